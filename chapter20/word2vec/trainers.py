"""Named skip-gram trainers, ours and gensim's, and how a run is scored (note, topic 1).

:func:`train` trains one of :data:`TRAINERS` (``"ours negative"``, ``"gensim hierarchical"``,
...) with a ``Word2VecConfig`` (the comparisons': :data:`COMPARISON`); :func:`score_run` turns
the vectors into a row of a comparison (ρ on WordSim-353 and SimLex-999, speed);
:func:`softmax_at_equal_time` trains the full softmax for a given time, the share of an epoch
it affords. Notebook 09's comparisons and its committed study are built from these three.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from chapter20.core.device import get_device
from chapter20.core.measure import time_fn
from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.corpus import corpus_sentences, encode_corpus
from chapter20.word2vec.gensim_reference import gensim_huffman_tree, gensim_word2vec
from chapter20.word2vec.sampling import keep_probabilities, skipgram_pairs
from chapter20.word2vec.skipgram import SkipGram
from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.skipgram_training import (
    _check_config,
    default_batch_size,
    train_word2vec,
)
from chapter20.word2vec.vectors import WordVectors

__all__ = [
    "COMPARISON",
    "TRAINERS",
    "score_run",
    "softmax_at_equal_time",
    "train",
]


#: Trainer names: ``"<source> <objective>"``. Ours run the fused kernels where they can
#: (``chapter20.word2vec.fused``); ``-plain`` forces the plain path (``fused=False``),
#: ``negative-shared`` draws the noise words once per window (``share_negatives=True``), and
#: ``hierarchical-gensim_tree`` trains on gensim's Huffman tree (``gensim_huffman_tree``).
TRAINERS = (
    "ours negative",
    "ours negative-plain",
    "ours negative-shared",
    "ours hierarchical",
    "ours hierarchical-plain",
    "ours hierarchical-gensim_tree",
    "ours softmax",
    "gensim negative",
    "gensim hierarchical",
)


#: The comparisons' settings (notebook 09, ``bench word2vec``): ``Word2VecConfig``'s, which are
#: gensim's defaults, on two CPU threads (gensim's 2 workers, our 2 Hogwild workers).
COMPARISON = Word2VecConfig(workers=2)


def train(trainer: str, sentences, config: Word2VecConfig | None = None) -> WordVectors:
    """Train one of :data:`TRAINERS` (``"ours negative"``, ``"gensim hierarchical"``, ...)
    with ``config``'s settings (None: ``Word2VecConfig()``); the name sets the objective, and
    for ours the path and the noise draws (:data:`TRAINERS`). Ours train without a progress
    bar, and the full softmax with one worker."""
    config = Word2VecConfig() if config is None else _check_config(config)
    source, _, objective = trainer.partition(" ")
    objective, _, variant = objective.partition("-")
    tree, settings = None, {}
    if source == "ours" and variant == "shared":
        settings["share_negatives"] = True
    elif source == "ours" and variant == "plain":
        settings["fused"] = False
    elif source == "ours" and variant == "gensim_tree" and objective == "hierarchical":
        tree = gensim_huffman_tree(sentences, config.min_count)
    elif variant:
        raise ValueError(f"trainer must be one of {TRAINERS}, got {trainer!r}")
    if source == "gensim":
        return gensim_word2vec(sentences, replace(config, objective=objective))
    if source != "ours":
        raise ValueError(f"trainer must be one of {TRAINERS}, got {trainer!r}")
    return train_word2vec(sentences, _ours(config, objective, **settings), tree=tree)


def _ours(config: Word2VecConfig, objective: str, **settings) -> Word2VecConfig:
    """``config`` for our ``objective``, without a progress bar: the full softmax is matrix
    multiplies, fastest on one worker with torch's own threads; the others keep ``workers``
    on a CPU (Hogwild workers run there only)."""
    on_cpu = config.device is None or torch.device(config.device).type == "cpu"
    workers = config.workers if on_cpu and objective != "softmax" else 1
    return replace(config, objective=objective, workers=workers, progress=False, **settings)


def score_run(trainer: str, wv: WordVectors, seed: int, epochs: float) -> dict:
    """One run as a row of a comparison: the trainer, seed and epochs, WordSim-353 and
    SimLex-999 ρ (gensim's evaluation), their OOV shares and scored pairs, and the run's speed
    (raw words per second and seconds; NaN and 0 for vectors that were not trained here)."""
    stats = wv.stats
    ws, sl = wv.evaluate_word_pairs("wordsim353"), wv.evaluate_word_pairs("simlex999")
    return {
        "trainer": trainer,
        "device": stats.device if stats else "cpu",
        "seed": seed,
        "epochs": epochs,
        "wordsim353": ws.spearman,
        "simlex999": sl.spearman,
        "wordsim_oov_%": ws.oov_ratio,
        "simlex_oov_%": sl.oov_ratio,
        "wordsim_scored": ws.pairs - ws.oov_pairs,
        "simlex_scored": sl.pairs - sl.oov_pairs,
        "words_per_second": stats.words_per_second if stats else float("nan"),
        "seconds": stats.seconds if stats else 0.0,
    }


def softmax_at_equal_time(
    corpus: str, seconds: float, config: Word2VecConfig | None = None
) -> tuple[WordVectors, float]:
    """The full softmax given ``seconds`` of training on ``corpus`` (claim C24), with
    ``config``'s settings (None: ``Word2VecConfig()``) for one epoch, one worker: its cost per
    pair is timed on the corpus's vocabulary, and it trains one epoch on the random share of
    the sentences it can afford in that time (the whole corpus's vocabulary, so the scores
    stay comparable). Returns the vectors and the share of one epoch it saw."""
    config = Word2VecConfig() if config is None else _check_config(config)
    config = _ours(replace(config, epochs=1), "softmax")
    seed = config.seed
    device = torch.device("cpu") if config.device is None else get_device(config.device)
    sentences = corpus_sentences(corpus)
    vocab = build_vocab(sentences, min_count=config.min_count)
    batch = default_batch_size("softmax", device)
    model = SkipGram("softmax", vocab.counts, dim=config.dim, seed=seed, device=device)
    gen = torch.Generator().manual_seed(seed)
    pairs = torch.randint(0, len(vocab), (2, batch), generator=gen).to(device)
    timing = time_fn(
        lambda: model.step(pairs[0], pairs[1], 1e-4), warmup=1, repeat=3, device=device
    )
    per_pair = timing.median
    corpus_ids = encode_corpus(sentences, vocab)
    keep = torch.as_tensor(keep_probabilities(vocab.counts, config.sample))
    epoch_pairs = len(skipgram_pairs(corpus_ids, config.window, keep, gen)[0])
    share = min(1.0, seconds / (per_pair / batch * epoch_pairs))
    order = np.random.default_rng(seed).permutation(len(sentences))
    chosen = np.sort(order[: max(1, round(share * len(sentences)))])
    subset = [sentences[i] for i in chosen]
    wv = train_word2vec(subset, config, vocab=vocab)
    return wv, share
