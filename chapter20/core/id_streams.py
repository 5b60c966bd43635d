"""Synthetic id streams: uniform and Zipf-distributed ids and word counts, the shared data of the
embedding-table experiments (§20.1 shard load and hot rows, §20.4 load imbalance) and of the note's
word2vec cost curves (topic 1). Deterministic for their seed: no global RNG is used or changed."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import torch

from chapter20.core.checks import INT_MAX, check_int, check_real

__all__ = ["uniform_ids", "zipf_counts", "zipf_ids", "zipf_probabilities"]


def _check_shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"shape must be an int or a tuple of ints, got {type(shape).__name__}")
    for entry in shape:
        if isinstance(entry, bool) or not isinstance(entry, numbers.Integral):
            raise TypeError(f"shape entries must be ints >= 0, got {tuple(shape)!r}")
        if not 0 <= entry <= INT_MAX:
            raise ValueError(f"shape entries must be ints in [0, {INT_MAX}], got {tuple(shape)!r}")
    return tuple(int(entry) for entry in shape)


def zipf_probabilities(num_embeddings: int, s: float = 1.1) -> np.ndarray:
    """Return the bounded Zipf distribution over ids ``0..num_embeddings-1`` (float64).

    Shared data for §20.1 (load per embedding shard) and §20.4 (load imbalance).
    ``P(k) ∝ 1/(k+1)**s``: id 0 is the most frequent, ``s = 0`` is uniform. The vector sums to
    1 (up to float64 rounding) and is non-increasing. ``s`` must be finite and >= 0.
    """
    num_embeddings = check_int("num_embeddings", num_embeddings, 1)
    s = check_real("s", s)
    if not (math.isfinite(s) and s >= 0):
        raise ValueError(f"s must be a finite number >= 0, got {s}")
    weights = np.arange(1, num_embeddings + 1, dtype=np.float64) ** -s
    return weights / weights.sum()


def zipf_counts(num_words: int, s: float = 1.1, total: int = 10**9) -> np.ndarray:
    """Word counts (int64, each >= 1) of a synthetic vocabulary of ``num_words`` words whose
    frequencies follow :func:`zipf_probabilities` over ``total`` tokens.

    Shared data for the note, topic 1 (the word2vec objectives' cost as the vocabulary grows,
    the Huffman tree's depth): word 0 is the most frequent."""
    num_words, total = check_int("num_words", num_words, 1), check_int("total", total, 1)
    return np.maximum(1, np.round(zipf_probabilities(num_words, s) * total)).astype(np.int64)


def uniform_ids(shape: int | Sequence[int], num_embeddings: int, *, seed: int = 0) -> torch.Tensor:
    """Return a ``torch.int64`` tensor of ``shape`` with ids drawn uniformly from ``0..V-1``.

    Shared data for §20.1–§20.4 (embedding-table experiments). Deterministic for ``seed``
    (a local ``numpy.random.Generator``; global RNG state is neither used nor changed).
    """
    shape = _check_shape(shape)
    num_embeddings = check_int("num_embeddings", num_embeddings, 1)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    return torch.from_numpy(rng.integers(0, num_embeddings, size=shape, dtype=np.int64))


def zipf_ids(
    shape: int | Sequence[int], num_embeddings: int, *, s: float = 1.1, seed: int = 0
) -> torch.Tensor:
    """Return a ``torch.int64`` tensor of ``shape`` with ids drawn from a bounded Zipf law.

    Shared data for §20.1 (hot rows and shard load) and §20.4 (load imbalance). Ids follow
    :func:`zipf_probabilities` exactly (id 0 most frequent, ``s = 0`` uniform), sampled by
    inverse CDF, so ``num_embeddings`` up to 10**7 costs two float64 vectors of that length.
    Deterministic for ``seed`` (local generator, no global RNG state).
    """
    shape = _check_shape(shape)
    probabilities = zipf_probabilities(num_embeddings, s)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    cdf = np.cumsum(probabilities)
    cdf[-1] = 1.0  # uniforms are < 1, so no draw can fall past the last id
    ids = np.searchsorted(cdf, rng.random(size=shape), side="right")
    return torch.from_numpy(np.asarray(ids, dtype=np.int64))
