"""§20.4 DDP, run, measured and modelled: the experiments behind notebook 06 and
``python -m chapter20 bench ddp``.

Measured here (gloo on this machine): step time of the contrastive encoder on 1 and 2 processes,
all-reduce time over message sizes (fitted with the alpha-beta model of a ring all-reduce), a
straggler slowing every rank, the bytes of compressed gradients. Modelled from stated link
speeds (``LINKS``): scaling efficiency from 8 to 512 GPUs.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.device import set_seed
from chapter20.core.measure import format_bytes
from chapter20.core.models import BagOfEmbeddingsEncoder, count_parameters
from chapter20.core.plotting import new_figure, new_panels
from chapter20.techniques.contrastive import distributed_info_nce
from chapter20.techniques.distributed import (
    allreduce_times_on_rank,
    compress_gradients,
    group_rank_and_size,
    ring_allreduce_seconds,
    run_local_group,
)

__all__ = [
    "LINKS",
    "allreduce_times_on_rank",
    "measure_allreduce",
    "fit_alpha_beta",
    "fit_residuals",
    "ring_allreduce_seconds",
    "scaling_model",
    "step_times_on_rank",
    "measure_scaling",
    "straggler_on_rank",
    "measure_straggler",
    "compression_on_rank",
    "plot_allreduce_fit",
    "plot_scaling_model",
    "benchmark",
]

#: Stated link speeds (bytes/s per GPU, one direction) and latencies (s) for the model: NVLink 3
#: of an A100 (600 GB/s bidirectional), InfiniBand HDR (200 Gb/s) and 100 Gb Ethernet per node.
LINKS = {
    "NVLink (A100)": {"bandwidth": 300e9, "latency": 3e-6},
    "InfiniBand HDR 200 Gb/s": {"bandwidth": 25e9, "latency": 5e-6},
    "Ethernet 100 Gb/s": {"bandwidth": 12.5e9, "latency": 20e-6},
}


def measure_allreduce(
    world_size: int = 2, sizes: tuple[int, ...] = tuple(4 * 4**k for k in range(2, 11))
) -> pd.DataFrame:
    """All-reduce time over message sizes on a local gloo group (rank 0's medians)."""
    times = run_local_group(allreduce_times_on_rank, world_size, (sizes,))[0]
    return pd.DataFrame({"bytes": sizes, "seconds": times, "world_size": world_size})


def fit_alpha_beta(frame: pd.DataFrame) -> tuple[float, float]:
    """Fit the ring all-reduce model t = 2(W-1)·alpha + 2(W-1)/W · bytes · beta to measured
    times: alpha is the per-step latency (s), beta the seconds per byte (1 / bandwidth).
    Least squares on *relative* residuals (weights 1/t): the sizes span decades, and an
    unweighted fit would let the largest messages decide alone (:func:`fit_residuals`)."""
    world = int(frame["world_size"].iloc[0])
    steps = 2 * (world - 1)
    x = np.asarray(frame["bytes"], dtype=float) * steps / world
    seconds = np.asarray(frame["seconds"], dtype=float)
    slope, intercept = np.polyfit(x, seconds, 1, w=1 / seconds)
    return max(intercept / steps, 0.0), max(slope, 0.0)


def fit_residuals(frame: pd.DataFrame, alpha: float, beta: float) -> pd.Series:
    """(measured − fitted) / fitted for each message size of ``frame``, indexed by bytes."""
    world = int(frame["world_size"].iloc[0])
    sizes = np.asarray(frame["bytes"], dtype=float)
    fitted = np.array(
        [ring_allreduce_seconds(n, world, alpha, 1 / beta if beta else np.inf) for n in sizes]
    )
    relative = (np.asarray(frame["seconds"], dtype=float) - fitted) / fitted
    return pd.Series(relative, index=frame["bytes"].to_numpy(), name="relative residual")


def scaling_model(
    gradient_bytes: float,
    compute_seconds: float,
    world_sizes: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512),
    *,
    gpus_per_node: int = 8,
    inter_node: str = "InfiniBand HDR 200 Gb/s",
    overlap: float = 0.0,
) -> pd.DataFrame:
    """Scaling efficiency of data parallelism, modelled (§20.4, claim C16): each step computes
    for ``compute_seconds`` and all-reduces ``gradient_bytes`` hierarchically — a ring over the
    node's GPUs on NVLink, then a ring over the nodes on ``inter_node`` for the node's share —
    with ``overlap`` of the communication hidden behind the backward pass."""
    nvlink, network = LINKS["NVLink (A100)"], LINKS[inter_node]
    records = []
    for world in world_sizes:
        in_node = min(world, gpus_per_node)
        nodes = max(1, world // gpus_per_node)
        comm = ring_allreduce_seconds(
            gradient_bytes, in_node, nvlink["latency"], nvlink["bandwidth"]
        )
        # across nodes, each GPU carries 1/in_node of the gradient over its own link
        comm += ring_allreduce_seconds(
            gradient_bytes / in_node, nodes, network["latency"], network["bandwidth"]
        )
        exposed = comm * (1 - overlap)
        efficiency = compute_seconds / (compute_seconds + exposed)
        records.append(
            {
                "gpus": world,
                "comm_seconds": comm,
                "efficiency": efficiency,
                "speedup": world * efficiency,
            }
        )
    return pd.DataFrame(records)


def _encoder_and_batch(vocab: int, dim: int, batch: int, seed: int = 0):
    set_seed(seed)
    model = BagOfEmbeddingsEncoder(vocab, dim)
    generator = torch.Generator().manual_seed(seed + 1)
    pairs = torch.randint(1, vocab, (2, batch, 24), generator=generator)
    return model, pairs


def step_times_on_rank(
    global_batch: int, vocab: int, dim: int, steps: int, compress: str = "none", delay: float = 0
) -> dict:
    """Median seconds of a DDP contrastive step on this rank for its share of ``global_batch``
    (cross-rank InfoNCE, Adam); ``delay`` seconds of extra work on rank 1 (a straggler)."""
    rank, world = group_rank_and_size()
    model, (anchors, positives) = _encoder_and_batch(vocab, dim, global_batch)
    stats = None
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
        stats = compress_gradients(model, compress)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    mine = slice(rank * global_batch // world, (rank + 1) * global_batch // world)
    times = []
    for step in range(steps + 1):
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = distributed_info_nce(model(anchors[mine]), model(positives[mine]))
        if rank == 1 and delay:
            time.sleep(delay)  # a slow rank: a busier GPU, a slower input pipeline
        loss.backward()
        optimizer.step()
        if step:  # the first step builds DDP's buckets
            times.append(time.perf_counter() - start)
    return {
        "rank": rank,
        "world": world,
        "seconds": float(np.median(times)),
        "compression_ratio": stats.ratio if stats else None,
        "gradient_bytes": 4 * count_parameters(model),
    }


def measure_scaling(
    global_batch: int = 512, vocab: int = 20_000, dim: int = 128, steps: int = 8
) -> pd.DataFrame:
    """Step time for the same global batch on 1 process and on a 2-process gloo group, each
    process with half of this machine's cores; the speed-up and the scaling efficiency
    (speed-up / 2) on this machine."""
    # Each rank of the pair gets half the cores (run_local_group); the single process gets the
    # same share, so the ratio measures the parallel scaling, not OpenMP's thread scaling.
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads // 2))
    try:
        single = step_times_on_rank(global_batch, vocab, dim, steps)
    finally:
        torch.set_num_threads(threads)
    pair = run_local_group(step_times_on_rank, 2, (global_batch, vocab, dim, steps))
    two = max(r["seconds"] for r in pair)
    return pd.DataFrame(
        [
            {"processes": 1, "seconds": single["seconds"], "speedup": 1.0, "efficiency": 1.0},
            {
                "processes": 2,
                "seconds": two,
                "speedup": single["seconds"] / two,
                "efficiency": single["seconds"] / two / 2,
            },
        ]
    )


def straggler_on_rank(global_batch: int, vocab: int, dim: int, steps: int, delay: float) -> list:
    """Step times of every rank without and with rank 1 delayed by ``delay`` seconds."""
    return [step_times_on_rank(global_batch, vocab, dim, steps, delay=d) for d in (0.0, delay)]


def measure_straggler(delay: float = 0.05, steps: int = 6, world_size: int = 2) -> pd.DataFrame:
    """A straggler slows every rank (§20.4 challenges): per-rank median step time without and
    with one rank ``delay`` seconds late, and the slowdown."""
    results = run_local_group(straggler_on_rank, world_size, (256, 5_000, 64, steps, delay))
    records = []
    for rank, (plain, slow) in enumerate(results):
        records.append(
            {
                "rank": rank,
                "delayed": rank == 1,
                "seconds": plain["seconds"],
                "with_straggler": slow["seconds"],
                "slowdown": slow["seconds"] - plain["seconds"],
            }
        )
    return pd.DataFrame(records)


def compression_on_rank(compress: str) -> dict:
    """Bytes of one compressed gradient all-reduce vs fp32 (for claim C03)."""
    return step_times_on_rank(64, 5_000, 64, 1, compress=compress)


def plot_allreduce_fit(frame: pd.DataFrame, alpha: float, beta: float):
    """Measured all-reduce time vs size with the fitted alpha-beta line (left), and the
    relative residual of each size (right)."""
    fig, (ax, res) = new_panels(2, "gloo all-reduce on this machine", figsize=(10, 4))
    world = int(frame["world_size"].iloc[0])
    sizes = np.asarray(frame["bytes"], dtype=float)
    fitted = [ring_allreduce_seconds(n, world, alpha, 1 / beta if beta else np.inf) for n in sizes]
    ax.loglog(sizes, frame["seconds"], "o", label="measured (median)")
    ax.loglog(
        sizes, fitted, "-", label=f"fit: alpha {alpha * 1e6:.0f} us, {1 / beta / 1e9:.2f} GB/s"
    )
    ax.set(xlabel="message size (bytes)", ylabel="seconds", title="time and fit")
    ax.legend()
    residuals = fit_residuals(frame, alpha, beta)
    res.semilogx(sizes, 100 * residuals.to_numpy(), "o-")
    res.axhline(0, color="#8C8C8C", linewidth=1)
    res.set(xlabel="message size (bytes)", ylabel="(measured − fit) / fit (%)",
            title="relative residuals")  # fmt: skip
    return fig


def plot_scaling_model(frames: dict[str, pd.DataFrame]):
    """Modelled speed-up vs GPUs for each inter-node link, with the ideal line."""
    fig, ax = new_figure("Data-parallel scaling, modelled", "GPUs", "speed-up over one GPU")
    first = next(iter(frames.values()))
    ax.plot(first["gpus"], first["gpus"], ":", color="#8C8C8C", label="ideal")
    for label, frame in frames.items():
        ax.plot(frame["gpus"], frame["speedup"], "o-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.legend(fontsize=8)
    return fig


def benchmark() -> None:
    """``python -m chapter20 bench ddp``: measured 2-process scaling efficiency here, and the
    fitted alpha and beta of gloo's all-reduce."""
    scaling = measure_scaling()
    one, two = scaling.iloc[0], scaling.iloc[1]
    print(
        f"contrastive step, global batch 512, 1 vs 2 gloo processes: "
        f"{one.seconds * 1e3:.1f} ms vs {two.seconds * 1e3:.1f} ms = speed-up "
        f"{two.speedup:.2f}x, efficiency {two.efficiency:.0%}"
    )
    frame = measure_allreduce()
    alpha, beta = fit_alpha_beta(frame)
    print(
        f"gloo all-reduce, 2 ranks: alpha = {alpha * 1e6:.1f} us per step, "
        f"beta = {beta * 1e9:.3f} ns/byte ({1 / beta / 1e9:.2f} GB/s); largest message "
        f"{format_bytes(frame['bytes'].iloc[-1])} in {frame['seconds'].iloc[-1] * 1e3:.2f} ms"
    )
