"""Tests for chapter20.word2vec.equivalence (note, topic 1): the fast paths that train (the C loop,
the batched step) equal the plain step and the few-line reference updates, pair after pair, to
float32 rounding; where the step cap binds, they part. The objectives' proofs hold to float64
rounding."""

from __future__ import annotations

import pytest
import torch

from chapter20.core.id_streams import zipf_counts
from chapter20.word2vec.equivalence import (
    fused_equals_plain,
    gradient_proof,
    hs_normalisation_proof,
    huffman_proof,
    reference_equals_fast,
)
from chapter20.word2vec.fused import compiler_available


def _pairs(n: int, count: int = 40, seed: int = 3):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (count,), generator=gen), torch.randint(
        0, 8, (count,), generator=gen
    )


@pytest.mark.parametrize("objective", ["negative", "hierarchical", "softmax"])
def test_reference_equals_what_trains(objective):
    if objective != "softmax" and not compiler_available():
        pytest.skip("no C compiler: the C loop cannot run")
    inputs, outputs = _pairs(200)
    tables, loss = reference_equals_fast(objective, zipf_counts(200), inputs, outputs)
    # float32 rounding of the same sums in another order, over 40 pairs in a row
    assert tables < 1e-5 and loss < 1e-5


def test_large_rate_is_capped_by_the_fast_path_only():
    if not compiler_available():
        pytest.skip("no C compiler: the C loop cannot run")
    inputs, outputs = _pairs(200)
    tables, _ = reference_equals_fast(
        "negative", zipf_counts(200), inputs, outputs, lr=2.0, scale=1.0
    )
    assert tables > 1e-3  # the step cap binds: the reference, uncapped, moves further


@pytest.mark.parametrize("objective", ["negative", "hierarchical"])
def test_the_c_loop_equals_the_plain_step_within_float32_rounding(objective):
    if not compiler_available():
        pytest.skip("needs a C compiler")
    tables, loss = fused_equals_plain(objective, pairs=60)
    assert 0 <= tables < 1e-5 and 0 <= loss < 1e-5


def test_the_objectives_proofs_hold():
    """The hand-written gradients equal autograd's and the hierarchical softmax sums to 1, both
    to float64 rounding (the notebook's 1e-12); the Huffman tree keeps its guarantees."""
    assert max(gradient_proof().values()) < 1e-12
    assert hs_normalisation_proof(n=300) < 1e-12
    proof = huffman_proof(zipf_counts(300))
    assert proof["prefix_free"] and proof["frequent_not_longer"]
    assert proof["entropy_bits"] <= proof["mean_code_bits"] < proof["entropy_bits"] + 1
