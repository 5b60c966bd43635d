"""The dated record of figures measured on GPUs: ``data/gpu_measurements.csv``.

GPU figures measured once live here with their provenance, never in prose (ARCHITECTURE.md,
"Claims"). Each row is one figure: when (``date``, UTC), on what (``device``,
NVIDIA ``driver``, ``torch`` version with its CUDA), by which ``command``, the ``quantity``, its
``value`` and ``unit``, ``notes`` (settings, comparison, load) and ``code``: the version of the
package code that produced it (:func:`code_version` of the modules it ran, e.g.
``word2vec@3f2a9c1e0b7d``; empty in rows recorded before the column existed). A verdict reads
only rows of the current code (:func:`current_gpu_figure`): after a change of the measured
modules, an older figure describes code that no longer exists, and the claim reads "needs a
GPU" until a GPU run measures it again; a judged GPU verdict names the code version it read
(:func:`unversioned_gpu_verdicts` lists those that do not). ``make gpu-check``
(``chapter20/scripts/gpu_check.py``) appends to it; notebooks and the audit read it with
:func:`read_gpu_measurements`. Rows are only ever appended, never rewritten: a figure that a newer
run supersedes stays, dated, beside the new one.

The file is found through ``chapter20.core.paths.data_file``, wherever the package keeps its data.
"""

from __future__ import annotations

import csv
import datetime
import math
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from chapter20.core.paths import data_file

__all__ = [
    "COLUMNS",
    "FILE_NAME",
    "GpuFigure",
    "append_gpu_measurements",
    "code_version",
    "current_gpu_figure",
    "current_gpu_ratio",
    "MEASURED_LIVE",
    "names_code_version",
    "unversioned_gpu_verdicts",
    "gpu_measurements_path",
    "gpu_figure",
    "gpu_figures",
    "gpu_provenance",
    "read_gpu_measurements",
]

FILE_NAME = "gpu_measurements.csv"
#: The columns, in file order. A row passed to :func:`append_gpu_measurements` names
#: ``command``, ``quantity``, ``value`` and ``unit`` (``notes`` optional); the provenance
#: columns come from :func:`gpu_provenance` unless the row gives them.
COLUMNS = (
    "date", "device", "driver", "torch", "command", "quantity", "value", "unit", "notes", "code",
)  # fmt: skip
_REQUIRED = ("command", "quantity", "value", "unit")


def gpu_measurements_path() -> Path:
    """Where the record lives (``data/gpu_measurements.csv`` via ``paths.data_file``)."""
    return data_file(FILE_NAME)


def _driver_version() -> str:
    """The NVIDIA driver's version from ``nvidia-smi``, or ``"unknown"``."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown"
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    versions = sorted({line.strip() for line in out.splitlines() if line.strip()})
    return " / ".join(versions) or "unknown"


def gpu_provenance() -> dict[str, str]:
    """``date`` (UTC, ISO), ``device`` (CUDA device 0's name, or ``"cpu (no CUDA)"``),
    ``driver`` (from ``nvidia-smi``) and ``torch`` (version, and the CUDA it was built with)."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu (no CUDA)",
        "driver": _driver_version() if cuda else "none",
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
    }


def _checked(row: Mapping[str, object], provenance: Mapping[str, str]) -> dict[str, str]:
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise ValueError(f"row has unknown columns {sorted(unknown)}; allowed: {COLUMNS}")
    missing = [c for c in _REQUIRED if c not in row]
    if missing:
        raise ValueError(f"row is missing {missing}; every row needs {_REQUIRED}")
    value = row["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"value must be a finite number, got {value!r}")
    full = {**provenance, "notes": "", "code": "", **row}
    return {c: str(full.get(c, "")) for c in COLUMNS}


def append_gpu_measurements(
    rows: Iterable[Mapping[str, object]],
    *,
    provenance: Mapping[str, str] | None = None,
    path: str | os.PathLike | None = None,
) -> int:
    """Append ``rows`` (dicts with ``command``, ``quantity``, ``value``, ``unit``, optional
    ``notes``) to the record, each stamped with ``provenance`` (default
    :func:`gpu_provenance`); returns how many were written. All rows are checked before any
    is written (``ValueError`` naming the problem), so a bad row leaves the file unchanged.
    ``path``: another file with the same columns (created with its header if missing)."""
    provenance = gpu_provenance() if provenance is None else provenance
    checked = [_checked(row, provenance) for row in rows]
    target = Path(path) if path is not None else gpu_measurements_path()
    new = not target.exists() or target.stat().st_size == 0
    with open(target, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(checked)
    return len(checked)


def read_gpu_measurements(path: str | os.PathLike | None = None):
    """The record as a ``pandas.DataFrame`` (one row per figure, ``value`` as float, ``date``
    as text), oldest first; ``ValueError`` if the header is not :data:`COLUMNS`."""
    import pandas as pd

    source = Path(path) if path is not None else gpu_measurements_path()
    frame = pd.read_csv(source, dtype=str, keep_default_na=False)
    if tuple(frame.columns) != COLUMNS:
        raise ValueError(
            f"{source.name} must have the columns {COLUMNS}, got {tuple(frame.columns)}"
        )
    frame["value"] = frame["value"].astype(float)
    return frame


@dataclass(frozen=True)
class GpuFigure:
    """One figure of the GPU record: ``value`` in ``unit`` for ``quantity``, measured by
    ``command`` on ``device`` (driver ``driver``, torch ``torch``) on ``date``."""

    quantity: str
    value: float
    unit: str
    device: str
    date: str
    driver: str
    torch: str
    command: str
    notes: str
    code: str = ""

    @property
    def provenance(self) -> str:
        """``'NVIDIA H200, 2026-11-29, torch 2.11.0+cu130 (CUDA 13.0): python -m ...'``."""
        return f"{self.device}, {self.date}, torch {self.torch}: {self.command}"


def gpu_figure(
    quantity: str, *, command: str | None = None, path: str | os.PathLike | None = None
) -> GpuFigure:
    """The newest row of the record measured on a GPU whose ``quantity`` is ``quantity`` (and
    whose ``command`` contains ``command``, if given); ``ValueError`` naming the quantity when
    there is none.
    A newer run appends rows, so the newest one is the figure to cite."""
    frame = read_gpu_measurements(path)
    on_gpu = ~frame["device"].str.lower().str.startswith(("cpu", "none", "unknown"))
    rows = frame[(frame["quantity"] == quantity) & on_gpu]
    if command is not None:
        rows = rows[rows["command"].str.contains(command, regex=False)]
    if rows.empty:
        known = sorted(set(frame["quantity"]))
        raise ValueError(f"quantity {quantity!r} is not in the GPU record; it has {known}")
    row = rows.sort_values("date", kind="stable").iloc[-1]
    return GpuFigure(**{k: row[k] for k in GpuFigure.__dataclass_fields__})


def gpu_figures(command: str, path: str | os.PathLike | None = None):
    """The rows of the record whose command contains ``command``, for display: date, device,
    quantity, value, unit (a notebook prints them with their provenance)."""
    frame = read_gpu_measurements(path)
    rows = frame[frame["command"].str.contains(command, regex=False)]
    return rows[["date", "device", "torch", "quantity", "value", "unit"]].reset_index(drop=True)


_PACKAGE = Path(__file__).resolve().parents[1]


def code_version(*modules: str) -> str:
    """A short content hash of the package code that a GPU figure measures: ``modules`` are
    dotted names below ``chapter20`` (a module, ``"training.trainer"``, or a folder,
    ``"word2vec"``); their source files (``.py`` and ``.c``) are hashed in a fixed order, so the
    version changes exactly when one of them does, in a checkout and in an installed wheel
    alike. Returns ``"<modules>@<12 hex digits>"``."""
    import hashlib

    if not modules:
        raise ValueError("modules must name at least one module or folder, e.g. 'word2vec'")
    files: list[Path] = []
    for name in modules:
        if not isinstance(name, str) or not name:
            raise TypeError(f"modules must be dotted names like 'word2vec', got {name!r}")
        base = _PACKAGE.joinpath(*name.split("."))
        if base.is_dir():
            files += [p for p in base.rglob("*") if p.suffix in (".py", ".c")]
        elif base.with_suffix(".py").is_file():
            files.append(base.with_suffix(".py"))
        else:
            raise ValueError(f"modules: {name!r} is neither a module nor a folder of chapter20")
    digest = hashlib.sha256()
    for path in sorted(set(files)):
        digest.update(path.relative_to(_PACKAGE).as_posix().encode())
        digest.update(path.read_bytes().replace(b"\r\n", b"\n"))
    return f"{'+'.join(modules)}@{digest.hexdigest()[:12]}"


def current_gpu_figure(
    quantity: str, modules: tuple[str, ...], *, path: str | os.PathLike | None = None
) -> GpuFigure | None:
    """The newest GPU row for ``quantity`` measured by the current version of ``modules``
    (:func:`code_version`), or None when every row predates a change of that code (or the
    record has none): what a claim's verdict may read."""
    frame = read_gpu_measurements(path)
    wanted = code_version(*modules)
    on_gpu = ~frame["device"].str.lower().str.startswith(("cpu", "none", "unknown"))
    rows = frame[(frame["quantity"] == quantity) & on_gpu & (frame["code"] == wanted)]
    if rows.empty:
        return None
    row = rows.sort_values("date", kind="stable").iloc[-1]
    return GpuFigure(**{k: row[k] for k in GpuFigure.__dataclass_fields__})


def current_gpu_ratio(
    numerator: str,
    denominator: str,
    modules: tuple[str, ...],
    *,
    path: str | os.PathLike | None = None,
) -> tuple[float, GpuFigure, GpuFigure] | None:
    """``(numerator / denominator, numerator's figure, denominator's figure)`` from the newest
    GPU rows of the two quantities measured by the current version of ``modules``
    (:func:`current_gpu_figure`; e.g. fp32 step seconds over bf16 step seconds, a speed-up), or
    None when either has no such row: a ratio of two figures is judged only if both are."""
    top = current_gpu_figure(numerator, modules, path=path)
    bottom = current_gpu_figure(denominator, modules, path=path)
    if top is None or bottom is None:
        return None
    return top.value / bottom.value, top, bottom


_VERSION = re.compile(r"@[0-9a-f]{12}\b")
#: What a GPU claim's note says when its figure was measured on CUDA in the run itself.
MEASURED_LIVE = "measured in this run"


def names_code_version(note: str) -> bool:
    """Whether a verdict's ``note`` names the code version of its GPU figure (the
    ``<modules>@<12 hex digits>`` of :func:`code_version`) or says it was measured on CUDA in
    the run itself (:data:`MEASURED_LIVE`): the two sources a GPU verdict may have."""
    return bool(_VERSION.search(str(note))) or MEASURED_LIVE in str(note)


def unversioned_gpu_verdicts(audit) -> list[str]:
    """The ids of the claims of ``audit`` (``chapter20.core.claims.audit``'s frame) whose basis
    is ``gpu`` and whose verdict was judged (not "needs a GPU", not "not yet measured") without
    naming the code version of its figure (:func:`names_code_version`): verdicts that break the
    one rule for GPU figures. Empty when the audit applies it."""
    from chapter20.core.claims import NEEDS_GPU, NOT_YET_MEASURED

    gpu = audit[audit["basis"] == "gpu"]
    judged = gpu[~gpu["verdict"].isin((NEEDS_GPU, NOT_YET_MEASURED))]
    return [row.id for row in judged.itertuples() if not names_code_version(row.note)]
