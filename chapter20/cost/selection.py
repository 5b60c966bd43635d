"""§20.5.1 Configurations of catalog instance types, and listing L12's selector, corrected.

Listing L12 ranks three instance types by hourly price alone (and calls the g5.xlarge's A10G a
T4). A :class:`Config` is ``n`` instances of one type of the price catalog
(``chapter20.cost.catalog``) with the prices of all of them; :func:`configuration` builds one by
name and :func:`cheapest_config` is L12's selector, corrected: the right GPU names, spot prices,
filters by GPU model and memory. What a run on a configuration takes and costs is
``chapter20.cost.estimates``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from chapter20.core.checks import check_int, check_positive
from chapter20.cost.catalog import catalog_or_default, gpu_models

__all__ = ["SPOT_QUOTES", "Config", "cheapest_config", "configuration"]

#: Where in a catalog row's spot range a spot price is quoted (:meth:`Config.spot_price`).
SPOT_QUOTES = ("low", "mid", "high")


@dataclass(frozen=True)
class Config:
    """``n_instances`` instances of one catalog type (§20.5.1); prices are for all of them.

    ``price_per_hour`` is what the budget is compared with: on-demand, or with ``spot`` the
    high end of the spot range (so no price inside the range exceeds the budget).
    """

    provider: str
    instance: str
    gpu_model: str
    gpu_memory_gb: float
    gpus_per_instance: int
    n_instances: int
    spot: bool
    on_demand_per_hour: float
    spot_low_per_hour: float | None
    spot_high_per_hour: float | None
    gpu_link_gb_s: float | None
    network_gbps: float
    region: str
    snapshot_date: str
    confidence: str

    @property
    def gpus(self) -> int:
        return self.n_instances * self.gpus_per_instance

    @property
    def price_per_hour(self) -> float:
        return self.spot_price("high") if self.spot else self.on_demand_per_hour

    def spot_price(self, quote: str = "mid") -> float:
        """The spot price of the whole configuration at the ``low``, ``mid`` or ``high`` end."""
        if quote not in SPOT_QUOTES:
            raise ValueError(f"spot_quote must be one of {list(SPOT_QUOTES)}, got {quote!r}")
        if self.spot_low_per_hour is None or self.spot_high_per_hour is None:
            raise ValueError(f"{self.instance} has no spot price in the catalog")
        low, high = self.spot_low_per_hour, self.spot_high_per_hour
        return {"low": low, "mid": (low + high) / 2, "high": high}[quote]

    def describe(self) -> str:
        """One line: ``8 x g5.xlarge (aws, 8 x A10G 24 GB) at $8.048/h on demand [2025-05]``."""
        kind = "spot, high end" if self.spot else "on demand"
        return (
            f"{self.n_instances} x {self.instance} ({self.provider}, {self.gpus} x "
            f"{self.gpu_model} {self.gpu_memory_gb:g} GB) at ${self.price_per_hour:,.3f}/h "
            f"{kind} [{self.snapshot_date} prices]"
        )

    @classmethod
    def from_catalog_row(cls, row: pd.Series, n_instances: int, spot: bool) -> Config:
        """``n_instances`` of the type of one catalog row (§20.5.1), its prices scaled to all of
        them. The row and the count are taken as they are: :func:`configuration` is the checked
        way to build one by name."""

        def scaled(value: object) -> float | None:
            return None if pd.isna(value) else round(float(value) * n_instances, 6)

        return cls(
            provider=row["provider"],
            instance=row["instance"],
            gpu_model=row["gpu_model"],
            gpu_memory_gb=float(row["gpu_memory_gb"]),
            gpus_per_instance=int(row["gpus"]),
            n_instances=n_instances,
            spot=spot,
            on_demand_per_hour=scaled(row["on_demand_per_hour"]),
            spot_low_per_hour=scaled(row["spot_low_per_hour"]),
            spot_high_per_hour=scaled(row["spot_high_per_hour"]),
            gpu_link_gb_s=None if pd.isna(row["gpu_link_gb_s"]) else float(row["gpu_link_gb_s"]),
            network_gbps=float(row["network_gbps"]),
            region=row["region"],
            snapshot_date=row["snapshot_date"],
            confidence=row["confidence"],
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
    if spot and pd.isna(row["spot_low_per_hour"]):
        raise ValueError(f"instance {instance!r} has no spot price in the catalog")
    return Config.from_catalog_row(row, n_instances, bool(spot))


def cheapest_config(
    target_gpus: int,
    budget_per_hour: float,
    *,
    prefer: str = "cost",
    gpu_model: str | None = None,
    min_gpu_memory_gb: float | None = None,
    spot: bool = False,
    catalog: pd.DataFrame | None = None,
) -> Config:
    """L12's selector, corrected (§20.5.1): ``n`` instances of one catalog type with at least
    ``target_gpus`` GPUs whose price per hour is within ``budget_per_hour``.

    - ``prefer="cost"``: the fewest instances that reach ``target_gpus``, and of those types
      the cheapest configuration per hour;
    - ``prefer="gpus"``: as many instances as the budget buys, and the type that gives the most
      GPUs (the cheaper one on a tie).

    ``gpu_model`` and ``min_gpu_memory_gb`` filter the types; ``spot=True`` prices spot
    capacity at the high end of its range, so the budget holds anywhere inside the range.
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
    if min_gpu_memory_gb is not None:
        min_memory = check_positive("min_gpu_memory_gb", min_gpu_memory_gb)
        frame = frame[frame["gpu_memory_gb"] >= min_memory]
    if spot:
        frame = frame[frame["spot_high_per_hour"].notna()]
    if frame.empty:
        raise ValueError(
            "no instance type in the catalog matches "
            f"gpu_model={gpu_model!r}, min_gpu_memory_gb={min_gpu_memory_gb!r}, spot={spot}"
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
