"""Tests for chapter20.word2vec.objectives (note, topic 1): the three objectives' losses and
gradients against autograd, and the hierarchical softmax's probabilities."""

from __future__ import annotations

import torch
from word2vec_helpers import zipf_counts

from chapter20.word2vec.huffman import build_huffman_tree
from chapter20.word2vec.objectives import (
    full_softmax_grads,
    hierarchical_softmax_grads,
    hierarchical_softmax_log_probs,
    negative_sampling_grads,
)


def test_hierarchical_softmax_probabilities_sum_to_one():
    gen = torch.Generator().manual_seed(0)
    counts = zipf_counts(300)
    tree = build_huffman_tree(counts)
    nodes = torch.randn(len(counts) - 1, 16, generator=gen, dtype=torch.float64)
    inputs = torch.randn(5, 16, generator=gen, dtype=torch.float64)
    probs = hierarchical_softmax_log_probs(inputs, nodes, tree).exp()
    # float64: the sum is exact up to rounding of 300 terms.
    assert torch.allclose(probs.sum(1), torch.ones(5, dtype=torch.float64), atol=1e-12)
    assert probs.min() > 0


def _autograd(loss_fn, *tensors):
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    loss = loss_fn(*leaves)
    loss.backward()
    return loss.detach(), [leaf.grad for leaf in leaves]


def test_negative_sampling_grads_match_autograd():
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(7, 12, generator=gen, dtype=torch.float64)
    u = torch.randn(7, 6, 12, generator=gen, dtype=torch.float64)
    weight = torch.ones(7, 6, dtype=torch.float64)
    weight[2, 3] = weight[5, 1] = 0.0  # noise words equal to the true word are skipped

    def loss_fn(h, u):
        scores = (u * h.unsqueeze(1)).sum(-1)
        terms = torch.cat([-torch.log(torch.sigmoid(scores[:, :1])),
                           -torch.log(torch.sigmoid(-scores[:, 1:]))], dim=1)  # fmt: skip
        return (terms * weight).sum()

    loss, (grad_h, grad_u) = _autograd(loss_fn, h, u)
    ours = negative_sampling_grads(h, u, weight)
    # float64 on both sides: agreement to rounding (1e-12).
    assert torch.allclose(ours.loss, loss, atol=1e-12)
    assert torch.allclose(ours.grad_input, grad_h, atol=1e-12)
    assert torch.allclose(ours.grad_output, grad_u, atol=1e-12)
    assert ours.grad_output[2, 3].abs().max() == 0


def test_hierarchical_softmax_grads_match_autograd_and_the_word_probability():
    gen = torch.Generator().manual_seed(2)
    counts = zipf_counts(50)
    tree = build_huffman_tree(counts)
    node_weights = torch.randn(49, 10, generator=gen, dtype=torch.float64)
    h = torch.randn(4, 10, generator=gen, dtype=torch.float64)
    words = torch.tensor([0, 7, 31, 49])
    mask = torch.as_tensor(tree.mask)[words]
    rows = torch.repeat_interleave(torch.as_tensor(tree.lengths)[words])
    points = torch.as_tensor(tree.points)[words][mask]
    codes = torch.as_tensor(tree.codes)[words][mask]

    def loss_fn(h_rows, nodes):
        scores = (h_rows * nodes).sum(-1)
        return -torch.log(
            torch.where(codes == 0, torch.sigmoid(scores), 1 - torch.sigmoid(scores))
        ).sum()

    loss, (grad_h, grad_n) = _autograd(loss_fn, h[rows], node_weights[points])
    ours = hierarchical_softmax_grads(h[rows], node_weights[points], codes)
    assert torch.allclose(ours.loss, loss, atol=1e-12)
    assert torch.allclose(ours.grad_input, grad_h, atol=1e-12)
    assert torch.allclose(ours.grad_output, grad_n, atol=1e-12)
    # The summed path loss is -log P(word | h) of the whole-vocabulary distribution.
    log_probs = hierarchical_softmax_log_probs(h, node_weights, tree)
    assert torch.allclose(ours.loss, -log_probs[torch.arange(4), words].sum(), atol=1e-12)


def test_full_softmax_equals_cross_entropy_and_autograd():
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(6, 8, generator=gen, dtype=torch.float64)
    w = torch.randn(40, 8, generator=gen, dtype=torch.float64)
    targets = torch.tensor([0, 5, 5, 39, 12, 1])

    def loss_fn(h, w):
        return torch.nn.functional.cross_entropy(h @ w.T, targets, reduction="sum")

    loss, (grad_h, grad_w) = _autograd(loss_fn, h, w)
    ours = full_softmax_grads(h, w, targets)
    assert torch.allclose(ours.loss, loss, atol=1e-12)
    assert torch.allclose(ours.grad_input, grad_h, atol=1e-12)
    assert torch.allclose(ours.grad_output, grad_w, atol=1e-12)
