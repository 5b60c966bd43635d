"""§20.5.1 The price catalog: SkyPilot's public cloud catalog at one commit, validated as read.

``data/instance_prices.csv`` holds every GPU instance type of AWS, GCP and Lambda as
SkyPilot's catalog repository (``skypilot-org/skypilot-catalog``) listed them at one commit:
one row per (cloud, instance type, region, zone), with the on-demand and the spot price of that
zone. ``data/instance_prices_sources.csv`` names the repository, file, commit, commit date and
git blob each cloud's rows come from, and ``data/instance_price_history.csv`` follows a few
instance types through the file's history. ``chapter20.cost.catalog_build`` writes all three
from a mirror of the repository; nothing in them is typed by hand.

- :func:`load_snapshot`, :func:`load_sources`, :func:`load_price_history`: the three files,
  every cell checked (a bad one raises ValueError naming the file, the line and the column);
- :func:`load_catalog`: one row per instance type in one region per cloud (by default the
  region the chapter implies, AWS ``us-east-1``), with the spot price's spread over the
  region's zones: what the rest of ``chapter20.cost`` reads (a ``catalog`` argument left at
  None is this table, :func:`catalog_or_default`);
- :func:`snapshot_label`: the caption that goes with anything showing these prices;
- :func:`spot_discounts`: the saving of spot over on-demand in every zone that has both.

The prices are list prices of the snapshot's day, never live prices.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from chapter20.core.paths import data_file

__all__ = [
    "CATALOG_COLUMNS",
    "DEFAULT_REGIONS",
    "PRICE_COLUMNS",
    "catalog_or_default",
    "gpu_models",
    "load_catalog",
    "load_price_history",
    "load_snapshot",
    "load_sources",
    "price_table",
    "snapshot_label",
    "spot_discounts",
]

#: The columns of ``data/instance_prices.csv`` and what each holds (see data/README.md).
PRICE_COLUMNS = {
    "cloud": "aws, gcp or lambda",
    "instance": "instance or machine type",
    "region": "the region the prices are for",
    "zone": "availability zone (empty where the catalog lists regions only)",
    "gpu_model": "the GPU as the catalog names it (A100-80GB: the 80 GB A100)",
    "gpus": "GPUs per instance, an int >= 1",
    "gpu_memory_gib": "memory per GPU in GiB (empty where the catalog does not give it)",
    "vcpus": "vCPUs of the instance",
    "memory_gib": "host memory of the instance in GiB",
    "on_demand_per_hour": "on-demand USD per instance-hour, > 0",
    "spot_per_hour": "spot USD per instance-hour in this zone (empty: no spot price)",
    "source": "the cloud's row of instance_prices_sources.csv",
}
#: The columns of :func:`load_catalog`: one row per instance type in one region.
CATALOG_COLUMNS = (
    "cloud",
    "instance",
    "region",
    "gpu_model",
    "gpus",
    "gpu_memory_gib",
    "vcpus",
    "memory_gib",
    "on_demand_per_hour",
    "spot_low_per_hour",
    "spot_median_per_hour",
    "spot_high_per_hour",
    "zones",
    "spot_zones",
    "snapshot_date",
    "commit",
)
#: The region of each cloud that :func:`load_catalog` prices by default: AWS's us-east-1 is
#: where the chapter's prices come from; GCP's us-central1 and Lambda's us-east-1 are the
#: same part of the world.
DEFAULT_REGIONS = {"aws": "us-east-1", "gcp": "us-central1", "lambda": "us-east-1"}
_HASH = re.compile(r"^[0-9a-f]{40}$")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class _BadCell(ValueError):
    pass


def _text(raw: str) -> str:
    if not raw.strip():
        raise _BadCell("must not be empty")
    return raw.strip()


def _number(raw: str, *, optional: bool = False) -> float | None:
    if not raw.strip():
        if optional:
            return None
        raise _BadCell("must be a number")
    try:
        value = float(raw)
    except ValueError:
        raise _BadCell("must be a number") from None
    if not math.isfinite(value) or value <= 0:
        raise _BadCell("must be a finite number > 0")
    return value


def _count(raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise _BadCell("must be an int >= 1") from None
    if value < 1:
        raise _BadCell("must be an int >= 1")
    return value


def _pattern(regex: re.Pattern, what: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if not regex.match(raw.strip()):
            raise _BadCell(f"must be {what}")
        return raw.strip()

    return parse


def _optional(parse: Callable[[str], object]) -> Callable[[str], object]:
    return lambda raw: parse(raw) if raw.strip() else None


_PRICE_PARSERS = {
    "cloud": _text,
    "instance": _text,
    "region": _text,
    "zone": lambda raw: raw.strip(),
    "gpu_model": _text,
    "gpus": _count,
    "gpu_memory_gib": _optional(_number),
    "vcpus": _optional(_number),
    "memory_gib": _optional(_number),
    "on_demand_per_hour": _number,
    "spot_per_hour": _optional(_number),
    "source": _text,
}
_SOURCE_PARSERS = {
    "source": _text,
    "repository": _pattern(re.compile(r"^[\w.-]+/[\w.-]+$"), "owner/name"),
    "path": _pattern(
        re.compile(r"^catalogs/v\d+/[\w-]+/vms\.csv$"), "catalogs/v<N>/<cloud>/vms.csv"
    ),
    "commit": _pattern(_HASH, "a 40-hex-digit commit hash"),
    "commit_date": _pattern(
        re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"), "a UTC time YYYY-MM-DDTHH:MM:SSZ"
    ),
    "blob": _pattern(_HASH, "a 40-hex-digit blob hash"),
    "rows_read": _count,
    "rows_kept": _count,
    "mirror": _text,
}
_HISTORY_PARSERS = {
    "date": _pattern(_DAY, "a date YYYY-MM-DD"),
    "commit": _pattern(_HASH, "a 40-hex-digit commit hash"),
    "cloud": _text,
    "instance": _text,
    "region": _text,
    "zones": _count,
    "on_demand_per_hour": _number,
    "spot_low_per_hour": _optional(_number),
    "spot_median_per_hour": _optional(_number),
    "spot_high_per_hour": _optional(_number),
}


def _read(path: Path, parsers: Mapping[str, Callable], key: tuple[str, ...]) -> pd.DataFrame:
    """Every cell of ``path`` parsed by its column's parser; ValueError naming the file, line
    and column of the first bad one, or the line that repeats a ``key``."""
    name = path.name
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if tuple(frame.columns) != tuple(parsers):
        raise ValueError(
            f"{name} line 1: the columns must be {list(parsers)}, got {list(frame.columns)}"
        )
    if frame.empty:
        raise ValueError(f"{name}: no rows")
    records, seen = [], {}
    for line, row in enumerate(frame.itertuples(index=False, name=None), start=2):
        record = {}
        for column, raw in zip(parsers, row):
            try:
                record[column] = parsers[column](raw)
            except _BadCell as exc:
                raise ValueError(
                    f"{name} line {line}, column {column!r}: {exc}, got {raw!r}"
                ) from None
        ident = tuple(record[k] for k in key)
        if ident in seen:
            raise ValueError(
                f"{name} line {line}: {dict(zip(key, ident))} repeats line {seen[ident]}"
            )
        seen[ident] = line
        records.append(record)
    return pd.DataFrame.from_records(records, columns=list(parsers))


def load_sources(path: str | Path | None = None) -> pd.DataFrame:
    """``data/instance_prices_sources.csv`` (§20.5.1): per cloud, the repository, file path,
    commit, commit date (UTC) and git blob its prices come from, and the mirror read."""
    if path is None:
        return _default_sources().copy()
    return _read(Path(path), _SOURCE_PARSERS, ("source",))


@cache
def _default_sources() -> pd.DataFrame:
    return _read(data_file("instance_prices_sources.csv"), _SOURCE_PARSERS, ("source",))


def load_snapshot(
    path: str | Path | None = None, sources: pd.DataFrame | None = None
) -> pd.DataFrame:
    """``data/instance_prices.csv`` (§20.5.1): one row per GPU instance type, region and zone,
    every cell checked: positive prices and sizes, an int GPU count, no repeated
    (cloud, instance, region, zone), and a ``source`` that names a row of the sources file
    (``sources``, default :func:`load_sources`) of the same cloud."""
    if path is None and sources is None:
        return _default_snapshot().copy()
    return _checked_snapshot(
        Path(path) if path else data_file("instance_prices.csv"),
        load_sources() if sources is None else sources,
    )


@cache
def _default_snapshot() -> pd.DataFrame:
    return _checked_snapshot(data_file("instance_prices.csv"), load_sources())


def _checked_snapshot(path: Path, sources: pd.DataFrame) -> pd.DataFrame:
    frame = _read(path, _PRICE_PARSERS, ("cloud", "instance", "region", "zone"))
    known = set(sources["source"])
    bad = frame.index[~frame["source"].isin(known) | (frame["source"] != frame["cloud"])]
    if len(bad):
        row = frame.loc[bad[0]]
        raise ValueError(
            f"{path.name} line {bad[0] + 2}, column 'source': must name the row "
            f"of its cloud in the sources file {sorted(known)}, got {row['source']!r}"
        )
    return frame


def load_price_history(path: str | Path | None = None) -> pd.DataFrame:
    """``data/instance_price_history.csv`` (§20.5.2): per instance type and day of the catalog's
    history, the commit read, the on-demand price and the lowest, median and highest spot price
    over the region's zones; checked as :func:`load_snapshot`, and low <= median <= high."""
    frame = _read(
        Path(path) if path else data_file("instance_price_history.csv"),
        _HISTORY_PARSERS,
        ("cloud", "instance", "region", "date"),
    )
    spot = frame[["spot_low_per_hour", "spot_median_per_hour", "spot_high_per_hour"]].astype(float)
    order = (spot.iloc[:, 0] <= spot.iloc[:, 1]) & (spot.iloc[:, 1] <= spot.iloc[:, 2])
    bad = frame.index[spot.notna().all(axis=1) & ~order]
    if len(bad):
        raise ValueError(
            f"{Path(path).name if path else 'instance_price_history.csv'} line "
            f"{bad[0] + 2}: spot prices must satisfy low <= median <= high"
        )
    frame["date"] = pd.to_datetime(frame["date"])
    return frame


def load_catalog(
    regions: Mapping[str, str] | None = None, snapshot: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per instance type of the snapshot in one region per cloud (§20.5.1), with the
    columns of :data:`CATALOG_COLUMNS`: the region's on-demand price (the median over its
    zones, which agree), the lowest, median and highest spot price over the zones that have one
    (NaN where none does), the zone counts, and the date and commit of the cloud's source.

    ``regions`` maps each cloud to its region (default :data:`DEFAULT_REGIONS`; a cloud left
    out is left out of the catalog); an unknown cloud or region raises ValueError naming the
    ones the snapshot has. Instance types not offered in the chosen region are absent."""
    if regions is None and snapshot is None:
        return _default_catalog().copy()
    return _catalog(
        dict(DEFAULT_REGIONS if regions is None else regions),
        load_snapshot() if snapshot is None else snapshot,
    )


@cache
def _default_catalog() -> pd.DataFrame:
    return _catalog(dict(DEFAULT_REGIONS), load_snapshot())


def _catalog(regions: dict[str, str], snapshot: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(regions, dict) or not regions:
        raise ValueError(f"regions must map clouds to regions, e.g. {DEFAULT_REGIONS}")
    sources = load_sources().set_index("source")
    parts = []
    for cloud, region in regions.items():
        mine = snapshot[snapshot["cloud"] == cloud]
        if mine.empty:
            raise ValueError(
                f"regions: cloud must be one of {sorted(snapshot['cloud'].unique())}, got {cloud!r}"
            )
        here = mine[mine["region"] == region]
        if here.empty:
            raise ValueError(
                f"regions: {cloud} region must be one of "
                f"{sorted(mine['region'].unique())}, got {region!r}"
            )
        parts.append(_per_type(here, sources.loc[cloud]))
    return pd.concat(parts, ignore_index=True)[list(CATALOG_COLUMNS)]


def _per_type(rows: pd.DataFrame, source: pd.Series) -> pd.DataFrame:
    spot = rows["spot_per_hour"].astype(float)
    grouped = rows.assign(spot=spot).groupby(["cloud", "instance"], sort=True)
    table = grouped.agg(
        region=("region", "first"),
        gpu_model=("gpu_model", "first"),
        gpus=("gpus", "first"),
        gpu_memory_gib=("gpu_memory_gib", "first"),
        vcpus=("vcpus", "first"),
        memory_gib=("memory_gib", "first"),
        on_demand_per_hour=("on_demand_per_hour", "median"),
        spot_low_per_hour=("spot", "min"),
        spot_median_per_hour=("spot", "median"),
        spot_high_per_hour=("spot", "max"),
        zones=("zone", "size"),
        spot_zones=("spot", "count"),
    ).reset_index()
    table["gpu_memory_gib"] = table["gpu_memory_gib"].astype(float)
    table["snapshot_date"] = source["commit_date"][:10]
    table["commit"] = source["commit"]
    return table


def catalog_or_default(catalog: pd.DataFrame | None) -> pd.DataFrame:
    """``catalog``, or the default :func:`load_catalog` when it is None (§20.5.1): how every
    function of ``chapter20.cost`` that takes a ``catalog`` argument reads it."""
    return load_catalog() if catalog is None else catalog


def gpu_models(catalog: pd.DataFrame | None = None) -> list[str]:
    """The GPU models of the catalog, sorted (§20.5.1)."""
    return sorted(catalog_or_default(catalog)["gpu_model"].unique())


def snapshot_label(catalog: pd.DataFrame | None = None) -> str:
    """A caption for anything that shows catalog prices (§20.5.1): the date of each cloud's
    prices in SkyPilot's catalog, e.g. ``SkyPilot catalog prices: aws 2023-12-13, gcp
    2023-12-12, lambda 2023-06-15 (list prices, not live)``; the commit of each is in
    :func:`load_sources`."""
    clouds = set(catalog_or_default(catalog)["cloud"])
    sources = load_sources()
    parts = [f"{row.source} {row.commit_date[:10]}"
             for row in sources.itertuples() if row.source in clouds]  # fmt: skip
    return f"SkyPilot catalog prices: {', '.join(parts)} (list prices, not live)"


def price_table(catalog: pd.DataFrame | None = None) -> pd.DataFrame:
    """The catalog for display (§20.5.1): GPUs, GiB per GPU, $/h, $/GPU-hour, the median spot
    price of the region's zones with their range, and the saving at the median."""
    frame = catalog_or_default(catalog)
    spot = frame["spot_median_per_hour"].notna()
    low, high = frame["spot_low_per_hour"], frame["spot_high_per_hour"]
    table = pd.DataFrame(
        {
            "cloud": frame["cloud"],
            "instance": frame["instance"],
            "GPUs": frame["gpus"].astype(str) + " x " + frame["gpu_model"],
            "GiB/GPU": frame["gpu_memory_gib"].map(lambda v: "—" if np.isnan(v) else f"{v:g}"),
            "$/h": frame["on_demand_per_hour"].round(4),
            "$/GPU-h": (frame["on_demand_per_hour"] / frame["gpus"]).round(3),
            "spot $/h (zones)": np.where(
                spot,
                frame["spot_median_per_hour"].map("{:.3f}".format)
                + " ("
                + low.map("{:.2f}".format)
                + "–"
                + high.map("{:.2f}".format)
                + ")",
                "—",
            ),
            "spot saving %": np.where(
                spot,
                (100 * (1 - frame["spot_median_per_hour"] / frame["on_demand_per_hour"]))
                .round()
                .map("{:.0f}".format),
                "—",
            ),
        }
    )
    return table.set_index("instance")


def spot_discounts(snapshot: pd.DataFrame | None = None) -> pd.DataFrame:
    """The saving of spot over on-demand, ``saving %`` = 100 · (1 − spot / on-demand), in
    every (cloud, instance, region, zone) of the snapshot that has a spot price (§20.5.2)."""
    frame = load_snapshot() if snapshot is None else snapshot
    frame = frame[frame["spot_per_hour"].notna()].copy()
    spot, on_demand = frame["spot_per_hour"].astype(float), frame["on_demand_per_hour"]
    frame["saving %"] = 100 * (1 - spot / on_demand)
    columns = ["cloud", "instance", "gpu_model", "region", "zone", "on_demand_per_hour",
               "spot_per_hour", "saving %"]  # fmt: skip
    return frame[columns].reset_index(drop=True)
