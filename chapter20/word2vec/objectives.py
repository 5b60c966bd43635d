"""The three ways to score a (word, context) pair, as loss and exact gradients (note, topic 1).

- **full softmax** (:func:`full_softmax_grads`): a softmax over the whole vocabulary, O(n) per
  pair, the baseline;
- **negative sampling** (:func:`negative_sampling_grads`): push the true context up and ``k``
  noise words down, O(k) per pair;
- **hierarchical softmax** (:func:`hierarchical_softmax_grads`): binary decisions along the
  word's Huffman path, O(log n) per pair.

The gradient functions are public so that the tests compare them with autograd; their private
terms (loss, d loss / d score and the curvature σ') are what ``SkipGram``'s steps apply.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from chapter20.word2vec.huffman import HuffmanTree

__all__ = [
    "OBJECTIVES",
    "ObjectiveGrads",
    "full_softmax_grads",
    "hierarchical_softmax_grads",
    "hierarchical_softmax_log_probs",
    "negative_sampling_grads",
]


#: The three ways to score a (word, context) pair.
OBJECTIVES = ("negative", "hierarchical", "softmax")


def _check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return objective


@dataclass(frozen=True)
class ObjectiveGrads:
    """Loss (summed over the batch) and its exact gradients with respect to the gathered
    input and output vectors (note, topic 1)."""

    loss: torch.Tensor
    grad_input: torch.Tensor
    grad_output: torch.Tensor


@functools.cache
def _ns_signs(width: int, dtype: torch.dtype, device: torch.device):
    """``(sign, label)`` rows for scores ``[B, width]``: +1 / 1 for the true word (column 0),
    -1 / 0 for the noise words."""
    label = torch.zeros((1, width), dtype=dtype, device=device)
    label[0, 0] = 1.0
    return 2.0 * label - 1.0, label


def _ns_terms(scores: torch.Tensor, weight: torch.Tensor | None):
    """Loss, d loss / d score and the curvature σ'(score) of negative sampling's scores
    ``[B, 1 + k]`` (column 0 the true word). Few tensor ops: this runs once per batch."""
    sign, label = _ns_signs(scores.shape[1], scores.dtype, scores.device)
    sig = torch.sigmoid(scores)
    coef = sig - label
    curvature = sig * (1.0 - sig)
    log_terms = torch.nn.functional.logsigmoid(scores * sign)
    if weight is None:
        return -log_terms.sum(), coef, curvature
    loss = -torch.dot(log_terms.view(-1), weight.reshape(-1))
    return loss, coef.mul_(weight), curvature.mul_(weight)


def negative_sampling_grads(
    inputs: torch.Tensor, outputs: torch.Tensor, weight: torch.Tensor | None = None
) -> ObjectiveGrads:
    """Negative-sampling loss and gradients for a batch (note, topic 1).

    ``inputs`` ``[B, D]``: input vectors; ``outputs`` ``[B, 1 + k, D]``: the output vectors of
    the true word (column 0) and of ``k`` noise words. The loss is
    ``sum_b [-log σ(u_b0·h_b) - sum_j log σ(-u_bj·h_b)]``; ``weight`` ``[B, 1 + k]`` (0 or 1)
    drops terms (word2vec skips a noise word equal to the true word). Gradients are exact
    (tested against autograd): ``grad_input`` ``[B, D]``, ``grad_output`` ``[B, 1 + k, D]``.
    Cost: O(k·D) per pair, whatever the vocabulary size.
    """
    scores = torch.linalg.vecdot(outputs, inputs.unsqueeze(1))
    loss, coef, _ = _ns_terms(scores, weight)
    grad_input = torch.bmm(coef.unsqueeze(1), outputs).squeeze(1)
    return ObjectiveGrads(loss, grad_input, coef.unsqueeze(2) * inputs.unsqueeze(1))


def _hs_terms(scores: torch.Tensor, codes: torch.Tensor):
    """Loss, d loss / d score and σ'(score) of hierarchical-softmax steps (code 0 = left,
    probability σ(score))."""
    target = 1.0 - codes.to(scores.dtype)
    sig = torch.sigmoid(scores)
    loss = -torch.nn.functional.logsigmoid(scores * (2.0 * target - 1.0)).sum()
    return loss, sig - target, sig * (1.0 - sig)


def hierarchical_softmax_grads(
    inputs: torch.Tensor, nodes: torch.Tensor, codes: torch.Tensor
) -> ObjectiveGrads:
    """Hierarchical-softmax loss and gradients for a batch of path steps (note, topic 1).

    Each row is one step on the path from the root to a pair's true word: ``inputs`` ``[N, D]``
    the pair's input vector, ``nodes`` ``[N, D]`` the inner node's vector, ``codes`` ``[N]``
    the branch taken (0 = left, probability ``σ(n·h)``; 1 = right, ``1 - σ(n·h)``). The loss,
    summed over a pair's steps, is ``-log P(word | input)``; gradients are exact per row (tested
    against autograd); summing a pair's rows gives the gradient of its input vector. Cost:
    O(code length · D) per pair — about log2 of the vocabulary size.
    """
    scores = torch.linalg.vecdot(inputs, nodes)
    loss, coef, _ = _hs_terms(scores, codes)
    return ObjectiveGrads(loss, coef.unsqueeze(1) * nodes, coef.unsqueeze(1) * inputs)


def hierarchical_softmax_log_probs(
    inputs: torch.Tensor, node_weights: torch.Tensor, tree: HuffmanTree
) -> torch.Tensor:
    """``log P(w | h)`` for every word ``w`` of the tree and every input row (note, topic 1).

    ``inputs`` ``[B, D]``, ``node_weights`` ``[n - 1, D]``; returns ``[B, n]``. The
    probabilities of every row sum to 1: each inner node splits its mass between its two
    children. O(n log n) per row: for tests and plots, not for training.
    """
    points = torch.as_tensor(tree.points, device=inputs.device)
    codes = torch.as_tensor(tree.codes, device=inputs.device).to(inputs.dtype)
    mask = torch.as_tensor(tree.mask, device=inputs.device)
    scores = torch.einsum("bd,nld->bnl", inputs, node_weights[points])
    steps = torch.nn.functional.logsigmoid(scores * (1 - 2 * codes))
    return (steps * mask).sum(-1)


def _softmax_terms(scores: torch.Tensor, targets: torch.Tensor):
    """Loss, d loss / d score (softmax minus one-hot) and the probabilities."""
    log_probs = torch.log_softmax(scores, dim=1)
    rows = torch.arange(len(targets), device=scores.device)
    loss = -log_probs[rows, targets].sum()
    probs = log_probs.exp_()
    coef = probs.clone()
    coef[rows, targets] -= 1.0
    return loss, coef, probs


def full_softmax_grads(
    inputs: torch.Tensor, output_weights: torch.Tensor, targets: torch.Tensor
) -> ObjectiveGrads:
    """Full-softmax loss and gradients (note, topic 1): the O(n) baseline.

    ``inputs`` ``[B, D]``, ``output_weights`` ``[n, D]`` (every word's output vector),
    ``targets`` ``[B]``. The loss is the summed cross-entropy of ``softmax(inputs @ W.T)``
    against ``targets`` (equal to ``F.cross_entropy(..., reduction="sum")`` up to rounding);
    ``grad_output`` is the dense ``[n, D]`` gradient of ``W``: every word, every step. Cost:
    O(n·D) per pair.
    """
    loss, coef, _ = _softmax_terms(inputs @ output_weights.T, targets)
    return ObjectiveGrads(loss, coef @ output_weights, coef.T @ inputs)
