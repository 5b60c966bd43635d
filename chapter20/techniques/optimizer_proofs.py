"""§20.3.2 The optimizers' references proven against the kernels that run them: the proofs that
notebooks 05 and 12 run and the tests hold (``chapter20.techniques.optimizers``).

- :func:`reference_gap`: a written-out update and an optimizer from the same weights on the same
  gradients, and how far apart they end;
- :func:`reference_step_proof`: AdamW's two moments and SGD-Nesterov's buffer, written out,
  against PyTorch's fused and foreach kernels;
- :func:`quantisation_proof`: block-wise dynamic 8-bit quantisation against bitsandbytes' own
  functions and the state its ``AdamW8bit`` holds.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import nn

from chapter20.core.checks import check_int, check_positive
from chapter20.techniques.optimizers import (
    adamw_reference_step,
    dequantise_dynamic,
    make_optimizer,
    quantise_dynamic,
    sgd_nesterov_reference_step,
)

__all__ = ["quantisation_proof", "reference_gap", "reference_step_proof"]


def reference_gap(
    reference_step: Callable,
    build: Callable[..., torch.optim.Optimizer],
    start: Sequence[torch.Tensor],
    grads: Sequence[Sequence[torch.Tensor]],
    lr: float,
) -> tuple[float, torch.optim.Optimizer]:
    """A written-out update (``reference_step(p, grad, state, lr)``, e.g.
    :func:`adamw_reference_step`) and the optimizer ``build(parameters, lr=lr)`` run from the same
    weights ``start`` on the same gradients, ``grads`` holding one gradient per tensor for each
    step (§20.3.2): the largest absolute difference of the weights after the steps, and the
    optimizer (its state, to read)."""
    lr = check_positive("lr", lr)
    ours, states = [t.clone() for t in start], [{} for _ in start]
    theirs = [nn.Parameter(t.clone()) for t in start]
    optimizer = build(theirs, lr=lr)
    for step in grads:
        for p, grad, state in zip(ours, step, states, strict=True):
            reference_step(p, grad, state, lr)
        for p, grad in zip(theirs, step, strict=True):
            p.grad = grad.clone()
        optimizer.step()
    return max(float((a - b.detach()).abs().max()) for a, b in zip(ours, theirs)), optimizer


def reference_step_proof(steps: int = 5, size: int = 1_000, tolerance: float = 1e-6) -> list[str]:
    """§20.3.2, notebook 05 section 1: ``adamw_reference_step`` against PyTorch's fused and
    foreach AdamW, ``sgd_nesterov_reference_step`` against SGD with Nesterov momentum, ``steps``
    steps on the same random gradients from the same weights: one line per kernel with the
    weights' max |Δ| (``tolerance``: float32 rounding) and the state's tensor names."""
    steps, size = check_int("steps", steps, 1), check_int("size", size, 1)
    tolerance = check_positive("tolerance", tolerance, zero=True)
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(size, generator=generator)
    grads = [[torch.randn(size, generator=generator)] for _ in range(steps)]
    kernels = {
        "AdamW, fused": (torch.optim.AdamW, dict(fused=True), adamw_reference_step),
        "AdamW, foreach": (torch.optim.AdamW, dict(foreach=True), adamw_reference_step),
        "SGD, Nesterov": (
            torch.optim.SGD,
            dict(momentum=0.9, nesterov=True),
            sgd_nesterov_reference_step,
        ),
    }
    lines = []
    for name, (kind, options, reference) in kernels.items():
        gap, optimizer = reference_gap(reference, partial(kind, **options), [start], grads, 1e-2)
        state = optimizer.state[optimizer.param_groups[0]["params"][0]]
        tensors = sorted(k for k, v in state.items() if v.numel() > 1)
        lines.append(f"{name:<15} vs the reference: weights max |Δ| = {gap:.1e} "
                     f"{'✓' if gap <= tolerance else '✗'}; state tensors {tensors}")  # fmt: skip
    return lines


def quantisation_proof(size: int = 65_536, tolerance: float = 1e-4) -> list[str]:
    """§20.3.2, notebook 05 section 2: ``techniques.optimizers.quantise_dynamic`` /
    ``dequantise_dynamic`` against bitsandbytes' own ``quantize_blockwise`` /
    ``dequantize_blockwise`` on this device, blocks of 256 and 2,048, signed and unsigned dynamic
    maps, and against the state an ``AdamW8bit`` holds after one step (its first moment is
    0.1 × the gradient). Decoding is the same arithmetic (max |Δ| 0); for encoding, the bytes
    that differ are within ``tolerance`` × the block's scale of the nearest level (bitsandbytes'
    CPU search is approximate near the midpoints between levels). One line per check."""
    size = check_int("size", size, 1)
    tolerance = check_positive("tolerance", tolerance, zero=True)
    functional = importlib.import_module("bitsandbytes.functional")
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(size, generator=generator) * torch.rand(size, generator=generator) ** 4
    lines = []
    for signed, block in ((True, 256), (False, 256), (True, 2048)):
        code = functional.create_dynamic_map(signed=signed)
        data = values if signed else values.abs()
        theirs, state = functional.quantize_blockwise(data, code=code, blocksize=block)
        mine, absmax = quantise_dynamic(data, code, block)
        decoded = dequantise_dynamic(theirs, state.absmax, code, block)
        same_decode = (decoded - functional.dequantize_blockwise(theirs, state)).abs().max()
        scale = absmax.repeat_interleave(block)[:size]
        extra = ((decoded - data).abs() - (dequantise_dynamic(mine, absmax, code, block) - data)
                 .abs()).div(scale).max()  # fmt: skip
        ok = same_decode == 0 and torch.equal(absmax, state.absmax) and extra <= tolerance
        lines.append(
            f"{'signed' if signed else 'unsigned'} map, block {block:>5,}: absmax equal, "
            f"decode max |Δ| = {same_decode:.1e}, same byte for "
            f"{(mine == theirs).float().mean():.1%} of values, extra error of the others "
            f"<= {extra:.1e} x scale {'✓' if ok else '✗'}"
        )
    parameter = torch.nn.Parameter(torch.zeros(size))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bitsandbytes' notices; a fallback would fail the proof
        optimizer = make_optimizer([parameter], "adamw8bit", 1e-3, weight_decay=0.0)
    parameter.grad = values.clone()
    optimizer.step()
    state = optimizer.state[parameter]
    moment = dequantise_dynamic(state["state1"], state["absmax1"], state["qmap1"], 256)
    gap = ((moment - 0.1 * values).abs() / state["absmax1"].repeat_interleave(256)).max()
    bound = float(state["qmap1"].diff().max()) / 2 + tolerance  # half the widest level gap
    lines.append(
        "AdamW8bit's own first moment decoded by the reference vs 0.1 x gradient: "
        f"max |Δ| = {gap:.1e} x scale (bound: half the widest gap between levels + "
        f"{tolerance:g}, {bound:.1e}) {'✓' if gap <= bound else '✗'}"
    )
    return lines
