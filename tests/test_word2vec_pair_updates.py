"""Tests for chapter20.word2vec.pair_updates (note, topic 1): the few-line reference updates are
SGD on autograd's gradients (that they equal the fast paths that train:
tests/test_word2vec_equivalence.py)."""

from __future__ import annotations

import torch

from chapter20.word2vec.pair_updates import (
    hierarchical_pair_step,
    negative_pair_step,
    softmax_pair_step,
)


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
