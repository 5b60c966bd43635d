"""§20.3.2, §20.8 ZeRO stage 1: the optimizer state partitioned over the ranks.

:func:`zero_redundancy` wraps an optimizer in ``torch.distributed.optim.ZeroRedundancyOptimizer``
— each rank keeps the state of its share of the parameters and broadcasts the parameters it
updated — as ``TrainConfig(zero1=True)`` asks of the trainer; :func:`local_state_bytes` counts
what this rank holds. :func:`zero1_partition` is the partition itself in a few lines (whole
tensors, largest first, to the least loaded rank), and :func:`zero1_state_bytes` the AdamW state
it leaves on each rank, proven against what ``ZeroRedundancyOptimizer`` holds.
"""

from __future__ import annotations

import inspect

import torch
import torch.distributed as dist

from chapter20.core.checks import check_int

__all__ = ["zero_redundancy", "local_state_bytes", "zero1_partition", "zero1_state_bytes"]


def zero_redundancy(optimizer: torch.optim.Optimizer, group=None) -> torch.optim.Optimizer:
    """ZeRO stage 1 of ``optimizer`` (§20.3.2): PyTorch's ``ZeroRedundancyOptimizer`` running the
    same class with the same settings and parameter groups over the ranks of ``group``, each
    rank keeping and stepping the state of its share of the parameters (whole tensors, dealt out
    greedily by size: :func:`zero1_partition`) and broadcasting them, so the replicas stay
    identical and the update is the plain optimizer's. ``TrainConfig(zero1=True)`` is how a
    training run asks for it. Needs a process group; in a world of one it holds everything."""
    from torch.distributed.optim import ZeroRedundancyOptimizer  # seconds to import: only here

    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("zero_redundancy needs a process group (run_local_group or torchrun)")
    accepted = inspect.signature(type(optimizer)).parameters  # defaults also hold derived keys
    settings = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    groups = [dict(param_group) for param_group in optimizer.param_groups]
    return ZeroRedundancyOptimizer(
        groups, optimizer_class=type(optimizer), process_group=group, **settings
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
