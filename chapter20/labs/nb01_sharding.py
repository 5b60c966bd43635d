"""§20.1 Sharded embedding tables, run and measured: the experiments behind notebook 01 and
``python -m chapter20 bench sharding``.

Functions named ``*_on_rank`` run inside a process group (one call per rank, e.g. through
:func:`chapter20.techniques.distributed.run_local_group`, or as a world of one without a group) and
return plain, picklable results; the others run in the calling process.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from chapter20.core.corpora import uniform_ids, zipf_ids
from chapter20.core.measure import format_bytes, time_fn, time_interleaved
from chapter20.core.seed_statistics import timing_spread_ms
from chapter20.techniques.communication_model import ring_allreduce_bytes
from chapter20.techniques.distributed import group_rank_and_size, run_local_group
from chapter20.techniques.memory_model import training_state_bytes
from chapter20.techniques.sharding import (
    INPUT_MODES,
    PARTITIONS,
    RowPartition,
    ShardedEmbedding,
    all_to_all_bytes,
    listing_lookup_done_right,
    shard_load,
)

__all__ = [
    "ownership_table",
    "batch_ids",
    "equivalence_on_rank",
    "misuse_on_rank",
    "reference_on_rank",
    "bad_ids_on_rank",
    "comm_bytes_on_rank",
    "throughput_on_rank",
    "survey_on_rank",
    "surveys_on_rank",
    "run_survey",
    "load_report",
    "table_memory_report",
    "benchmark",
]


def ownership_table(num_embeddings: int, world_size: int) -> pd.DataFrame:
    """Rows each rank owns under both partitions (§20.1), for printing."""
    records = []
    for kind in PARTITIONS:
        layout = RowPartition(num_embeddings, world_size, kind)
        for rank in range(world_size):
            rows = layout.rows_of(rank).tolist()
            shown = rows if len(rows) <= 8 else rows[:3] + ["..."] + rows[-2:]
            records.append({"partition": kind, "rank": rank, "rows": len(rows), "ids": shown})
    return pd.DataFrame(records)


# --------------------------------------------------------------------------------------------
# Proof: sharded == nn.Embedding
# --------------------------------------------------------------------------------------------


def batch_ids(num_embeddings: int, world_size: int, rank: int, seed: int = 0) -> torch.Tensor:
    """An awkward (3, k) id batch: every shard's first and last row under both partitions (the
    same on every rank), random ids that depend on ``rank`` and ``seed``, and repeats. Pass the
    same ``rank`` on every rank for replicated inputs."""
    boundaries = []
    for kind in PARTITIONS:
        layout = RowPartition(num_embeddings, world_size, kind)
        for r in range(world_size):
            rows = layout.rows_of(r)
            if len(rows):
                boundaries += [int(rows[0]), int(rows[-1])]
    generator = torch.Generator().manual_seed(seed * 7919 + rank)
    random = torch.randint(0, num_embeddings, (12,), generator=generator).tolist()
    ids = boundaries + random + random[:4]  # the repeats accumulate gradients
    ids += ids[: (-len(ids)) % 3]
    return torch.tensor(ids).view(3, -1)


def _reference_weight(num_embeddings: int, dim: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(10_000 + seed)
    return torch.randn(num_embeddings, dim, generator=generator)


def bad_ids_on_rank(num_embeddings: int = 37, dim: int = 3, group=None) -> list[dict]:
    """Feed bad ids to both input modes (§20.1): an id of V, an id of -1, float ids. Replicated
    ranks all get them; in per-rank mode only rank 1 does (rank 0 in a world of one), the others
    a good batch. One record per case: the error each rank raised (type, message) — ``None``
    would mean zeros came back — and whether a good batch afterwards still equals
    ``nn.Embedding`` (the group is still in step)."""
    rank, world = group_rank_and_size(group)
    culprit = min(1, world - 1)
    good = torch.tensor([0, num_embeddings // 2, num_embeddings - 1])
    cases = {
        "too large": torch.tensor([3, num_embeddings]),
        "negative": torch.tensor([-1, 3]),
        "float": torch.tensor([1.0, 2.0]),
    }
    records = []
    for inputs in INPUT_MODES:
        table = ShardedEmbedding(num_embeddings, dim, inputs=inputs, group=group)
        for case, bad in cases.items():
            ids = bad if inputs == "replicated" or rank == culprit else good
            error, message = None, None
            try:
                table(ids)
            except (IndexError, TypeError) as raised:
                error, message = type(raised).__name__, str(raised)
            still_right = torch.equal(table(good), F.embedding(good, table.full_weight()))
            records.append(
                {
                    "W": world,
                    "rank": rank,
                    "inputs": inputs,
                    "case": case,
                    "got_bad_ids": ids is bad,
                    "error": error,
                    "message": message,
                    "good_batch_after": still_right,
                }
            )
    return records


def equivalence_on_rank(
    sizes: tuple[int, ...], dim: int = 5, lr: float = 0.5, seed: int = 0, group=None
) -> list[dict]:
    """Check every (V, partition, inputs) on this rank against ``nn.Embedding`` (§20.1).

    For each case the same logical weight is sharded; per-rank inputs differ on every rank (the
    reference looks up all ranks' ids at once), replicated inputs are the same everywhere. Rank
    0's batch is empty in one extra case per V. Compared bitwise: the output, each shard's
    weight gradient against the matching rows of the full gradient, and the table after one SGD
    step. Returns one record per case, with the largest absolute difference of each.
    """
    rank, world = group_rank_and_size(group)
    records = []
    cases = product(sizes, PARTITIONS, INPUT_MODES, (False, True))
    for num_embeddings, kind, inputs, empty_on_rank0 in cases:
        if empty_on_rank0 and inputs == "replicated":
            continue
        full = _reference_weight(num_embeddings, dim, seed)
        if inputs == "replicated":
            all_ids = [batch_ids(num_embeddings, world, 0, seed)]
            mine = all_ids[0]
        else:
            all_ids = [batch_ids(num_embeddings, world, r, seed) for r in range(world)]
            if empty_on_rank0:
                all_ids[0] = all_ids[0][:, :0]
            mine = all_ids[rank]
        probes = [
            torch.randn(*ids.shape, dim, generator=torch.Generator().manual_seed(i))
            for i, ids in enumerate(all_ids)
        ]
        table = ShardedEmbedding.from_full_weight(full, inputs=inputs, partition=kind, group=group)
        out = table(mine)
        (out * probes[rank if inputs == "per_rank" else 0]).sum().backward()
        reference = full.clone().requires_grad_()
        flat_ids = torch.cat([ids.reshape(-1) for ids in all_ids])
        flat_probe = torch.cat([p.reshape(-1, dim) for p in probes])
        (F.embedding(flat_ids, reference) * flat_probe).sum().backward()
        expected_out = F.embedding(mine, full)
        expected_grad = reference.grad[table.row_ids()]
        torch.optim.SGD(table.parameters(), lr=lr).step()
        torch.optim.SGD([reference], lr=lr).step()
        stepped = table.full_weight()
        records.append(
            {
                "V": num_embeddings,
                "W": world,
                "rank": rank,
                "partition": kind,
                "inputs": inputs,
                "empty_batch": empty_on_rank0 and rank == 0,
                "forward_equal": torch.equal(out.detach(), expected_out),
                "grad_equal": torch.equal(table.weight.grad, expected_grad),
                "step_equal": torch.equal(stepped, reference.detach()),
                "max_abs_diff": max(
                    _max_diff(out.detach(), expected_out),
                    _max_diff(table.weight.grad, expected_grad),
                    _max_diff(stepped, reference.detach()),
                ),
            }
        )
    return records


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def misuse_on_rank(num_embeddings: int = 101, dim: int = 4, seed: int = 0, group=None) -> dict:
    """The chapter's design misused (§20.1, listing L1): a replicated all-reduce table fed a
    different batch on every rank. Returns how many output rows match ``nn.Embedding``."""
    rank, world = group_rank_and_size(group)
    full = _reference_weight(num_embeddings, dim, seed)
    ids = batch_ids(num_embeddings, world, rank, seed)
    table = ShardedEmbedding.from_full_weight(full, inputs="replicated", group=group)
    with torch.no_grad():
        got = table(ids).reshape(-1, dim)
    expected = F.embedding(ids, full).reshape(-1, dim)
    right = (got == expected).all(dim=1)
    return {"W": world, "rank": rank, "rows": int(right.numel()), "right_rows": int(right.sum())}


def reference_on_rank(
    sizes: tuple[int, ...], dim: int = 5, seed: int = 0, group=None
) -> list[dict]:
    """:func:`listing_lookup_done_right` against ``ShardedEmbedding(inputs="replicated",
    partition="range")`` on this rank, for each V of ``sizes``: the output and the shard's
    gradient (largest absolute difference), and whether an id of V raises."""
    rank, world = group_rank_and_size(group)
    records = []
    for num_embeddings in sizes:
        full = _reference_weight(num_embeddings, dim, seed)
        ids = batch_ids(num_embeddings, world, 0, seed)
        probe = torch.randn(*ids.shape, dim, generator=torch.Generator().manual_seed(seed))
        table = ShardedEmbedding.from_full_weight(
            full, inputs="replicated", partition="range", group=group
        )
        shard = table.weight.detach().clone().requires_grad_()
        ours, theirs = table(ids), listing_lookup_done_right(ids, shard, num_embeddings, group)
        (ours * probe).sum().backward()
        (theirs * probe).sum().backward()
        try:
            listing_lookup_done_right(torch.tensor([num_embeddings]), shard, num_embeddings, group)
            raised = False
        except IndexError:
            raised = True
        records.append({"V": num_embeddings, "W": world, "rank": rank, "rows": len(shard),
                        "forward": _max_diff(ours.detach(), theirs.detach()),
                        "gradient": _max_diff(table.weight.grad, shard.grad),
                        "bad_id_raises": raised})  # fmt: skip
    return records


# --------------------------------------------------------------------------------------------
# Measure: bytes per collective, throughput
# --------------------------------------------------------------------------------------------


def comm_bytes_on_rank(
    global_batch: int, dim: int, num_embeddings: int, seed: int = 0, group=None
) -> list:
    """Bytes this rank sends in one forward + backward, both patterns, for ``global_batch``
    lookups per step (§20.1.1): replicated ranks all hold the whole batch; per-rank ranks hold
    1/W of it. Each record has the measured bytes and the formula's."""
    rank, world = group_rank_and_size(group)
    records = []
    ids_all = uniform_ids(global_batch, num_embeddings, seed=seed)
    per_rank_ids = ids_all.tensor_split(world)[rank]
    for inputs, ids in (("replicated", ids_all), ("per_rank", per_rank_ids)):
        table = ShardedEmbedding(num_embeddings, dim, inputs=inputs, group=group)
        table(ids).sum().backward()
        row_bytes = dim * table.weight.element_size()
        for record in table.comm_log:
            if record.op == "all_reduce":
                formula = ring_allreduce_bytes(ids.numel() * row_bytes, world)
            elif record.payload == "bucket sizes":
                formula = (world - 1) * 3 * 8
            elif record.payload == "ids":
                formula = all_to_all_bytes(ids, num_embeddings, world, rank, 8)
            elif record.payload == "rows (forward)":
                formula = _rows_requested_by_others(ids_all, world, rank, num_embeddings, dim)
            else:
                formula = all_to_all_bytes(ids, num_embeddings, world, rank, row_bytes)
            records.append(
                {
                    "W": world,
                    "rank": rank,
                    "inputs": inputs,
                    "op": record.op,
                    "payload": record.payload,
                    "tensor_bytes": record.tensor_bytes,
                    "measured_bytes": record.bytes_sent,
                    "formula_bytes": formula,
                }
            )
    return records


def _rows_requested_by_others(
    ids_all: torch.Tensor, world: int, rank: int, num_embeddings: int, dim: int
) -> int:
    """Bytes of the rows rank ``rank`` returns in forward: every other rank's ids it owns."""
    layout = RowPartition(num_embeddings, world, "range")
    total = 0
    for other, ids in enumerate(ids_all.tensor_split(world)):
        if other != rank:
            total += int((layout.owner(ids) == rank).sum())
    return total * dim * 4


def _lookup_step(table: nn.Module, ids: torch.Tensor, probe: torch.Tensor):
    def step():
        table.zero_grad(set_to_none=True)
        (table(ids) * probe).sum().backward()

    return step


def throughput_on_rank(
    global_batch: int,
    dim: int,
    num_embeddings: int,
    inputs: str = "per_rank",
    repeat: int = 9,
    group=None,
) -> tuple[float, ...]:
    """Seconds of each of ``repeat`` lookups + backward of ``global_batch`` ids (§20.1); per-rank
    inputs give each rank 1/W of the batch, replicated inputs all of it."""
    rank, world = group_rank_and_size(group)
    ids = zipf_ids(global_batch, num_embeddings, s=1.0, seed=1)
    if inputs == "per_rank":
        ids = ids.tensor_split(world)[rank]
    table = ShardedEmbedding(num_embeddings, dim, inputs=inputs, partition="modulo", group=group)
    probe = torch.ones(*ids.shape, dim)
    return time_fn(_lookup_step(table, ids, probe), repeat=repeat, device="cpu").times


def survey_on_rank(
    sizes: tuple[int, ...],
    comm: tuple[int, int, int],
    throughput: tuple[int, int, int] | None,
    group=None,
) -> dict:
    """Everything notebook 01 runs at one world size, on this rank of ``group`` (the default
    group if None): the equivalence cases for ``sizes``, the misuse check, bytes per collective
    for ``comm = (global_batch, dim, V)``, and if given the step times for ``throughput``."""
    _, world = group_rank_and_size(group)
    return {
        "equivalence": equivalence_on_rank(sizes, group=group),
        "misuse": [misuse_on_rank(group=group)] if world > 1 else [],
        "reference": reference_on_rank(sizes, group=group),
        "errors": bad_ids_on_rank(group=group),
        "comm": comm_bytes_on_rank(*comm, group=group),
        "seconds": throughput_on_rank(*throughput, group=group) if throughput else None,
    }


def surveys_on_rank(plans: dict[int, tuple], extra: tuple | None = None) -> dict:
    """One group serves every world size (§20.1): for each ``W`` of ``plans`` (the arguments of
    :func:`survey_on_rank`), ranks 0..W-1 form a sub-group (``dist.new_group``; the whole group
    for the largest W) and run the survey in it while the other ranks wait at the next
    sub-group's creation. Then ``extra = (function, args)`` runs on the whole group. Returns
    ``{"surveys": {W: result}, "extra": result}`` (surveys of the sub-groups this rank is in)."""
    rank, world = group_rank_and_size()
    surveys = {}
    for size, args in sorted(plans.items()):
        group = None if size == world else dist.new_group(list(range(size)))  # every rank calls
        if rank < size:
            surveys[size] = survey_on_rank(*args, group=group)
    return {"surveys": surveys, "extra": extra[0](*extra[1]) if extra else None}


def run_survey(
    world_sizes: tuple[int, ...] = (1, 2, 3, 4),
    *,
    extra_sizes: tuple[int, ...] = (101, 1000),
    comm: tuple[int, int, int] = (4096, 64, 10_000),
    throughput: tuple[int, int, int] = (32_768, 64, 100_000),
    throughput_world_sizes: tuple[int, ...] = (1, 2),
    extra: tuple | None = None,
) -> dict[str, pd.DataFrame]:
    """Run :func:`survey_on_rank` at each world size — W = 1 in this process, every larger W in
    one real gloo group of max(world_sizes) local processes, a sub-group per W
    (:func:`surveys_on_rank`) — and collect the frames: ``equivalence`` (V in {W-1, W, W+1,
    *extra_sizes}), ``misuse``, ``errors``, ``comm`` and ``throughput`` (median milliseconds and
    min–max, lookups per second next to ``nn.Embedding`` timed here for the same ids; a group's
    step takes as long as its slowest rank). ``extra = (function, args)`` runs on every rank of
    the largest group; rank 0's result comes back under ``"extra"``."""
    frames: dict[str, list] = {
        "equivalence": [], "reference": [], "misuse": [], "errors": [], "comm": []
    }  # fmt: skip
    single = _single_process_seconds(*throughput)
    timings = [{"table": "nn.Embedding", "W": 1, "times": single["nn.Embedding"]}]
    plans = {
        world: (
            tuple(v for v in (world - 1, world, world + 1, *extra_sizes) if v >= 1),
            comm,
            throughput if world > 1 and world in throughput_world_sizes else None,
        )
        for world in world_sizes
    }
    largest = max(world_sizes)
    grouped = {w: plan for w, plan in plans.items() if w > 1}
    ranks = run_local_group(surveys_on_rank, largest, (grouped, extra)) if grouped else []
    by_world = {w: [r["surveys"][w] for r in ranks if w in r["surveys"]] for w in grouped}
    if 1 in plans:
        by_world[1] = [survey_on_rank(*plans[1])]
    for world in sorted(by_world):
        results = by_world[world]
        for key in frames:
            frames[key] += [record for rank in results for record in rank[key]]
        if world == 1 and world in throughput_world_sizes:
            timings.append(
                {"table": "ShardedEmbedding", "W": 1, "times": single["ShardedEmbedding"]}
            )
        elif results[0]["seconds"] is not None:
            slowest = max((r["seconds"] for r in results), key=lambda t: float(np.median(t)))
            timings.append({"table": "ShardedEmbedding", "W": world, "times": slowest})
    result: dict = {key: pd.DataFrame(records) for key, records in frames.items()}
    speed = pd.DataFrame(
        [{"table": t["table"], "W": t["W"], **timing_spread_ms(t["times"])} for t in timings]
    )
    speed["lookups_per_s"] = throughput[0] / (speed["ms"] / 1e3)
    speed["vs_nn_embedding"] = speed["ms"].iloc[0] / speed["ms"]
    result["throughput"] = speed
    result["extra"] = ranks[0]["extra"] if ranks else None
    return result


def _single_process_seconds(global_batch: int, dim: int, num_embeddings: int) -> dict:
    """Step seconds (every repeat) of ``nn.Embedding`` and of the sharded table as a world of
    one, timed in alternation for the same ids."""
    ids = zipf_ids(global_batch, num_embeddings, s=1.0, seed=1)
    probe = torch.ones(global_batch, dim)
    tables = {
        "nn.Embedding": nn.Embedding(num_embeddings, dim),
        "ShardedEmbedding": ShardedEmbedding(num_embeddings, dim, partition="modulo"),
    }
    steps = {name: _lookup_step(table, ids, probe) for name, table in tables.items()}
    return {
        name: t.times
        for name, t in time_interleaved(steps, warmup=3, repeat=25, device="cpu").items()
    }


def load_report(
    num_embeddings: int = 100_000,
    world_sizes: tuple[int, ...] = (2, 4, 8, 16),
    lookups: int = 200_000,
    s: float = 1.1,
) -> pd.DataFrame:
    """Load imbalance (busiest rank / mean) of range and modulo partitions under Zipf ids
    (§20.1.1, stragglers): per world size and partition, with the load of every rank."""
    ids = zipf_ids(lookups, num_embeddings, s=s, seed=0)
    records = []
    for world, kind in product(world_sizes, PARTITIONS):
        load = shard_load(ids, num_embeddings, world, kind).double()
        records.append(
            {
                "W": world,
                "partition": kind,
                "imbalance": float(load.max() / load.mean()),
                "busiest_share": float(load.max() / load.sum()),
                "load": load.long().tolist(),
            }
        )
    return pd.DataFrame(records)


def table_memory_report(
    num_embeddings: int = 100_000_000,
    dim: int = 128,
    world_sizes: tuple[int, ...] = (1, 2, 4, 8, 16),
    gpu_bytes: float = 80e9,
) -> pd.DataFrame:
    """Bytes per rank of a row-sharded table, weights only and with gradients + Adam state
    (§20.1.1, model parallelism), and whether each fits ``gpu_bytes`` (80 GB by default)."""
    records = []
    for world in world_sizes:
        rows = math.ceil(num_embeddings / world)
        state = training_state_bytes(rows * dim, optimizer="adam")
        training = state["parameters"] + state["gradients"] + state["optimizer_state"]
        records.append(
            {
                "W": world,
                "rows_per_rank": rows,
                "weights_bytes": state["parameters"],
                "training_bytes": training,
                "weights_fit": state["parameters"] <= gpu_bytes,
                "training_fits": training <= gpu_bytes,
            }
        )
    return pd.DataFrame(records)


# --------------------------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------------------------


def benchmark() -> None:
    """``python -m chapter20 bench sharding``: measured vs formula bytes per collective at W=2,
    and the throughput of the sharded table relative to ``nn.Embedding`` at W=1 and W=2."""
    survey = run_survey((1, 2), extra_sizes=())
    comm, speed = survey["comm"], survey["throughput"]
    comm = comm[comm["W"] == 2]
    print("bytes sent per collective, W=2, 4096 lookups, D=64 (rank 0):")
    for row in comm[comm["rank"] == 0].itertuples():
        measured, formula = format_bytes(row.measured_bytes), format_bytes(row.formula_bytes)
        print(
            f"  {row.inputs:<10} {row.op:<10} {row.payload:<26} "
            f"measured {measured:>10}  formula {formula:>10}"
        )
    agree = bool((comm["measured_bytes"] == comm["formula_bytes"]).all())
    print(f"measured == formula for every collective and rank: {agree}")
    print("\nlookup + backward, 32768 Zipf ids, V=100000, D=64:")
    for row in speed.itertuples():
        print(
            f"  {row.table:<17} W={row.W}  {row.lookups_per_s / 1e6:6.2f} M lookups/s  "
            f"{row.vs_nn_embedding:5.2f}x nn.Embedding"
        )
    overhead = 1 / speed["vs_nn_embedding"].iloc[1] - 1
    verdict = "meets" if overhead <= 0.10 else "misses"
    print(f"W=1 overhead vs nn.Embedding: {overhead:+.1%} ({verdict} the <= 10% target)")
