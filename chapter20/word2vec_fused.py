"""word2vec's SGD steps as single fused kernels: the fast path of ``chapter20.word2vec``.

The note on efficient embedding training, topic 1. ``SkipGram.step`` (the plain path) computes
a batch's update op by op: gather the output rows into a ``[B, 1 + k, D]`` tensor, multiply,
sum, take sigmoids, multiply again, scatter. Each op is one pass over memory, and each writes
a large temporary that the next op reads back. Where the time goes (``word2vec_lab.
profile_step``, notebook 09): the scatter, the element-wise products and the gathers — moving
rows, not arithmetic. word2vec's C loop never has that problem: it keeps one pair's few rows in
the first-level cache and does all the work on them at once.

The functions here state the same update as one expression each, so that ``torch.compile``'s
CPU backend turns each into a few C++ loops. Negative sampling is written with broadcasts and
sums (``(u * h).sum(-1)``, not ``torch.bmm``): the compiled loops read every output row
straight from the weight table, compute its score, sigmoid, step and step cap in registers,
and add the step back — no ``[B, 1 + k, D]`` temporary, two passes over the rows per pair
instead of eight. The hierarchical softmax steps whole windows, whose scores are small matrix
products: those stay batched GEMMs (``bmm``, which beats any loop the compiler writes for
them, measured) and the compiler fuses everything around them. Run eagerly the functions are
slower than the plain path, but they compute the same numbers (tested), which is what makes
the compiled kernels trustworthy.

Practicalities, each measured or tested:

- the CPU backend needs a C++ compiler; :func:`fused_step` returns ``None`` (and the trainer
  falls back to the plain path, with a warning) when there is none or compiling fails;
- the kernels are compiled with ``cpp_wrapper``: the generated C++ entry point releases
  Python's GIL, so Hogwild worker threads run them in parallel, as gensim's workers run its C.
  Each kernel runs on one thread (``workers`` brings the parallelism): a kernel split over
  threads waits for the slowest at every step, and on a shared machine that is often one
  that was descheduled;
- shapes are fixed (the trainer pads a short last batch with the all-zero sink rows, whose
  steps are zero), so each objective compiles once per process; the vocabulary size (of the
  tables and of the noise sampler) and the depth of the Huffman tree are dynamic, so another
  corpus does not recompile (another ``dim``, ``negative`` or batch size does). The first
  compile takes a minute or more on 2 cores; later processes load it from inductor's on-disk
  cache in seconds.
"""

from __future__ import annotations

import functools
import shutil
import sysconfig
import warnings

import torch

__all__ = [
    "MAX_EXP",
    "compiler_available",
    "fused_step",
    "hierarchical_window_step",
    "negative_pair_step",
]

#: Hierarchical-softmax steps whose score is this large are skipped, as in word2vec and gensim
#: (their ``MAX_EXP``): the sigmoid is saturated there.
MAX_EXP = 6.0


def _row_cap(rows: torch.Tensor, curvature: torch.Tensor, lr: torch.Tensor, size) -> torch.Tensor:
    """``1 / max(1, lr * Σ curvature)``, the sum over all entries of the batch that update the
    same row (``SkipGram``'s step cap), for each entry."""
    total = torch.zeros(size, dtype=curvature.dtype, device=curvature.device)
    total = total.index_add(0, rows, curvature)
    return 1.0 / torch.clamp(total[rows] * lr, min=1.0)


def negative_pair_step(
    w_in: torch.Tensor,
    w_out: torch.Tensor,
    inputs: torch.Tensor,
    outputs: torch.Tensor,
    slot: torch.Tensor,
    coin: torch.Tensor,
    prob: torch.Tensor,
    alias: torch.Tensor,
    lr: torch.Tensor,
) -> torch.Tensor:
    """Negative sampling's step on ``B`` pairs, in place, as one expression (note, topic 1).

    ``inputs [B]``, ``outputs [B]``: the pairs' input and true output words (the sink rows
    ``len(w_in) - 1`` and ``len(w_out) - 1`` in padding); ``slot``, ``coin`` ``[B, k]``: the
    uniform draws of Walker's alias method (``NoiseSampler``: a slot, then a number in
    [0, 1)), turned into ``k`` noise words per pair with the sampler's ``prob`` and ``alias``
    tables here, so that the draw is fused too; ``lr``: 0-d tensor. The same update as
    ``SkipGram.step`` with ``noise_targets`` from the same draws (tested equal): the scores
    ``u·h``, the coefficients ``(σ(u·h) - label) · lr``, a noise word equal to the true word
    skipped, both tables' steps divided by the per-row cap. Returns the summed loss.
    """
    noise = torch.where(coin < prob[slot], slot, alias[slot])
    targets = torch.cat([outputs.unsqueeze(1), noise], dim=1)  # [B, 1 + k]
    live = (inputs != len(w_in) - 1).to(w_in.dtype).unsqueeze(1)  # 0 for padding
    weight = (targets != outputs.unsqueeze(1)).to(w_in.dtype)
    weight[:, 0] = 1.0
    weight = weight * live
    label = torch.zeros_like(weight)
    label[:, 0] = 1.0
    h = w_in[inputs]  # [B, D]
    u = w_out[targets]  # [B, 1 + k, D]: compiled, these rows are read, never stored
    scores = (u * h.unsqueeze(1)).sum(-1)
    sig = torch.sigmoid(scores)
    loss = -(torch.nn.functional.logsigmoid(scores * (2.0 * label - 1.0)) * weight).sum()
    coef = (sig - label) * weight * -lr
    curvature = sig * (1.0 - sig) * weight
    flat = targets.reshape(-1)
    out_curvature = curvature * (h * h).sum(-1, keepdim=True)
    out_cap = _row_cap(flat, out_curvature.reshape(-1), lr, len(w_out))
    in_cap = _row_cap(inputs, (curvature * (u * u).sum(-1)).sum(1), lr, len(w_in))
    step_in = (coef.unsqueeze(2) * u).sum(1) * in_cap.unsqueeze(1)
    step_out = (coef.reshape(-1) * out_cap).reshape(coef.shape).unsqueeze(2) * h.unsqueeze(1)
    # The input rows first: their step is the last use of the gathered output rows, which the
    # output update then overwrites (the other order makes the compiler keep a copy of them).
    w_in.index_put_((inputs,), step_in, accumulate=True)
    w_out.index_put_((flat,), step_out.reshape(len(flat), -1), accumulate=True)
    return loss


def hierarchical_window_step(
    w_in: torch.Tensor,
    w_out: torch.Tensor,
    contexts: torch.Tensor,
    targets: torch.Tensor,
    labels: torch.Tensor,
    lr: torch.Tensor,
) -> torch.Tensor:
    """The hierarchical softmax's step on ``G`` whole windows, in place (note, topic 1).

    ``contexts [G, S]``: each window's input words (the sink row ``len(w_in) - 1`` in unused
    slots); ``targets [G, L]``: the inner nodes on the path of the window's output word (the
    sink row ``len(w_out) - 1`` past its end); ``labels [G, L]``: 1 - code. Every (context,
    node) pair of a window is one score; steps beyond ``±MAX_EXP`` are skipped. The same update
    as ``SkipGram.step_windows`` (tested equal). Returns the summed loss.
    """
    live_slot = (contexts != len(w_in) - 1).to(labels.dtype)
    live_node = (targets != len(w_out) - 1).to(labels.dtype)
    h = w_in[contexts]  # [G, S, D]
    u = w_out[targets]  # [G, L, D]
    # A window's scores are a small matrix product: left to a batched GEMM, which beats any
    # loop the compiler writes for them; the compiler fuses everything around the products.
    scores = torch.bmm(h, u.transpose(1, 2))  # [G, S, L]
    weight = live_slot.unsqueeze(2) * live_node.unsqueeze(1) * (scores.abs() < MAX_EXP)
    sig = torch.sigmoid(scores)
    label = labels.unsqueeze(1)
    loss = -(torch.nn.functional.logsigmoid(scores * (2.0 * label - 1.0)) * weight).sum()
    coef = (sig - label) * weight * -lr
    curvature = sig * (1.0 - sig) * weight
    in_curvature = (curvature * (u * u).sum(-1).unsqueeze(1)).sum(2)  # [G, S]
    out_curvature = (curvature * (h * h).sum(-1).unsqueeze(2)).sum(1)  # [G, L]
    in_cap = _row_cap(contexts.reshape(-1), in_curvature.reshape(-1), lr, len(w_in))
    out_cap = _row_cap(targets.reshape(-1), out_curvature.reshape(-1), lr, len(w_out))
    step_in = torch.bmm(coef, u)  # [G, S, D]
    step_out = torch.bmm(coef.transpose(1, 2), h)  # [G, L, D]
    dim = w_in.shape[1]
    # Input rows first, as in negative_pair_step: the compiler then keeps a copy of the
    # windows' input rows for the output step, the smaller of the two.
    w_in.index_put_(
        (contexts.reshape(-1),), step_in.reshape(-1, dim) * in_cap.unsqueeze(1), accumulate=True
    )
    w_out.index_put_(
        (targets.reshape(-1),), step_out.reshape(-1, dim) * out_cap.unsqueeze(1), accumulate=True
    )
    return loss


_STEPS = {"negative": negative_pair_step, "hierarchical": hierarchical_window_step}
#: Argument dims that may change from run to run without recompiling: the tables' rows (the
#: vocabulary size) and the length of the longest Huffman path (it depends on the counts).
_DYNAMIC_DIMS = {
    "negative": {0: 0, 1: 0, 6: 0, 7: 0},
    "hierarchical": {0: 0, 1: 0, 3: 1, 4: 1},
}


def compiler_available() -> bool:
    """Whether a C++ compiler that ``torch.compile``'s CPU backend can call is on the PATH."""
    names = [sysconfig.get_config_var("CXX") or "", "c++", "g++", "clang++"]
    return any(name and shutil.which(name.split()[0]) for name in names)


@functools.cache
def _compiled(objective: str):
    # One thread per kernel: the trainer's Hogwild workers bring the parallelism, and a kernel
    # that never waits for a second thread keeps going when other programs share the cores.
    # Ids are in range by construction (the trainer draws them), so the compiled loops skip
    # the per-element index checks.
    options = {"cpp_wrapper": True, "cpp.threads": 1, "assert_indirect_indexing": False}
    # Not fullgraph=True (the functions have no graph break; the tests compile them whole):
    # its check counts compiled frames in a process-wide counter, which two Hogwild threads
    # calling at once reset under each other, raising for a step that did run compiled.
    return torch.compile(_STEPS[objective], options=options)


def fused_step(objective: str, *example_args: torch.Tensor):
    """The compiled fused step of ``objective`` (``"negative"`` or ``"hierarchical"``), ready
    to call, or ``None`` when it cannot be used: with a warning saying why for no C++ compiler
    or a compile error; silently on a device other than the CPU (GPUs train on the plain path,
    whose large batches already keep them busy).

    ``example_args``: arguments of the shapes training will use; the step is compiled and run
    once on copies of them (so the weights are not touched), then checked against the eager
    fused step on the same input: a mismatch beyond float32 rounding also returns ``None``.
    """
    if objective not in _STEPS:
        raise ValueError(f"objective must be one of {tuple(_STEPS)}, got {objective!r}")
    if example_args[0].device.type != "cpu":
        return None
    if not compiler_available():
        warnings.warn(
            "no C++ compiler found: word2vec trains on the plain (unfused) path, about half "
            "as fast; install one (e.g. g++) for the fused kernels",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    step = _compiled(objective)
    args = [arg.clone() for arg in example_args]  # the step writes into the tables
    for index, dim in _DYNAMIC_DIMS[objective].items():
        torch._dynamo.mark_dynamic(args[index], dim)
    reference = [arg.clone() for arg in example_args[:2]]
    try:
        loss = step(*args)
    except Exception as error:  # compile failures come in many types; all mean "fall back"
        warnings.warn(
            f"torch.compile failed for the fused {objective} step ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}); training on the plain path",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    expected = _STEPS[objective](*reference, *example_args[2:])
    same = torch.allclose(loss, expected, rtol=1e-4, atol=1e-4) and all(
        torch.allclose(a, b, atol=1e-5) for a, b in zip(args, reference)
    )
    if not same:
        warnings.warn(
            f"the compiled {objective} step disagrees with its eager form; training on the "
            "plain path",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return step
