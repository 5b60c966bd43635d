"""§20.1.1, §20.3.2 the mechanisms of notebook 12 in a few lines each, beside the library
versions the notebook measures: the pipeline schedule as a grid of stages × time slots (and its
figure), tensor parallelism of a dense block split over shards in one process, and ZeRO-1's
partition of the optimizer state over ranks; and :func:`run_in_one_group`, which runs the
notebook's multi-rank experiments in one process group (a group costs seconds to start).

Each reference is short enough to read and is proven in the notebook against what PyTorch
computes: the grid's idle share against (S−1)/(M+S−1), the split block against the whole one,
the partition against the state that ``ZeroRedundancyOptimizer`` holds on each rank.
"""

from __future__ import annotations

import torch
from matplotlib.patches import Patch
from torch import nn

from chapter20.core.checks import check_int
from chapter20.core.plotting import new_panels
from chapter20.labs.common import LOCAL_GROUP_TIMEOUT_S
from chapter20.techniques.distributed import run_local_group
from chapter20.techniques.parallelism import SCHEDULES

__all__ = [
    "schedule_order",
    "schedule_grid",
    "grid_idle_share",
    "plot_schedule",
    "tensor_parallel_block",
    "zero1_partition",
    "zero1_state_bytes",
    "run_in_one_group",
]


def schedule_order(kind: str, stages: int, micro_batches: int, stage: int) -> list[tuple]:
    """The order in which ``stage`` runs its work under ``kind`` (§20.1.1): ("F", m) is the
    forward of micro-batch m, ("B", m) its backward. GPipe: every forward, then every backward.
    1F1B: S−1−stage forwards to fill the pipeline, then one forward and one backward in turn,
    then the backwards left."""
    if kind == "gpipe":
        return [("F", m) for m in range(micro_batches)] + [("B", m) for m in range(micro_batches)]
    warmup = min(stages - 1 - stage, micro_batches)
    order = [("F", m) for m in range(warmup)]
    for m in range(micro_batches - warmup):
        order += [("F", warmup + m), ("B", m)]
    return order + [("B", m) for m in range(micro_batches - warmup, micro_batches)]


def schedule_grid(kind: str, stages: int, micro_batches: int) -> dict[tuple, int]:
    """The time slot of every piece of work when each forward and each backward takes one slot
    (§20.1.1): {(stage, "F"/"B", micro-batch): slot}. A forward needs the previous stage's
    forward of its micro-batch, a backward the next stage's backward (the last stage, its own
    forward); a stage does one thing at a time, in :func:`schedule_order`."""
    if kind not in SCHEDULES:
        raise ValueError(f"kind must be one of {', '.join(SCHEDULES)}, got {kind!r}")
    stages = check_int("stages", stages, 1)
    micro_batches = check_int("micro_batches", micro_batches, 1)
    orders = [schedule_order(kind, stages, micro_batches, s) for s in range(stages)]
    done, free, slots = {}, [0] * stages, {}
    while any(orders):
        for s in range(stages):
            while orders[s]:
                op, m = orders[s][0]
                need = (s - 1, "F", m) if op == "F" else (s + 1, "B", m)
                if op == "B" and s == stages - 1:
                    need = (s, "F", m)
                if op == "F" and s == 0:
                    ready = 0
                elif need in done:
                    ready = done[need]
                else:
                    break  # wait for the other stage
                slots[(s, op, m)] = max(free[s], ready)
                done[(s, op, m)] = free[s] = slots[(s, op, m)] + 1
                orders[s].pop(0)
    return slots


def grid_idle_share(slots: dict[tuple, int]) -> float:
    """The share of the stages' time slots spent idle in a :func:`schedule_grid`: the bubble
    of the schedule as drawn."""
    stages = 1 + max(s for s, _, _ in slots)
    length = 1 + max(slots.values())
    return 1 - len(slots) / (stages * length)


def plot_schedule(stages: int = 4, micro_batches: int = 4):
    """§20.1.1: GPipe and 1F1B as stages × time slots, each box a micro-batch's forward or
    backward, the idle slots (the bubble) hatched."""
    fig, axes = new_panels(
        2, f"{stages} pipeline stages, {micro_batches} micro-batches", figsize=(11, 3.6),
        alt=f"Two Gantt charts of {stages} pipeline stages over time slots for {micro_batches} "
        "micro-batches, GPipe and 1F1B: forwards fill the pipeline diagonally, backwards drain "
        "it, and the idle slots at the start and end of each stage form the bubble",
    )  # fmt: skip
    colours = {"F": "C0", "B": "C1"}
    for ax, kind in zip(axes, SCHEDULES):
        slots = schedule_grid(kind, stages, micro_batches)
        length = 1 + max(slots.values())
        for s in range(stages):
            ax.broken_barh([(0, length)], (s - 0.4, 0.8), facecolor="#F4F4F4",
                           edgecolor="#B0B0B0", hatch="///", linewidth=0.5)  # fmt: skip
        for (s, op, m), t in slots.items():
            ax.broken_barh([(t, 1)], (s - 0.4, 0.8), color=colours[op], edgecolor="white")
            ax.text(t + 0.5, s, f"{op}{m}", ha="center", va="center", color="white", fontsize=8)
        share = grid_idle_share(slots)
        ax.set_title(f"{'GPipe' if kind == 'gpipe' else '1F1B'}: idle share {share:.3f}")
        ax.set_xlim(0, length), ax.set_yticks(range(stages)), ax.set_ylim(stages - 0.5, -0.5)
        ax.set_xlabel("time slot (one forward or one backward)"), ax.set_ylabel("stage (rank)")
    idle = Patch(facecolor="#F4F4F4", edgecolor="#B0B0B0", hatch="///", label="idle: the bubble")
    handles = [Patch(color="C0", label="forward of micro-batch m (Fm)"),
               Patch(color="C1", label="backward of micro-batch m (Bm)"), idle]  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncol=3)
    return fig


def tensor_parallel_block(x: torch.Tensor, up: nn.Linear, down: nn.Linear, shards: int):
    """``down(gelu(up(x)))`` computed as ``shards`` ranks would in Megatron's tensor parallelism
    (§20.1.1), simulated in one process: each shard holds a slice of ``up``'s output rows
    (column-parallel) and the matching slice of ``down``'s input columns (row-parallel), so it
    computes a partial sum of the output with no communication in between; the sum over the
    shards is the one all-reduce of the forward."""
    shards = check_int("shards", shards, 1, maximum=up.out_features)
    partial = []
    for w1, b1, w2 in zip(up.weight.chunk(shards, 0), up.bias.chunk(shards),
                          down.weight.chunk(shards, 1)):  # fmt: skip
        hidden = nn.functional.gelu(x @ w1.T + b1)  # this shard's hidden units only
        partial.append(hidden @ w2.T)  # a partial sum of every output unit
    return torch.stack(partial).sum(dim=0) + down.bias  # the all-reduce, then the bias once


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


def _jobs_on_rank(jobs: dict) -> dict:
    return {name: fn(*args) for name, (fn, args) in jobs.items()}


def run_in_one_group(world: int, jobs: dict) -> list[dict]:
    """§20.4 several experiments on one local gloo group of ``world`` ranks, started once:
    ``jobs`` maps a name to ``(fn, args)``, where ``fn`` is a module-level ``*_on_rank``
    function; each rank runs them in order. Returns, in rank order, each rank's
    ``{name: fn(*args)}``."""
    world = check_int("world", world, 1)
    if not isinstance(jobs, dict) or not all(callable(job[0]) for job in jobs.values()):
        raise TypeError("jobs must map names to (function, args) pairs")
    return run_local_group(_jobs_on_rank, world, (jobs,), timeout_s=LOCAL_GROUP_TIMEOUT_S)
