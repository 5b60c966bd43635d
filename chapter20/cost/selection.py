"""§20.5.1 Configurations of catalog instance types, and listing L12's selector, corrected.

Listing L12 ranks three instance types by hourly price alone (and calls the g5.xlarge's A10G a
T4). A :class:`Config` is ``n`` instances of one type of the price catalog
(``chapter20.cost.catalog``, one region per cloud) with the prices of all of them;
:func:`configuration` builds one by name and :func:`cheapest_config` is L12's selector,
corrected: the catalog's GPU names, spot prices, filters by GPU model and memory. What a run on
a configuration takes and costs is ``chapter20.cost.estimates``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from chapter20.core.checks import check_int, check_positive
from chapter20.cost.catalog import catalog_or_default, gpu_models
from chapter20.cost.hardware import gpu_link_gb_s, instance_network_gbps

__all__ = ["CHAPTER_PRICES", "SPOT_QUOTES", "Config", "cheapest_config", "configuration"]

#: Listing L12's three instance types as the chapter types them: its price per hour, GPU count
#: and GPU label (its label for the g5.xlarge is a T4), checked against the catalog in notebook 08.
CHAPTER_PRICES = {
    "p3.2xlarge": (3.06, 1, "V100"),
    "p4d.24xlarge": (32.77, 8, "A100"),
    "g5.xlarge": (1.006, 1, "T4"),
}

#: Which spot price of the region's zones :meth:`Config.spot_price` quotes: the lowest, the
#: median or the highest zone's.
SPOT_QUOTES = ("low", "median", "high")


@dataclass(frozen=True)
class Config:
    """``n_instances`` instances of one catalog type in one region (§20.5.1); prices are for all
    of them. ``price_per_hour`` is what a budget is compared with: on-demand, or with ``spot``
    the highest spot price of the region's zones (so the budget holds in any zone).

    ``gpu_link_gb_s`` (NVLink per GPU and direction, multi-GPU instances) and ``network_gbps``
    come from ``chapter20.cost.hardware``: None where no cited document gives them, and the
    time model then refuses what it would need them for."""

    cloud: str
    instance: str
    region: str
    gpu_model: str
    gpu_memory_gib: float | None
    gpus_per_instance: int
    n_instances: int
    spot: bool
    on_demand_per_hour: float
    spot_low_per_hour: float | None
    spot_median_per_hour: float | None
    spot_high_per_hour: float | None
    gpu_link_gb_s: float | None
    network_gbps: float | None
    snapshot_date: str

    @property
    def gpus(self) -> int:
        return self.n_instances * self.gpus_per_instance

    @property
    def price_per_hour(self) -> float:
        return self.spot_price("high") if self.spot else self.on_demand_per_hour

    def spot_price(self, quote: str = "median") -> float:
        """The spot price of the whole configuration in the region's ``low``, ``median`` or
        ``high`` zone (§20.5.2); ValueError where the catalog has no spot price."""
        if quote not in SPOT_QUOTES:
            raise ValueError(f"spot_quote must be one of {list(SPOT_QUOTES)}, got {quote!r}")
        price = {"low": self.spot_low_per_hour, "median": self.spot_median_per_hour,
                 "high": self.spot_high_per_hour}[quote]  # fmt: skip
        if price is None:
            raise ValueError(f"{self.instance} has no spot price in {self.region} in the catalog")
        return price

    def describe(self) -> str:
        """One line: ``8 x g5.xlarge (aws us-east-1, 8 x A10G 24 GiB) at $8.048/h on demand
        [2023-12-13 prices]``."""
        kind = "spot, highest zone" if self.spot else "on demand"
        memory = "" if self.gpu_memory_gib is None else f" {self.gpu_memory_gib:g} GiB"
        return (
            f"{self.n_instances} x {self.instance} ({self.cloud} {self.region}, {self.gpus} x "
            f"{self.gpu_model}{memory}) at ${self.price_per_hour:,.3f}/h {kind} "
            f"[{self.snapshot_date} prices]"
        )

    @classmethod
    def from_catalog_row(cls, row: pd.Series, n_instances: int, spot: bool) -> Config:
        """``n_instances`` of the type of one catalog row (§20.5.1), its prices scaled to all of
        them, its links from ``chapter20.cost.hardware``. The row and the count are taken as
        they are: :func:`configuration` is the checked way to build one by name."""

        def scaled(value: object) -> float | None:
            return None if pd.isna(value) else round(float(value) * n_instances, 6)

        gpus = int(row["gpus"])
        return cls(
            cloud=row["cloud"],
            instance=row["instance"],
            region=row["region"],
            gpu_model=row["gpu_model"],
            gpu_memory_gib=None if pd.isna(row["gpu_memory_gib"]) else float(row["gpu_memory_gib"]),
            gpus_per_instance=gpus,
            n_instances=n_instances,
            spot=spot,
            on_demand_per_hour=scaled(row["on_demand_per_hour"]),
            spot_low_per_hour=scaled(row["spot_low_per_hour"]),
            spot_median_per_hour=scaled(row["spot_median_per_hour"]),
            spot_high_per_hour=scaled(row["spot_high_per_hour"]),
            gpu_link_gb_s=gpu_link_gb_s(row["gpu_model"]) if gpus > 1 else None,
            network_gbps=instance_network_gbps(row["cloud"], row["instance"]),
            snapshot_date=row["snapshot_date"],
        )


def configuration(
    instance: str, n_instances: int = 1, *, spot: bool = False, catalog: pd.DataFrame | None = None
) -> Config:
    """``n_instances`` of the catalog's ``instance`` as a :class:`Config` (§20.5.1);
    ValueError for an instance the catalog lacks, or ``spot`` where it has no spot price."""
    frame = catalog_or_default(catalog)
    n_instances = check_int("n_instances", n_instances, 1)
    rows = frame[frame["instance"] == instance]
    if rows.empty:
        raise ValueError(f"instance must be one of {sorted(frame['instance'])}, got {instance!r}")
    row = rows.iloc[0]
    if spot and pd.isna(row["spot_median_per_hour"]):
        raise ValueError(
            f"instance {instance!r} has no spot price in {row['region']} in the catalog"
        )
    return Config.from_catalog_row(row, n_instances, bool(spot))


def cheapest_config(
    target_gpus: int,
    budget_per_hour: float,
    *,
    prefer: str = "cost",
    gpu_model: str | None = None,
    min_gpu_memory_gib: float | None = None,
    spot: bool = False,
    catalog: pd.DataFrame | None = None,
) -> Config:
    """L12's selector, corrected (§20.5.1): ``n`` instances of one catalog type with at least
    ``target_gpus`` GPUs whose price per hour is within ``budget_per_hour``.

    - ``prefer="cost"``: the fewest instances that reach ``target_gpus``, and of those types
      the cheapest configuration per hour;
    - ``prefer="gpus"``: as many instances as the budget buys, and the type that gives the most
      GPUs (the cheaper one on a tie).

    ``gpu_model`` and ``min_gpu_memory_gib`` filter the types (a type whose GPU memory the
    catalog does not give is left out by the memory filter); ``spot=True`` prices spot capacity
    at the region's highest zone, so the budget holds in any zone. L12 itself is this selector
    on a catalog of its three types (``catalog=``).
    Ties go to the lower price, then fewer instances, then the instance name: the answer is
    deterministic. More budget never gives a worse answer: the same or a cheaper configuration
    (``cost``), the same or more GPUs (``gpus``). Raises ValueError for bad arguments and when
    nothing fits, naming the cheapest configuration that would.
    """
    target_gpus = check_int("target_gpus", target_gpus, 1)
    budget = check_positive("budget_per_hour", budget_per_hour)
    if prefer not in ("cost", "gpus"):
        raise ValueError(f"prefer must be 'cost' or 'gpus', got {prefer!r}")
    if not isinstance(spot, bool):
        raise TypeError(f"spot must be a bool, got {type(spot).__name__}")
    frame = catalog_or_default(catalog)
    if gpu_model is not None:
        known = gpu_models(frame)
        if gpu_model not in known:
            raise ValueError(f"gpu_model must be one of {known} or None, got {gpu_model!r}")
        frame = frame[frame["gpu_model"] == gpu_model]
    if min_gpu_memory_gib is not None:
        min_memory = check_positive("min_gpu_memory_gib", min_gpu_memory_gib)
        frame = frame[frame["gpu_memory_gib"] >= min_memory]  # unknown memory (NaN) is out
    if spot:
        frame = frame[frame["spot_high_per_hour"].notna()]
    if frame.empty:
        raise ValueError(
            "no instance type in the catalog matches "
            f"gpu_model={gpu_model!r}, min_gpu_memory_gib={min_gpu_memory_gib!r}, spot={spot}"
        )
    fewest = [
        Config.from_catalog_row(row, math.ceil(target_gpus / row["gpus"]), spot)
        for _, row in frame.iterrows()
    ]
    fits = [c for c in fewest if c.price_per_hour <= budget * (1 + 1e-12)]
    if not fits:
        cheapest = min(fewest, key=_cost_key)
        raise ValueError(
            f"no configuration of >= {target_gpus} GPUs fits budget_per_hour={budget:g}; "
            f"the cheapest is {cheapest.describe()}"
        )
    if prefer == "cost":
        return min(fits, key=_cost_key)
    most = []
    for config in fits:
        per_instance = config.price_per_hour / config.n_instances
        n = max(config.n_instances, int(budget * (1 + 1e-12) // per_instance))
        row = frame[frame["instance"] == config.instance].iloc[0]
        most.append(Config.from_catalog_row(row, n, spot))
    return min(most, key=lambda c: (-c.gpus, *_cost_key(c)))


def _cost_key(config: Config) -> tuple:
    return (round(config.price_per_hour, 9), config.n_instances, config.instance)
