"""§20.4 challenges, run and measured: a rank with a slow input pipeline in a data-parallel run,
monitored per rank, detected, and given a smaller share of the global batch (notebook 06,
section 7).

Every rank trains the bag-of-embeddings encoder through the composed ``Trainer`` (cross-rank
InfoNCE) on its share of the same global batches; rank ``slow_rank``'s loader spends
``delay_per_example`` seconds per example it loads (a slower disk, a busier host, heavier
decoding). ``chapter20.techniques.parallelism.RankMonitor`` logs every iteration on every rank;
after the first phase ``balanced_split`` resizes the shares from what was measured, and the
second phase runs with them.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from chapter20.core.device import set_seed
from chapter20.core.id_streams import uniform_ids
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.core.plotting import new_panels
from chapter20.core.seed_statistics import timing_spread_ms
from chapter20.labs.common import LOCAL_GROUP_TIMEOUT_S as TIMEOUT_S
from chapter20.techniques.distributed import group_rank_and_size, run_local_group
from chapter20.techniques.parallelism import RankMonitor, balanced_split, own_seconds
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import Trainer

__all__ = [
    "STRAGGLER_RUN",
    "uneven_split_on_rank",
    "straggler_run_on_rank",
    "measure_straggler",
    "straggler_job",
    "straggler_frames",
    "own_rates",
    "phase_table",
    "plot_straggler",
]

#: The run: global batch, steps per phase, the slow rank and its extra seconds per example.
STRAGGLER_RUN = {
    "global_batch": 256,
    "steps": 12,
    "slow_rank": 1,
    "delay_per_example": 2e-4,
    "vocab": 5_000,
    "dim": 64,
}


def _global_batches(steps: int, global_batch: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """``[steps, 2, global_batch, 16]`` token ids: the same global batches on every rank."""
    return uniform_ids((steps, 2, global_batch, 16), vocab, seed=seed + 1).clamp_min(1)


def _share(batch: torch.Tensor, shares: list[int], rank: int) -> tuple[torch.Tensor, ...]:
    start = sum(shares[:rank])
    return tuple(t[start : start + shares[rank]] for t in batch)


def _trainer(vocab: int, dim: int, optimizer: str = "adamw") -> Trainer:
    set_seed(0)
    encoder = BagOfEmbeddingsEncoder(vocab, dim)
    if optimizer == "sgd":
        sgd = torch.optim.SGD(encoder.parameters(), lr=0.5)
        return Trainer(encoder, TrainConfig(temperature=0.1), optimizer=sgd)
    return Trainer(encoder, TrainConfig(lr=1e-3, weight_decay=0.0, temperature=0.1))


def uneven_split_on_rank(shares: list[int], vocab: int = 500, dim: int = 16) -> float:
    """On every rank: one SGD step of the composed Trainer on the same global batch, split
    evenly and split as ``shares``; the largest weight difference after the step (§20.4).
    Cross-rank InfoNCE weighs every pair by 1 / (pairs of all ranks), so the split must not
    matter beyond float32 rounding."""
    rank, world = group_rank_and_size()
    total = sum(shares)
    batch = _global_batches(1, total, vocab)[0]
    even = [total // world + (r < total % world) for r in range(world)]
    weights = []
    for split in (even, shares):
        trainer = _trainer(vocab, dim, optimizer="sgd")
        trainer.step(_share(batch, split, rank))
        weights.append([p.detach().clone() for p in trainer.encoder.parameters()])
    return max(float((a - b).abs().max()) for a, b in zip(*weights))


def _load(batch, shares, rank, slow_rank, delay):
    part = _share(batch, shares, rank)
    if rank == slow_rank:
        time.sleep(delay * shares[rank])  # a slow input pipeline: seconds per example loaded
    return part


def own_rates(rows: list[dict]) -> list[float]:
    """Examples per second of each rank's own work in the monitored ``rows`` (§20.4): its share
    over :func:`chapter20.techniques.parallelism.own_seconds`."""
    own = own_seconds(rows)
    share = pd.DataFrame(rows).groupby("rank")["batch"].median()
    return [float(share[rank] / own[rank]) for rank in own]


def straggler_run_on_rank(
    global_batch: int = 256,
    steps: int = 12,
    slow_rank: int = 1,
    delay_per_example: float = 2e-4,
    vocab: int = 5_000,
    dim: int = 64,
) -> dict:
    """Two phases of ``steps`` iterations each, monitored on every rank: even shares of the
    global batch, then the shares :func:`chapter20.techniques.parallelism.balanced_split` gives
    from the first phase's rates (the first two steps of a phase are warm-up and not used).
    Returns every rank's monitor rows (with the phase), both splits, and the proof that the
    balanced split takes the even split's step (:func:`uneven_split_on_rank`, this rank)."""
    rank, world = group_rank_and_size()
    trainer = _trainer(vocab, dim)
    batches = _global_batches(2 * steps, global_batch, vocab)
    monitor = RankMonitor()
    splits = {"even": [global_batch // world + (r < global_batch % world) for r in range(world)]}
    for index in range(2 * steps):
        if index == steps:
            measured = [r for r in monitor.gathered() if r["step"] >= 2]
            splits["balanced"] = balanced_split(own_rates(measured), global_batch)
        shares = splits["balanced" if index >= steps else "even"]
        with monitor.iteration(index, shares[rank]):
            with monitor.data_wait():
                batch = _load(batches[index], shares, rank, slow_rank, delay_per_example)
            with monitor.step():
                trainer.step(batch)
    rows = monitor.gathered()
    for row in rows:
        row["phase"] = "balanced" if row["step"] >= steps else "even"
    proof = uneven_split_on_rank(splits["balanced"])
    return {"rows": rows, "splits": splits, "uneven_vs_even": proof}


def measure_straggler(**overrides) -> tuple[pd.DataFrame, dict]:
    """:func:`straggler_run_on_rank` on 2 gloo ranks (``STRAGGLER_RUN`` with ``overrides``):
    every rank's monitor rows as a frame, and ``{"splits", "uneven_vs_even"}`` (the largest
    weight difference on any rank between one step on the balanced and on the even split)."""
    function, args = straggler_job(**overrides)
    return straggler_frames(run_local_group(function, 2, args, timeout_s=TIMEOUT_S))


def straggler_job(**overrides) -> tuple:
    """``(straggler_run_on_rank, args)`` of ``STRAGGLER_RUN`` with ``overrides``: the job to run
    in a 2-rank group that serves other experiments too (notebook 06 starts one)."""
    return straggler_run_on_rank, tuple({**STRAGGLER_RUN, **overrides}.values())


def straggler_frames(result: list[dict]) -> tuple[pd.DataFrame, dict]:
    """The ranks' results of :func:`straggler_run_on_rank` (rank order) as in
    :func:`measure_straggler`: rank 0's monitor rows (every rank's) as a frame, and
    ``{"splits", "uneven_vs_even"}``."""
    proof = max(r["uneven_vs_even"] for r in result)
    return pd.DataFrame(result[0]["rows"]), {"splits": result[0]["splits"], "uneven_vs_even": proof}


def phase_table(frame: pd.DataFrame, warmup: int = 2) -> pd.DataFrame:
    """Per phase and rank: the share, the median of data wait, step and iteration
    milliseconds, the iteration's min–max range (``chapter20.core.seed_statistics``), and the
    median CPU share (the first ``warmup`` steps of a phase left out)."""
    first = frame.groupby("phase")["step"].transform("min")
    kept = frame[frame["step"] >= first + warmup]
    rows = []
    for (phase, rank), part in kept.groupby(["phase", "rank"], sort=False):
        iteration = timing_spread_ms(part["iteration_seconds"])
        rows.append(
            {
                "phase": phase,
                "rank": rank,
                "share": int(part["batch"].iloc[0]),
                "data_ms": timing_spread_ms(part["data_seconds"])["ms"],
                "step_ms": timing_spread_ms(part["step_seconds"])["ms"],
                "iteration_ms": iteration["ms"],
                "iteration_range_ms": iteration["range_ms"],
                "cpu_share": float(np.median(part["cpu_share"])),
            }
        )
    return pd.DataFrame(rows)


def plot_straggler(frame: pd.DataFrame, steps: int = STRAGGLER_RUN["steps"]):
    """Per rank and iteration: the data wait (left) and the step time (right, which includes
    waiting for the other rank); the dashed line is where the shares were rebalanced."""
    fig, (data, step) = new_panels(2, "A slow input pipeline on rank 1, monitored per rank",
                                   figsize=(10, 4))  # fmt: skip
    for rank, part in frame.groupby("rank"):
        data.plot(part["step"], 1e3 * part["data_seconds"], "o-", ms=3, label=f"rank {rank}")
        step.plot(part["step"], 1e3 * part["step_seconds"], "o-", ms=3, label=f"rank {rank}")
    for ax, title in ((data, "waiting for data"), (step, "training step (incl. waiting)")):
        ax.axvline(steps - 0.5, color="#8C8C8C", ls="--", lw=1, label="shares rebalanced")
        ax.set(xlabel="iteration", ylabel="ms", title=title)
        ax.legend(fontsize=8)
    return fig
