"""The skip-gram model: its two tables of vectors and word2vec's SGD step (note, topic 1).

:class:`SkipGram` holds the input vectors (the word vectors) and the output vectors (the output
words', or the Huffman tree's inner nodes'), and applies word2vec's update to a batch of
(input, output) pairs in vectorised tensor ops, on CPU or CUDA, with no autograd: the plain
path. :meth:`SkipGram.fused_kernel` hands out the fused path, the same update one pair at a
time in C (``chapter20.word2vec.fused``). :class:`Workspace` is one stepping thread's scratch
memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from chapter20.core.checks import check_int, check_real
from chapter20.word2vec.fused import MAX_EXP, load_kernels
from chapter20.word2vec.huffman import HuffmanTree, _check_counts, _check_tree, build_huffman_tree
from chapter20.word2vec.objectives import (
    _check_objective,
    _hs_terms,
    _ns_signs,
    _ns_terms,
    _softmax_terms,
)
from chapter20.word2vec.sampling import NoiseSampler, noise_distribution
from chapter20.word2vec.skipgram_config import Word2VecConfig

__all__ = [
    "step_pair_by_pair",
    "SkipGram",
    "Workspace",
]


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
    of ``counts`` (e.g. gensim's, to compare with gensim on the same tree). ``seed``: the
    initial weights' and the noise generator's (``train_word2vec`` derives it from its
    configuration's seed, ``run_seeds``); ``dim`` and ``negative`` default to
    ``Word2VecConfig``'s.
    """

    def __init__(
        self,
        objective: str,
        counts: Sequence[int] | np.ndarray,
        *,
        dim: int = Word2VecConfig.dim,
        negative: int = Word2VecConfig.negative,
        device: torch.device | str = "cpu",
        seed: int,
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
        targets, labels, target_mask = self._window_targets(outputs, noise)
        width = targets.shape[1]
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

    def _window_targets(
        self, outputs: torch.Tensor, noise: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The output rows that the pairs of each window score, for :meth:`step_windows`:
        ``(targets [G, width], labels, target_mask)``. Hierarchical softmax: the output word's
        path (on a CPU trimmed to the batch's longest), its labels, and False on padding.
        Negative sampling: the output word then its ``k`` noise words (``noise``, drawn from
        the model's generator when None), the labels 1, 0, ..., 0, and False where a noise word
        equals the output word (word2vec skips it)."""
        g = len(outputs)
        if self.objective == "hierarchical":
            width = self.tree.max_depth
            if self._trim_paths:  # the batch's longest path; reading it back would stall a GPU
                width = int(self._lengths.index_select(0, outputs).max()) if g else 0
            targets = self._points_padded.index_select(0, outputs)[:, :width]
            labels = self._labels.index_select(0, outputs)[:, :width]
            return targets, labels, targets != self.output_pad
        if noise is None:
            noise = self.sampler.sample(g * self.negative, self.generator).view(g, -1)
        targets = torch.cat([outputs.unsqueeze(1), noise], dim=1)
        labels = _ns_signs(targets.shape[1], torch.float32, self.device)[1]
        target_mask = targets != outputs.unsqueeze(1)
        target_mask[:, 0] = True  # a noise word equal to the true word is skipped
        return targets, labels, target_mask


def step_pair_by_pair(
    model: SkipGram,
    inputs: torch.Tensor,
    outputs: torch.Tensor,
    lr: float,
    noise: torch.Tensor | None = None,
) -> float:
    """The plain step on one (input, output) pair at a time, in order (note, topic 1): the
    reference the fused C kernels must equal, since each of their updates starts from the rows
    the previous pair left. ``noise``: for negative sampling, the ``(pairs, k)`` noise words the
    kernel drew (a noise word equal to the pair's output word is masked out, as the kernel
    skips it). Returns the summed loss."""
    lr = check_real("lr", lr, minimum=0.0, maximum=10.0, exclusive=True)  # beyond: divergence
    total = 0.0
    for p in range(len(inputs)):
        targets = None
        if noise is not None:
            ids = torch.cat([outputs[p : p + 1], noise[p]]).unsqueeze(0)
            weight = (ids != outputs[p]).float()
            weight[:, 0] = 1.0
            targets = (ids, weight)
        total += float(model.step(inputs[p : p + 1], outputs[p : p + 1], lr, targets))
    return total
