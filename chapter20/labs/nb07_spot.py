"""The experiments of notebook 07 (§20.5.2): preemptions drawn as a timeline (the run and its
restart time are ``chapter20.demos.chaos_launch``'s), the cost of one checkpoint
and of deterministic mode on this machine, and the checkpoint interval under simulated
preemptions. What a saved state holds is ``chapter20.training.state.state_table``; the fault
matrix is ``chapter20.labs.nb07_faults``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import matplotlib.ticker
import numpy as np
import pandas as pd
import torch

from chapter20.core.paths import cache_dir
from chapter20.core.plotting import new_figure, plain_log_ticks
from chapter20.core.seed_statistics import timing_spread_ms
from chapter20.cost.young_daly import (
    PreemptionModel,
    expected_wall_time,
    simulate_wall_time,
    young_daly_interval,
)
from chapter20.demos.spot_run import SpotConfig, run_spot_training
from chapter20.training.checkpoints import CheckpointManager
from chapter20.training.loop import LoopConfig

__all__ = [
    "fresh_directory",
    "plot_timeline",
    "checkpoint_cost",
    "determinism_cost",
    "plot_checkpoint_cost",
    "interval_sweep",
    "plot_interval_sweep",
]


def fresh_directory(name: str) -> Path:
    """An empty directory ``<cache>/spot/<name>`` for a notebook's runs (emptied if it exists),
    so every execution starts without checkpoints."""
    path = cache_dir() / "spot" / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def plot_timeline(progress: list[dict], clean_progress: list[dict] | None = None):
    """Step against wall time for a run with kills (restarts marked), and the clean run."""
    fig, ax = new_figure(
        "Preempted run: work after the last checkpoint is redone",
        "wall time since the first step (s)",
        "optimizer step completed",
    )
    steps = [r for r in progress if "step" in r]
    start = progress[0]["time"]
    ax.plot(
        [r["time"] - start for r in steps],
        [r["step"] for r in steps],
        "o",
        ms=4,
        label="with kills (torchrun restarts)",
    )
    for i, kill in enumerate(r for r in progress if "kill" in r):
        ax.axvline(
            kill["time"] - start, color="C3", lw=1, ls="--", label="SIGKILL" if i == 0 else None
        )
    if clean_progress:
        t0 = clean_progress[0]["time"]
        ax.plot(
            [r["time"] - t0 for r in clean_progress],
            [r["step"] for r in clean_progress],
            "-",
            color="C2",
            lw=1,
            label="uninterrupted",
        )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))  # outside the axes, off the data
    return fig


def checkpoint_cost(sizes_mib=(8, 32, 128), repeat: int = 5) -> pd.DataFrame:
    """Seconds to save (atomic, fsync, checksum) and to load a state of each size (MiB) on this
    machine's temporary disk: the median of ``repeat`` and the save's min–max range; and
    the implied MiB/s at the median."""
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        manager = CheckpointManager(tmp, keep_last=1)
        for mib in sizes_mib:
            state = {"step": 0, "weights": torch.zeros(int(mib * 2**20) // 4)}
            saves, loads = [], []
            for i in range(repeat):
                state["step"] = i
                start = time.perf_counter()
                manager.save(state)
                saves.append(time.perf_counter() - start)
                start = time.perf_counter()
                manager.load_latest()
                loads.append(time.perf_counter() - start)
            save, load = timing_spread_ms(saves), float(np.median(loads))
            records.append({"MiB": mib, "save s": save["ms"] / 1e3,
                            "save range s": save["range_ms"] / 1e3, "load s": load,
                            "save MiB/s": mib / (save["ms"] / 1e3)})  # fmt: skip
        manager.close()
    return pd.DataFrame(records)


def determinism_cost(run: dict, repeats: int = 5) -> pd.DataFrame:
    """What :func:`chapter20.core.device.deterministic_mode` costs (§20.5.2): milliseconds per step
    of the spot run (``run``: SpotConfig fields) with it and without it (this process's thread
    count, default algorithms), interleaved: the median of ``repeats`` runs and its min–max
    range, and the 1-minute load average at the end; ``attrs["same_weights"]``: whether the
    last runs of the two variants ended with bitwise equal parameters. MKL's CNR mode is fixed
    per process, so both variants share whichever mode this process has."""
    steps = run["steps"]
    times: dict[bool, list[float]] = {True: [], False: []}
    prints: dict[bool, str] = {}
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            for deterministic in (True, False):
                loop = LoopConfig(checkpoint_every=steps, deterministic=deterministic)
                config = SpotConfig(output_dir=f"{tmp}/{i}-{deterministic}", **run, loop=loop)
                start = time.perf_counter()
                prints[deterministic] = run_spot_training(config).fingerprint
                times[deterministic].append(time.perf_counter() - start)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    frame = pd.DataFrame(
        [
            {
                "mode": "deterministic_mode (1 thread)" if det else f"default ({threads} threads)",
                "ms/step": timing_spread_ms(times[det])["ms"] / steps,
                "range ms/step": timing_spread_ms(times[det])["range_ms"] / steps,
                "load average": load,
            }
            for det in (True, False)
        ]
    )
    frame.attrs["same_weights"] = prints[True] == prints[False]
    return frame


def plot_checkpoint_cost(frame: pd.DataFrame):
    """§20.5.2: seconds to save and to load a checkpoint against its size, as measured here."""
    fig, ax = new_figure(
        "The cost of one checkpoint on this machine", "checkpoint size (MiB)", "seconds"
    )
    ax.plot(frame["MiB"], frame["save s"], "o-", label="save (tmp + fsync + rename)")
    ax.plot(frame["MiB"], frame["load s"], "s-", label="load + verify checksum")
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xticks(frame["MiB"], labels=[f"{mib:g}" for mib in frame["MiB"]])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    plain_log_ticks(ax.yaxis)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def interval_sweep(
    work_seconds: float,
    model: PreemptionModel,
    *,
    points: int = 12,
    runs: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Mean simulated wall time (hours) for 2·``points``+1 checkpoint intervals from Young/Daly
    / 10 to × 10 (the middle one is Young/Daly), next to the model's expectation."""
    optimum = young_daly_interval(model.checkpoint_seconds, model.mtbf_seconds)
    intervals = np.geomspace(optimum / 10, optimum * 10, 2 * points + 1)  # the middle: τ*
    records = []
    for i, tau in enumerate(intervals):
        sim = simulate_wall_time(work_seconds, tau, model, runs=runs, seed=seed + i)
        records.append(
            {
                "interval s": float(tau),
                "simulated h": sim.mean() / 3600,
                "sem h": sim.std() / np.sqrt(runs) / 3600,
                "model h": expected_wall_time(work_seconds, tau, model) / 3600,
            }
        )
    return pd.DataFrame(records)


def plot_interval_sweep(frame: pd.DataFrame, work_seconds: float, young_daly: float):
    """§20.5.2: expected wall time against the checkpoint interval, Young/Daly's marked."""
    fig, ax = new_figure(
        "Save too often: saving dominates; too rarely: redone work dominates",
        "compute between checkpoints (minutes)",
        "expected wall time (hours)",
    )
    ax.errorbar(
        frame["interval s"] / 60,
        frame["simulated h"],
        yerr=2 * frame["sem h"],
        fmt="o",
        ms=3,
        label="Monte Carlo (mean ± 2 s.e.)",
    )
    ax.plot(frame["interval s"] / 60, frame["model h"], "-", label="Daly's model")
    ax.axvline(young_daly / 60, color="C3", ls="--", label="Young/Daly √(2·C·M)")
    ax.axhline(work_seconds / 3600, color="grey", lw=1, label="the work without preemptions")
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig
