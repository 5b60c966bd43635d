"""Skip-gram word2vec trained three ways: full softmax, negative sampling, hierarchical softmax.

The note on efficient embedding training, topic 1 (efficient sampling). A skip-gram model
predicts the words around each word. Scoring the prediction with a softmax over the whole
vocabulary costs O(n) per (word, context) pair; word2vec avoids it in two ways:

- **negative sampling**: push the true context up and ``k`` noise words, drawn from the unigram
  distribution raised to 0.75, down: O(k) per pair;
- **hierarchical softmax**: a Huffman tree over the vocabulary; a word's probability is the
  product of binary decisions on the path from the root to its leaf: O(log n) per pair, and
  frequent words, with short codes, are the cheapest.

The three objectives share one vocabulary (``chapter20.vocab.vocabulary.build_vocab``), one pair
generator (gensim's dynamic window and frequent-word subsampling) and one training loop with linear
learning-rate decay from ``alpha`` to ``min_alpha``. The loop steps by one of two paths, with no
autograd: the plain path is hand-written, vectorised SGD in PyTorch (a batch's scores as row-wise
dot products, the sigmoid coefficients, row updates scattered with ``index_add_``) on CPU or CUDA;
on a CPU, the fused path (``chapter20.word2vec.fused``) applies the same update one pair at a time
in a small C loop, as word2vec does, tested equal to the plain step on one pair at a time. The
per-objective gradient functions are public so that the tests compare them with autograd.

Public API for other sections: :func:`corpus_sentences` (the real corpus), :func:`train_word2vec`
(-> :class:`WordVectors`) and :func:`evaluate_word_pairs` (scores any words + vectors on
WordSim-353 / SimLex-999 the way gensim does).
"""

from __future__ import annotations

import functools
import math
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from chapter20.core.checks import INT_MAX, check_int, check_real
from chapter20.core.corpora import lee_background, wiki_sentences, word_similarity_path
from chapter20.core.device import get_device, synchronize
from chapter20.vocab.vocabulary import Vocabulary, build_vocab
from chapter20.word2vec.fused import MAX_EXP, load_kernels

__all__ = [
    "CORPORA",
    "OBJECTIVES",
    "MAX_EXP",
    "EncodedCorpus",
    "HuffmanTree",
    "NoiseSampler",
    "ObjectiveGrads",
    "PairEvaluation",
    "SkipGram",
    "TrainStats",
    "Workspace",
    "WordVectors",
    "build_huffman_tree",
    "corpus_sentences",
    "FUSED_CHUNK",
    "default_batch_size",
    "encode_corpus",
    "evaluate_word_pairs",
    "full_softmax_grads",
    "hierarchical_softmax_grads",
    "hierarchical_softmax_log_probs",
    "keep_probabilities",
    "negative_sampling_grads",
    "noise_distribution",
    "skipgram_pairs",
    "skipgram_windows",
    "train_word2vec",
]

#: The three ways to score a (word, context) pair.
OBJECTIVES = ("negative", "hierarchical", "softmax")
#: The real corpora :func:`corpus_sentences` knows.
CORPORA = ("wiki", "lee", "wiki+lee")


# --- corpus ---------------------------------------------------------------------------------


def corpus_sentences(name: str = "wiki+lee") -> list[list[str]]:
    """The real corpus as a flat list of token lists (note, topic 1).

    ``"wiki"``: every sentence of the Wikipedia sample in gensim's test data
    (``data.wiki_sentences``, ~22K sentences, ~447K tokens); ``"lee"``: the 300 documents of
    ``lee_background.cor`` (~58K tokens); ``"wiki+lee"``: both, Wikipedia first. Windows never
    cross a list boundary, for our trainers and gensim's alike.
    """
    if name not in CORPORA:
        raise ValueError(f"name must be one of {CORPORA}, got {name!r}")
    out: list[list[str]] = []
    if name in ("wiki", "wiki+lee"):
        out.extend(sentence for article in wiki_sentences() for sentence in article)
    if name in ("lee", "wiki+lee"):
        out.extend(lee_background())
    return out


def _check_sentences(sentences: Iterable[Sequence[str]]) -> list[Sequence[str]]:
    if isinstance(sentences, (str, bytes)):
        raise TypeError("sentences must be an iterable of token lists, not a string")
    sentences = list(sentences)
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"sentences[{i}] is a string; sentences must be token lists (list of str)"
            )
    if not any(len(s) for s in sentences):
        raise ValueError("sentences is empty: the corpus has no tokens to train on")
    return sentences


@dataclass(frozen=True)
class EncodedCorpus:
    """A corpus as vocabulary ids, on one device (note, topic 1).

    ``ids`` (int64): the in-vocabulary words in corpus order (unknown words are dropped before
    any windowing, as gensim drops them); ``sentence`` (int64): the sentence of each id;
    ``raw_words``: tokens before dropping, the count gensim reports as raw words.
    """

    ids: torch.Tensor
    sentence: torch.Tensor
    raw_words: int

    def to(self, device: torch.device | str) -> EncodedCorpus:
        return EncodedCorpus(self.ids.to(device), self.sentence.to(device), self.raw_words)


def encode_corpus(sentences: Sequence[Sequence[str]], vocab: Vocabulary) -> EncodedCorpus:
    """Encode ``sentences`` with ``vocab`` (note, topic 1): unknown words are dropped."""
    encoded = [vocab.encode(s, drop_unknown=True) for s in sentences]
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    ids = np.concatenate(encoded) if encoded else np.zeros(0, dtype=np.int64)
    sentence = np.repeat(np.arange(len(encoded), dtype=np.int64), lengths)
    raw = int(sum(len(s) for s in sentences))
    return EncodedCorpus(torch.from_numpy(ids), torch.from_numpy(sentence), raw)


# --- sampling: subsampling, windows, noise ---------------------------------------------------


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """Probability of keeping each occurrence of a word, gensim's formula (note, topic 1).

    With ``t = sample * counts.sum()``, a word seen ``c`` times is kept with probability
    ``min(1, (sqrt(c / t) + 1) * t / c)``: words rarer than ``t`` are always kept, very frequent
    words ("the", "of") mostly dropped. ``sample = 0`` keeps everything.
    """
    # A threshold share of the corpus: 1 already keeps every word; more is no subsampling.
    sample = check_real("sample", sample, minimum=0, maximum=1)
    counts = np.asarray(counts, dtype=np.float64)
    if sample == 0:
        return np.ones_like(counts)
    threshold = sample * counts.sum() if sample < 1 else sample * (3 + math.sqrt(5)) / 2
    return np.minimum(1.0, (np.sqrt(counts / threshold) + 1) * threshold / counts)


def _draw_windows(corpus, window, keep, generator):
    """Subsample, draw every kept word's reach, and mark its valid context slots: returns the
    kept ids, ``valid [n, 2 * window]`` (slot ``c`` is offset ``offsets[c]``) and ``offsets``."""
    window = check_int("window", window, 1)
    ids, sentence = corpus.ids, corpus.sentence
    device = ids.device
    if keep is not None:
        draw = torch.rand(len(ids), generator=generator, device=device, dtype=torch.float64)
        kept = draw < keep.index_select(0, ids)
        ids, sentence = ids.masked_select(kept), sentence.masked_select(kept)
    n = len(ids)
    reach = window - torch.randint(0, window, (n,), generator=generator, device=device)
    offsets = list(range(-window, 0)) + list(range(1, window + 1))
    # valid[i, c]: position i predicts from position i + offsets[c]; row-major = corpus order.
    valid = torch.zeros((n, len(offsets)), dtype=torch.bool, device=device)
    for col, d in enumerate(offsets):
        step = abs(d)
        if step >= n:
            continue
        if d < 0:
            valid[step:, col] = (reach[step:] >= step) & (sentence[step:] == sentence[:-step])
        else:
            valid[:-step, col] = (reach[:-step] >= step) & (sentence[:-step] == sentence[step:])
    return ids, valid, torch.tensor(offsets, dtype=torch.int64, device=device)


def skipgram_pairs(
    corpus: EncodedCorpus,
    window: int,
    keep: torch.Tensor | None,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One epoch of skip-gram pairs, vectorised, on the corpus's device (note, topic 1).

    Returns ``(inputs, outputs, kept)``. As in gensim: each occurrence is kept with
    probability ``keep[id]`` (frequent-word subsampling), then every kept word at position
    ``i`` draws its window ``b ~ U{1..window}`` and is predicted from each kept word ``j`` of
    its sentence with ``0 < |i - j| <= b``: ``inputs[p]`` is the word at ``j`` (its input
    vector is used), ``outputs[p]`` the word at ``i``. Pairs come in corpus order (by ``i``,
    then ``j``); ``kept`` is the number of kept words (gensim's "effective words").
    Deterministic for the state of ``generator``.
    """
    ids, valid, offsets = _draw_windows(corpus, window, keep, generator)
    rows, cols = valid.nonzero(as_tuple=True)
    return (
        ids.index_select(0, rows + offsets.index_select(0, cols)),
        ids.index_select(0, rows),
        len(ids),
    )


def skipgram_windows(
    corpus: EncodedCorpus,
    window: int,
    keep: torch.Tensor | None,
    generator: torch.Generator,
    pad: int,
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The same epoch as :func:`skipgram_pairs`, grouped by predicted word (note, topic 1).

    Returns ``(outputs, contexts, pairs, kept)``: ``outputs [G]`` the words that have at least
    one context, in corpus order, and ``contexts [G, 2 * window]`` their context words, with
    ``pad`` in unused slots. For the same generator state the windows hold exactly the pairs
    :func:`skipgram_pairs` returns (tested); ``pairs`` counts them.
    """
    pad = check_int("pad", pad, 0)
    ids, valid, offsets = _draw_windows(corpus, window, keep, generator)
    rows = valid.any(1).nonzero().squeeze(1)
    valid = valid.index_select(0, rows)
    positions = (rows.unsqueeze(1) + offsets.unsqueeze(0)).clamp_(0, max(len(ids) - 1, 0))
    contexts = torch.where(valid, ids[positions], torch.full_like(positions, pad))
    return ids.index_select(0, rows), contexts, int(valid.sum()), len(ids)


def noise_distribution(counts: np.ndarray, power: float = 0.75) -> np.ndarray:
    """Negative-sampling noise: ``counts ** power``, normalised (note, topic 1; word2vec's 0.75)."""
    power = check_real("power", power, finite=True, minimum=0)
    with np.errstate(over="ignore"):
        weights = np.asarray(counts, dtype=np.float64) ** power
    if not np.all(np.isfinite(weights)):
        raise ValueError(f"power={power:g} overflows counts ** power; word2vec uses 0.75")
    return weights / weights.sum()


class NoiseSampler:
    """Draws noise words from a fixed distribution in O(1) each, on any device (note, topic 1).

    Walker's alias method: one uniform slot and one uniform number per draw, then a comparison,
    so a batch of draws is a few vectorised tensor ops whatever the vocabulary size. Exact up
    to float64 rounding of the table (built in NumPy, deterministic); draws are deterministic
    for a seeded generator.
    """

    def __init__(self, probabilities: np.ndarray, device: torch.device | str = "cpu"):
        p = np.asarray(probabilities, dtype=np.float64)
        if p.ndim != 1 or len(p) == 0 or not np.all(p >= 0) or not p.sum() > 0:
            raise ValueError("probabilities must be a non-empty 1-D array of non-negative numbers")
        n = len(p)
        scaled = p * (n / p.sum())
        prob = np.ones(n)
        alias = np.arange(n)
        small = np.flatnonzero(scaled < 1.0).tolist()
        large = np.flatnonzero(scaled >= 1.0).tolist()
        while small and large:
            s, g = small.pop(), large.pop()
            prob[s], alias[s] = scaled[s], g
            scaled[g] -= 1.0 - scaled[s]
            (small if scaled[g] < 1.0 else large).append(g)
        self.size = n
        self.probabilities = p / p.sum()
        self.prob = torch.tensor(prob, dtype=torch.float64, device=device)
        self.alias = torch.tensor(alias, dtype=torch.int64, device=device)

    def sample(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """``count`` draws (int64) on the sampler's device."""
        device = self.prob.device
        slot = torch.randint(0, self.size, (count,), generator=generator, device=device)
        u = torch.rand(count, generator=generator, device=device, dtype=torch.float64)
        return torch.where(
            u < self.prob.index_select(0, slot), slot, self.alias.index_select(0, slot)
        )


# --- Huffman tree ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HuffmanTree:
    """The Huffman tree of a vocabulary, as padded arrays (note, topic 1).

    Word ``w`` has a path of ``lengths[w]`` inner nodes from the root: ``points[w, :L]``
    (node ids ``0..n-2``; the root is ``n-2``) and ``codes[w, :L]`` (0 = left, 1 = right); the
    rest of each row is padding, False in ``mask``. ``codes`` are int8 and ``points`` int32, so
    a million-word tree stays small.
    """

    codes: np.ndarray
    points: np.ndarray
    lengths: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        return np.arange(self.codes.shape[1])[None, :] < self.lengths[:, None]

    @property
    def max_depth(self) -> int:
        return int(self.codes.shape[1])

    def code(self, word: int) -> str:
        """Word ``word``'s code as a string of 0s and 1s."""
        return "".join(str(int(c)) for c in self.codes[word, : self.lengths[word]])

    def mean_code_length(self, weights: np.ndarray) -> float:
        """Mean code length in bits, weighted by ``weights`` (counts or probabilities)."""
        w = np.asarray(weights, dtype=np.float64)
        return float((w * self.lengths).sum() / w.sum())


def _check_counts(counts: Sequence[int] | np.ndarray) -> np.ndarray:
    """Word counts: a non-empty 1-D array of finite numbers > 0 (at most what an int64 holds)."""
    array = np.asarray(counts)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"counts must be numbers (word counts), got dtype {array.dtype}")
    if array.ndim != 1 or len(array) == 0:
        raise ValueError("counts must be a non-empty 1-D sequence of word counts")
    if not np.all(np.isfinite(array)) or np.any(array <= 0) or np.any(array > INT_MAX):
        raise ValueError(f"counts must all be finite, > 0 and <= {INT_MAX}")
    return array


def _check_tree(tree: HuffmanTree, words: int) -> HuffmanTree:
    """A tree given in place of :func:`build_huffman_tree`'s: one path per word, inner nodes
    ``0..words-2``, codes 0 or 1."""
    if not isinstance(tree, HuffmanTree):
        raise TypeError(
            f"tree must be a chapter20.word2vec.skipgram.HuffmanTree, got {type(tree).__name__}"
        )
    if len(tree.lengths) != words or tree.codes.shape != tree.points.shape:
        raise ValueError(f"tree must hold one path per word ({words}), got {len(tree.lengths)}")
    mask = tree.mask
    if (tree.points[mask] >= max(words - 1, 1)).any() or (tree.points[mask] < 0).any():
        raise ValueError(f"tree's points must be inner nodes 0..{words - 2}")
    if not np.isin(tree.codes[mask], (0, 1)).all():
        raise ValueError("tree's codes must be 0 or 1")
    return tree


def build_huffman_tree(counts: Sequence[int] | np.ndarray) -> HuffmanTree:
    """The Huffman tree of word ``counts`` (note, topic 1); see :class:`HuffmanTree`.

    Built like gensim's: of the ``(count, index)`` items, the two smallest merged into an
    inner node (ids ``n, n+1, ...`` in merge order; node ``n + i`` is point ``i``), the first
    popped on the left. Ties break by index, so the tree is deterministic; gensim's heap
    compares counts only and may break ties differently, which changes codes but not the
    mean code length (both trees are optimal). Guarantees (tested): the codes are prefix-free,
    a more frequent word never has a longer code than a rarer one, and the count-weighted mean
    code length is within 1 bit of the entropy. One word gets an empty code.
    """
    counts = _check_counts(counts)
    n = len(counts)
    parent = np.full(2 * n - 1, -1, dtype=np.int64)
    bit = np.zeros(2 * n - 1, dtype=np.int8)
    # The heap's pops without a heap (van Leeuwen's two queues): the leaves sorted by
    # (count, index), and the inner nodes, which are made in that same order (each merged count
    # is at least the last one). The smaller front goes first, a leaf on a tie (its index is
    # smaller than any inner node's): the same pops, in the same order, as a heap of
    # (count, index) items (tested), in a tenth of the time for a million words.
    leaves = np.lexsort((np.arange(n), counts)).tolist()
    leaf_counts = [int(counts[i]) for i in leaves]
    node_counts: list[int] = []
    i = j = 0

    def pop() -> tuple[int, int]:
        nonlocal i, j
        if i < n and (j >= len(node_counts) or leaf_counts[i] <= node_counts[j]):
            i += 1
            return leaf_counts[i - 1], leaves[i - 1]
        j += 1
        return node_counts[j - 1], n + j - 1

    for node in range(n, 2 * n - 1):
        count_a, a = pop()
        count_b, b = pop()
        parent[a] = parent[b] = node
        bit[b] = 1
        node_counts.append(count_a + count_b)
    # Walk every leaf up to the root at once: first to measure the depths, then to fill rows.
    lengths = np.zeros(n, dtype=np.int64)
    node = np.arange(n)
    while (up := parent[node] >= 0).any():
        lengths += up
        node = np.where(up, parent[node], node)
    depth = int(lengths.max())
    codes = np.zeros((n, depth), dtype=np.int8)
    points = np.zeros((n, depth), dtype=np.int32)
    leaves = np.flatnonzero(lengths)
    node, position = leaves, lengths[leaves] - 1
    while len(leaves):
        codes[leaves, position] = bit[node]
        points[leaves, position] = parent[node] - n
        node, position = parent[node], position - 1
        keep = position >= 0
        node, position, leaves = node[keep], position[keep], leaves[keep]
    return HuffmanTree(codes=codes, points=points, lengths=lengths)


# --- the three objectives: loss and gradients ------------------------------------------------


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


# --- training -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainStats:
    """What one training run did and how long it took (note, topic 1).

    ``raw_words``: corpus tokens processed, out-of-vocabulary ones included, summed over
    epochs (gensim's "raw words", the basis of every words-per-second figure here);
    ``effective_words``: in-vocabulary words kept by subsampling (gensim's "effective words");
    ``seconds``: wall time of training (pair generation included, vocabulary building and
    corpus encoding excluded); ``epoch_loss``: mean loss per pair of each epoch; ``fused``:
    whether the fused per-pair kernels ran (``chapter20.word2vec.fused``), not the plain path.
    """

    objective: str
    device: str
    epochs: int
    raw_words: int
    effective_words: int
    pairs: int
    seconds: float
    batch_size: int = 0
    workers: int = 1
    epoch_loss: tuple[float, ...] = ()
    fused: bool = False

    @property
    def words_per_second(self) -> float:
        """Raw corpus words per second of training (the definition used for gensim too)."""
        return self.raw_words / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class WordVectors:
    """Trained word vectors (note, topic 1): ``words[i]`` has vector ``vectors[i]`` (float32).

    Lookup (``wv["word"]``), cosine :meth:`similarity`, :meth:`most_similar` and
    :meth:`evaluate_word_pairs` (gensim's semantics). ``stats`` describes the training run.
    """

    words: tuple[str, ...]
    vectors: np.ndarray
    stats: TrainStats | None = None
    index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if self.vectors.ndim != 2 or len(self.vectors) != len(self.words):
            raise ValueError(
                f"vectors must be [len(words), dim]; got {self.vectors.shape} for "
                f"{len(self.words)} words"
            )
        if not self.index:
            self.index.update((w, i) for i, w in reversed(list(enumerate(self.words))))

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> np.ndarray:
        if word not in self.index:
            raise KeyError(f"{word!r} is not in the vocabulary ({len(self.words)} words)")
        return self.vectors[self.index[word]]

    def _unit(self) -> np.ndarray:
        norms = np.linalg.norm(self.vectors.astype(np.float64), axis=1, keepdims=True)
        return (self.vectors / np.where(norms > 0, norms, 1)).astype(np.float32)

    def similarity(self, word1: str, word2: str) -> float:
        """Cosine similarity of two words' vectors."""
        a, b = self[word1].astype(np.float64), self[word2].astype(np.float64)
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    def most_similar(self, word: str, topn: int = 10) -> list[tuple[str, float]]:
        """The ``topn`` words with the highest cosine similarity to ``word`` (itself excluded)."""
        topn = check_int("topn", topn, 1)
        self[word]  # KeyError for an unknown word
        unit = self._unit()
        sims = unit @ unit[self.index[word]]
        sims[self.index[word]] = -np.inf
        best = np.argsort(-sims, kind="stable")[:topn]
        return [(self.words[i], float(sims[i])) for i in best]

    def evaluate_word_pairs(self, name: str = "wordsim353", **kwargs) -> PairEvaluation:
        """:func:`evaluate_word_pairs` on these vectors."""
        return evaluate_word_pairs(self.words, self.vectors, name, **kwargs)

    def to_gensim(self):
        """The same vectors as a gensim ``KeyedVectors`` (for cross-checks)."""
        from gensim.models import KeyedVectors

        kv = KeyedVectors(self.vectors.shape[1], dtype=np.float32)
        kv.add_vectors(list(self.words), self.vectors.astype(np.float32))
        return kv


#: Pairs per call of the fused kernels: each pair is its own SGD step there, so the size only
#: sets how often Python hands out work and updates the learning rate, as gensim's jobs of
#: 10,000 words do (about 36,000 pairs on the real corpus).
FUSED_CHUNK = 16384


def default_batch_size(
    objective: str,
    device: torch.device | str = "cpu",
    share_negatives: bool = False,
    *,
    fused: bool = False,
) -> int:
    """Pairs per SGD step (note, topic 1). On a CPU, a batch whose temporaries stay in cache
    (a thousand or two pairs); on a GPU, large batches to fill it. The full softmax's
    ``[B, n]`` scores grow with the vocabulary, so it takes fewer. With ``fused`` (the fused
    kernels, one SGD step per pair), the pairs per kernel call, :data:`FUSED_CHUNK`."""
    _check_objective(objective)
    if fused:
        return FUSED_CHUNK
    cuda = torch.device(device).type == "cuda"
    if objective == "negative" and share_negatives:
        return 16384 if cuda else 2048
    sizes = {
        "negative": (1024, 16384),
        "hierarchical": (1024, 4096),
        "softmax": (512, 4096),
    }
    return sizes[objective][cuda]


def _check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return objective


class Workspace:
    """Scratch memory for :meth:`SkipGram.step`, one per thread that steps a model.

    ``output_sums`` and ``input_sums`` (one slot per row of each table, kept zero between
    steps) collect the step cap's per-row sums; :meth:`buffer` hands out ``[n, D]`` buffers
    that are reused from step to step. On a CPU, allocating the batch's large temporaries
    afresh every step costs more than computing them: each new block of memory is faulted in
    page by page.
    """

    def __init__(self, output_rows: int, input_rows: int, dim: int, device: torch.device):
        output_rows = check_int("output_rows", output_rows, 0)
        input_rows = check_int("input_rows", input_rows, 0)
        dim = check_int("dim", dim, 1)
        self.output_sums = torch.zeros(output_rows, device=device)
        self.input_sums = torch.zeros(input_rows, device=device)
        self.dim, self.device = dim, device
        self._buffers: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, n: int) -> torch.Tensor:
        """An uninitialised ``[n, D]`` float32 buffer (grown by a quarter when too small)."""
        buf = self._buffers.get(name)
        if buf is None or len(buf) < n:
            size = max(n, int(1.25 * len(buf)) if buf is not None else n)
            buf = self._buffers[name] = torch.empty((size, self.dim), device=self.device)
        return buf[:n]


def _capped(coef, rows, curvature, lr, sums):
    """``coef`` divided by ``max(1, lr * Σ curvature)``, the sum over the batch's entries that
    update the same row (``sums``: a zero vector with a slot per row, left zero)."""
    sums.index_add_(0, rows, curvature)
    total = sums.index_select(0, rows)
    sums.index_fill_(0, rows, 0.0)
    return coef / torch.clamp(total * lr, min=1.0)


class SkipGram:
    """The weights of a skip-gram model and one vectorised SGD step (note, topic 1).

    ``input_vectors`` ``[n, D]`` are the word vectors (initialised like word2vec's: uniform in
    ``[-0.5/D, 0.5/D)``); ``output_vectors`` (zeros) are the output words' vectors
    (``"negative"``, ``"softmax"``: ``[n, D]``) or the Huffman tree's inner nodes
    (``"hierarchical"``: ``[n - 1, D]``). :meth:`step` applies word2vec's update for a batch of
    (input word, output word) pairs: the exact gradients of :func:`negative_sampling_grads`,
    :func:`hierarchical_softmax_grads` or :func:`full_softmax_grads` times ``-lr``, gathered
    and scattered with ``index_select`` / ``index_add_``, all in tensor ops.

    Two things differ from summing the pairs' word2vec updates, both for stability:

    - like word2vec and gensim, a hierarchical-softmax step whose score is beyond
      ``±MAX_EXP`` is skipped (the sigmoid is saturated);
    - word2vec applies pairs one at a time; a batch computes every pair's update from the same
      weights and adds them up. For a row that many pairs of one batch update (the tree's root,
      frequent noise words) the sum can overshoot where sequential steps would have adapted,
      so a row's summed step is divided by ``max(1, lr · Σ σ'(score)·|x|²)``, where ``x`` is
      the vector it is multiplied with (the input vector for an output row, the output
      vectors for an input row): the learning rate times the loss's curvature along that
      row, summed over the batch. A row updated a few times per batch at word2vec's learning
      rate gets the plain sum.

    ``tree``: the hierarchical softmax's Huffman tree, instead of :func:`build_huffman_tree`
    of ``counts`` (e.g. gensim's, to compare with gensim on the same tree).
    """

    def __init__(
        self,
        objective: str,
        counts: Sequence[int] | np.ndarray,
        *,
        dim: int = 100,
        negative: int = 5,
        device: torch.device | str = "cpu",
        seed: int = 1,
        tree: HuffmanTree | None = None,
    ):
        self.objective = _check_objective(objective)
        self.dim = check_int("dim", dim, 1)
        self.negative = check_int("negative", negative, 1)
        counts = _check_counts(counts)
        self.device = torch.device(device)
        n = len(counts)
        rng = np.random.default_rng(check_int("seed", seed, 0))
        init = (rng.random((n, self.dim), dtype=np.float32) - 0.5) / self.dim
        rows = max(n - 1, 1) if objective == "hierarchical" else n
        # One extra, all-zero "sink" row in each table: padded slots of a window point there,
        # get zero updates, and never alias a real row.
        self._w_in = torch.zeros((n + 1, self.dim), device=self.device)
        self._w_in[:n] = torch.from_numpy(init).to(self.device)
        self._w_out = torch.zeros((rows + 1, self.dim), device=self.device)
        self.input_vectors, self.output_vectors = self._w_in[:n], self._w_out[:rows]
        self.input_pad, self.output_pad = n, rows
        if objective == "negative":
            self.sampler = NoiseSampler(noise_distribution(counts), self.device)
        if objective == "hierarchical":
            self.tree = build_huffman_tree(counts) if tree is None else _check_tree(tree, n)
            self._points = torch.as_tensor(self.tree.points, device=self.device)
            self._codes = torch.as_tensor(self.tree.codes, device=self.device)
            self._mask = torch.as_tensor(self.tree.mask, device=self.device)
            self._lengths = torch.as_tensor(self.tree.lengths, device=self.device)
            self._trim_paths = self.device.type == "cpu"
            padded = np.where(self.tree.mask, self.tree.points, rows)
            self._points_padded = torch.as_tensor(padded, device=self.device).long()
            self._labels = torch.as_tensor(
                1.0 - self.tree.codes, dtype=torch.float32, device=self.device
            )
        self._workspace = self.new_workspace()
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(rng.integers(2**63)))

    def new_workspace(self) -> Workspace:
        """Scratch memory for :meth:`step`; each concurrent worker needs its own."""
        return Workspace(len(self._w_out), len(self._w_in), self.dim, self.device)

    def noise_targets(
        self, outputs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(targets, weight)`` for negative sampling: ``targets`` ``[P, 1 + k]`` holds each
        pair's true word and ``k`` noise words; ``weight`` is 0 where a noise word equals the
        true word (word2vec skips it), else 1. Drawn for a whole epoch at once, ahead of
        training."""
        generator = self.generator if generator is None else generator
        p, k = len(outputs), self.negative
        noise = self.sampler.sample(p * k, generator).view(p, k)
        targets = torch.cat([outputs.unsqueeze(1), noise], dim=1)
        weight = (targets != outputs.unsqueeze(1)).to(self.input_vectors.dtype)
        weight[:, 0] = 1.0
        return targets, weight

    def fused_kernel(self):
        """``kernel(outputs, inputs, lr, generator) -> loss``: the pairs ``(inputs[p],
        outputs[p])`` stepped one after another by the fused C loop of
        ``chapter20.word2vec.fused`` (negative sampling with noise per pair, or the
        hierarchical softmax), or None where it cannot run: the full softmax, a GPU (whose
        large batches the plain path keeps busy), no C compiler (with a warning). Each call
        draws one seed from ``generator`` for its noise words. Equal, pair after pair, to
        :meth:`step` on one pair at a time (tested)."""
        if self.objective == "softmax" or self.device.type != "cpu":
            return None
        kernels = load_kernels()  # warns if there is no compiler
        if kernels is None:
            return None
        w_in, w_out = self._w_in, self._w_out
        if self.objective == "negative":
            k, prob, alias = self.negative, self.sampler.prob, self.sampler.alias

            def kernel(outputs, inputs, lr, generator):
                seed = int(torch.randint(0, 2**63 - 1, (), generator=generator))
                return kernels.negative_pairs(
                    w_in, w_out, inputs, outputs, k, prob, alias, seed, lr
                )

            return kernel
        points, labels, lengths = self._points_padded, self._labels, self._lengths

        def kernel(outputs, inputs, lr, generator):
            return kernels.hierarchical_pairs(
                w_in, w_out, inputs, outputs, points, labels, lengths, lr
            )

        return kernel

    def step(
        self,
        inputs: torch.Tensor,
        outputs: torch.Tensor,
        lr: float,
        targets: tuple[torch.Tensor, torch.Tensor] | None = None,
        workspace: Workspace | None = None,
    ) -> torch.Tensor:
        """One SGD step on pairs ``(inputs[i], outputs[i])`` (int64 ids on the model's device);
        returns the batch's summed loss (a 0-d tensor, computed before the update).
        ``targets``: negative sampling's :meth:`noise_targets` for these pairs (drawn from the
        model's generator when None). ``workspace``: :meth:`new_workspace`, one per thread."""
        ws = self._workspace if workspace is None else workspace
        w_in, w_out = self.input_vectors, self.output_vectors
        h = torch.index_select(w_in, 0, inputs, out=ws.buffer("h", len(inputs)))
        if self.objective == "negative":
            ids, weight = self.noise_targets(outputs) if targets is None else targets
            b, width = ids.shape
            flat = ids.view(-1)
            u = torch.index_select(w_out, 0, flat, out=ws.buffer("rows", len(flat)))
            u = u.view(b, width, -1)
            products = torch.mul(
                u, h.unsqueeze(1), out=ws.buffer("products", len(flat)).view(u.shape)
            )
            loss, coef, curvature = _ns_terms(products.sum(-1), weight)
            coef.mul_(-lr)  # the step per score; index_add_ with alpha != 1 is slow on CPU
            step_in = torch.bmm(coef.unsqueeze(1), u, out=ws.buffer("step_in", b).view(b, 1, -1))
            step_in = step_in.view(b, -1)
            u_sq = torch.linalg.vector_norm(u, dim=2).square_()
            in_curvature = (curvature * u_sq).sum(1)
            curvature.mul_(torch.linalg.vector_norm(h, dim=1).square_().unsqueeze(1))
            out_coef = _capped(coef.view(-1), flat, curvature.view(-1), lr, ws.output_sums)
            # h first: TensorIterator vectorises this broadcast 2-3x better than coef first.
            step_out = torch.mul(h.unsqueeze(1), out_coef.view(b, width, 1), out=products)
            w_out.index_add_(0, flat, step_out.view(b * width, -1))
        elif self.objective == "hierarchical":
            lengths = self._lengths.index_select(0, outputs)
            mask = self._mask.index_select(0, outputs)
            nodes = self._points.index_select(0, outputs).masked_select(mask).long()
            codes = self._codes.index_select(0, outputs).masked_select(mask)
            rows = torch.repeat_interleave(lengths)
            n = len(nodes)
            h_rows = torch.index_select(h, 0, rows, out=ws.buffer("h_rows", n))
            gathered = torch.index_select(w_out, 0, nodes, out=ws.buffer("rows", n))
            products = torch.mul(gathered, h_rows, out=ws.buffer("products", n))
            scores = products.sum(-1)
            loss, coef, curvature = _hs_terms(scores, codes)
            live = (scores.abs() < MAX_EXP).to(coef.dtype)
            coef, curvature = coef * (live * -lr), curvature * live
            step_in = ws.buffer("step_in", len(inputs)).zero_()
            step_in.index_add_(0, rows, torch.mul(gathered, coef.unsqueeze(1), out=products))
            node_sq = torch.linalg.vector_norm(gathered, dim=1).square_()
            in_curvature = torch.zeros(len(inputs), device=self.device)
            in_curvature.index_add_(0, rows, curvature * node_sq)
            h_sq = torch.linalg.vector_norm(h, dim=1).square_().index_select(0, rows)
            node_coef = _capped(coef, nodes, curvature * h_sq, lr, ws.output_sums)
            w_out.index_add_(0, nodes, torch.mul(h_rows, node_coef.unsqueeze(1), out=products))
        else:
            loss, coef, probs = _softmax_terms(h @ w_out.T, outputs)
            step_in = (coef @ w_out).mul_(-lr)
            curvature = probs * (1.0 - probs)
            in_curvature = curvature @ torch.linalg.vector_norm(w_out, dim=1).square_()
            row_curvature = curvature.T @ torch.linalg.vector_norm(h, dim=1).square_()
            w_out.addmm_((coef / torch.clamp(row_curvature * lr, min=1.0)).T, h, alpha=-lr)
        ones = torch.ones_like(in_curvature)
        step_in.mul_(_capped(ones, inputs, in_curvature, lr, ws.input_sums).unsqueeze(1))
        w_in.index_add_(0, inputs, step_in)
        return loss

    def step_windows(
        self,
        outputs: torch.Tensor,
        contexts: torch.Tensor,
        lr: float,
        noise: torch.Tensor | None = None,
        workspace: Workspace | None = None,
    ) -> torch.Tensor:
        """One SGD step on whole windows (:func:`skipgram_windows`): word ``outputs[g]`` is
        predicted from each of ``contexts[g]`` (``input_pad`` in unused slots). Returns the
        summed loss.

        All pairs of a window share their output rows, so they are gathered and updated once
        per window and the scores are small matrix products (``bmm``) instead of one dot
        product per row. For the hierarchical softmax the pairs of a window share the output
        word's path anyway: the step equals :meth:`step` on the same pairs (tested). For
        negative sampling the ``k`` noise words (``noise [G, k]``, drawn from the model's
        generator when None) are drawn once per window and shared by its pairs — every pair
        still sees ``k`` noise words from the same distribution, but they are not independent
        across the pairs of a window (gensim draws them per pair).
        """
        if self.objective == "softmax":
            raise ValueError("step_windows is for 'negative' and 'hierarchical' objectives")
        ws = self._workspace if workspace is None else workspace
        g, slots = contexts.shape
        if self.objective == "hierarchical":
            width = self.tree.max_depth
            if self._trim_paths:  # the batch's longest path; reading it back would stall a GPU
                width = int(self._lengths.index_select(0, outputs).max()) if g else 0
            targets = self._points_padded.index_select(0, outputs)[:, :width]
            labels = self._labels.index_select(0, outputs)[:, :width]
            target_mask = targets != self.output_pad
        else:
            if noise is None:
                noise = self.sampler.sample(g * self.negative, self.generator).view(g, -1)
            targets = torch.cat([outputs.unsqueeze(1), noise], dim=1)
            width = targets.shape[1]
            labels = _ns_signs(width, torch.float32, self.device)[1]
            target_mask = targets != outputs.unsqueeze(1)
            target_mask[:, 0] = True  # a noise word equal to the true word is skipped
        if g == 0 or width == 0:
            return torch.zeros((), device=self.device)
        h = torch.index_select(self._w_in, 0, contexts.view(-1), out=ws.buffer("h", g * slots))
        h = h.view(g, slots, -1)
        u = torch.index_select(
            self._w_out, 0, targets.reshape(-1), out=ws.buffer("rows", g * width)
        )
        u = u.view(g, width, -1)
        scores = torch.bmm(h, u.transpose(1, 2))  # [g, slots, width]
        weight = ((contexts != self.input_pad).unsqueeze(2) & target_mask.unsqueeze(1)).to(
            scores.dtype
        )
        if self.objective == "hierarchical":
            weight.mul_(scores.abs() < MAX_EXP)  # word2vec skips saturated steps
        labels = labels.unsqueeze(1)
        sig = torch.sigmoid(scores)
        coef = (sig - labels).mul_(weight)
        log_terms = torch.nn.functional.logsigmoid(scores * (2.0 * labels - 1.0))
        loss = -torch.dot(log_terms.view(-1), weight.view(-1))
        curvature = (sig - sig * sig).mul_(weight)
        coef.mul_(-lr)
        step_in = torch.bmm(coef, u, out=ws.buffer("step_in", g * slots).view(g, slots, -1))
        u_sq = torch.linalg.vector_norm(u, dim=2).square_().unsqueeze(1)
        in_curvature = (curvature * u_sq).sum(2).view(-1)  # per context slot
        in_scale = _capped(
            torch.ones_like(in_curvature), contexts.view(-1), in_curvature, lr, ws.input_sums
        )
        step_in.mul_(in_scale.view(g, slots, 1))
        h_sq = torch.linalg.vector_norm(h, dim=2).square_().unsqueeze(2)
        row_curvature = (curvature * h_sq).sum(1)  # [g, width]: per output row of each window
        flat = targets.reshape(-1)
        scale = _capped(
            torch.ones_like(row_curvature).view(-1),
            flat,
            row_curvature.view(-1),
            lr,
            ws.output_sums,
        )
        coef.mul_(scale.view(g, 1, width))
        step_out = torch.bmm(
            coef.transpose(1, 2), h, out=ws.buffer("step_out", g * width).view(g, width, -1)
        )
        self._w_out.index_add_(0, flat, step_out.view(g * width, -1))
        self._w_in.index_add_(0, contexts.view(-1), step_in.view(g * slots, -1))
        return loss


def train_word2vec(
    sentences: Iterable[Sequence[str]],
    objective: str = "negative",
    *,
    dim: int = 100,
    window: int = 5,
    min_count: int = 5,
    negative: int = 5,
    sample: float = 1e-3,
    epochs: int = 5,
    alpha: float = 0.025,
    min_alpha: float = 1e-4,
    batch_size: int | None = None,
    seed: int = 1,
    device: torch.device | str | None = None,
    workers: int = 1,
    threads: int | None = None,
    vocab: Vocabulary | None = None,
    share_negatives: bool = False,
    fused: bool | None = None,
    tree: HuffmanTree | None = None,
    progress: bool = True,
) -> WordVectors:
    """Train skip-gram word vectors on ``sentences`` (note, topic 1).

    ``objective`` is ``"negative"`` (``negative`` noise words per pair from unigram^0.75),
    ``"hierarchical"`` (Huffman-tree softmax) or ``"softmax"`` (the full softmax). The other
    settings mean what gensim's ``Word2Vec(sg=1, ...)`` arguments of the same name mean; the
    vocabulary is ``build_vocab(sentences, min_count=min_count)`` unless ``vocab`` is given
    (then ``min_count`` is not used). Each epoch draws subsampled, dynamic-window pairs
    (:func:`skipgram_pairs`) in corpus order, and the learning rate decays linearly from
    ``alpha`` to ``min_alpha`` over the run. Unlike gensim, sentences longer than 10,000 words
    are not truncated. ``tree``: the hierarchical softmax's tree (see :class:`SkipGram`).

    Two paths apply word2vec's updates (:class:`SkipGram`):

    - **fused** (on the CPU, by default): the C loop of ``chapter20.word2vec.fused``, one SGD
      step per pair as in word2vec and gensim, for negative sampling with noise per pair and
      the hierarchical softmax; ``batch_size`` pairs per call (:data:`FUSED_CHUNK`);
    - **plain**: batched tensor ops, ``batch_size`` pairs per SGD step
      (:func:`default_batch_size`), on any device. The hierarchical softmax steps whole
      windows there (:meth:`SkipGram.step_windows`: the same updates, computed once per
      window); so does negative sampling with ``share_negatives=True``, which draws the ``k``
      noise words once per window instead of once per pair (no longer gensim's sampling: off
      by default, and plain only).

    ``fused``: ``None`` (default): the fused path where it can run (a CPU, a C compiler: else
    the plain path, with a warning if the compiler is missing); ``False``: the plain path;
    ``True``: the same as None, plus a warning if the fused path cannot run. The kernels
    compile in well under a second, once per process, before the clock starts.
    ``stats.fused`` says which path ran.

    ``device``: CPU by default, or e.g. ``"cuda"``. ``threads``: torch's CPU threads during
    training (restored afterwards). ``workers > 1`` (CPU only) runs that many Python threads
    on shared weights without locks, as gensim's workers do ("Hogwild"), each taking the
    epoch's next batch from a shared queue when it is free; each then computes with one torch
    thread unless ``threads`` says otherwise.

    Guarantees: with ``workers=1`` the run is deterministic for ``seed`` (bitwise on CPU for a
    fixed ``threads``); with more workers, like gensim's, it is not. Raises ``ValueError``
    naming the argument for an empty corpus, a ``min_count`` that removes every word, a corpus
    with no pair, ``negative``, ``window``, ``dim``, ``epochs``, ``batch_size`` or ``workers``
    < 1, a ``sample`` < 0 or a learning rate out of range; ``TypeError`` for a string where
    token lists are expected.
    """
    objective = _check_objective(objective)
    dim = check_int("dim", dim, 1)
    window = check_int("window", window, 1)
    negative = check_int("negative", negative, 1)
    epochs = check_int("epochs", epochs, 1)
    seed = check_int("seed", seed, 0)
    workers = check_int("workers", workers, 1)
    alpha = check_real("alpha", alpha, finite=True)
    min_alpha = check_real("min_alpha", min_alpha, finite=True)
    if not 0 < alpha <= 1:  # SGD on word vectors diverges long before a rate of 1
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    if not 0 <= min_alpha <= alpha:
        raise ValueError(f"min_alpha must be in [0, alpha={alpha}], got {min_alpha}")
    if threads is not None:
        threads = check_int("threads", threads, 1)
    if fused is not None and not isinstance(fused, bool):
        raise TypeError(f"fused must be None, True or False, got {fused!r}")
    keep = keep_probabilities(np.ones(1), sample)  # validates sample before the corpus work
    sentences = _check_sentences(sentences)
    if vocab is None:
        vocab = build_vocab(sentences, min_count=min_count)
    elif not isinstance(vocab, Vocabulary):
        raise TypeError(
            f"vocab must be a chapter20.vocab.vocabulary.Vocabulary, got {type(vocab).__name__}"
        )
    device = torch.device("cpu") if device is None else get_device(str(device))
    if workers > 1 and device.type != "cpu":
        raise ValueError(f"workers > 1 runs on CPU only; got workers={workers} on {device}")
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, 1)
    keep = torch.as_tensor(keep_probabilities(vocab.counts, sample), device=device)
    corpus = encode_corpus(sentences, vocab).to(device)
    if len(corpus.ids) < 2:
        raise ValueError("sentences have fewer than two in-vocabulary words: no pairs to train on")

    seeds = [int(s) for s in np.random.SeedSequence(seed).generate_state(3)]
    model = SkipGram(
        objective, vocab.counts, dim=dim, negative=negative, device=device, seed=seeds[0],
        tree=tree,
    )  # fmt: skip
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(
        threads if threads is not None else (1 if workers > 1 else previous_threads)
    )
    try:
        stats = _train(
            model, corpus, keep, window, epochs, alpha, min_alpha, batch_size, seeds, workers,
            progress, share_negatives, fused,
        )  # fmt: skip
    finally:
        torch.set_num_threads(previous_threads)
    vectors = model.input_vectors.cpu().numpy().copy()
    return WordVectors(words=tuple(vocab.words), vectors=vectors, stats=stats)


def _train(
    model, corpus, keep, window, epochs, alpha, min_alpha, batch_size, seeds, workers, progress,
    share_negatives, fused,
) -> TrainStats:  # fmt: skip
    if progress:
        from tqdm.auto import tqdm
    else:  # tqdm.auto warns in notebooks without ipywidgets even when the bar is disabled
        from tqdm import tqdm

    device = model.device
    # Compiling the fused kernel (if any) happens here, before the clock starts.
    kernel = _fused_kernel(model, share_negatives, fused)
    # The plain path steps the hierarchical softmax (and shared noise) by whole windows.
    windows = kernel is None and (model.objective == "hierarchical" or share_negatives)
    batch = batch_size or default_batch_size(
        model.objective, device, share_negatives, fused=kernel is not None
    )
    pair_generator = torch.Generator(device=device)
    pair_generator.manual_seed(seeds[1])
    # Noise words are drawn batch by batch, each worker from its own generator: a batch's
    # draws stay in cache, and one worker's run is deterministic.
    noise_generators = [torch.Generator(device=device) for _ in range(workers)]
    for w, generator in enumerate(noise_generators):
        generator.manual_seed(seeds[2] + w)
    workspaces = [] if kernel else [model.new_workspace() for _ in range(workers)]  # plain only
    lock = threading.Lock()
    bar = tqdm(
        total=corpus.raw_words * epochs, disable=not progress, unit="word", unit_scale=True,
        desc=model.objective,
    )  # fmt: skip

    def draw() -> _Epoch:
        if windows:
            outputs, contexts, n_pairs, kept = skipgram_windows(
                corpus, window, keep, pair_generator, pad=model.input_pad
            )
            return _Epoch(outputs, contexts, n_pairs, kept)
        inputs, outputs, kept = skipgram_pairs(corpus, window, keep, pair_generator)
        return _Epoch(outputs, inputs, len(inputs), kept)

    def plain(outputs, inputs, lr, worker):
        generator, workspace = noise_generators[worker], workspaces[worker]
        if windows:
            noise = None
            if model.objective == "negative":
                noise = model.sampler.sample(len(outputs) * model.negative, generator)
                noise = noise.view(len(outputs), -1)
            return model.step_windows(outputs, inputs, lr, noise, workspace)
        targets = None
        if model.objective == "negative":
            targets = model.noise_targets(outputs, generator)
        return model.step(inputs, outputs, lr, targets, workspace)

    def fused_step(outputs, inputs, lr, worker):
        return kernel(outputs, inputs, lr, noise_generators[worker])

    step = plain if kernel is None else fused_step

    def run(epoch, data, batch_ids, worker):
        n = len(data.outputs)
        total = torch.zeros((), dtype=torch.float64, device=device)
        while (i := _next_of(batch_ids, lock)) is not None:
            lo, hi = i * per_step, min((i + 1) * per_step, n)
            lr = alpha - (alpha - min_alpha) * (epoch + lo / n) / epochs
            total += step(data.outputs[lo:hi], data.inputs[lo:hi], lr, worker)
            with lock:
                bar.update(corpus.raw_words * (hi - lo) / n)
        return total

    # Whole windows per step: about `batch` pairs (a window holds window + 1 pairs on average).
    per_step = max(1, round(batch / (window + 1))) if windows else batch
    effective = pairs = 0
    losses = []
    synchronize(device)
    start = time.perf_counter()
    # One thread draws the next epoch's pairs while the others train (epoch after epoch, so
    # the draws are deterministic); `workers` threads share an epoch's batches.
    with bar, ThreadPoolExecutor(1) as prefetch, ThreadPoolExecutor(workers) as pool:
        upcoming = prefetch.submit(draw)
        for epoch in range(epochs):
            data = upcoming.result()
            if epoch + 1 < epochs:
                upcoming = prefetch.submit(draw)
            n_batches = -(-len(data.outputs) // per_step)
            # The workers take the epoch's batches in order, each the next one not yet taken
            # when it is free (gensim's job queue): a worker slowed down by other programs
            # takes fewer, and none waits long for the other at the end of the epoch.
            batch_ids = iter(range(n_batches))
            jobs = [pool.submit(run, epoch, data, batch_ids, w) for w in range(workers)]
            totals = [job.result() for job in jobs]
            effective += data.kept
            pairs += data.pairs
            losses.append(float(sum(totals)) / max(data.pairs, 1))
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    synchronize(device)
    return TrainStats(
        objective=model.objective,
        device=str(device),
        epochs=epochs,
        raw_words=corpus.raw_words * epochs,
        effective_words=effective,
        pairs=pairs,
        seconds=time.perf_counter() - start,
        batch_size=batch,
        workers=workers,
        epoch_loss=tuple(losses),
        fused=kernel is not None,
    )


def _fused_kernel(model: SkipGram, share_negatives: bool, fused: bool | None):
    """The model's fused kernel (:meth:`SkipGram.fused_kernel`) when ``fused`` allows it and
    it can run, else None (the plain path). Noise shared by a window has no fused kernel."""
    if fused is False:
        return None
    supported = model.objective == "hierarchical" or (
        model.objective == "negative" and not share_negatives
    )
    kernel = model.fused_kernel() if supported else None  # warns if there is no compiler
    if fused and kernel is None and (not supported or model.device.type != "cpu"):
        warnings.warn(
            f"fused=True: no fused kernel for {model.objective!r} "
            f"{'with shared noise ' if share_negatives else ''}on {model.device}; plain path",
            RuntimeWarning,
            stacklevel=4,
        )
    return kernel


def _next_of(iterator, lock: threading.Lock):
    """The next item of an iterator that several threads share, or None when it is done."""
    with lock:
        return next(iterator, None)


@dataclass(frozen=True)
class _Epoch:
    """One epoch's draws: pairs (``inputs`` = input ids) or windows (``inputs`` = contexts)."""

    outputs: torch.Tensor
    inputs: torch.Tensor
    pairs: int
    kept: int


# --- evaluation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PairEvaluation:
    """Word-similarity scores of a set of vectors, as gensim reports them (note, topic 1).

    ``spearman`` and ``pearson``: correlations between human scores and cosine similarities
    over the pairs whose two words are in the vocabulary; ``oov_pairs`` pairs were skipped,
    ``oov_ratio`` is their share of all ``pairs`` in percent (gensim's third return value).
    """

    name: str
    spearman: float
    pearson: float
    pairs: int
    oov_pairs: int

    @property
    def oov_ratio(self) -> float:
        return 100.0 * self.oov_pairs / self.pairs


def _word_pairs(name: str) -> list[tuple[str, str, float]]:
    """The pairs of a similarity set in their original case, parsed line by line as gensim's
    ``evaluate_word_pairs`` parses them (``data.word_similarity`` gives them lowercased)."""
    rows = []
    with open(word_similarity_path(name), encoding="utf-8") as f:
        for line in f:
            if not line or line.startswith("#"):
                continue
            try:
                a, b, score = line.split("\t")
                rows.append((a, b, float(score)))
            except (ValueError, TypeError):
                continue
    return rows


def evaluate_word_pairs(
    words: Sequence[str] | Vocabulary,
    vectors: np.ndarray | torch.Tensor,
    name: str = "wordsim353",
    *,
    case_insensitive: bool = True,
    restrict_vocab: int = 300_000,
) -> PairEvaluation:
    """Spearman ρ of ``vectors`` on WordSim-353 or SimLex-999, gensim's way (note, topic 1).

    ``words[i]`` has vector ``vectors[i]`` (any ``[len(words), dim]`` array: trained,
    PCA-reduced, ...; words ordered most frequent first, as a ``Vocabulary`` is). Mirrors
    ``KeyedVectors.evaluate_word_pairs``: only the first ``restrict_vocab`` words count; with
    ``case_insensitive`` words are compared upper-cased and the first (most frequent) of
    several case variants wins; a pair with an out-of-vocabulary word is skipped and counted;
    the similarity is the cosine. Raises ``ValueError`` if no pair is in the vocabulary.
    """
    words = list(words.words if isinstance(words, Vocabulary) else words)
    vectors = vectors.detach().cpu().numpy() if isinstance(vectors, torch.Tensor) else vectors
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or len(vectors) != len(words):
        raise ValueError(
            f"vectors must be [len(words), dim]; got {vectors.shape} for {len(words)} words"
        )
    restrict_vocab = check_int("restrict_vocab", restrict_vocab, 1)
    allowed = list(enumerate(words[:restrict_vocab]))
    if case_insensitive:
        lookup = {w.upper(): i for i, w in reversed(allowed)}
    else:
        lookup = {w: i for i, w in allowed}
    rows = _word_pairs(name)
    gold, model, oov = [], [], 0
    for a, b, score in rows:
        if case_insensitive:
            a, b = a.upper(), b.upper()
        if a not in lookup or b not in lookup:
            oov += 1
            continue
        va = vectors[lookup[a]].astype(np.float64)
        vb = vectors[lookup[b]].astype(np.float64)
        gold.append(score)
        model.append(float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb))))
    if not gold:
        raise ValueError(f"no pair of {name} has both words in the vocabulary")
    scores = pd.DataFrame({"gold": gold, "model": model})
    return PairEvaluation(
        name=name,
        spearman=float(scores["gold"].corr(scores["model"], method="spearman")),
        pearson=float(scores["gold"].corr(scores["model"], method="pearson")),
        pairs=len(rows),
        oov_pairs=oov,
    )
