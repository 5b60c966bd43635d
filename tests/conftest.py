"""Shared test settings: tests marked ``cuda`` or ``multigpu`` skip cleanly without the hardware
(DESIGN.md, "Tests"), so a mark is all a GPU-only test needs."""

import os

import pytest
import torch

from chapter20.core.device import MKL_CNR_MODE

# MKL reads its reproducibility mode once, at its first call. The spot demo's subprocesses run
# under chapter20.core.device.deterministic_mode, which sets it; in-process references computed by
# the tests must use the same mode, so it is set here, before any test computes anything.
os.environ.setdefault("MKL_CBWR", MKL_CNR_MODE)

# Under pytest-xdist (make test runs two workers), each worker computes on one thread: two
# workers with two threads each would make four on a 2-core machine, and a thread that waits for
# a descheduled partner spins.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if item.get_closest_marker("cuda") and gpus < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if item.get_closest_marker("multigpu") and gpus < 2:
            item.add_marker(pytest.mark.skip(reason="needs two or more CUDA GPUs"))


@pytest.fixture(scope="module")
def lee():
    """The Lee corpus's 300 documents as token lists (``word2vec.corpus.corpus_sentences``), for
    the word2vec tests."""
    from chapter20.word2vec.corpus import corpus_sentences

    return corpus_sentences("lee")
