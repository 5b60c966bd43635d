"""§20.5 Every option over the price catalog, and the Pareto frontier of time and cost.

:func:`training_options` prices one workload on every catalog type and every GPU count that is
a whole number of its instances (time and cost from ``chapter20.cost.estimates``, on demand or on
spot); :func:`pareto_frontier` keeps the options that no other option beats on both time and
cost. Listing L12 ranks by price per hour; these rank by what the whole run takes and costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from chapter20.core.checks import check_int
from chapter20.cost.catalog import catalog_or_default
from chapter20.cost.estimates import (
    EMBEDDING_WORKLOAD,
    Preemption,
    Workload,
    cost_to_train,
    data_parallel_efficiency,
    throughput_per_gpu,
    time_to_train,
)
from chapter20.cost.selection import Config

__all__ = ["pareto_frontier", "training_options"]


def training_options(
    workload: Workload = EMBEDDING_WORKLOAD,
    gpu_counts: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
    *,
    instances: Sequence[str] | None = None,
    spot: bool = False,
    preemption: Preemption | None = None,
    overlap: float = 0.0,
    catalog: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Time and cost to train ``workload`` for every catalog type (or ``instances``) and every
    GPU count that is a whole number of its instances (§20.5).

    Per row: GPUs, per-GPU throughput (:func:`throughput_per_gpu`, an assumption), the
    alpha-beta scaling efficiency, ``hours`` (wall time, with the preemption overhead on spot),
    ``price_per_hour`` and ``cost``. On spot the price is the middle of the range.
    """
    frame = catalog_or_default(catalog)
    if instances is not None:
        unknown = sorted(set(instances) - set(frame["instance"]))
        if unknown:
            raise ValueError(f"instances not in the catalog: {unknown}")
        frame = frame[frame["instance"].isin(instances)]
    if spot:
        frame = frame[frame["spot_low_per_hour"].notna()]
    counts = [check_int("gpu_counts", g, 1) for g in gpu_counts]
    records = []
    for _, row in frame.iterrows():
        per_gpu = throughput_per_gpu(row["gpu_model"], workload)
        step = workload.pairs_per_gpu / per_gpu
        for gpus in counts:
            if gpus % row["gpus"]:
                continue
            config = Config.from_catalog_row(row, gpus // row["gpus"], spot)
            efficiency = data_parallel_efficiency(
                config, workload.gradient_bytes, step, overlap=overlap
            )
            seconds = time_to_train(workload.pairs, per_gpu, gpus, efficiency)
            run = cost_to_train(config, seconds, preemption=preemption)
            records.append(
                {
                    "instance": row["instance"],
                    "provider": row["provider"],
                    "gpu_model": row["gpu_model"],
                    "n_instances": config.n_instances,
                    "gpus": gpus,
                    "pairs_per_s_per_gpu": per_gpu,
                    "efficiency": efficiency,
                    "hours": run.wall_hours,
                    "price_per_hour": run.price_per_hour,
                    "cost": run.cost,
                }
            )
    return pd.DataFrame(records)


def pareto_frontier(options: pd.DataFrame, time: str = "hours", cost: str = "cost") -> pd.DataFrame:
    """The options no other option beats on both time and cost (§20.5), sorted by time: along
    the frontier the time rises and the cost strictly falls. Ties keep the first option."""
    for column in (time, cost):
        if column not in options.columns:
            raise ValueError(f"options has no column {column!r}")
        values = options[column].to_numpy(dtype=float)
        if not np.isfinite(values).all():
            raise ValueError(f"column {column!r} must hold finite numbers (no NaN)")
    ordered = options.sort_values([time, cost], kind="stable")
    keep, best = [], math.inf
    for index, value in zip(ordered.index, ordered[cost]):
        if value < best:
            keep.append(index)
            best = value
    return ordered.loc[keep]
