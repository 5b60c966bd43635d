"""§20.5.1 Rebuild the price snapshot from a mirror of SkyPilot's public catalog repository.

SkyPilot keeps the instance catalogs it prices clouds with in a public git repository,
``skypilot-org/skypilot-catalog``: one ``catalogs/<schema>/<cloud>/vms.csv`` per cloud and
schema version, refreshed every few hours by the cloud's own price APIs, every version kept in
the git history. This module reads a mirror of that repository (a bare git directory is enough:
everything goes through ``git show`` and ``git log``) and writes three files to ``data/``:

- ``instance_prices.csv``: every GPU instance type of AWS, GCP and Lambda at one revision,
  one row per (cloud, instance type, region, zone), reduced to what the cost model needs
  (:func:`build_snapshot`);
- ``instance_prices_sources.csv``: for each cloud, the repository, file path, commit, commit
  date and git blob the rows come from, so that every price traces to one file of one commit;
- ``instance_price_history.csv``: on-demand and spot prices of a few instance types, one row
  per day of the file's history up to that revision (:func:`build_history`).

Nothing is typed by hand: run ``python -m chapter20.cost.catalog_build --mirror DIR`` (or
``make prices MIRROR=DIR``) on a fresh mirror to rebuild all three. What the reduction keeps:

- AWS and Lambda: rows whose accelerator is a GPU (``GpuInfo`` names NVIDIA or AMD as the
  manufacturer; Inferentia, Trainium, Gaudi, FPGAs are left out), with the GPU memory from
  ``GpuInfo``;
- GCP: the accelerator-optimized A2 machine types, whose name fixes their GPUs
  (``a2-highgpu-8g``: 8 × A100; ``ultragpu``: A100-80GB), priced as SkyPilot prices them: the
  machine type's vCPU and memory price plus the price of its GPUs in the same zone. G2 (L4) and
  N1 with attached GPUs are left out: the first's GPU count is not in its name, the second's
  host machine is a free choice.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from chapter20.cost.catalog import PRICE_COLUMNS

__all__ = [
    "CLOUDS",
    "HISTORY_SERIES",
    "SOURCE_REPOSITORY",
    "Mirror",
    "build_history",
    "build_snapshot",
    "main",
    "reduce_rows",
    "write_outputs",
]

SOURCE_REPOSITORY = "skypilot-org/skypilot-catalog"
CLOUDS = ("aws", "gcp", "lambda")
#: The (cloud, instance, region) price series of ``instance_price_history.csv``: the chapter's
#: three AWS types, the T4 type that L12's label would mean, the H100 type, one GCP A100 type.
HISTORY_SERIES = (
    ("aws", "p3.2xlarge", "us-east-1"),
    ("aws", "p4d.24xlarge", "us-east-1"),
    ("aws", "g5.xlarge", "us-east-1"),
    ("aws", "g4dn.xlarge", "us-east-1"),
    ("aws", "p5.48xlarge", "us-east-1"),
    ("gcp", "a2-highgpu-8g", "us-central1"),
)
#: The columns of ``data/instance_prices.csv``, in the order the loader documents them.
PRICE_FIELDS = tuple(PRICE_COLUMNS)
SOURCE_FIELDS = (
    "source",
    "repository",
    "path",
    "commit",
    "commit_date",
    "blob",
    "rows_read",
    "rows_kept",
    "mirror",
)
HISTORY_FIELDS = (
    "date",
    "commit",
    "cloud",
    "instance",
    "region",
    "zones",
    "on_demand_per_hour",
    "spot_low_per_hour",
    "spot_median_per_hour",
    "spot_high_per_hour",
)
_GPU_MAKERS = ("NVIDIA", "AMD")
_GCP_A2 = re.compile(r"^a2-(highgpu|megagpu|ultragpu)-(\d+)g$")


# --------------------------------------------------------------------------------------------
# Reading the mirror
# --------------------------------------------------------------------------------------------


class Mirror:
    """A git mirror of the catalog repository (bare or not), read with ``git`` only (§20.5.1).
    ValueError when ``path`` is not a git directory."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise ValueError(f"mirror must be a git directory, got {str(path)!r} (not a folder)")
        try:
            self._git("rev-parse", "--git-dir")
        except ValueError:
            raise ValueError(f"mirror must be a git directory, got {str(path)!r}") from None

    def _git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.path), *args], capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise ValueError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
        return done.stdout

    def commit(self, rev: str) -> str:
        """The full hash of ``rev``; ValueError naming it if the mirror has no such revision."""
        try:
            return self._git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
        except ValueError:
            raise ValueError(f"rev must be a revision of the mirror, got {rev!r}") from None

    def show(self, rev: str, path: str) -> str:
        """The text of ``path`` at ``rev``."""
        return self._git("show", f"{rev}:{path}")

    def blob(self, rev: str, path: str) -> str:
        """The git blob hash of ``path`` at ``rev``: names its exact content."""
        return self._git("rev-parse", f"{rev}:{path}").strip()

    def versions(self, rev: str, path: str) -> list[tuple[str, datetime]]:
        """(commit, commit time in UTC) of every commit that changed ``path`` up to ``rev``,
        newest first."""
        out = self._git("log", "--format=%H %ct", rev, "--", path)
        return [
            (commit, datetime.fromtimestamp(int(stamp), tz=timezone.utc))
            for commit, stamp in (line.split() for line in out.splitlines() if line.strip())
        ]

    def catalog_path(self, rev: str, cloud: str, schema: str | None = None) -> str:
        """``catalogs/<schema>/<cloud>/vms.csv`` at ``rev``: of ``schema`` if given, else of the
        newest schema version (``v7`` after ``v5``) that has the cloud."""
        listing = self._git("ls-tree", "-r", "--name-only", rev, "catalogs").split()
        found = {
            int(m.group(1)): name
            for name in listing
            if (m := re.fullmatch(rf"catalogs/v(\d+)/{re.escape(cloud)}/vms\.csv", name))
        }
        if schema is not None:
            number = int(schema.lstrip("v")) if schema.lstrip("v").isdigit() else -1
            if number not in found:
                raise ValueError(
                    f"schema must be one of {sorted(f'v{n}' for n in found)} for {cloud}, "
                    f"got {schema!r}"
                )
            return found[number]
        if not found:
            raise ValueError(f"the mirror has no catalogs/v*/{cloud}/vms.csv at {rev}")
        return found[max(found)]


# --------------------------------------------------------------------------------------------
# Reducing one file to the rows the cost model needs
# --------------------------------------------------------------------------------------------


def _float(text: str | None) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    value = float(text)
    return value if value == value else None  # NaN reads as missing


def _number(value: float | None) -> str:
    """A price or size as text: the value rounded to 6 decimals, without trailing zeros."""
    return "" if value is None else repr(round(value, 6))


def _gpu_info(text: str) -> dict | None:
    """SkyPilot's ``GpuInfo`` cell (a Python literal) as a dict, or None."""
    try:
        info = ast.literal_eval(text) if text.strip().startswith("{") else None
    except (ValueError, SyntaxError):
        return None
    return info if isinstance(info, dict) else None


def _reduce_aws_like(reader: Iterable[dict], cloud: str) -> tuple[list[dict], int]:
    """AWS and Lambda rows whose accelerator is a GPU; (rows, rows read)."""
    rows, read = [], 0
    for row in reader:
        read += 1
        info = _gpu_info(row.get("GpuInfo") or "")
        gpus = (info or {}).get("Gpus") or [{}]
        if not row.get("AcceleratorName") or gpus[0].get("Manufacturer") not in _GPU_MAKERS:
            continue
        price = _float(row.get("Price"))
        if price is None or price <= 0:
            continue
        memory = (gpus[0].get("MemoryInfo") or {}).get("SizeInMiB")
        spot = _float(row.get("SpotPrice"))
        rows.append(
            {
                "cloud": cloud,
                "instance": row["InstanceType"],
                "region": row["Region"],
                "zone": row.get("AvailabilityZone") or "",
                "gpu_model": row["AcceleratorName"],
                "gpus": str(int(float(row["AcceleratorCount"]))),
                "gpu_memory_gib": _number(memory / 1024 if memory else None),
                "vcpus": _number(_float(row.get("vCPUs"))),
                "memory_gib": _number(_float(row.get("MemoryGiB"))),
                "on_demand_per_hour": _number(price),
                "spot_per_hour": _number(spot if spot and spot > 0 else None),
                "source": cloud,
            }
        )
    return rows, read


def _reduce_gcp(reader: Iterable[dict]) -> tuple[list[dict], int]:
    """GCP's A2 machine types, each priced with its GPUs in the same zone; (rows, rows read)."""
    machines, accelerators, read = [], {}, 0
    for row in reader:
        read += 1
        name = row.get("InstanceType") or ""
        if not name and row.get("AcceleratorName"):
            key = (
                row["AcceleratorName"],
                int(float(row["AcceleratorCount"])),
                row["AvailabilityZone"],
            )
            accelerators[key] = row
        elif _GCP_A2.match(name):
            machines.append(row)
    rows = []
    for vm in machines:
        kind, count = _GCP_A2.match(vm["InstanceType"]).groups()
        gpu = "A100-80GB" if kind == "ultragpu" else "A100"
        acc = accelerators.get((gpu, int(count), vm["AvailabilityZone"]))
        vm_price, acc_price = _float(vm.get("Price")), _float((acc or {}).get("Price"))
        if acc is None or not vm_price or not acc_price:
            continue
        vm_spot, acc_spot = _float(vm.get("SpotPrice")), _float(acc.get("SpotPrice"))
        spot = vm_spot + acc_spot if vm_spot and acc_spot else None
        rows.append(
            {
                "cloud": "gcp",
                "instance": vm["InstanceType"],
                "region": vm["Region"],
                "zone": vm["AvailabilityZone"],
                "gpu_model": gpu,
                "gpus": count,
                "gpu_memory_gib": "",  # not in GCP's rows
                "vcpus": _number(_float(vm.get("vCPUs"))),
                "memory_gib": _number(_float(vm.get("MemoryGiB"))),
                "on_demand_per_hour": _number(vm_price + acc_price),
                "spot_per_hour": _number(spot),
                "source": "gcp",
            }
        )
    return rows, read


def reduce_rows(text: str, cloud: str) -> tuple[list[dict], int]:
    """The rows of one catalog file ``text`` of ``cloud`` that the snapshot keeps (see the
    module docstring), with the columns of ``instance_prices.csv``, sorted by instance, region
    and zone; and how many rows the file had (§20.5.1)."""
    if cloud not in CLOUDS:
        raise ValueError(f"cloud must be one of {list(CLOUDS)}, got {cloud!r}")
    reader = csv.DictReader(io.StringIO(text))
    rows, read = _reduce_gcp(reader) if cloud == "gcp" else _reduce_aws_like(reader, cloud)
    rows.sort(key=lambda r: (r["instance"], r["region"], r["zone"]))
    return rows, read


# --------------------------------------------------------------------------------------------
# The snapshot, its sources, and the price history
# --------------------------------------------------------------------------------------------


def build_snapshot(
    mirror: Mirror,
    rev: str = "HEAD",
    clouds: Sequence[str] = CLOUDS,
    *,
    schema: str | None = None,
    repository: str = SOURCE_REPOSITORY,
    mirror_label: str = "",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The price snapshot at ``rev`` (one row per GPU instance type, region and zone) and its
    sources (one row per cloud: repository, path, the last commit that changed the file at
    ``rev``, its date, the blob hash), as DataFrames of text cells (§20.5.1)."""
    prices, sources = [], []
    for cloud in clouds:
        path = mirror.catalog_path(rev, cloud, schema)
        commit, when = mirror.versions(rev, path)[0]
        rows, read = reduce_rows(mirror.show(rev, path), cloud)
        prices += rows
        sources.append(
            {
                "source": cloud,
                "repository": repository,
                "path": path,
                "commit": commit,
                "commit_date": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "blob": mirror.blob(rev, path),
                "rows_read": str(read),
                "rows_kept": str(len(rows)),
                "mirror": mirror_label or mirror.path.name,
            }
        )
    return (
        pd.DataFrame(prices, columns=PRICE_FIELDS),
        pd.DataFrame(sources, columns=SOURCE_FIELDS),
    )


def _daily(versions: list[tuple[str, datetime]]) -> list[tuple[str, datetime]]:
    """The newest version of each UTC day, oldest day first."""
    newest: dict[str, tuple[str, datetime]] = {}
    for commit, when in versions:  # newest first: keep the first seen per day
        newest.setdefault(when.strftime("%Y-%m-%d"), (commit, when))
    return [newest[day] for day in sorted(newest)]


def _only(text: str, cloud: str, instances: set[str]) -> str:
    """The header and the lines that can matter for ``instances`` (a fast pre-filter: the
    reducer decides): GCP's accelerator rows start with an empty instance type."""
    lines = text.splitlines(keepends=True)
    keep = [lines[0]]
    prefixes = tuple(f"{name}," for name in instances) + ((",",) if cloud == "gcp" else ())
    keep += [line for line in lines[1:] if line.startswith(prefixes)]
    return "".join(keep)


def _series_row(day, commit, cloud, instance, region, rows) -> dict:
    on_demand = pd.Series([float(r["on_demand_per_hour"]) for r in rows])
    spot = pd.Series([float(r["spot_per_hour"]) for r in rows if r["spot_per_hour"]])
    return {
        "date": day,
        "commit": commit,
        "cloud": cloud,
        "instance": instance,
        "region": region,
        "zones": str(len(rows)),
        "on_demand_per_hour": _number(float(on_demand.median())),
        "spot_low_per_hour": _number(float(spot.min()) if len(spot) else None),
        "spot_median_per_hour": _number(float(spot.median()) if len(spot) else None),
        "spot_high_per_hour": _number(float(spot.max()) if len(spot) else None),
    }


def build_history(
    mirror: Mirror,
    rev: str = "HEAD",
    series: Sequence[tuple[str, str, str]] = HISTORY_SERIES,
    *,
    schema: str | None = None,
) -> pd.DataFrame:
    """Daily prices of each (cloud, instance, region) of ``series`` over the history of its
    cloud's file up to ``rev`` (§20.5.2): for the newest version of each UTC day, the
    on-demand price (median over the region's zones) and the lowest, median and highest spot
    price over the zones; days on which the instance is not in the file are left out."""
    records = []
    for cloud in dict.fromkeys(c for c, _, _ in series):
        wanted = [(i, r) for c, i, r in series if c == cloud]
        names = {i for i, _ in wanted}
        path = mirror.catalog_path(rev, cloud, schema)
        for commit, when in _daily(mirror.versions(rev, path)):
            rows, _ = reduce_rows(_only(mirror.show(commit, path), cloud, names), cloud)
            for instance, region in wanted:
                mine = [r for r in rows if r["instance"] == instance and r["region"] == region]
                if mine:
                    day = when.strftime("%Y-%m-%d")
                    records.append(_series_row(day, commit, cloud, instance, region, mine))
    frame = pd.DataFrame(records, columns=HISTORY_FIELDS)
    return frame.sort_values(["cloud", "instance", "date"], kind="stable", ignore_index=True)


def write_outputs(
    out_dir: str | Path, prices: pd.DataFrame, sources: pd.DataFrame, history: pd.DataFrame | None
) -> list[Path]:
    """Write the snapshot, its sources and (if given) the history as CSV into ``out_dir``;
    returns the paths written."""
    out = Path(out_dir)
    if not out.is_dir():
        raise ValueError(f"out must be an existing folder, got {str(out_dir)!r}")
    frames = {"instance_prices.csv": prices, "instance_prices_sources.csv": sources}
    if history is not None:
        frames["instance_price_history.csv"] = history
    written = []
    for name, frame in frames.items():
        frame.to_csv(out / name, index=False, lineterminator="\n")
        written.append(out / name)
    return written


def _default_out() -> Path:
    from chapter20.core.paths import data_file

    return data_file("instance_prices.csv").parent


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m chapter20.cost.catalog_build --mirror DIR``: rebuild the price snapshot, its
    sources and the price history from a mirror of SkyPilot's catalog repository (§20.5.1).
    A bad argument ends it with one line on stderr and exit status 2."""
    parser = argparse.ArgumentParser(
        prog="python -m chapter20.cost.catalog_build",
        description="Rebuild data/instance_prices*.csv and data/instance_price_history.csv "
        f"from a git mirror of {SOURCE_REPOSITORY}.",
    )
    parser.add_argument("--mirror", required=True, help="the mirror's git directory")
    parser.add_argument("--rev", default="HEAD", help="the revision to read (default: HEAD)")
    parser.add_argument("--schema", default=None, help="catalog schema, e.g. v7 (default: newest)")
    parser.add_argument("--out", default=None, help="output folder (default: the data folder)")
    parser.add_argument(
        "--repository",
        default=SOURCE_REPOSITORY,
        help=f"repository the mirror copies (default: {SOURCE_REPOSITORY})",
    )
    parser.add_argument("--mirror-label", default="", help="how to name the mirror in the sources")
    parser.add_argument("--no-history", action="store_true", help="skip the price history")
    args = parser.parse_args(argv)
    try:
        mirror = Mirror(args.mirror)
        rev = mirror.commit(args.rev)
        prices, sources = build_snapshot(
            mirror,
            rev,
            schema=args.schema,
            repository=args.repository,
            mirror_label=args.mirror_label,
        )
        history = None if args.no_history else build_history(mirror, rev, schema=args.schema)
        written = write_outputs(args.out or _default_out(), prices, sources, history)
    except (ValueError, OSError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
