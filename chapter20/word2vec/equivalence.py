"""The fast paths of skip-gram training proven equal to their references, pair after pair (note,
topic 1).

Training steps by the fused C loop on a CPU (``chapter20.word2vec.fused``) and by batched tensor
ops elsewhere (:meth:`~chapter20.word2vec.skipgram.SkipGram.step`); the few-line updates of
``chapter20.word2vec.pair_updates`` say what one pair's step is. :func:`fused_equals_plain`
runs the C loop and the plain step on the same pairs one after another, from the same random
tables; :func:`reference_equals_fast` runs the few-line updates against what trains. Each update
starts from what the previous ones left, so a difference in any single step would grow from
pair to pair. Notebook 09 prints both; the tests hold them to float32 rounding.
"""

from __future__ import annotations

import numpy as np
import torch

from chapter20.core.checks import check_int, check_real
from chapter20.core.corpora import zipf_counts
from chapter20.word2vec.fused import load_kernels
from chapter20.word2vec.pair_updates import (
    hierarchical_pair_step,
    negative_pair_step,
    softmax_pair_step,
)
from chapter20.word2vec.skipgram import SkipGram, step_pair_by_pair
from chapter20.word2vec.skipgram_training import _torch_threads

__all__ = [
    "fused_equals_plain",
    "reference_equals_fast",
]


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
