"""The chapter's quantitative claims (C01–C30) as data, each with a written criterion, and
their audit against measurements.

``data/claims.csv`` gives every claim, besides its text and the claimed range (``low``,
``high``, ``unit``, ``rel_tol``), the **criterion** in our words (the measured quantity, the
workload, the comparison), its **basis** and the one notebook that **owns** its verdict. The
verdict is computed by :func:`check` from the value a notebook measured, never typed:

- ``holds`` / ``does not hold``  a measured value inside / outside the claimed range (widened
                                 by ``rel_tol``), with every extra condition of the criterion
                                 (``conditions=``, each a computed test) met;
- ``consistent with the model``  the same comparison for a modelled figure (basis
                                 ``model: <name>``): the model, not a measurement, agrees;
- ``needs a GPU``                basis ``gpu`` and the value was not measured on a GPU (a CPU
                                 figure is still shown); a figure from the GPU record
                                 (``chapter20.core.gpu_record``) or measured on CUDA is judged;
- ``not measurable here``        basis ``missing: <what>``: what this companion would need.

Only the owner logs a verdict (``ClaimsLog`` refuses any other claim), so the audit has one
row per claim. A ``ClaimsLog`` records its rows as JSON in ``paths.results_dir()``, one file per
notebook, and ``python -m chapter20 audit`` (``make run``) prints the 30 owners' latest rows.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from chapter20.core.checks import check_int, check_real
from chapter20.core.paths import data_file, results_dir

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
CONSISTENT = "consistent with the model"
NEEDS_GPU = "needs a GPU"
NOT_MEASURABLE = "not measurable here"
NOT_YET_MEASURED = "not yet measured"
VERDICTS = (HOLDS, DOES_NOT_HOLD, CONSISTENT, NEEDS_GPU, NOT_MEASURABLE)
#: How a claim's verdict is reached (the ``basis`` column, before any ``:``).
BASES = ("measured", "gpu", "model", "missing")


@dataclass(frozen=True)
class Claim:
    """One quantitative claim of the chapter, restated in our words (see data/claims.csv).

    ``low``/``high`` bound the claimed value in ``unit`` (None: unbounded on that side);
    ``rel_tol`` widens them for claims stated as "about". ``criterion`` says what is measured,
    on which workload, and how it is compared; ``basis`` is one of :data:`BASES` and
    ``basis_detail`` names the model (``model``) or what is missing here (``missing``).
    ``notebook`` owns the verdict.
    """

    id: str
    section: str
    claim: str
    low: float | None
    high: float | None
    unit: str
    rel_tol: float
    notebook: str
    criterion: str = ""
    basis: str = "measured"
    basis_detail: str = ""

    @property
    def quantitative(self) -> bool:
        return self.low is not None or self.high is not None

    def expected(self) -> str:
        """The claimed value as text, e.g. ``'1.5–2 × speed-up'`` or ``'≈ 3 × param memory'``."""
        if not self.quantitative:
            return "qualitative"
        if self.low == self.high:
            return f"≈ {_fmt(self.low)} {self.unit}".rstrip()
        if self.high is None:
            return f"≥ {_fmt(self.low)} {self.unit}".rstrip()
        if self.low is None:
            return f"≤ {_fmt(self.high)} {self.unit}".rstrip()
        return f"{_fmt(self.low)}–{_fmt(self.high)} {self.unit}".rstrip()

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the claimed range, widened by ``rel_tol``."""
        low_ok = self.low is None or value >= self.low - self.rel_tol * abs(self.low) - 1e-12 * abs(
            self.low
        )
        high_ok = self.high is None or value <= self.high + self.rel_tol * abs(
            self.high
        ) + 1e-12 * abs(self.high)
        return low_ok and high_ok

    def comparison(self) -> str:
        """The range test as text, e.g. ``'1.5–2 × speed-up, ±10%'``."""
        tolerance = f", ±{100 * self.rel_tol:g}%" if self.rel_tol else ""
        return f"{self.expected()}{tolerance}"


@dataclass(frozen=True)
class ClaimRow:
    """A claim next to what was measured, with the verdict (one row of a Claims check)."""

    id: str
    section: str
    claim: str
    expected: str
    measured: str
    verdict: str
    note: str
    source: str
    measured_at: str
    criterion: str = ""
    basis: str = ""


def _fmt(value: float | None) -> str:
    """A number as a reader writes it: 64,000,000,000 / 0.008 / 1.5 / 6.1e-05."""
    if value is None:
        return "—"
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) < 1e-3 or abs(value) >= 1e6:
        return f"{value:.3g}"
    return f"{value:.4g}"


def _parse_bound(text: str) -> float | None:
    return float(text) if text.strip() else None


def _parse_basis(text: str) -> tuple[str, str]:
    kind, _, detail = (part.strip() for part in text.partition(":"))
    kind = kind or "measured"
    if kind not in BASES:
        raise ValueError(f"basis must start with one of {', '.join(BASES)}, got {text!r}")
    if kind in ("model", "missing") and not detail:
        raise ValueError(f"basis {kind!r} must name the {kind} after a colon, got {text!r}")
    return kind, detail


@cache
def load_claims() -> dict[str, Claim]:
    """The claims C01–C30 from ``data/claims.csv``, keyed by id, validated."""
    path = data_file("claims.csv")
    claims: dict[str, Claim] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            try:
                basis, detail = _parse_basis(row.get("basis") or "")
                claim = Claim(
                    id=row["id"].strip(),
                    section=row["section"].strip(),
                    claim=row["claim"].strip(),
                    low=_parse_bound(row["low"]),
                    high=_parse_bound(row["high"]),
                    unit=row["unit"].strip(),
                    rel_tol=float(row["rel_tol"] or 0),
                    notebook=row["notebook"].strip(),
                    criterion=(row.get("criterion") or "").strip(),
                    basis=basis,
                    basis_detail=detail,
                )
            except (KeyError, ValueError, AttributeError) as exc:
                raise ValueError(f"{path.name} line {line}: malformed row ({exc})") from exc
            if claim.id in claims:
                raise ValueError(f"{path.name} line {line}: duplicate claim id {claim.id}")
            claims[claim.id] = claim
    return claims


def get_claim(claim_id: str) -> Claim:
    """The claim with id ``claim_id`` (e.g. ``'C04'``); ValueError for an unknown id."""
    claims = load_claims()
    if claim_id not in claims:
        raise ValueError(f"claim_id must be one of C01–C{len(claims):02d}, got {claim_id!r}")
    return claims[claim_id]


def is_gpu_device(device: str) -> bool:
    """Whether a device description names a GPU: ``'cuda'``, ``'cuda:1'``, ``'NVIDIA H200'``
    (a recorded device), not ``'cpu'``, ``'mps'`` or ``'cpu (no CUDA)'``."""
    text = str(device).strip().lower()
    return text.startswith("cuda") or text.startswith("nvidia") or text.startswith("amd")


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _checked_conditions(conditions: Mapping[str, object] | None) -> dict[str, bool]:
    if conditions is None:
        return {}
    if not isinstance(conditions, Mapping):
        raise TypeError(
            f"conditions must be a mapping of name -> bool, got {type(conditions).__name__}"
        )
    out = {}
    for name, value in conditions.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(
                f"conditions[{name!r}] must be a computed bool, got {type(value).__name__}"
            )
        out[str(name)] = bool(value)
    return out


def check(
    claim_id: str,
    measured: float | None,
    *,
    unit: str | None = None,
    note: str = "",
    conditions: Mapping[str, object] | None = None,
    device: str | None = None,
    source: str = "interactive",
) -> ClaimRow:
    """Judge one claim on its criterion (``data/claims.csv``) and return its row (all sections).

    - ``measured``: the value measured (or modelled, basis ``model``) here, in the claim's unit
      (``unit``, if given, must match it, so a ratio is never compared with a percentage).
      None only where nothing here can measure it (basis ``missing``, or ``gpu`` off a GPU).
    - ``conditions``: the criterion's other tests, by name, each a bool the notebook computed
      (e.g. ``{"fits one 80 GB GPU": plan.fits}``); the claim holds only if all are true.
    - ``device``: where ``measured`` was measured (``'cuda'``, ``'cpu'``, or a recorded GPU's
      name from ``chapter20.core.gpu_record``); default: CUDA if present, else the CPU. It matters
      only for basis ``gpu``: off a GPU the verdict is "needs a GPU".

    The verdict follows from the claim's basis: ``missing`` → not measurable here; ``gpu``
    off a GPU → needs a GPU; otherwise the range (and conditions) decide: holds / does not
    hold, or for basis ``model`` consistent with the model / does not hold.
    """
    claim = get_claim(claim_id)
    if unit is not None and claim.unit and unit != claim.unit:
        raise ValueError(f"unit={unit!r} does not match claim {claim_id}'s unit {claim.unit!r}")
    if measured is not None:
        measured = check_real("measured", measured, finite=True)
    tests = _checked_conditions(conditions)
    device = _default_device() if device is None else str(device)
    if claim.basis == "missing":
        verdict = NOT_MEASURABLE
    elif claim.basis == "gpu" and not is_gpu_device(device):
        verdict = NEEDS_GPU
    elif measured is None:
        raise ValueError(
            f"claim {claim_id} is judged on a measured value (basis {claim.basis!r}): "
            "measured must be a number"
        )
    elif claim.contains(float(measured)) and all(tests.values()):
        verdict = CONSISTENT if claim.basis == "model" else HOLDS
    else:
        verdict = DOES_NOT_HOLD
    shown_unit = unit if unit is not None else claim.unit
    measured_text = "—" if measured is None else f"{_fmt(float(measured))} {shown_unit}".rstrip()
    extra = [f"{name} {'✓' if ok else '✗'}" for name, ok in tests.items()]
    if claim.basis == "model":
        extra.append(f"model: {claim.basis_detail}")
    elif claim.basis == "missing":
        extra.append(f"missing here: {claim.basis_detail}")
    elif claim.basis == "gpu":
        extra.append(f"measured on {device}")
    note = "; ".join(part for part in (note, *extra) if part)
    return ClaimRow(
        id=claim.id,
        section=claim.section,
        claim=claim.claim,
        expected=claim.expected(),
        measured=measured_text,
        verdict=verdict,
        note=note,
        source=source,
        measured_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        criterion=f"{claim.criterion} [{claim.comparison()}]".strip(),
        basis=claim.basis,
    )


def owner(claim_id: str) -> str:
    """The notebook that owns ``claim_id``'s verdict, e.g. ``'04_gradient_checkpointing'``."""
    return get_claim(claim_id).notebook


def judged_in(claim_id: str) -> str:
    """A pointer for a notebook that shows a claim it does not own: ``'C10 is judged in
    notebook 04_gradient_checkpointing'``."""
    return f"{claim_id} is judged in notebook {owner(claim_id)}"


_DISPLAY_COLUMNS = ["id", "section", "claim", "expected", "measured", "verdict", "note"]


def table(rows: list[ClaimRow], columns: list[str] | None = None) -> pd.DataFrame:
    """Claim rows as a DataFrame for display (default columns: no source, no timestamp)."""
    frame = pd.DataFrame([asdict(r) for r in rows], columns=list(ClaimRow.__dataclass_fields__))
    return frame[columns or _DISPLAY_COLUMNS]


class ClaimsLog:
    """The claims checked by one notebook, saved to ``results_dir()/<source>.json`` on each check.

    >>> log = ClaimsLog("00_overview")
    >>> log.check("C11", 3.0, note="Adam state / weights, measured")   # doctest: +SKIP
    """

    def __init__(self, source: str, directory: Path | None = None):
        if not source or any(c in source for c in "/\\"):
            raise ValueError(f"source must be a plain name like '00_overview', got {source!r}")
        self.source = source
        self.directory = directory
        self.rows: dict[str, ClaimRow] = {}

    @property
    def path(self) -> Path:
        return (self.directory or results_dir()) / f"{self.source}.json"

    def check(self, claim_id: str, measured: float | None, **kwargs) -> ClaimRow:
        """``check(...)`` one claim, keep its row (a re-check replaces it) and save the log.
        Only the claim's owner (``data/claims.csv``) may log it: one verdict per claim."""
        if owner(claim_id) != self.source:
            raise ValueError(
                f"{claim_id}'s verdict is owned by {owner(claim_id)}, not {self.source}: "
                "show the measurement there, and leave the verdict to the owner"
            )
        row = check(claim_id, measured, source=self.source, **kwargs)
        self.rows[row.id] = row
        self.save()
        return row

    def save(self) -> None:
        """Write the rows atomically, so a reader never sees half a file."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps([asdict(r) for r in self.rows.values()], indent=1, ensure_ascii=False)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(payload)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def table(self) -> pd.DataFrame:
        return table(sorted(self.rows.values(), key=lambda r: r.id))

    def to_text(self) -> str:
        """The Claims check as plain text (what a notebook prints, checked by nbval)."""
        lines = []
        for r in sorted(self.rows.values(), key=lambda r: r.id):
            lines.append(f"{r.id} [{r.verdict}] {r.claim}")
            lines.append(f"    claimed {r.expected}; measured {r.measured}")
            if r.criterion:
                lines.append(f"    criterion: {r.criterion}")
            if r.note:
                lines.append(f"    {r.note}")
        return "\n".join(lines)


def recorded_rows(directory: Path | None = None) -> list[ClaimRow]:
    """Every row saved by any notebook's ClaimsLog in ``directory`` (default results_dir())."""
    rows: list[ClaimRow] = []
    for path in sorted((directory or results_dir()).glob("*.json")):
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
            rows.extend(ClaimRow(**item) for item in items)
        except (ValueError, TypeError) as exc:  # bad JSON, bad encoding, wrong fields
            raise ValueError(f"{path}: not a claims log ({exc})") from exc
    return rows


def audit(directory: Path | None = None) -> pd.DataFrame:
    """All 30 claims, one row each: the latest verdict recorded by the claim's owner notebook
    (rows that other notebooks recorded, e.g. by an older version, are ignored).

    A claim its owner has not checked yet is listed as "not yet measured", naming the owner,
    so the table always shows the whole chapter in 30 rows.
    """
    claims = load_claims()
    latest: dict[str, ClaimRow] = {}
    for row in recorded_rows(directory):
        claim = claims.get(row.id)
        if claim is None or row.source != claim.notebook:
            continue
        if row.id not in latest or row.measured_at >= latest[row.id].measured_at:
            latest[row.id] = row
    records = []
    for claim in claims.values():
        if claim.id in latest:
            records.append(asdict(latest[claim.id]))
            continue
        records.append(
            {
                **_claim_fields(claim),
                "measured": "—",
                "verdict": NOT_YET_MEASURED,
                "note": f"audited in {claim.notebook}",
                "source": "",
                "measured_at": "",
                "criterion": f"{claim.criterion} [{claim.comparison()}]",
                "basis": claim.basis,
            }
        )
    return pd.DataFrame(records, columns=list(ClaimRow.__dataclass_fields__))


def audit_text(frame: pd.DataFrame, width: int = 70) -> str:
    """The audit table as fixed-width text, one claim per line (``python -m chapter20 audit``);
    claims longer than ``width`` (>= 10) characters are cut."""
    width = check_int("width", width, 10, maximum=1000)
    lines = [f"{'id':<4} {'§':<8} {'verdict':<25} {'claim':<{width}}  claimed → measured  [source]"]
    for row in frame.itertuples(index=False):
        claim = row.claim if len(row.claim) <= width else row.claim[: width - 1] + "…"
        source = f"  [{row.source}]" if row.source else ""
        lines.append(
            f"{row.id:<4} {row.section:<8} {row.verdict:<25} {claim:<{width}}  "
            f"{row.expected} → {row.measured}{source}"
        )
    return "\n".join(lines)


def _claim_fields(claim: Claim) -> dict[str, str]:
    return {
        "id": claim.id,
        "section": claim.section,
        "claim": claim.claim,
        "expected": claim.expected(),
    }
