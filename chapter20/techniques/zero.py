"""§20.3.2, §20.8 ZeRO stage 1: the optimizer state partitioned over the ranks.

:func:`zero_adamw` is ``torch.distributed.optim.ZeroRedundancyOptimizer`` around AdamW — each rank
keeps the moments of its share of the parameters and broadcasts the parameters it updated — ready
to hand to ``chapter20.training.trainer.Trainer(optimizer=...)``; :func:`local_state_bytes` counts
what this rank holds. :func:`zero1_partition` is the partition itself in a few lines (whole
tensors, largest first, to the least loaded rank), and :func:`zero1_state_bytes` the AdamW state
it leaves on each rank, proven against what ``ZeroRedundancyOptimizer`` holds.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.checks import check_int, check_positive

__all__ = ["zero_adamw", "local_state_bytes", "zero1_partition", "zero1_state_bytes"]


def zero_adamw(params, lr: float, *, weight_decay: float = 0.01, group=None):
    """AdamW whose state is sharded over the ranks of ``group`` — ZeRO stage 1 (§20.3.2):
    ``torch.distributed.optim.ZeroRedundancyOptimizer``. Each rank keeps the two moments of
    its share of the parameters (whole tensors, dealt out greedily by size, so the shares are
    only as even as the tensors allow), steps them, and broadcasts the updated parameters, so
    the replicas stay identical and equal plain AdamW. Pass it to
    ``chapter20.training.trainer.Trainer(optimizer=...)``. In a world of one it holds everything."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    lr = check_positive("lr", lr)
    weight_decay = check_positive("weight_decay", weight_decay, zero=True)
    params = list(params.parameters() if isinstance(params, nn.Module) else params)
    if not params:
        raise ValueError("params must hold at least one parameter")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("zero_adamw needs a process group (run_local_group or torchrun)")
    return ZeroRedundancyOptimizer(
        params,
        optimizer_class=torch.optim.AdamW,
        process_group=group,
        lr=lr,
        weight_decay=weight_decay,
    )


def local_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of optimizer state this rank holds (§20.3.2): for a ``ZeroRedundancyOptimizer``
    its local optimizer's share, for any other optimizer all of it."""
    inner = getattr(optimizer, "optim", optimizer)
    return sum(
        value.numel() * value.element_size()
        for state in inner.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )


def zero1_partition(params: list[torch.Tensor], world: int) -> list[int]:
    """ZeRO-1's assignment of parameters to ranks as ``ZeroRedundancyOptimizer`` makes it
    (§20.3.2): whole tensors, largest first, each to the rank that holds the fewest elements so
    far. Returns each parameter's rank; that rank alone keeps its optimizer state and
    broadcasts it after the step."""
    world = check_int("world", world, 1)
    loads, owner = [0] * world, [0] * len(params)
    for i in sorted(range(len(params)), key=lambda i: -params[i].numel()):
        rank = min(range(world), key=loads.__getitem__)
        owner[i], loads[rank] = rank, loads[rank] + params[i].numel()
    return owner


def zero1_state_bytes(params: list[torch.Tensor], world: int) -> list[int]:
    """Bytes of AdamW state each rank keeps under :func:`zero1_partition`: two float32 moments
    per element and a float32 step counter per tensor (§20.3.2)."""
    owner = zero1_partition(params, world)
    held = [0] * world
    for p, rank in zip(params, owner):
        held[rank] += 8 * p.numel() + 4
    return held
