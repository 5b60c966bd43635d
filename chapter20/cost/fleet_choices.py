"""§20.5 Every fleet choice over the price catalog (an instance type and a count of it, on demand
or on spot), and the Pareto frontier of time and cost.

:func:`training_options` prices one workload on every catalog type the time model can time and
every GPU count that is a whole number of its instances (time and cost from
``chapter20.cost.estimates``, on demand or on spot); :func:`untimed_types` lists the others and
why (no cited datasheet peak in the workload's precision; a PCIe part; no cited network for
several instances). :func:`pareto_frontier` keeps the options that no other option beats on
both time and cost; :func:`cheapest_fleet` picks the cheapest option of at least so many GPUs of
one model. Listing L12 ranks by price per hour; these rank by what the whole run takes and
costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from chapter20.core.checks import check_int
from chapter20.cost.catalog import catalog_or_default, load_catalog
from chapter20.cost.estimates import (
    EMBEDDING_WORKLOAD,
    Preemption,
    Workload,
    cost_to_train,
    data_parallel_efficiency,
    throughput_per_gpu,
    time_to_train,
)
from chapter20.cost.hardware import instance_network_gbps, precisions_of, timed_gpus
from chapter20.cost.selection import Config

__all__ = ["cheapest_fleet", "pareto_frontier", "training_options", "untimed_types"]


def _why_untimed(row: pd.Series, workload: Workload) -> str:
    """Why the time model cannot time ``row``'s type for ``workload`` ("" when it can)."""
    if "pcie" in row["instance"].lower():
        return "a PCIe part: the datasheet rows are the SXM parts'"
    if row["gpu_model"] not in timed_gpus():
        return f"no cited datasheet for the {row['gpu_model']}"
    if workload.precision not in precisions_of(row["gpu_model"]):
        return f"the {row['gpu_model']} has no {workload.precision} units"
    return ""


def untimed_types(
    workload: Workload = EMBEDDING_WORKLOAD, catalog: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The catalog types the time model cannot time for ``workload``, one row each with the
    reason (§20.5): a GPU without a cited datasheet peak in the workload's precision (the
    A10G; the V100 for bf16), or a PCIe part; and the types it times as one instance only
    because no document read here states their network bandwidth."""
    records = []
    for _, row in catalog_or_default(catalog).iterrows():
        why = _why_untimed(row, workload)
        if not why and instance_network_gbps(row["cloud"], row["instance"]) is None:
            why = "timed as one instance only: no cited network bandwidth"
        if why:
            records.append(
                {
                    "cloud": row["cloud"],
                    "instance": row["instance"],
                    "gpu_model": row["gpu_model"],
                    "reason": why,
                }
            )
    return pd.DataFrame(records, columns=["cloud", "instance", "gpu_model", "reason"])


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
    """Time and cost to train ``workload`` for every catalog type (or ``instances``) that the
    time model can time (:func:`untimed_types` lists the rest) and every GPU count that is a
    whole number of its instances — one instance only where its network is not cited (§20.5).

    Per row: GPUs, per-GPU throughput (:func:`throughput_per_gpu`, a model), the alpha-beta
    scaling efficiency, ``hours`` (wall time, with the preemption overhead on spot),
    ``price_per_hour`` and ``cost``. On spot the price is the region's median zone.
    ValueError when ``instances`` names a type the catalog lacks or the model cannot time.
    """
    frame = catalog_or_default(catalog)
    if instances is not None:
        unknown = sorted(set(instances) - set(frame["instance"]))
        if unknown:
            raise ValueError(f"instances not in the catalog: {unknown}")
        frame = frame[frame["instance"].isin(instances)]
    if spot:
        frame = frame[frame["spot_median_per_hour"].notna()]
    counts = [check_int("gpu_counts", g, 1) for g in gpu_counts]
    records = []
    for _, row in frame.iterrows():
        why = _why_untimed(row, workload)
        if why:
            if instances is not None:
                raise ValueError(f"instances: {row['instance']} cannot be timed: {why}")
            continue
        per_gpu = throughput_per_gpu(row["gpu_model"], workload)
        step = workload.pairs_per_gpu / per_gpu
        networked = instance_network_gbps(row["cloud"], row["instance"]) is not None
        for gpus in counts:
            if gpus % row["gpus"] or (gpus > row["gpus"] and not networked):
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
                    "cloud": row["cloud"],
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


def cheapest_fleet(
    min_gpus: int = 100, gpu_model: str = "A100", workload: Workload = EMBEDDING_WORKLOAD
) -> pd.Series:
    """The cheapest run of ``workload`` on at least ``min_gpus`` GPUs of ``gpu_model`` that the
    time model can time (one row of :func:`training_options`; §20.5, C17): the GPU counts tried
    are each of the catalog's instance sizes for that GPU rounded up to ``min_gpus``; ties go
    to the instance name."""
    min_gpus = check_int("min_gpus", min_gpus, 1)
    catalog = load_catalog()
    sizes = sorted({int(g) for g in catalog.loc[catalog["gpu_model"] == gpu_model, "gpus"]})
    counts = sorted({math.ceil(min_gpus / g) * g for g in sizes})
    options = training_options(workload, counts)
    options = options[(options["gpu_model"] == gpu_model) & (options["gpus"] >= min_gpus)]
    if options.empty:
        raise ValueError(f"no timed configuration of >= {min_gpus} {gpu_model} GPUs")
    return options.sort_values(["cost", "instance"], kind="stable").iloc[0]
