"""The fast paths of skip-gram training proven equal to their references, pair after pair, and the
objectives' own guarantees (note, topic 1).

Training steps by the fused C loop on a CPU (``chapter20.word2vec.fused``) and by batched tensor
ops elsewhere (:meth:`~chapter20.word2vec.skipgram.SkipGram.step`); the few-line updates of
``chapter20.word2vec.pair_updates`` say what one pair's step is. :func:`fused_equals_plain`
runs the C loop and the plain step on the same pairs one after another, from the same random
tables; :func:`reference_equals_fast` runs the few-line updates against what trains. Each update
starts from what the previous ones left, so a difference in any single step would grow from
pair to pair. Notebook 09 prints both; the tests hold them to float32 rounding.

Before them, notebook 09 proves what the objectives rest on: the Huffman tree's guarantees
(:func:`huffman_proof`), the hierarchical softmax a proper distribution
(:func:`hs_normalisation_proof`), and the hand-written gradients that training applies equal to
autograd's (:func:`gradient_proof`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from chapter20.core.checks import check_int, check_real
from chapter20.core.id_streams import zipf_counts
from chapter20.word2vec.epoch_reference import train_epoch_reference
from chapter20.word2vec.fused import load_kernels
from chapter20.word2vec.huffman import build_huffman_tree
from chapter20.word2vec.objectives import (
    full_softmax_grads,
    hierarchical_softmax_grads,
    hierarchical_softmax_log_probs,
    negative_sampling_grads,
)
from chapter20.word2vec.pair_updates import (
    hierarchical_pair_step,
    negative_pair_step,
    softmax_pair_step,
)
from chapter20.word2vec.skipgram import SkipGram, step_pair_by_pair
from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.skipgram_training import (
    _encoded_corpus,
    _model,
    _torch_threads,
    _train,
    run_seeds,
)

__all__ = [
    "huffman_proof",
    "hs_normalisation_proof",
    "gradient_proof",
    "fused_equals_plain",
    "reference_equals_fast",
    "loop_equals_trainer",
]


def huffman_proof(counts: np.ndarray) -> dict[str, float | bool]:
    """The Huffman tree's guarantees, checked on ``counts`` (note, topic 1): prefix-free codes,
    frequent words never longer, mean code length within 1 bit of the entropy."""
    counts = np.asarray(counts)
    tree = build_huffman_tree(counts)
    codes = sorted(tree.code(w) for w in range(len(counts)))
    p = counts / counts.sum()
    # Longest code among words of each count, most frequent first, against the shortest code
    # among rarer words: a frequent word is never longer when max(earlier) <= min(later).
    by_count = pd.DataFrame({"count": counts, "length": tree.lengths}).groupby("count")["length"]
    longest = by_count.max().sort_index(ascending=False).cummax().to_numpy()
    shortest = by_count.min().sort_index(ascending=False).to_numpy()
    return {
        "words": len(counts),
        "prefix_free": not any(b.startswith(a) for a, b in zip(codes, codes[1:])),
        "frequent_not_longer": bool(np.all(longest[:-1] <= shortest[1:])),
        "entropy_bits": float(-(p * np.log2(p)).sum()),
        "mean_code_bits": tree.mean_code_length(counts),
        "max_depth": tree.max_depth,
        "log2_n": math.log2(len(counts)),
    }


def hs_normalisation_proof(n: int = 2000, dim: int = 32, rows: int = 8, seed: int = 0) -> float:
    """Largest ``|Σ_w P(w | h) - 1|`` over ``rows`` random inputs, for random node vectors of
    a ``n``-word Huffman tree (float64): hierarchical softmax is a proper distribution."""
    n, dim = check_int("n", n, 2), check_int("dim", dim, 1)
    rows, seed = check_int("rows", rows, 1), check_int("seed", seed, 0)
    gen = torch.Generator().manual_seed(seed)
    tree = build_huffman_tree(zipf_counts(n))
    nodes = torch.randn(n - 1, dim, generator=gen, dtype=torch.float64) / math.sqrt(dim)
    inputs = torch.randn(rows, dim, generator=gen, dtype=torch.float64)
    total = hierarchical_softmax_log_probs(inputs, nodes, tree).exp().sum(1)
    return float((total - 1).abs().max())


def _autograd(loss_fn, *tensors):
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    loss_fn(*leaves).backward()
    return [leaf.grad for leaf in leaves]


def gradient_proof(seed: int = 0) -> dict[str, float]:
    """Largest ``|ours - autograd|`` over every gradient of each objective, float64, on a
    small case (note, topic 1). The hand-written gradients are what training applies."""
    gen = torch.Generator().manual_seed(check_int("seed", seed, 0))

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    h, u = randn(16, 24), randn(16, 6, 24)
    ns = negative_sampling_grads(h, u)

    def ns_loss(h, u):
        s = (u * h.unsqueeze(1)).sum(-1)
        return -(
            torch.log(torch.sigmoid(s[:, 0])).sum() + torch.log(torch.sigmoid(-s[:, 1:])).sum()
        )

    diffs = {"negative": _max_diff((ns.grad_input, ns.grad_output), _autograd(ns_loss, h, u))}
    tree = build_huffman_tree(zipf_counts(100))
    words = torch.randint(0, 100, (16,), generator=gen)
    mask = torch.as_tensor(tree.mask)[words]
    rows = torch.repeat_interleave(torch.as_tensor(tree.lengths)[words])
    codes = torch.as_tensor(tree.codes)[words][mask]
    h_rows, n_rows = (
        randn(16, 24)[rows],
        randn(99, 24)[torch.as_tensor(tree.points)[words][mask].long()],
    )
    hs = hierarchical_softmax_grads(h_rows, n_rows, codes)

    def hs_loss(h, n):
        p = torch.sigmoid((h * n).sum(-1))
        return -torch.log(torch.where(codes == 0, p, 1 - p)).sum()

    diffs["hierarchical"] = _max_diff(
        (hs.grad_input, hs.grad_output), _autograd(hs_loss, h_rows, n_rows)
    )
    w, targets = randn(100, 24), torch.randint(0, 100, (16,), generator=gen)
    sm = full_softmax_grads(h, w, targets)

    def sm_loss(h, w):
        return torch.nn.functional.cross_entropy(h @ w.T, targets, reduction="sum")

    diffs["softmax"] = _max_diff((sm.grad_input, sm.grad_output), _autograd(sm_loss, h, w))
    return diffs


def fused_equals_plain(objective: str, pairs: int = 100, *, lr: float = 0.5, seed: int = 7):
    """Largest difference between the fused C kernel (``chapter20.word2vec.fused``) and the
    plain step (``SkipGram.step``) applied to the same ``pairs`` pairs one after another, from
    the same random tables (note, topic 1): ``(max |Δ| of the tables, |Δ| of the summed loss
    relative to it)``, or None without a C compiler. At ``lr = 0.5`` the step caps are active.
    Negative sampling draws its noise words in the kernel's stream and gives the plain step the
    same ones. Runs on one torch thread: the ops of one pair are so small that more threads
    only add their handovers."""
    pairs, lr, seed = check_int("pairs", pairs, 1), _check_lr(lr), check_int("seed", seed, 0)
    with _torch_threads(1):
        twins = []
        for _ in range(2):
            model = SkipGram(objective, zipf_counts(60, total=10**6), dim=37, negative=4, seed=seed)
            twins.append(_random_tables(model, seed, 0.3))
        fused, plain = twins
        kernel = fused.fused_kernel()
        if kernel is None:
            return None
        gen = torch.Generator().manual_seed(seed + 1)
        inputs = torch.randint(0, 60, (pairs,), generator=gen)
        outputs = torch.randint(0, 6, (pairs,), generator=gen)  # frequent words: repeats in a row
        noise = _kernel_noise(fused, pairs) if objective == "negative" else None
        loss = kernel(outputs, inputs, lr, torch.Generator().manual_seed(1))
        plain_loss = step_pair_by_pair(plain, inputs, outputs, lr, noise)
        tables = max(_max_diff((fused._w_in, fused._w_out), (plain._w_in, plain._w_out)), 0.0)
        return tables, abs(loss - plain_loss) / abs(plain_loss)


def reference_equals_fast(
    objective: str,
    counts: np.ndarray,
    inputs: torch.Tensor,
    outputs: torch.Tensor,
    *,
    lr: float = 0.025,
    scale: float = 0.2,
    seed: int = 7,
):
    """The few-line updates of ``chapter20.word2vec.pair_updates`` against what training runs
    (note, topic 1), on the pairs ``(inputs[p], outputs[p])`` one after another, from the same
    random tables (``scale`` × normal, so that every score and step is far from zero): the
    fused C loop for negative sampling (the same noise words) and the hierarchical softmax, the
    plain ``SkipGram.step`` for the full softmax. Returns ``(max |Δ| of the tables, |Δ| of the
    summed loss relative to it)``, or None where the C loop cannot run. At word2vec's rate
    (0.025) the fast paths' step cap does not bind, so the two must agree to float32 rounding.
    Runs on one torch thread, as :func:`fused_equals_plain`."""
    lr, seed = _check_lr(lr), check_int("seed", seed, 0)
    scale = check_real("scale", scale, minimum=0.0, exclusive=True, finite=True)
    with _torch_threads(1):
        model = _random_tables(SkipGram(objective, counts, seed=seed), seed, scale)
        w_in, w_out = model.input_vectors.clone(), model.output_vectors.clone()
        pairs = list(zip(inputs.tolist(), outputs.tolist()))
        if objective == "softmax":
            loss = step_pair_by_pair(model, inputs, outputs, lr)
            reference = sum(softmax_pair_step(w_in, w_out, i, o, lr) for i, o in pairs)
        else:
            kernel = model.fused_kernel()
            if kernel is None:
                return None
            reference = sum(_reference_steps(model, w_in, w_out, pairs, lr))
            loss = kernel(outputs, inputs, lr, torch.Generator().manual_seed(1))
        tables = _max_diff((model.input_vectors, model.output_vectors), (w_in, w_out))
        return tables, abs(loss - reference) / abs(reference)


def loop_equals_trainer(
    objective: str, sentences, vocab, *, chunk: int = 512, seed: int = 1
) -> tuple[float, float, int, int] | None:
    """One epoch of :func:`~chapter20.word2vec.epoch_reference.train_epoch_reference` (Python
    loops) against one epoch of ``train_word2vec``'s own loop (note, topic 1): the fused C path,
    one worker, one torch thread, ``chunk`` pairs per call (several calls: the learning rate
    decays between them), ``seed``'s initial weights and generators for both, on
    ``sentences`` with ``vocab``. Returns ``(max |Δ| of the tables, |Δ| of the summed loss
    relative to it, pairs of the reference, pairs of the trainer)``, or None where the C loop
    cannot run (the full softmax; no C compiler, where training takes the batched step)."""
    config = Word2VecConfig(
        objective=objective, epochs=1, batch_size=check_int("chunk", chunk, 1), seed=seed,
        workers=1, threads=1, fused=True, progress=False,
    )  # fmt: skip
    if objective == "softmax" or load_kernels() is None:  # no C loop for these
        return None
    seeds, cpu = run_seeds(config.seed, 0), torch.device("cpu")
    corpus, keep = _encoded_corpus(sentences, vocab, config.sample, cpu)
    trained, twin = (_model(config, vocab, seeds[0], cpu, None) for _ in range(2))
    stats = _train(trained, corpus, keep, config, seeds)
    generators = [torch.Generator().manual_seed(s) for s in seeds[1:]]
    with _torch_threads(1):
        loss, pairs = train_epoch_reference(twin, corpus, keep, config, 0, *generators)
    tables = _max_diff((trained._w_in, trained._w_out), (twin._w_in, twin._w_out))
    return tables, abs(stats.epoch_loss[0] * stats.pairs - loss) / abs(loss), pairs, stats.pairs


def _reference_steps(model: SkipGram, w_in, w_out, pairs, lr) -> list[float]:
    """The losses of the few-line updates of negative sampling (with the noise words the C loop
    draws) or the hierarchical softmax (on the model's tree) on ``pairs``, applied in order to
    ``w_in`` and ``w_out``."""
    if model.objective == "negative":
        noise = _kernel_noise(model, len(pairs))
        return [negative_pair_step(w_in, w_out, i, o, noise[p], lr)
                for p, (i, o) in enumerate(pairs)]  # fmt: skip
    tree = model.tree
    points, codes = torch.as_tensor(tree.points).long(), torch.as_tensor(tree.codes)
    return [hierarchical_pair_step(w_in, w_out, i, points[o, : tree.lengths[o]],
                                   codes[o, : tree.lengths[o]], lr)
            for i, o in pairs]  # fmt: skip


def _random_tables(model: SkipGram, seed: int, scale: float) -> SkipGram:
    """``model`` with both tables drawn anew, ``scale`` × normal (seeded by ``seed``): scores
    and steps far from zero, unlike word2vec's start (zero output vectors)."""
    gen = torch.Generator().manual_seed(seed)
    for table in (model.input_vectors, model.output_vectors):
        table.copy_(torch.randn(table.shape, generator=gen) * scale)
    return model


def _kernel_noise(model: SkipGram, pairs: int) -> torch.Tensor:
    """The ``(pairs, k)`` noise words that ``model``'s fused kernel draws when it is called with
    a generator seeded 1: the kernel takes one seed from that generator for its own stream."""
    stream = int(torch.randint(0, 2**63 - 1, (), generator=torch.Generator().manual_seed(1)))
    sampler = model.sampler
    noise = load_kernels().draw_noise(sampler.prob, sampler.alias, stream, model.negative * pairs)
    return noise.view(pairs, model.negative)


def _check_lr(lr: float) -> float:
    """A learning rate in (0, 10): beyond, SGD on word vectors only diverges."""
    return check_real("lr", lr, minimum=0.0, maximum=10.0, exclusive=True)


def _max_diff(ours, theirs) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(ours, theirs))
