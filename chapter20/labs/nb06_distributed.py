"""§20.4 DDP, run, measured and modelled: the experiments behind notebook 06 and
``python -m chapter20 bench ddp``.

Measured here (gloo on this machine): what gloo's all-reduce puts on the wire and how long it
takes, for growing messages on 2 and 3 ranks (claims C02, C03); the step time of the contrastive
encoder on 1 and 2 processes; §20.4.1's practices (``find_unused_parameters``, a barrier per
step, the error DDP raises for a parameter the loss does not use: the model, the step and the
error are ``chapter20.techniques.ddp_practices``). A rank with a slow input pipeline is
``chapter20.labs.nb06_stragglers``; the alpha-beta model and the scaling it predicts
are ``chapter20.techniques.communication_model``. Timings: medians with their min–max range."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from matplotlib.patches import Rectangle
from torch import nn

from chapter20.core.device import set_seed
from chapter20.core.measure import format_bytes, time_interleaved
from chapter20.core.models import BagOfEmbeddingsEncoder, count_parameters
from chapter20.core.plotting import new_panels
from chapter20.core.seed_statistics import median_and_range, range_text, timing_spread_ms
from chapter20.demos import ddp_run
from chapter20.labs.common import LOCAL_GROUP_TIMEOUT_S as TIMEOUT_S
from chapter20.techniques.allreduce_timing import (
    allreduce_times_on_rank,
    loopback_bytes,
    wire_bytes_per_call,
)
from chapter20.techniques.communication_model import fit_alpha_beta, ring_allreduce_seconds
from chapter20.techniques.contrastive import distributed_info_nce
from chapter20.techniques.ddp_practices import (
    PRACTICE_MODEL,
    WithUnusedHead,
    ddp_step,
    unused_parameter_error,
)
from chapter20.techniques.distributed import group_rank_and_size, run_in_one_group, run_local_group
from chapter20.techniques.pipeline import deep_encoder

__all__ = [
    "allreduce_sweep_on_rank",
    "measure_allreduce_sweep",
    "wire_growth",
    "step_times_on_rank",
    "measure_scaling",
    "single_step_times",
    "scaling_table",
    "sweep_job",
    "practices_table",
    "demo_on_rank",
    "run_notebook_groups",
    "results_of",
    "sweep_frame",
    "practices_on_rank",
    "measure_practices",
    "plot_allreduce_sweep",
    "allreduce_growth_note",
    "fp16_compression_note",
    "link_speed_note",
    "scaling_speedup_note",
    "benchmark",
    "plot_ring",
    "two_process_prediction",
]

#: Message sizes of the all-reduce sweep: 4 KiB to 16 MiB, ×4 apart.
SWEEP_SIZES = tuple(4**k * 4096 for k in range(7))

# --------------------------------------------------------------------------------------------
# What an all-reduce costs: bytes on the wire and time, 2 and 3 ranks
# --------------------------------------------------------------------------------------------


def allreduce_sweep_on_rank(
    sizes: tuple[int, ...] = SWEEP_SIZES,
    dtypes: tuple[str, ...] = ("float32",),
    repeat: int = 5,
    wire_repeat: int = 2,
    fp16_min_bytes: int = 64 * 1024,
) -> list[dict]:
    """On every rank of a group (§20.1.1, §20.4): for each dtype and message of ``sizes`` bytes,
    the all-reduce's median, fastest and slowest seconds over ``repeat`` calls
    (``chapter20.techniques.allreduce_timing.allreduce_times_on_rank``)
    and the loopback bytes per call, all ranks together (``wire_bytes_per_call``; NaN where the
    counter is missing). float16 is measured from ``fp16_min_bytes`` up (what C03 compares).
    Rank 0's records are the ones to read."""
    _, world = group_rank_and_size()
    records = []
    for dtype in dtypes:
        chosen = [size for size in sizes if dtype != "float16" or size >= fp16_min_bytes]
        timings = allreduce_times_on_rank(tuple(chosen), repeat, dtype=dtype)
        kind = getattr(torch, dtype)
        itemsize = torch.empty((), dtype=kind).element_size()
        for size, times in zip(chosen, timings):
            tensor = torch.ones(max(1, size // itemsize), dtype=kind)
            calls = max(1, min(8, (4 << 20) // size))
            wire = wire_bytes_per_call(tensor, calls, wire_repeat) if loopback_bytes() else np.nan
            median, low, high = median_and_range(times)
            records.append(
                {
                    "W": world,
                    "dtype": dtype,
                    "bytes": tensor.numel() * tensor.element_size(),
                    "seconds": median,
                    "seconds_min": low,
                    "seconds_max": high,
                    "wire_bytes": wire,
                    "wire_per_rank": wire / world,
                }
            )
    return records


def measure_allreduce_sweep(
    world_sizes: tuple[int, ...] = (2, 3), sizes: tuple[int, ...] = SWEEP_SIZES
) -> pd.DataFrame:
    """:func:`allreduce_sweep_on_rank` on a local gloo group of each of ``world_sizes``; float32
    on every size, float16 too on 2 ranks (what an fp16 communication hook hands to gloo)."""
    records = []
    for world in world_sizes:
        records += run_local_group(*sweep_job(world, sizes), timeout_s=TIMEOUT_S)[0]
    return pd.DataFrame(records)


def sweep_job(world: int, sizes: tuple[int, ...] = SWEEP_SIZES) -> tuple:
    """``(allreduce_sweep_on_rank, args)`` for a group of ``world`` ranks: float32, and float16
    too on 2 ranks."""
    dtypes = ("float32", "float16") if world == 2 else ("float32",)
    return allreduce_sweep_on_rank, (sizes, dtypes)


def wire_growth(frame: pd.DataFrame, *, min_bytes: int = 64 * 1024) -> pd.DataFrame:
    """Fit the wire bytes per rank of :func:`measure_allreduce_sweep` for each world size and
    dtype, over messages of at least ``min_bytes`` (§20.1.1, claim C02): ``per_byte`` is the
    slope of a least-squares line ``bytes on the wire per rank = fixed + per_byte × message``,
    ``exponent`` the slope on log-log axes (1: the traffic grows in proportion to the
    message, i.e. to the parameters)."""
    rows = []
    for (world, dtype), part in frame.groupby(["W", "dtype"], sort=True):
        part = part[part["bytes"] >= min_bytes]
        if part["wire_per_rank"].isna().any() or len(part) < 2:
            per_byte = exponent = fixed = np.nan
        else:
            x, y = part["bytes"].to_numpy(float), part["wire_per_rank"].to_numpy(float)
            per_byte, fixed = np.polyfit(x, y, 1)
            exponent = np.polyfit(np.log(x), np.log(y), 1)[0]
        rows.append(
            {"W": world, "dtype": dtype, "per_byte": per_byte, "fixed": fixed, "exponent": exponent}
        )
    return pd.DataFrame(rows)


def plot_allreduce_sweep(frame: pd.DataFrame, growth: pd.DataFrame, *, min_bytes: int = 64 * 1024):
    """Bytes on the wire per rank (left) and time (right) of gloo's all-reduce against the
    message size, 2 and 3 ranks, float32: one colour per world size in both panels, each fit
    drawn over the messages it was fitted to (the wire fit from ``min_bytes``, as
    :func:`wire_growth`; the alpha-beta fit over every message)."""
    fig, (wire, clock) = new_panels(2, "gloo all-reduce on this machine", figsize=(11, 4))
    for index, (world, part) in enumerate(frame[frame["dtype"] == "float32"].groupby("W")):
        color, sizes = f"C{index}", part["bytes"].to_numpy(float)
        fit = growth[(growth["W"] == world) & (growth["dtype"] == "float32")].iloc[0]
        fitted_sizes = sizes[sizes >= min_bytes]
        wire.loglog(sizes, part["wire_per_rank"], "o", color=color, label=f"W={world}, measured")
        label = f"W={world}, fit: {fit['per_byte']:.3f} B per byte"
        wire.loglog(fitted_sizes, fit["fixed"] + fit["per_byte"] * fitted_sizes, "-", color=color,
                    label=label)  # fmt: skip
        alpha, beta = fit_alpha_beta(part)
        clock.errorbar(sizes, part["seconds"], yerr=[part["seconds"] - part["seconds_min"],
                       part["seconds_max"] - part["seconds"]], fmt="o", ms=3, color=color,
                       label=f"W={world}, median (min–max)")  # fmt: skip
        fitted = [ring_allreduce_seconds(n, world, alpha, 1 / beta if beta else np.inf)
                  for n in sizes]  # fmt: skip
        clock.loglog(sizes, fitted, "-", color=color, label=f"W={world}, alpha-beta fit")
    wire.set(xlabel="message (bytes)", ylabel="bytes on the wire per rank", title="bytes")
    clock.set(xlabel="message (bytes)", ylabel="seconds per all-reduce", title="time")
    wire.legend(fontsize=8, loc="upper left")
    clock.legend(fontsize=8, loc="upper left")
    return fig


# --------------------------------------------------------------------------------------------
# Scaling: 1 vs 2 processes measured
# --------------------------------------------------------------------------------------------


def _encoder_and_batch(vocab: int, dim: int, batch: int, seed: int = 0):
    set_seed(seed)
    model = BagOfEmbeddingsEncoder(vocab, dim)
    generator = torch.Generator().manual_seed(seed + 1)
    pairs = torch.randint(1, vocab, (2, batch, 24), generator=generator)
    return model, pairs


def step_times_on_rank(global_batch: int, vocab: int, dim: int, steps: int) -> dict:
    """Seconds of a DDP contrastive step on this rank for its share of ``global_batch``
    (cross-rank InfoNCE, Adam): the median and every time of ``steps`` steps after a first one."""
    rank, world = group_rank_and_size()
    model, (anchors, positives) = _encoder_and_batch(vocab, dim, global_batch)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    mine = slice(rank * global_batch // world, (rank + 1) * global_batch // world)
    times = []
    for step in range(steps + 1):
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = distributed_info_nce(model(anchors[mine]), model(positives[mine]))
        loss.backward()
        optimizer.step()
        if step:  # the first step builds DDP's buckets
            times.append(time.perf_counter() - start)
    return {"rank": rank, "seconds": float(np.median(times)), "times": times,
            "gradient_bytes": 4 * count_parameters(model)}  # fmt: skip


def measure_scaling(
    global_batch: int = 512, vocab: int = 20_000, dim: int = 128, steps: int = 8
) -> pd.DataFrame:
    """Step time for the same global batch on 1 process and on a 2-process gloo group, each
    process with half of this machine's cores: median and min–max over ``steps`` (the group's
    step: its slowest rank), the speed-up and the efficiency (speed-up / 2)."""
    single = single_step_times(global_batch, vocab, dim, steps)
    pair = run_local_group(
        step_times_on_rank, 2, (global_batch, vocab, dim, steps), timeout_s=TIMEOUT_S
    )
    return scaling_table(single, pair)


def single_step_times(
    global_batch: int = 512, vocab: int = 20_000, dim: int = 128, steps: int = 8
) -> dict:
    """:func:`step_times_on_rank` in this process as a world of one, on half of the cores."""
    # Each rank of the pair gets half the cores (run_local_group); the single process gets the
    # same share, so the ratio measures the parallel scaling, not OpenMP's thread scaling.
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads // 2))
    try:
        return step_times_on_rank(global_batch, vocab, dim, steps)
    finally:
        torch.set_num_threads(threads)


def scaling_table(single: dict, pair: list[dict]) -> pd.DataFrame:
    """The 1-process step (``single``) against a 2-rank group's (``pair``, every rank's
    :func:`step_times_on_rank`; the group's step is its slowest rank): median and min–max
    milliseconds, the speed-up and the efficiency (speed-up / 2)."""
    slowest = max(pair, key=lambda r: r["seconds"])
    rows = []
    for processes, result in ((1, single), (2, slowest)):
        speedup = single["seconds"] / result["seconds"]
        rows.append({"processes": processes, **timing_spread_ms(result["times"]),
                     "speedup": speedup, "efficiency": speedup / processes})  # fmt: skip
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# §20.4.1 practices: find_unused_parameters, barriers, the unused-parameter error
# --------------------------------------------------------------------------------------------


def practices_on_rank(batch: int = 64, repeat: int = 15, model: dict = PRACTICE_MODEL) -> dict:
    """§20.4.1's practices on this rank of a group: the step time (forward, backward, SGD) of
    the deep encoder under DDP as recommended, with ``find_unused_parameters=True`` (an extra
    walk of the autograd graph every step to find parameters without a gradient) and with a
    ``dist.barrier()`` after every step, timed in alternation; the error DDP raises when a
    parameter really is unused and the flag is off; and that the flag makes that model train."""
    rank, _ = group_rank_and_size()
    generator = torch.Generator().manual_seed(rank)
    ids = torch.randint(0, model["vocab_size"], (batch, 16), generator=generator)
    labels = torch.randint(0, model["classes"], (batch,), generator=generator)
    variants = {}
    for name, unused, barrier in (
        ("as recommended", False, False),
        ("find_unused_parameters=True", True, False),
        ("a barrier after every step", False, True),
    ):
        set_seed(0)
        ddp = nn.parallel.DistributedDataParallel(
            deep_encoder(**model), find_unused_parameters=unused
        )
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        variants[name] = ddp_step(ddp, optimizer, ids, labels, barrier)
    timing = time_interleaved(variants, warmup=2, repeat=repeat, device="cpu")
    error = unused_parameter_error(model, ids, labels)
    set_seed(0)
    tolerant = nn.parallel.DistributedDataParallel(
        WithUnusedHead(model), find_unused_parameters=True
    )
    step = ddp_step(tolerant, torch.optim.SGD(tolerant.parameters(), lr=0.1), ids, labels)
    step()
    step()  # the step that raised without the flag
    return {
        "rank": rank,
        "timing": {name: t.times for name, t in timing.items()},
        "error": error,
        "unused_grad_with_flag": tolerant.module.unused.weight.grad,
    }


def measure_practices(batch: int = 64, repeat: int = 15) -> tuple[pd.DataFrame, dict]:
    """:func:`practices_on_rank` on 2 gloo ranks: per variant the step's median milliseconds
    and min–max (of the rank with the larger median), and rank 0's error text."""
    return practices_table(
        run_local_group(practices_on_rank, 2, (batch, repeat), timeout_s=TIMEOUT_S)
    )


def practices_table(results: list[dict]) -> tuple[pd.DataFrame, dict]:
    """Every rank's :func:`practices_on_rank` as :func:`measure_practices` returns them."""
    rows = []
    for name in results[0]["timing"]:
        times = max((r["timing"][name] for r in results), key=lambda t: float(np.median(t)))
        rows.append({"variant": name, **timing_spread_ms(times)})
    extra = {
        "error": results[0]["error"],
        "trained_with_flag": True,  # two steps ran: the second would have raised without it
        "unused_grad_with_flag": results[0]["unused_grad_with_flag"],
    }
    return pd.DataFrame(rows), extra


# --------------------------------------------------------------------------------------------
# One group per world size for every multi-process experiment of notebook 06
# --------------------------------------------------------------------------------------------


def demo_on_rank(argv: list[str]) -> dict:
    """The DDP demo (``chapter20.demos.ddp_run.main``) with the command line ``argv`` on this
    rank: its summary (picklable: the finished run also holds the trainer)."""
    return ddp_run.main(argv).summary


def run_notebook_groups(
    demo_argv: list[str], *, extra: dict | None = None, practices_repeat: int = 10,
    scaling_steps: int = 6,
) -> dict[int, list[dict]]:  # fmt: skip
    """Every multi-process experiment of notebook 06 in one local gloo group per world size, so
    that each size costs one start (§20.4): on 2 ranks the DDP demo (``demo_argv``) in float32
    and with fp16 compression, the all-reduce sweep, the step times of :func:`measure_scaling`
    and the practices; on 3 ranks the demo and the sweep. ``extra`` maps a world size to more
    ``{name: (function, args)}`` jobs. Returns, per world size, every rank's ``{name: result}``
    in rank order."""
    fp16 = [*demo_argv, "--gradient-compression", "fp16"]
    jobs = {
        2: {"demo": (demo_on_rank, (demo_argv,)), "demo fp16": (demo_on_rank, (fp16,)),
            "sweep": sweep_job(2),
            "scaling": (step_times_on_rank, (512, 20_000, 128, scaling_steps)),
            "practices": (practices_on_rank, (64, practices_repeat))},
        3: {"demo": (demo_on_rank, (demo_argv,)), "sweep": sweep_job(3)},
    }  # fmt: skip
    for world, more in (extra or {}).items():
        jobs.setdefault(world, {}).update(more)
    return {
        world: run_in_one_group(world, named, timeout_s=TIMEOUT_S)
        for world, named in sorted(jobs.items())
    }


def results_of(groups: dict[int, list[dict]], world: int, name: str) -> list:
    """Every rank's result of the job ``name`` in the group of ``world`` ranks of
    :func:`run_notebook_groups`, in rank order."""
    return [rank[name] for rank in groups[world]]


def sweep_frame(groups: dict[int, list[dict]]) -> pd.DataFrame:
    """The all-reduce sweep of :func:`run_notebook_groups` (rank 0's records of every group), as
    :func:`measure_allreduce_sweep` returns it."""
    return pd.DataFrame([r for world in sorted(groups) for r in groups[world][0].get("sweep", [])])


# --------------------------------------------------------------------------------------------
# The notes of notebook 06's claims check
# --------------------------------------------------------------------------------------------


def allreduce_growth_note(per_byte: pd.Series) -> str:
    """Claim C02's note in notebook 06's claims check (§20.4): the bytes on the wire per rank per
    message byte of float32 all-reduces on 2 and 3 ranks (``per_byte``, indexed by ``(W, dtype)``
    as :func:`wire_growth` fits them), and the growth from W=2 to W=3 summed over the ranks."""
    two, three = per_byte[(2, "float32")], per_byte[(3, "float32")]
    return (
        f"per-rank wire bytes per message byte: W=2 {two:.3f}, W=3 {three:.3f}; "
        f"summed over ranks x{3 * (three / two) / 2:.2f}"
    )


def fp16_compression_note(hook_ratio: float) -> str:
    """Claim C03's note in notebook 06's claims check (§20.4): where the ratio was measured, and
    the fp16 / fp32 bytes the DDP communication hook counted (``hook_ratio``, section 3)."""
    return (
        "on the loopback wire, 2 gloo ranks; the DDP hook's count: "
        f"{hook_ratio:.2f}; the run stays within 1e-3 of fp32"
    )


def link_speed_note(slower: dict[str, float]) -> str:
    """Claim C15's note in notebook 06's claims check (§20.4): the datasheet ratios of NVLink's
    bandwidth over InfiniBand HDR's and 100 Gb Ethernet's (``slower``, keyed by the names of
    ``communication_model.LINKS``)."""
    return (
        f"datasheet: NVLink (A100) / InfiniBand HDR x{slower['InfiniBand HDR 200 Gb/s']:.0f}, "
        f"/ 100 Gb Ethernet x{slower['Ethernet 100 Gb/s']:.0f}"
    )


def scaling_speedup_note(at: dict) -> str:
    """Claim C16's note in notebook 06's claims check (§20.4): the speed-up at 64 GPUs over
    InfiniBand that the alpha-beta model (``communication_model.scaling_model``) gives BERT-base
    and the 1M x 128 encoder (``at``: each model's row at 64 GPUs, keyed by the notebook's
    names)."""
    bert, encoder = at["BERT-base, InfiniBand"], at["encoder 1M x 128, InfiniBand"]
    return (
        "the alpha-beta model's upper bound: BERT-base over InfiniBand "
        f"x{bert.speedup:.1f}, the 1M x 128 encoder x{encoder.speedup:.1f}"
    )


# --------------------------------------------------------------------------------------------
# Figures and the benchmark
# --------------------------------------------------------------------------------------------


def plot_ring(log: list, world: int):
    """§20.4, the ring all-reduce's steps (``communication_model.ring_allreduce_reference``'s
    ``log``): one panel per step, rank by chunk, each cell shaded and labelled with how many
    ranks' gradients it holds summed after the step; outlined: the chunks received at that step,
    each from the rank above (rank 0 from rank W-1)."""
    counts = np.ones((world, world), dtype=int)
    fig, axes = new_panels(len(log) + 1, f"Ring all-reduce, {world} ranks, a gradient of "
                           f"{world} chunks each", figsize=(2.1 * (len(log) + 1), 2.9))  # fmt: skip
    for index, ax in enumerate(axes):
        received = []
        if index:
            phase, sends = log[index - 1]
            before = counts.copy()
            for rank, chunk in sends:
                receiver = (rank + 1) % world
                kept = before[receiver, chunk] if phase == "reduce-scatter" else 0
                counts[receiver, chunk] = before[rank, chunk] + kept
                received.append((receiver, chunk))
        ax.imshow(counts, cmap="Blues", vmin=0, vmax=world + 1)
        ax.grid(False)
        for (rank, chunk), n in np.ndenumerate(counts):
            color = "white" if n == world else "black"
            ax.text(chunk, rank, str(n), ha="center", va="center", fontsize=9, color=color)
        for rank, chunk in received:
            ax.add_patch(Rectangle((chunk - 0.5, rank - 0.5), 1, 1, fill=False, lw=2, ec="C3"))
        ax.set_xticks(range(world), [str(c) for c in range(world)], fontsize=8)
        ax.set_yticks(range(world), [f"rank {r}" for r in range(world)], fontsize=8)
        ax.set_xlabel("chunk", fontsize=8)
        ax.set_title(f"{log[index - 1][0]}\nafter step {index}" if index else "start", fontsize=9)
    return fig


def two_process_prediction(
    scaling: pd.DataFrame, sweep: pd.DataFrame, vocab: int = 20_000, dim: int = 128
) -> str:
    """§20.4's data-parallel model of the 2-process step of :func:`measure_scaling`, next to the
    measurement, as one line: the 1-process step halved (each rank computes half the batch)
    plus a ring all-reduce of the encoder's gradient on 2 ranks at the alpha and beta fitted to
    ``sweep`` (:func:`measure_allreduce_sweep`, float32 on 2 ranks). No overlap."""
    alpha, beta = fit_alpha_beta(sweep[(sweep["W"] == 2) & (sweep["dtype"] == "float32")])
    gradient = 4 * count_parameters(BagOfEmbeddingsEncoder(vocab, dim))
    times = scaling.set_index("processes")["ms"]
    model = times[1] / 2 + 1e3 * ring_allreduce_seconds(gradient, 2, alpha, 1 / beta)
    return (
        f"model, 2 processes (half the compute each + all-reduce of {format_bytes(gradient)} at "
        f"the fitted alpha-beta, no overlap): {model:.1f} ms; measured: {times[2]:.1f} ms"
    )


def benchmark() -> None:
    """``python -m chapter20 bench ddp``: measured 2-process scaling efficiency here, and gloo's
    all-reduce on 2 and 3 ranks: bytes on the wire per rank and the fitted alpha and beta."""
    scaling = measure_scaling()
    one, two = scaling.iloc[0], scaling.iloc[1]
    spread = range_text(scaling.min_ms, scaling.max_ms)
    print(
        f"contrastive step, global batch 512, 1 vs 2 gloo processes: {one.ms:.1f} ms "
        f"(range {spread[0]}) vs {two.ms:.1f} ms (range {spread[1]}) = speed-up "
        f"{two.speedup:.2f}x, efficiency {two.efficiency:.0%}"
    )
    frame = measure_allreduce_sweep()
    growth = wire_growth(frame)
    for world, part in frame[frame["dtype"] == "float32"].groupby("W"):
        alpha, beta = fit_alpha_beta(part)
        per_byte = growth[(growth["W"] == world) & (growth["dtype"] == "float32")]["per_byte"]
        print(
            f"gloo all-reduce, {world} ranks: alpha = {alpha * 1e6:.1f} us per step, "
            f"{1 / beta / 1e9:.2f} GB/s; {float(per_byte.iloc[0]):.3f} bytes on the wire per "
            f"rank per byte; largest message {format_bytes(part['bytes'].iloc[-1])} in "
            f"{part['seconds'].iloc[-1] * 1e3:.2f} ms"
        )
