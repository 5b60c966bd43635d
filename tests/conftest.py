"""Shared test settings: tests marked ``cuda`` or ``multigpu`` skip cleanly without the hardware
(ARCHITECTURE.md, "Tests"), so a mark is all a GPU-only test needs."""

import os

# Under pytest-xdist (make test runs two workers), each worker computes on one thread: two
# workers with two threads each would make four on a 2-core machine, and a thread that waits for
# a descheduled partner spins (gensim's LSI in test_baselines took 20 s instead of 3). OpenBLAS
# reads its thread count when numpy loads it, so this comes before the first numpy import.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import shutil  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest

# MKL reads its reproducibility mode once, at its first call. The spot demo's subprocesses run
# under chapter20.core.device.deterministic_mode, which sets it; in-process references computed by
# the tests must use the same mode, so it is set here, before any test computes anything. The
# value is that module's MKL_CNR_MODE (test_device checks that they agree), written out so that
# the main process of a pytest-xdist run does not import torch: its workers start sooner.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

# The same for torch's own threads.
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)


#: The modules that take longest (2–35 s each of one worker on a 2-core machine), longest first.
#: ``make test`` gives whole modules to two workers (``--dist loadscope --no-loadscope-reorder``)
#: in collection order: with the long ones first and the short ones (the rest, under 2 s each)
#: filling in at the end, both workers finish together, instead of one waiting on a long module
#: that happened to start last.
LONGEST_FIRST = (
    "test_spot.py",
    "test_sharding.py",
    "test_capstone_run.py",
    "test_ddp_demo.py",
    "test_run_notebooks.py",
    "test_training.py",
    "test_package.py",
    "test_precision.py",
    "test_word2vec_skipgram_training.py",
    "test_distributed.py",
    "test_checkpointing.py",
    "test_contrastive.py",
    "test_vocab_lab.py",
    "test_word2vec_huffman.py",
    "test_data.py",
    "test_layering.py",
    "test_word2vec_data_parallel.py",
    "test_word2vec_fused.py",
    "test_baselines.py",
    "test_conventions.py",
    "test_parallelism.py",
    "test_memory.py",
    "test_device.py",
)


_CACHE = pytest.StashKey[tuple]()


def pytest_configure(config):
    """One corpus cache for the whole run, never the user's ``~/.cache``: a temporary folder
    that the pytest-xdist workers inherit (they start after this, in the main process), where
    the Wikipedia sample is parsed once — in a thread, while the workers start — instead of by
    every module that reads it."""
    if hasattr(config, "workerinput"):  # a worker: the main process has set the cache up
        return
    cache = tempfile.mkdtemp(prefix="chapter20-test-cache-")
    os.environ["CHAPTER20_CACHE"] = cache

    def parse() -> None:
        from chapter20.core.corpora import lee_background, wiki_sentences

        wiki_sentences()
        lee_background()

    warm = threading.Thread(target=parse, daemon=True)
    warm.start()
    config.stash[_CACHE] = (cache, warm)


def pytest_unconfigure(config):
    if _CACHE in config.stash:
        cache, warm = config.stash[_CACHE]
        warm.join()
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _corpora_parsed(request):
    """In the process that parses the corpora in a thread (a run without pytest-xdist workers),
    the tests wait for it first: a test importing gensim while that thread imports it can fail
    ("partially initialized module")."""
    if _CACHE in request.config.stash:
        request.config.stash[_CACHE][1].join()


@pytest.fixture(scope="session")
def test_cache() -> Path:
    """The run's corpus cache (``$CHAPTER20_CACHE``, set up by :func:`pytest_configure`)."""
    return Path(os.environ["CHAPTER20_CACHE"])


def pytest_collection_modifyitems(config, items):
    order = {name: rank for rank, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: order.get(item.path.name, len(order)))  # stable: keeps the rest
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if item.get_closest_marker("cuda") and gpus < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if item.get_closest_marker("multigpu") and gpus < 2:
            item.add_marker(pytest.mark.skip(reason="needs two or more CUDA GPUs"))


# --- corpora and matrices shared by the vocabulary, BPE, PCA and notebook-10 tests ----------


@pytest.fixture(scope="module")
def lee_background():
    """The Lee background corpus: documents as token lists."""
    from chapter20.core.corpora import lee_background

    return lee_background()


@pytest.fixture(scope="module")
def lee_split(lee_background):
    """The Lee documents split into training and held-out documents (20% held out, seed 0)."""
    from chapter20.core.corpora import train_test_split_articles

    return train_test_split_articles(lee_background, 0.2, seed=0)


@pytest.fixture(scope="module")
def bpe_small(lee_split):
    """A byte-level BPE vocabulary of 600 entries trained on the Lee training documents."""
    from chapter20.vocab.bpe import train_bpe

    return train_bpe(lee_split[0], 600)


def _low_rank_matrix(n=120, d=40, rank=6, noise=0.01, seed=0, dtype=np.float64):
    """A matrix with a clear spectral gap after ``rank`` components, plus an offset mean."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(5.0, 1.0, rank)
    signal = (rng.standard_normal((n, rank)) * scales) @ rng.standard_normal((rank, d))
    return (signal + noise * rng.standard_normal((n, d)) + 3.0).astype(dtype)


@pytest.fixture(scope="session")
def low_rank_matrix():
    """``low_rank_matrix(n, d, rank, noise, seed, dtype)``: a matrix with a clear spectral gap
    after ``rank`` components, plus an offset mean."""
    return _low_rank_matrix


@pytest.fixture(scope="module")
def bag_of_words():
    """The sentences of the first three Wikipedia articles as bag-of-words rows over 300 words
    (20% held out), and their PCA to 20 dimensions: ``(data, compressed)``."""
    from chapter20.vocab.bag_of_words import bag_of_words_data, compress_bag_of_words

    data = bag_of_words_data(300, limit_articles=3, test_fraction=0.2)
    return data, compress_bag_of_words(data, 20)


@pytest.fixture(scope="module")
def lee():
    """The Lee corpus's 300 documents as token lists (``word2vec.corpus.corpus_sentences``), for
    the word2vec tests."""
    from chapter20.word2vec.corpus import corpus_sentences

    return corpus_sentences("lee")
