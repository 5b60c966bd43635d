"""The chapter's quantitative claims (C01–C30) as data, and their audit against measurements.

Every notebook ends with a "Claims check": for each claim it measured, a row with the claim,
what this machine measured, and a verdict. A verdict comes from a measurement, never from text:

- ``holds``               the measured value lies in the claimed range (within its tolerance),
                          or the notebook's own test of a qualitative claim passed;
- ``does not hold here``  it was measured and falls outside;
- ``needs a GPU``         the claim is about hardware this machine lacks (the measured CPU value
                          is still shown);
- ``not measurable here`` nothing on this machine can measure it.

A ``ClaimsLog`` records its rows as JSON in ``paths.results_dir()``, one file per notebook, so
that ``python -m chapter20 audit`` (and ``make run``) print the latest verdict of every claim.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import pandas as pd

from chapter20.checks import check_int, check_real
from chapter20.paths import data_file, results_dir

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold here"
NEEDS_GPU = "needs a GPU"
NOT_MEASURABLE = "not measurable here"
NOT_YET_MEASURED = "not yet measured"
VERDICTS = (HOLDS, DOES_NOT_HOLD, NEEDS_GPU, NOT_MEASURABLE)


@dataclass(frozen=True)
class Claim:
    """One quantitative claim of the chapter, restated in our words (see data/claims.csv).

    ``low``/``high`` bound the claimed value in ``unit`` (None: unbounded on that side, or a
    qualitative claim when both are None); ``rel_tol`` widens them for claims stated as "about".
    """

    id: str
    section: str
    claim: str
    low: float | None
    high: float | None
    unit: str
    rel_tol: float
    notebook: str

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
        low_ok = self.low is None or value >= self.low * (1 - self.rel_tol) - 1e-12 * abs(self.low)
        high_ok = self.high is None or value <= self.high * (1 + self.rel_tol) + 1e-12 * abs(
            self.high
        )
        return low_ok and high_ok


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


@cache
def load_claims() -> dict[str, Claim]:
    """The claims C01–C30 from ``data/claims.csv``, keyed by id, validated."""
    path = data_file("claims.csv")
    claims: dict[str, Claim] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            try:
                claim = Claim(
                    id=row["id"].strip(),
                    section=row["section"].strip(),
                    claim=row["claim"].strip(),
                    low=_parse_bound(row["low"]),
                    high=_parse_bound(row["high"]),
                    unit=row["unit"].strip(),
                    rel_tol=float(row["rel_tol"] or 0),
                    notebook=row["notebook"].strip(),
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


def check(
    claim_id: str,
    measured: float | None,
    *,
    unit: str | None = None,
    note: str = "",
    holds: bool | None = None,
    needs_gpu: bool = False,
    source: str = "interactive",
) -> ClaimRow:
    """Judge one claim against a measured value and return its row (all sections).

    - ``measured``: the number measured here, in the claim's unit (``unit``, if given, must
      match it, so a ratio is never compared with a percentage). None when nothing here can
      measure it.
    - ``holds``: for a qualitative claim, the outcome of the notebook's own test; for a
      quantitative one it overrides the range only when given.
    - ``needs_gpu``: the claim concerns hardware this machine lacks; the verdict says so and
      the CPU figure is still shown.
    """
    claim = get_claim(claim_id)
    if unit is not None and claim.unit and unit != claim.unit:
        raise ValueError(f"unit={unit!r} does not match claim {claim_id}'s unit {claim.unit!r}")
    if measured is not None:
        measured = check_real("measured", measured, finite=True)
    if needs_gpu:
        verdict = NEEDS_GPU
    elif holds is not None:
        verdict = HOLDS if holds else DOES_NOT_HOLD
    elif measured is None:
        verdict = NOT_MEASURABLE
    elif not claim.quantitative:
        raise ValueError(
            f"claim {claim_id} is qualitative: pass holds=True/False with the measurement"
        )
    else:
        verdict = HOLDS if claim.contains(float(measured)) else DOES_NOT_HOLD
    shown_unit = unit if unit is not None else claim.unit
    measured_text = "—" if measured is None else f"{_fmt(float(measured))} {shown_unit}".rstrip()
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
    )


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
        """``check(...)`` one claim, keep its row (a re-check replaces it) and save the log."""
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
    """All 30 claims with the latest recorded verdict of each notebook that checked them.

    A claim no notebook has checked yet is listed as "not yet measured", naming the notebook
    that audits it, so the table always shows the whole chapter.
    """
    latest: dict[tuple[str, str], ClaimRow] = {}
    for row in recorded_rows(directory):
        key = (row.id, row.source)
        if key not in latest or row.measured_at >= latest[key].measured_at:
            latest[key] = row
    records = []
    for claim in load_claims().values():
        found = sorted(
            (r for (cid, _), r in latest.items() if cid == claim.id), key=lambda r: r.source
        )
        if not found:
            records.append(
                {
                    **_claim_fields(claim),
                    "measured": "—",
                    "verdict": NOT_YET_MEASURED,
                    "note": f"audited in {claim.notebook}",
                    "source": "",
                    "measured_at": "",
                }
            )
        records.extend(asdict(r) for r in found)
    return pd.DataFrame(records, columns=list(ClaimRow.__dataclass_fields__))


def audit_text(frame: pd.DataFrame, width: int = 70) -> str:
    """The audit table as fixed-width text, one claim per line (``python -m chapter20 audit``);
    claims longer than ``width`` (>= 10) characters are cut."""
    width = check_int("width", width, 10, maximum=1000)
    lines = [f"{'id':<4} {'§':<8} {'verdict':<19} {'claim':<{width}}  claimed → measured  [source]"]
    for row in frame.itertuples(index=False):
        claim = row.claim if len(row.claim) <= width else row.claim[: width - 1] + "…"
        source = f"  [{row.source}]" if row.source else ""
        lines.append(
            f"{row.id:<4} {row.section:<8} {row.verdict:<19} {claim:<{width}}  "
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
