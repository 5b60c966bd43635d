"""word2vec's update for one (input word, output word) pair, three ways, in a few lines each
(note, topic 1): the reference a reader can follow, proven equal to the package's fast paths.

- :func:`softmax_pair_step`: the full softmax, a score for every word of the vocabulary and the
  softmax's denominator over all of them: O(n) per pair;
- :func:`negative_pair_step`: negative sampling, the true word and ``k`` noise words: O(k);
- :func:`hierarchical_pair_step`: the hierarchical softmax, one binary decision per inner node
  on the output word's Huffman path: O(log n).

Each is plain SGD on one pair with the exact gradient (``chapter20.word2vec.objectives``),
written for reading, not speed. The trainer applies the same updates with the fused C loop
(``chapter20.word2vec.fused``) on a CPU or the batched ``SkipGram.step`` on a GPU; both add a
step cap that does not bind at word2vec's learning rates (see ``SkipGram``), and notebook 09
proves them equal to these functions, pair after pair.
"""

from __future__ import annotations

import torch

from chapter20.core.checks import check_int, check_real
from chapter20.word2vec.fused import MAX_EXP

__all__ = [
    "hierarchical_pair_step",
    "negative_pair_step",
    "softmax_pair_step",
]


def _checked(w_in: torch.Tensor, w_out: torch.Tensor, word, row, lr) -> float:
    """The checks every step shares: ``word`` a row of ``w_in``, ``row`` (the output word or
    ``None``) a row of ``w_out``, ``lr`` in (0, 10) (beyond: divergence)."""
    check_int("word", word, 0, len(w_in) - 1)
    if row is not None:
        check_int("context", row, 0, len(w_out) - 1)
    return check_real("lr", lr, minimum=0.0, maximum=10.0, exclusive=True)


def softmax_pair_step(
    w_in: torch.Tensor, w_out: torch.Tensor, word: int, context: int, lr: float
) -> float:
    """One SGD step of the full softmax on the pair (``word``, ``context``), in place: every
    one of the n rows of ``w_out`` is scored and updated. Returns the pair's loss,
    ``-log softmax(w_out @ h)[context]``."""
    lr = _checked(w_in, w_out, word, context, lr)
    h = w_in[word].clone()
    scores = w_out @ h  # n dot products
    probs = torch.softmax(scores, dim=0)  # the denominator sums over all n words
    g = probs.clone()
    g[context] -= 1.0  # d loss / d score: softmax minus one-hot
    w_in[word] -= lr * (g @ w_out)
    w_out -= lr * torch.outer(g, h)  # every row moves
    return float(-torch.log(probs[context]))


def negative_pair_step(
    w_in: torch.Tensor,
    w_out: torch.Tensor,
    word: int,
    context: int,
    noise: torch.Tensor,
    lr: float,
) -> float:
    """One SGD step of negative sampling on the pair (``word``, ``context``) with the noise
    words ``noise`` (``k`` ids), in place: ``1 + k`` rows of ``w_out`` are scored and updated.
    A noise word equal to ``context`` is skipped, as in word2vec. Returns the pair's loss."""
    lr = _checked(w_in, w_out, word, context, lr)
    h = w_in[word].clone()
    rows = torch.cat([torch.tensor([context]), noise])  # the true word, then k noise words
    labels = (rows == context).float()  # 1 for the true word, 0 for noise
    keep = (rows != context).float()
    keep[0] = 1.0  # a noise word equal to the true word is skipped
    u = w_out[rows]
    scores = u @ h  # 1 + k dot products
    g = (torch.sigmoid(scores) - labels) * keep  # d loss / d score
    w_out.index_add_(0, rows, -lr * torch.outer(g, h))
    w_in[word] -= lr * (g @ u)
    signs = 2.0 * labels - 1.0
    return float(-(torch.nn.functional.logsigmoid(signs * scores) * keep).sum())


def hierarchical_pair_step(
    w_in: torch.Tensor,
    w_nodes: torch.Tensor,
    word: int,
    points: torch.Tensor,
    codes: torch.Tensor,
    lr: float,
) -> float:
    """One SGD step of the hierarchical softmax on the pair (``word``, output word), in place:
    ``points`` are the inner nodes on the output word's Huffman path (root first) and ``codes``
    its branches (0 = left, taken with probability σ(v·h)). Each node is a logistic decision
    with label ``1 - code``; a node whose score is beyond ±6 (``MAX_EXP``) is skipped, as in
    word2vec. Returns the pair's loss, ``-log P(output word | word)``."""
    lr = _checked(w_in, w_nodes, word, None, lr)
    h = w_in[word].clone()
    v = w_nodes[points]
    scores = v @ h  # one dot product per node on the path
    labels = 1.0 - codes.float()
    live = (scores.abs() < MAX_EXP).float()
    g = (torch.sigmoid(scores) - labels) * live  # d loss / d score
    w_nodes.index_add_(0, points, -lr * torch.outer(g, h))
    w_in[word] -= lr * (g @ v)
    return float(-torch.nn.functional.logsigmoid((2.0 * labels - 1.0) * scores).sum())
