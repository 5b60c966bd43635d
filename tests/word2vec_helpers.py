"""Helpers that several word2vec test files share (note, topic 1): synthetic Zipf word counts
and a small skip-gram model with random weights and a batch of pairs."""

from __future__ import annotations

import numpy as np
import torch

from chapter20.core import id_streams
from chapter20.word2vec.skipgram import SkipGram


def zipf_counts(n: int, s: float = 1.1, total: int = 10**6) -> np.ndarray:
    """Counts of ``n`` words that follow a Zipf(``s``) law over ``total`` tokens (each >= 1):
    ``chapter20.core.id_streams.zipf_counts`` over a million tokens."""
    return id_streams.zipf_counts(n, s, total)


def small_model(objective, n=60, dim=8, seed=0):
    """A ``SkipGram`` over ``n`` Zipf words with random N(0, 0.3²) weights in both tables, and a
    batch of 32 random (input, output) pairs."""
    model = SkipGram(objective, zipf_counts(n), dim=dim, negative=4, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    model.input_vectors.copy_(torch.randn(model.input_vectors.shape, generator=gen) * 0.3)
    model.output_vectors.copy_(torch.randn(model.output_vectors.shape, generator=gen) * 0.3)
    inputs = torch.randint(0, n, (32,), generator=gen)
    outputs = torch.randint(0, n, (32,), generator=gen)
    return model, inputs, outputs
