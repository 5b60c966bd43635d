"""Tests for chapter20.word2vec.pair_updates (note, topic 1): the few-line reference updates equal
the fast paths that train (the C loop, the batched step), pair after pair, and their gradients
are autograd's."""

from __future__ import annotations

import pytest
import torch

from chapter20.labs.nb09_step_cost import reference_equals_fast, zipf_counts
from chapter20.word2vec.fused import compiler_available
from chapter20.word2vec.pair_updates import (
    hierarchical_pair_step,
    negative_pair_step,
    softmax_pair_step,
)


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


def _autograd_step(loss_fn, w_in, w_out, lr):
    a, b = w_in.clone().requires_grad_(True), w_out.clone().requires_grad_(True)
    loss_fn(a, b).backward()
    return w_in - lr * a.grad, w_out - lr * b.grad


def test_steps_are_sgd_on_the_exact_gradient():
    gen = torch.Generator().manual_seed(0)
    w_in = torch.randn(12, 6, generator=gen, dtype=torch.float64)
    w_out = torch.randn(12, 6, generator=gen, dtype=torch.float64) * 0.3
    lr = 0.1

    def softmax_loss(a, b):
        return torch.nn.functional.cross_entropy((b @ a[3]).unsqueeze(0), torch.tensor([5]))

    expected = _autograd_step(softmax_loss, w_in, w_out, lr)
    got_in, got_out = w_in.clone(), w_out.clone()
    softmax_pair_step(got_in, got_out, 3, 5, lr)
    assert torch.allclose(got_in, expected[0]) and torch.allclose(got_out, expected[1])

    noise = torch.tensor([1, 5, 7])  # 5 is the true word: skipped

    def negative_loss(a, b):
        s = b[torch.tensor([5, 1, 7])] @ a[3]
        return -(
            torch.nn.functional.logsigmoid(s[0]) + torch.nn.functional.logsigmoid(-s[1:]).sum()
        )

    expected = _autograd_step(negative_loss, w_in, w_out, lr)
    got_in, got_out = w_in.clone(), w_out.clone()
    negative_pair_step(got_in, got_out, 3, 5, noise, lr)
    assert torch.allclose(got_in, expected[0]) and torch.allclose(got_out, expected[1])

    points, codes = torch.tensor([10, 4, 2]), torch.tensor([0, 1, 1], dtype=torch.int8)

    def hierarchical_loss(a, b):
        s = b[points] @ a[3]
        return -torch.nn.functional.logsigmoid((1 - 2 * codes.double()) * s).sum()

    expected = _autograd_step(hierarchical_loss, w_in, w_out, lr)
    got_in, got_out = w_in.clone(), w_out.clone()
    hierarchical_pair_step(got_in, got_out, 3, points, codes, lr)
    assert torch.allclose(got_in, expected[0]) and torch.allclose(got_out, expected[1])
