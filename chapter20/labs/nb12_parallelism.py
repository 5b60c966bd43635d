"""§20.1.1, §20.3.2, §20.4.1 beyond plain data parallelism, run and measured: the pipeline, ZeRO-1
and DDP's overlap experiments behind notebook 12 and ``python -m chapter20 bench parallelism``.

Each ``*_on_rank`` function runs on every rank of a local gloo group
(``chapter20.techniques.distributed.run_local_group``); the functions without the suffix start the
group and gather the ranks' results into frames. The rest of notebook 12 (listing L2 corrected,
AdamW implementations, the input pipeline, two nodes) is ``chapter20.labs.nb12_practices``.
"""

from __future__ import annotations

import contextlib
import textwrap
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.device import set_seed
from chapter20.core.findings import compare, share
from chapter20.core.id_streams import uniform_ids
from chapter20.core.measure import format_bytes, time_interleaved
from chapter20.core.models import TransformerEncoder
from chapter20.core.plotting import new_figure
from chapter20.core.seed_statistics import median_and_range, timing_spread_ms
from chapter20.labs.common import LOCAL_GROUP_TIMEOUT_S as TIMEOUT_S
from chapter20.techniques import pipeline
from chapter20.techniques.allreduce_timing import allreduce_times_on_rank
from chapter20.techniques.communication_model import fit_alpha_beta
from chapter20.techniques.ddp_hooks import log_buckets, predicted_overlap
from chapter20.techniques.distributed import group_rank_and_size, run_local_group
from chapter20.techniques.memory_model import EncoderShape
from chapter20.techniques.pipeline import (
    bubble_fraction,
    cross_entropy_per_example,
    deep_encoder,
    pipeline_batch,
    pipeline_p2p_bytes,
    pipeline_schedule,
    split_stages,
)
from chapter20.techniques.zero import local_state_bytes
from chapter20.training.config import TrainConfig
from chapter20.training.memory_plan import plan
from chapter20.training.trainer import Trainer

__all__ = [
    "PIPELINE_MODEL",
    "single_process_gradients",
    "pipeline_on_rank",
    "measure_pipeline",
    "pipeline_results",
    "ZERO_MODEL",
    "zero_on_rank",
    "measure_zero",
    "OVERLAP_MODEL",
    "BLOCKING",
    "blocking_label",
    "overlap_on_rank",
    "measure_overlap",
    "hidden_measurable",
    "overlap_findings",
    "no_sync_on_rank",
    "plot_bubble",
    "plot_overlap",
    "benchmark",
]


#: The deep encoder the pipeline and overlap experiments split or replicate.
PIPELINE_MODEL = {"vocab_size": 1_000, "width": 256, "depth": 8, "classes": 16}


def _mean_cross_entropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(output, target)


def single_process_gradients(
    micro_batches: int, batch: int = 256, model: dict = PIPELINE_MODEL, seed: int = 0
) -> tuple[float, dict[str, torch.Tensor]]:
    """The reference of the pipeline proof: one step of the composed Trainer on one process,
    exact accumulation over ``micro_batches``; its loss and the gradients by parameter name."""
    set_seed(seed)
    encoder = deep_encoder(**model)
    trainer = Trainer(
        encoder, TrainConfig(micro_batches=micro_batches), loss=cross_entropy_per_example
    )
    result = trainer.step(pipeline_batch(batch, model, seed))
    return result.loss, {n: p.grad.clone() for n, p in encoder.named_parameters()}


def pipeline_on_rank(
    kinds: tuple[str, ...],
    micro_batches: tuple[int, ...],
    batch: int,
    steps: int,
    model: dict = PIPELINE_MODEL,
    seed: int = 0,
) -> dict:
    """This rank's stage of the deep encoder, pipelined over the group (one stage per rank) by
    each schedule and micro-batch count: the first step's loss and gradients (the proof), and
    for each configuration the median step time, the compute seconds in it, the bytes sent."""
    rank, world = group_rank_and_size()
    set_seed(seed)
    full = deep_encoder(**model)
    names = {id(p): n for n, p in full.named_parameters()}
    part = split_stages(full, world)[rank]
    ids, labels = pipeline_batch(batch, model, seed)
    records, proofs = [], {}
    for kind in kinds:
        for count in micro_batches:
            if kind == "1f1b" and count < world:
                continue  # 1F1B's steady state needs a micro-batch in every stage
            stage = pipeline.TimedStage(part, rank, world, torch.device("cpu"))
            schedule = pipeline_schedule(stage, kind, count, _mean_cross_entropy)
            walls, computes, sent = [], [], 0
            for step in range(steps + 1):
                part.zero_grad(set_to_none=True)
                stage.reset()
                losses: list = []
                dist.barrier()
                start = time.perf_counter()
                if rank == 0:
                    schedule.step(ids)
                elif rank == world - 1:
                    schedule.step(target=labels, losses=losses)
                else:
                    schedule.step()
                wall = time.perf_counter() - start
                if step == 0 and count == max(micro_batches):
                    proofs[kind] = {
                        "losses": [float(x.detach()) for x in losses],
                        "grads": {names[id(p)]: p.grad.clone() for p in part.parameters()},
                    }
                if step:  # the first step also infers shapes and exchanges metadata
                    walls.append(wall)
                    computes.append(stage.counters.compute_seconds)
                    sent = stage.counters.sent_bytes
            records.append(
                {
                    "rank": rank,
                    "schedule": kind,
                    "micro_batches": count,
                    "step_seconds": float(np.median(walls)),
                    "walls": walls,
                    "compute_seconds": float(np.median(computes)),
                    "sent_bytes": sent,
                }
            )
    return {"records": records, "proofs": proofs}


def measure_pipeline(
    kinds: tuple[str, ...] = ("gpipe", "1f1b"),
    micro_batches: tuple[int, ...] = (1, 2, 4, 8),
    batch: int = 256,
    steps: int = 3,
    model: dict = PIPELINE_MODEL,
    stages: int = 2,
) -> tuple[pd.DataFrame, dict]:
    """The deep encoder in ``stages`` stages on as many gloo ranks: per schedule and micro-batch
    count, the step's median milliseconds (the slower stage) and its min–max range, the
    measured bubble (1 − compute / step time, mean over the stages) next to (S−1)/(M+S−1), and
    the bytes sent point to point per step next to the formula. Also returns, per schedule, the
    proof: the micro-batch losses and every stage's gradients of the first step at the largest
    micro-batch count."""
    results = run_local_group(
        pipeline_on_rank, stages, (kinds, micro_batches, batch, steps, model), timeout_s=TIMEOUT_S
    )
    return pipeline_results(results, batch, model)


def pipeline_results(results: list[dict], batch: int, model: dict = PIPELINE_MODEL):
    """The frame and proofs of :func:`measure_pipeline` from every rank's
    :func:`pipeline_on_rank` result."""
    stages = len(results)
    frame = pd.DataFrame([r for result in results for r in result["records"]])
    frame["idle"] = 1 - frame["compute_seconds"] / frame["step_seconds"]
    table = frame.groupby(["schedule", "micro_batches"], sort=False).agg(
        step_ms=("step_seconds", lambda s: 1e3 * s.max()),
        bubble_measured=("idle", "mean"),
        sent_bytes=("sent_bytes", "sum"),
    )
    table = table.reset_index()
    slowest = frame.loc[frame.groupby(["schedule", "micro_batches"], sort=False)["step_seconds"]
                        .idxmax(), "walls"]  # fmt: skip
    spread = [timing_spread_ms(walls) for walls in slowest]
    table.insert(3, "step_min_ms", [q["min_ms"] for q in spread])
    table.insert(4, "step_max_ms", [q["max_ms"] for q in spread])
    table["bubble_formula"] = [bubble_fraction(stages, m) for m in table["micro_batches"]]
    table["bytes_formula"] = pipeline_p2p_bytes(batch, model["width"], stages)
    proofs = {
        kind: {
            "micro_batches": int(table[table.schedule == kind]["micro_batches"].max()),
            "losses": results[-1]["proofs"][kind]["losses"],
            "grads": {k: v for r in results for k, v in r["proofs"][kind]["grads"].items()},
        }
        for kind in results[0]["proofs"]
    }
    return table, proofs


# --------------------------------------------------------------------------------------------
# ZeRO stage 1
# --------------------------------------------------------------------------------------------

#: The Transformer encoder of the ZeRO experiment (``TransformerEncoder`` arguments).
ZERO_MODEL = {"vocab_size": 2_000, "d_model": 64, "n_heads": 4, "n_layers": 2, "max_len": 16}


def zero_on_rank(steps: int, global_batch: int, model: dict = ZERO_MODEL, seed: int = 0):
    """Two Trainers on this rank, same weights and batches, DDP over the group and contrastive
    with cross-rank negatives: one with plain AdamW, one with ZeRO-1 AdamW (``zero1=True``:
    :func:`chapter20.techniques.zero.zero_redundancy`). After ``steps`` steps: the largest weight
    difference and each optimizer's state bytes on this rank."""
    rank, world = group_rank_and_size()
    config = TrainConfig(optimizer="adamw", lr=1e-2, weight_decay=0.01)
    set_seed(seed)
    plain = Trainer(TransformerEncoder(**model, dropout=0.0), config)
    set_seed(seed)
    zero = Trainer(TransformerEncoder(**model, dropout=0.0), replace(config, zero1=True))
    ids = uniform_ids((steps, 2, global_batch, model["max_len"]), model["vocab_size"], seed=seed)
    mine = slice(rank * global_batch // world, (rank + 1) * global_batch // world)
    losses = []
    for step in range(steps):
        batch = (ids[step, 0, mine], ids[step, 1, mine])
        losses.append((plain.step(batch).loss, zero.step(batch).loss))
    gap = max(
        float((a - b).detach().abs().max())
        for a, b in zip(plain.encoder.parameters(), zero.encoder.parameters())
    )
    return {
        "rank": rank,
        "world": world,
        "max_weight_diff": gap,
        "losses": losses,
        "plain_state_bytes": local_state_bytes(plain.optimizer),
        "zero_state_bytes": local_state_bytes(zero.optimizer),
    }


def measure_zero(
    world_sizes: tuple[int, ...] = (2, 3), steps: int = 4, global_batch: int = 24
) -> pd.DataFrame:
    """ZeRO-1 vs plain AdamW on each world size (:func:`zero_results` of a group each)."""
    frames = [
        zero_results(run_local_group(zero_on_rank, world, (steps, global_batch),
                                     timeout_s=TIMEOUT_S), global_batch)
        for world in world_sizes
    ]  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def zero_results(results: list[dict], global_batch: int) -> pd.DataFrame:
    """From every rank's :func:`zero_on_rank` result: the weights after the steps (max |Δ|),
    and the optimizer state per rank measured, vs the plain state / W and vs the memory
    planner's ZeRO-1 prediction (``memory_plan.plan(..., zero_stage=1)``)."""
    world = len(results)
    with torch.device("meta"):  # the shape without allocating the weights
        shape = EncoderShape.of(TransformerEncoder(**ZERO_MODEL))
    predicted = plan(
        shape, TrainConfig(), batch=global_batch // world, seq_len=shape.max_len,
        world_size=world, zero_stage=1,
    ).components["optimizer_state"]  # fmt: skip
    frame = pd.DataFrame(
        [{"world_size": world, "rank": r["rank"], "max_weight_diff": r["max_weight_diff"],
          "plain_state_bytes": r["plain_state_bytes"], "zero_state_bytes": r["zero_state_bytes"],
          "plain / W": r["plain_state_bytes"] / world, "planned_zero1": predicted}
         for r in results]
    )  # fmt: skip
    frame["share"] = frame["zero_state_bytes"] / frame["plain_state_bytes"]
    return frame


# --------------------------------------------------------------------------------------------
# Overlap and no_sync
# --------------------------------------------------------------------------------------------

OVERLAP_MODEL = {"vocab_size": 1_000, "width": 512, "depth": 8, "classes": 16}
#: The start of the blocking-hook variant's name in :func:`measure_overlap`'s table; the rest
#: (:func:`blocking_label`) names the buckets it ran on.
BLOCKING = "blocking hook"


def blocking_label(ddp: nn.parallel.DistributedDataParallel) -> str:
    """The blocking-hook variant's name with the bucket sizes of ``ddp``, read from the wrapped
    model: its cap (``bucket_bytes_cap``) and, when no ``bucket_cap_mb`` was given, the smaller
    first bucket DDP makes then (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``), so the
    row's bucket count can be checked against the gradient's size."""
    cap = ddp.bucket_bytes_cap / 2**20
    default = bool(getattr(ddp, "bucket_bytes_cap_default", False))
    first = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", None) if default else None
    sizes = f"{cap:g} MiB buckets" + (f", the first {first / 2**20:g} MiB" if first else "")
    origin = ": DDP's default" if default else ""
    return f"{BLOCKING} ({sizes}{origin})"


def overlap_on_rank(
    bucket_caps_mb: tuple[float, ...],
    batch: int,
    repeat: int,
    model: dict = OVERLAP_MODEL,
    seed: int = 0,
) -> dict:
    """Forward + backward of the deep encoder under DDP on this rank, timed in alternation for:
    each bucket size (overlapped), default buckets with a blocking hook (communication forced
    in line, nothing overlaps), no_sync (no communication), and the forward alone. Also fits
    alpha and beta of the all-reduce to the median times of two message sizes
    (``chapter20.techniques.communication_model.fit_alpha_beta``), and records each variant's
    buckets."""
    rank, world = group_rank_and_size()
    ids, labels = pipeline_batch(batch, model, seed + rank)
    variants, logs = {}, {}

    def wrapped(cap_mb, blocking=False):
        set_seed(seed)
        ddp = nn.parallel.DistributedDataParallel(deep_encoder(**model), bucket_cap_mb=cap_mb)
        return ddp, log_buckets(ddp, blocking=blocking)

    def step(ddp, sync=True):
        def run():
            dist.barrier()
            ddp.zero_grad(set_to_none=True)
            with ddp.no_sync() if not sync else contextlib.nullcontext():
                cross_entropy_per_example(ddp, (ids, labels)).mean().backward()

        return run

    for cap in bucket_caps_mb:
        ddp, logs[f"buckets of {cap:g} MiB"] = wrapped(cap)
        variants[f"buckets of {cap:g} MiB"] = step(ddp)
    ddp, log = wrapped(None, blocking=True)  # DDP's default buckets
    logs[blocking_label(ddp)], variants[blocking_label(ddp)] = log, step(ddp)
    quiet, _ = wrapped(None)
    variants["no_sync (no communication)"] = step(quiet, sync=False)

    def forward_only():
        dist.barrier()
        with torch.no_grad():
            cross_entropy_per_example(quiet, (ids, labels))

    variants["forward only"] = forward_only
    timing = time_interleaved(variants, warmup=2, repeat=repeat, device="cpu")
    gradient_bytes = 4 * sum(p.numel() for p in quiet.parameters())
    sizes = (4096, gradient_bytes)
    medians = [median_and_range(t)[0] for t in allreduce_times_on_rank(sizes, repeat=5)]
    alpha, beta = fit_alpha_beta(pd.DataFrame({"bytes": sizes, "seconds": medians, "W": world}))
    beta = max(beta, 1e-15)  # a bandwidth too high to measure stays finite
    buckets = {}
    for name, log in logs.items():  # one more step of each, logged alone
        log.reset()
        variants[name]()
        buckets[name] = list(log.bucket_bytes)
    return {
        "rank": rank,
        "world": world,
        "seconds": {name: t.median for name, t in timing.items()},
        "times": {name: t.times for name, t in timing.items()},
        "buckets": buckets,
        "alpha": alpha,
        "bandwidth": 1 / beta,
        "gradient_bytes": gradient_bytes,
    }


def measure_overlap(
    bucket_caps_mb: tuple[float, ...] = (1.0, 4.0, 1000.0), batch: int = 32, repeat: int = 5
) -> tuple[pd.DataFrame, dict]:
    """DDP's overlap on 2 gloo ranks: per variant the median step time (slowest rank) and its
    min–max range, its buckets, the share of the communication hidden behind the
    backward, measured against the step whose communication all comes after the backward (one
    bucket, the largest cap) as
    1 − (t − t_no_sync) / (t_one_bucket − t_no_sync), and the alpha-beta model's prediction
    (:func:`chapter20.techniques.ddp_hooks.predicted_overlap`, alpha and beta fitted here). The
    blocking hook's row shows what waiting inside the backward costs on top."""
    results = run_local_group(
        overlap_on_rank, 2, (bucket_caps_mb, batch, repeat), timeout_s=TIMEOUT_S
    )
    return overlap_results(results, bucket_caps_mb)


def overlap_results(results: list[dict], bucket_caps_mb: tuple[float, ...]):
    """The frame and fit of :func:`measure_overlap` from every rank's :func:`overlap_on_rank`
    result."""
    seconds = {name: max(r["seconds"][name] for r in results) for name in results[0]["seconds"]}
    slowest = {name: max(results, key=lambda r: r["seconds"][name])["times"][name]
               for name in seconds}  # fmt: skip
    first = results[0]
    quiet = seconds["no_sync (no communication)"]
    after = seconds[f"buckets of {max(bucket_caps_mb):g} MiB"]
    backward = quiet - seconds["forward only"]
    records = []
    for name, t in seconds.items():
        spread = timing_spread_ms(slowest[name])
        row = {"variant": name, "step_ms": 1e3 * t, "range_ms": spread["range_ms"]}
        if name in first["buckets"]:
            buckets = first["buckets"][name]
            model = predicted_overlap(buckets, backward, 2, first["alpha"], first["bandwidth"])
            hidden = 1 - (t - quiet) / (after - quiet) if after > quiet else np.nan
            row.update(
                buckets=len(buckets),
                hidden_measured=hidden,
                hidden_model=0.0 if name.startswith(BLOCKING) else model["hidden_fraction"],
                comm_model_ms=1e3 * model["comm_seconds"],
            )
        records.append(row)
    fit = {
        "alpha": first["alpha"],
        "bandwidth": first["bandwidth"],
        "gradient_bytes": first["gradient_bytes"],
        "backward_ms": 1e3 * backward,
        "comm_after_backward_ms": 1e3 * (after - quiet),
    }
    frame = pd.DataFrame(records)
    measurable = hidden_measurable(frame)  # a share from indistinguishable times is noise
    noise = frame["variant"].map(lambda name: not measurable.get(name, True))
    frame.loc[noise, "hidden_measured"] = np.nan
    return frame, fit


def _step_comparisons(frame: pd.DataFrame) -> tuple[str, dict[str, str]]:
    """The one-bucket reference of :func:`measure_overlap`'s table, and each other variant's
    step time compared with it (``core.findings.compare``, within the wider min–max range)."""
    steps = frame.set_index("variant")
    buckets = [n for n in steps.index if n.startswith("buckets of")]
    reference = max(buckets, key=lambda n: float(n.split()[2]))
    lines = {}
    for name in [*buckets, *(n for n in steps.index if n.startswith(BLOCKING))]:
        if name == reference or name not in steps.index:
            continue
        spread = max(steps.loc[name, "range_ms"], steps.loc[reference, "range_ms"])
        lines[name] = compare(name, steps.loc[name, "step_ms"], reference,
                              steps.loc[reference, "step_ms"], quantity="time", unit="ms",
                              spread=spread)  # fmt: skip
    return reference, lines


def hidden_measurable(frame: pd.DataFrame) -> dict[str, bool]:
    """Per variant of :func:`measure_overlap`'s table but the reference: whether its step time
    differs from the one-bucket step's beyond the spread, the condition for its hidden share
    to be a measurement rather than timing noise (the rule :func:`overlap_findings` prints)."""
    _, lines = _step_comparisons(frame)
    return {name: "indistinguishable" not in line for name, line in lines.items()}


def overlap_findings(frame: pd.DataFrame) -> list[str]:
    """The reading of :func:`measure_overlap`'s table, computed (``chapter20.core.findings``):
    for each bucket size but the one-bucket reference, its step time against the reference's
    (indistinguishable within the wider min–max range) and, only where they differ beyond it,
    the share of the one-bucket step's communication it hid (negative when its step took
    longer); then the blocking hook's step time against the reference's."""
    steps = frame.set_index("variant")
    reference, comparisons = _step_comparisons(frame)
    after = steps.loc[reference, "step_ms"]
    quiet = steps.loc["no_sync (no communication)", "step_ms"]
    lines = []
    for name, line in comparisons.items():
        if name.startswith(BLOCKING):  # waits for each bucket inside the backward: no overlap
            waits = ", each bucket waited for inside the backward (nothing overlaps)"
            lines.append(name + waits + line.removeprefix(name))
        elif "indistinguishable" not in line:
            lines.append(share(f"{name}: communication hidden behind the backward",
                               after - steps.loc[name, "step_ms"], after - quiet,
                               of=f"the {reference} step's communication"))  # fmt: skip
            lines.append(line)
        else:
            lines.append(f"{name}: hidden share not measurable here: step times indistinguishable")
            lines.append(line)
    return lines


def no_sync_on_rank(micro_batches: int, batch: int, model: dict = PIPELINE_MODEL) -> dict:
    """All-reduces per optimizer step of the composed Trainer (exact accumulation over
    ``micro_batches``; ``no_sync`` on all but the last), counted by the trainer's DDP
    communication hook (``Trainer.communication``), next to the same micro-batches' backward
    passes without ``no_sync``."""
    rank, _ = group_rank_and_size()
    set_seed(0)
    trainer = Trainer(
        deep_encoder(**model), TrainConfig(micro_batches=micro_batches),
        loss=cross_entropy_per_example,
    )  # fmt: skip
    counted = trainer.communication
    data = pipeline_batch(batch, model, seed=rank)
    trainer.step(data)  # the first step also rebuilds DDP's buckets in gradient order
    before = counted.calls
    trainer.step(data)
    with_no_sync, before = counted.calls - before, counted.calls
    for micro in zip(*(t.chunk(micro_batches) for t in data)):
        cross_entropy_per_example(trainer.model, micro).mean().backward()
    return {"rank": rank, "with_no_sync": with_no_sync, "without_no_sync": counted.calls - before}


# --------------------------------------------------------------------------------------------
# Figures and the benchmark
# --------------------------------------------------------------------------------------------


def plot_bubble(table: pd.DataFrame):
    """Measured idle share of a pipelined step vs micro-batches, with (S−1)/(M+S−1)."""
    fig, ax = new_figure("Pipeline bubble, 2 stages on 2 gloo ranks", "micro-batches M",
                         "idle share of the step")  # fmt: skip
    for kind, part in table.groupby("schedule", sort=False):
        ax.plot(part["micro_batches"], part["bubble_measured"], "o-", label=f"{kind}, measured")
    first = table[table.schedule == table.schedule.iloc[0]]
    ax.plot(first["micro_batches"], first["bubble_formula"], "k:", label="(S-1)/(M+S-1)")
    ax.set_xscale("log", base=2)
    counts = sorted(table["micro_batches"].unique())
    ax.set_xticks(counts, [str(m) for m in counts])  # plain integers, not powers of 2
    ax.minorticks_off()
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))  # outside the axes, off the data
    return fig


def plot_overlap(frame: pd.DataFrame):
    """Communication hidden behind the backward: measured vs the alpha-beta model."""
    rows = frame.dropna(subset=["hidden_model"])
    measurable = hidden_measurable(frame)
    fig, ax = new_figure("DDP overlap, 2 gloo ranks", "variant", "share of communication hidden")
    x = np.arange(len(rows))
    shown = [measurable.get(name, True) for name in rows["variant"]]
    ax.bar(x - 0.2, rows["hidden_measured"].where(shown), 0.4, label="measured")
    for i in np.flatnonzero(~np.array(shown)):  # a share of indistinguishable times is noise
        ax.text(x[i] - 0.2, 0.02, "not measurable: times indistinguishable", ha="center",
                va="bottom", fontsize=7, rotation=90)  # fmt: skip
    ax.set_xlim(-0.7, len(rows) - 0.3)
    ax.bar(x + 0.2, rows["hidden_model"], 0.4, label="alpha-beta model (free comm engine)")
    labels = ["\n".join(textwrap.wrap(name, 24)) for name in rows["variant"]]  # long names
    ax.set_xticks(x, labels, rotation=15, fontsize=8)
    ax.axhline(0, color="#8C8C8C", linewidth=0.8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def benchmark(
    micro_batches: tuple[int, ...] = (1, 2, 4, 8, 16),
    pipeline_batch_size: int = 512,
    world_sizes: tuple[int, ...] = (2, 3, 4),
    bucket_caps: tuple[float, ...] = (0.25, 1.0, 4.0, 25.0, 1000.0),
) -> None:
    """``python -m chapter20 bench parallelism``: the pipeline bubble vs micro-batches, ZeRO-1
    state per rank on 2–4 ranks, DDP overlap vs bucket size (``bench practices``: AdamW's
    implementations, the DataLoader, two nodes)."""
    pd.set_option("display.width", 160)
    table, _ = measure_pipeline(micro_batches=micro_batches, batch=pipeline_batch_size, steps=5)
    print("pipeline, 2 stages:\n" + table.round(3).to_string(index=False))
    zero = measure_zero(world_sizes)
    print("\nZeRO-1 vs AdamW:\n" + zero.round(4).to_string(index=False))
    frame, fit = measure_overlap(bucket_caps, repeat=9)
    print(
        f"\noverlap (alpha {fit['alpha'] * 1e6:.0f} us, {fit['bandwidth'] / 1e9:.2f} GB/s, "
        f"gradient {format_bytes(fit['gradient_bytes'])}):"
    )
    print(frame.round(3).to_string(index=False))
