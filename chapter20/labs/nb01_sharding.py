"""§20.1 Sharded embedding tables, run and measured: the experiments behind notebook 01 and
``python -m chapter20 bench sharding``.

Functions named ``*_on_rank`` run inside a process group (one call per rank, e.g. through
:func:`chapter20.techniques.distributed.run_local_group`, or as a world of one without a group) and
return plain, picklable results; the others run in the calling process. The proofs the survey
runs on every rank (sharded == ``nn.Embedding``, the misuse, bad ids, bytes per collective) are
``chapter20.techniques.sharding_proofs``.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.id_streams import zipf_ids
from chapter20.core.measure import format_bytes, time_fn, time_interleaved
from chapter20.core.seed_statistics import timing_spread_ms
from chapter20.techniques.distributed import group_rank_and_size, run_local_group
from chapter20.techniques.memory_model import training_state_bytes
from chapter20.techniques.sharding import (
    PARTITIONS,
    RowPartition,
    ShardedEmbedding,
    shard_load,
)
from chapter20.techniques.sharding_proofs import (
    bad_ids_on_rank,
    comm_bytes_on_rank,
    equivalence_on_rank,
    misuse_on_rank,
    reference_on_rank,
)

__all__ = [
    "ownership_table",
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
