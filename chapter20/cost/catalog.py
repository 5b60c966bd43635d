"""§20.5.1 The price catalog: a dated snapshot of list prices, validated as it is read.

:func:`load_catalog` reads ``data/instance_prices.csv``, a **dated snapshot** of list prices
(never live prices), into one row per instance type with the columns of
:data:`CATALOG_COLUMNS`, and checks every cell; :func:`snapshot_label` is the caption that goes
with anything showing those prices. The rest of ``chapter20.cost`` reads prices only through this
module: the functions below and the columns of :data:`CATALOG_COLUMNS` (a ``catalog`` argument
left at None is the snapshot, :func:`catalog_or_default`). Another source of prices replaces
this module alone.
"""

from __future__ import annotations

import csv
import math
import re
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from chapter20.core.paths import data_file

__all__ = [
    "CATALOG_COLUMNS",
    "catalog_or_default",
    "gpu_models",
    "load_catalog",
    "price_table",
    "snapshot_label",
]

#: The columns of ``data/instance_prices.csv`` and what each must hold (see data/README.md).
CATALOG_COLUMNS = {
    "provider": "cloud provider (aws, gcp, azure)",
    "instance": "instance or machine type, unique in the file",
    "gpu_model": "GPU model, e.g. A10G, A100, H100",
    "gpus": "GPUs per instance, an int >= 1",
    "gpu_memory_gb": "memory per GPU in GB, > 0",
    "on_demand_per_hour": "on-demand USD per instance-hour, > 0",
    "spot_low_per_hour": "low end of the spot range, USD per hour (empty: no spot)",
    "spot_high_per_hour": "high end of the spot range, USD per hour (empty: no spot)",
    "gpu_link_gb_s": "GPU-to-GPU bandwidth inside the instance, GB/s per GPU and direction",
    "network_gbps": "network bandwidth of the instance, Gbit/s",
    "region": "the region the price is for",
    "snapshot_date": "when the price applied, YYYY-MM or YYYY-MM-DD",
    "confidence": "how sure the recorded on-demand price is: high, medium or low",
    "source": "where the price is published",
}
_CONFIDENCE = ("high", "medium", "low")
_DATE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")


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


def _date(raw: str) -> str:
    match = _DATE.match(raw.strip())
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise _BadCell("must be a date YYYY-MM or YYYY-MM-DD")
    if match.group(3) is not None:
        pd.Timestamp(raw.strip())  # a real calendar day, else ValueError below
    return raw.strip()


def _choice(raw: str) -> str:
    if raw.strip() not in _CONFIDENCE:
        raise _BadCell(f"must be one of {list(_CONFIDENCE)}")
    return raw.strip()


_PARSERS = {
    "provider": _text,
    "instance": _text,
    "gpu_model": _text,
    "gpus": _count,
    "gpu_memory_gb": _number,
    "on_demand_per_hour": _number,
    "spot_low_per_hour": lambda raw: _number(raw, optional=True),
    "spot_high_per_hour": lambda raw: _number(raw, optional=True),
    "gpu_link_gb_s": lambda raw: _number(raw, optional=True),
    "network_gbps": _number,
    "region": _text,
    "snapshot_date": _date,
    "confidence": _choice,
    "source": _text,
}


def _row_error(name: str, line: int, column: str, reason: str, raw: object) -> ValueError:
    return ValueError(f"{name} line {line}, column {column!r}: {reason}, got {raw!r}")


def _parse_row(name: str, line: int, row: dict[str, str]) -> dict[str, object]:
    record: dict[str, object] = {}
    for column, parse in _PARSERS.items():
        raw = row[column] if row[column] is not None else ""
        try:
            record[column] = parse(raw)
        except (_BadCell, ValueError) as exc:
            reason = str(exc) if isinstance(exc, _BadCell) else "must be a real calendar date"
            raise _row_error(name, line, column, reason, raw) from None
    low, high = record["spot_low_per_hour"], record["spot_high_per_hour"]
    if (low is None) != (high is None):
        column = "spot_low_per_hour" if low is None else "spot_high_per_hour"
        raise _row_error(name, line, column, "give both ends of the spot range or neither", "")
    if low is not None and high is not None:
        if low > high:
            raise _row_error(name, line, "spot_low_per_hour", f"must be <= spot_high ({high})", low)
        if high > record["on_demand_per_hour"]:
            raise _row_error(
                name,
                line,
                "spot_high_per_hour",
                f"must be <= on_demand_per_hour ({record['on_demand_per_hour']})",
                high,
            )
    if record["gpus"] > 1 and record["gpu_link_gb_s"] is None:
        raise _row_error(name, line, "gpu_link_gb_s", "needed for an instance of several GPUs", "")
    return record


def load_catalog(path: str | Path | None = None) -> pd.DataFrame:
    """The price snapshot (§20.5.1) as a DataFrame, one row per instance type, validated.

    ``path`` defaults to ``data/instance_prices.csv``. Every column of :data:`CATALOG_COLUMNS`
    must be present (and no other); a bad cell raises ``ValueError`` naming the file, the line
    and the column. Guaranteed on return: positive prices and sizes, spot ranges with
    low <= high <= on-demand, a date on every row, unique instance names.
    The prices are the snapshot's, never live prices: show :func:`snapshot_label` with them.
    """
    if path is None:
        return _default_catalog().copy()
    return _read_catalog(Path(path))


@cache
def _default_catalog() -> pd.DataFrame:
    return _read_catalog(data_file("instance_prices.csv"))


def _read_catalog(path: Path) -> pd.DataFrame:
    name = path.name
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in CATALOG_COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{name} line 1: missing column(s) {missing}")
        extra = [c for c in header if c not in CATALOG_COLUMNS]
        if extra:
            raise ValueError(f"{name} line 1: unknown column(s) {extra}")
        records, seen = [], {}
        for line, row in enumerate(reader, start=2):
            if None in row:
                raise ValueError(f"{name} line {line}: more cells than columns")
            record = _parse_row(name, line, row)
            key = record["instance"]  # looked up by name: unique across providers
            if key in seen:
                raise _row_error(
                    name, line, "instance", f"duplicate of line {seen[key]}", record["instance"]
                )
            seen[key] = line
            records.append(record)
    if not records:
        raise ValueError(f"{name}: no rows")
    return pd.DataFrame.from_records(records, columns=list(CATALOG_COLUMNS))


def catalog_or_default(catalog: pd.DataFrame | None) -> pd.DataFrame:
    """``catalog``, or the snapshot :func:`load_catalog` reads when it is None (§20.5.1): how
    every function of ``chapter20.cost`` that takes a ``catalog`` argument reads it."""
    return load_catalog() if catalog is None else catalog


def gpu_models(catalog: pd.DataFrame | None = None) -> list[str]:
    """The GPU models of the catalog, sorted (§20.5.1)."""
    return sorted(catalog_or_default(catalog)["gpu_model"].unique())


def snapshot_label(catalog: pd.DataFrame | None = None) -> str:
    """A caption for anything that shows catalog prices: which snapshot they come from
    (§20.5.1)."""
    dates = sorted(catalog_or_default(catalog)["snapshot_date"].unique())
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return f"list prices of a {when} snapshot (not live prices; see data/README.md)"


def price_table(catalog: pd.DataFrame | None = None) -> pd.DataFrame:
    """The catalog for display (§20.5.1): GPUs, memory, $/h, $/GPU-hour, spot range and the
    spot saving it implies, and how confident the recorded on-demand price is."""
    frame = catalog_or_default(catalog)
    spot = frame["spot_low_per_hour"].notna()
    low = frame["spot_low_per_hour"].astype(float)
    high = frame["spot_high_per_hour"].astype(float)
    table = pd.DataFrame(
        {
            "provider": frame["provider"],
            "instance": frame["instance"],
            "GPUs": frame["gpus"].astype(str) + " x " + frame["gpu_model"],
            "GB/GPU": frame["gpu_memory_gb"].astype(int),
            "$/h": frame["on_demand_per_hour"],
            "$/GPU-h": (frame["on_demand_per_hour"] / frame["gpus"]).round(3),
            "spot $/h": np.where(
                spot, low.map("{:.2f}".format) + "-" + high.map("{:.2f}".format), "—"
            ),
            "spot saving %": np.where(
                spot,
                (100 * (1 - high / frame["on_demand_per_hour"])).round().map("{:.0f}".format)
                + "-"
                + (100 * (1 - low / frame["on_demand_per_hour"])).round().map("{:.0f}".format),
                "—",
            ),
            "confidence": frame["confidence"],
        }
    )
    return table.set_index("instance")
