"""§20.2.1 Gradient accumulation: several micro-batches, one optimizer step.

The chapter's trainer (listing L4) divides each micro-batch's mean loss by the number of
micro-batches. That is the full-batch gradient only when every micro-batch has the same size;
:func:`accumulate_step` weights each example by 1 / (examples in the whole step), counted over
all ranks under DDP, so any split — uneven micro-batches, a short last batch, ranks with
different counts — gives the full-batch gradient. Under DDP the gradient all-reduce runs once,
on the last micro-batch (``no_sync`` on the others), and clipping comes after accumulation.

What accumulation does not do is add negatives to a contrastive loss: a per-example InfoNCE
loss computed inside each micro-batch only sees that micro-batch's keys. For that, see
``chapter20.contrastive`` (gradient caching, cross-rank negatives).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._pytree import tree_leaves

from chapter20.checks import check_optional_positive
from chapter20.distributed import group_rank_and_size

__all__ = ["AccumulationResult", "num_examples", "accumulate_step"]

_NORMALIZATIONS = ("examples", "micro_batches")


@dataclass(frozen=True)
class AccumulationResult:
    """What one accumulated step did: ``loss`` is the mean per-example loss on this rank,
    ``examples`` the examples this rank saw, ``grad_norm`` the total gradient norm before
    clipping (None unless ``clip_norm`` was given)."""

    loss: float
    examples: int
    micro_batches: int
    grad_norm: float | None


def num_examples(batch: Any) -> int:
    """Examples in a micro-batch: the length of its first tensor (a tensor, or a tuple / dict
    of tensors that share their first dimension)."""
    tensors = [leaf for leaf in tree_leaves(batch) if isinstance(leaf, torch.Tensor)]
    if not tensors or tensors[0].dim() == 0:
        raise ValueError("a micro-batch must hold at least one tensor with a batch dimension")
    return int(tensors[0].shape[0])


def accumulate_step(
    model: nn.Module,
    micro_batches: Sequence[Any],
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    *,
    clip_norm: float | None = None,
    normalize: str = "examples",
) -> AccumulationResult:
    """One optimizer step over ``micro_batches`` (§20.2.1).

    ``loss_fn(model, batch)`` returns one loss per example (shape ``[n]``). Each micro-batch's
    summed loss is scaled by 1 / (examples in the step), so the accumulated gradient is that of
    the mean loss over the whole batch; under DDP (``model`` wrapped in
    ``DistributedDataParallel``) the count is summed over ranks and multiplied by the world
    size, since DDP averages. ``normalize="micro_batches"`` reproduces listing L4 (mean per
    micro-batch / number of micro-batches), exact only for equal sizes — kept for comparison.
    Gradients are cleared first and left in ``.grad`` after the step.
    """
    if not micro_batches:
        raise ValueError("micro_batches must hold at least one micro-batch")
    if normalize not in _NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {_NORMALIZATIONS}, got {normalize!r}")
    clip_norm = check_optional_positive("clip_norm", clip_norm)
    ddp = isinstance(model, nn.parallel.DistributedDataParallel)
    counts = [num_examples(batch) for batch in micro_batches]
    local = sum(counts)
    total, world = local, 1
    if ddp:
        _, world = group_rank_and_size(model.process_group)
        count = torch.tensor([local], dtype=torch.float64, device=_device_of(model))
        dist.all_reduce(count, group=model.process_group)
        total = int(count.item())
    if total == 0:
        raise ValueError("the micro-batches hold no example")
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for index, (batch, count) in enumerate(zip(micro_batches, counts)):
        last = index == len(micro_batches) - 1
        sync = contextlib.nullcontext() if last or not ddp else model.no_sync()
        with sync:
            losses = loss_fn(model, batch)
            if losses.shape != (count,):
                raise ValueError(
                    f"loss_fn must return one loss per example, shape ({count},), got "
                    f"{tuple(losses.shape)} for micro-batch {index}"
                )
            if normalize == "examples":
                scale = world / total
            else:
                scale = 1.0 / (max(count, 1) * len(micro_batches))
            (losses.sum() * scale).backward()
        loss_sum += float(losses.detach().sum())
    grad_norm = None
    if clip_norm is not None:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm))
    optimizer.step()
    return AccumulationResult(loss_sum / max(local, 1), local, len(micro_batches), grad_norm)


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
