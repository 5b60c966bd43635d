"""The chapter's quantitative claims (C01–C30) as data, each with a written criterion, and
their audit against measurements.

``data/claims.csv`` gives every claim, besides its text and the claimed range (``low``,
``high``, ``unit``, ``rel_tol``), the **criterion** in our words (the measured quantity, the
workload, the comparison), its **basis** and the one notebook that **owns** its verdict. The
verdict is computed by :func:`check` from the value a notebook measured, never typed:

- ``holds`` / ``does not hold``  a measured value inside / outside the claimed range (widened
                                 by ``rel_tol``, the tolerance of an "about" claim), with every
                                 extra condition of the criterion (``conditions=``, each a
                                 computed test) met. A value beyond the range says which way
                                 (``direction``): on the claim's ``favourable`` side (a
                                 speed-up or a saving larger than claimed) the claim holds,
                                 "larger than claimed"; on the other side, or for a two-sided
                                 claim (an exact figure), it does not hold, "smaller / larger
                                 than claimed";
- ``inconclusive``               a quality claim (a ``control`` in the CSV: a harmful variant
                                 chosen before the run) whose metric did not detect the harm
                                 (``control_detected=False``): a metric that cannot fail
                                 cannot confirm;
- ``inconclusive: not trained    a study whose runs stayed at the untrained model's level
  past its start``               (``trained_past_start=False``): it gives no trend, so no
                                 verdict;
- ``consistent with the model``  the same comparison for a modelled figure (basis
                                 ``model: <name>``): the model, not a measurement, agrees;
- ``needs a GPU``                basis ``gpu`` and the value was not measured on a GPU (a CPU
                                 figure is still shown); a figure from the GPU record
                                 (``chapter20.core.gpu_record``) or measured on CUDA is judged;
- ``not measurable here``        basis ``missing: <what>``: what this companion would need;
- ``a definition, not testable`` basis ``definition: <why>``: the claim restates how a quantity
                                 is defined (Adam keeps two moments per weight), so no run can
                                 confirm or refute it; the value is shown, not judged.

The table's rows, their ranges and the test of a value against a range are
``chapter20.core.claim_criteria`` (:class:`~chapter20.core.claim_criteria.Claim`); this module
loads the table, judges and logs. Only the owner logs a verdict (``ClaimsLog`` refuses any other
claim), so the audit has one row per claim. A ``ClaimsLog`` records its rows as JSON in
``paths.results_dir()``, one file per notebook, and ``python -m chapter20 audit`` (``make run``)
prints the 30 owners' latest rows.
"""

from __future__ import annotations

import html
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
from chapter20.core.claim_criteria import Claim, _fmt, read_claims
from chapter20.core.paths import data_file, results_dir

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
CONSISTENT = "consistent with the model"
NEEDS_GPU = "needs a GPU"
NOT_MEASURABLE = "not measurable here"
INCONCLUSIVE = "inconclusive"
NOT_TRAINED = "inconclusive: not trained past its start"
DEFINITION = "a definition, not testable"
NOT_YET_MEASURED = "not yet measured"
VERDICTS = (
    HOLDS, DOES_NOT_HOLD, CONSISTENT, INCONCLUSIVE, NOT_TRAINED, NEEDS_GPU, NOT_MEASURABLE,
    DEFINITION,
)  # fmt: skip


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
    direction: str = ""

    @property
    def judgement(self) -> str:
        """The verdict with its direction: ``'holds, larger than claimed'``, ``'does not hold:
        smaller than claimed'``, or the verdict alone."""
        return verdict_with_direction(self.verdict, self.direction)


@cache
def load_claims() -> dict[str, Claim]:
    """The claims C01–C30 from ``data/claims.csv`` (:func:`read_claims`), keyed by id,
    validated."""
    return read_claims(data_file("claims.csv"))


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
    control_detected: bool | None = None,
    trained_past_start: bool | None = None,
    device: str | None = None,
    source: str = "interactive",
) -> ClaimRow:
    """Judge one claim on its criterion (``data/claims.csv``) and return its row (all sections).

    - ``measured``: the value measured (or modelled, basis ``model``) here, in the claim's unit
      (``unit``, if given, must match it, so a ratio is never compared with a percentage).
      None only where nothing here can measure it (basis ``missing``, or ``gpu`` off a GPU).
    - ``conditions``: the criterion's other tests, by name, each a bool the notebook computed
      (e.g. ``{"fits one 80 GB GPU": plan.fits}``); the claim holds only if all are true.
    - ``control_detected``: for a quality claim (a ``control`` in the CSV), whether the metric
      told the deliberately harmful variant apart over the seeds; required for those claims, and
      False makes the verdict "inconclusive".
    - ``trained_past_start``: for a claim judged on a trend over trained runs, whether the
      runs left the untrained model's level beyond the seed spread (e.g.
      ``chapter20.core.seed_statistics.beyond_noise``); False makes the verdict
      "inconclusive: not trained past its start" (``measured`` may then be None).
    - ``device``: where ``measured`` was measured (``'cuda'``, ``'cpu'``, or a recorded GPU's
      name from ``chapter20.core.gpu_record``); default: CUDA if present, else the CPU. It matters
      only for basis ``gpu``: off a GPU the verdict is "needs a GPU".

    The verdict follows from the claim's basis: ``missing`` → not measurable here; ``gpu`` off
    a GPU → needs a GPU; runs not trained past their start → inconclusive; otherwise the
    range, its direction and the conditions decide (see the module docstring), "consistent
    with the model" standing for "holds" under basis ``model``.
    """
    claim = get_claim(claim_id)
    if unit is not None and claim.unit and unit != claim.unit:
        raise ValueError(f"unit={unit!r} does not match claim {claim_id}'s unit {claim.unit!r}")
    if measured is not None:
        measured = check_real("measured", measured, finite=True)
    tests = _checked_conditions(conditions)
    untrained = trained_past_start is not None and not trained_past_start
    if claim.control and claim.basis != "missing" and control_detected is None and not untrained:
        raise TypeError(
            f"claim {claim_id} is a quality claim: pass control_detected (did the metric detect "
            f"the harmful variant: {claim.control}?)"
        )
    for name, flag in (
        ("control_detected", control_detected),
        ("trained_past_start", trained_past_start),
    ):
        if flag is not None and not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be a computed bool, got {flag!r}")
    device = _default_device() if device is None else str(device)
    verdict, direction = _verdict(claim, measured, tests, control_detected, device, untrained)
    return _row(claim, measured, unit, note, tests, device, verdict, direction, source)


def _verdict(claim, measured, tests, control_detected, device, untrained) -> tuple[str, str]:
    """(verdict, direction) of :func:`check`."""
    if claim.basis == "definition":
        return DEFINITION, ""
    if claim.basis == "gpu" and not is_gpu_device(device):
        return NEEDS_GPU, ""
    # Runs that never left their start say nothing, even about what is missing to measure more.
    if untrained:
        return NOT_TRAINED, ""
    if claim.basis == "missing":
        return NOT_MEASURABLE, ""
    if measured is None:
        raise ValueError(
            f"claim {claim.id} is judged on a measured value (basis {claim.basis!r}): "
            "measured must be a number"
        )
    if claim.control and not control_detected:
        return INCONCLUSIVE, ""
    if not all(tests.values()):
        return DOES_NOT_HOLD, "a condition failed"
    direction = claim.direction(float(measured))
    holds = CONSISTENT if claim.basis == "model" else HOLDS
    if not direction or claim.favours(direction):
        return holds, direction
    return DOES_NOT_HOLD, direction


def _row(claim, measured, unit, note, tests, device, verdict, direction, source) -> ClaimRow:
    shown_unit = unit if unit is not None else claim.unit
    measured_text = "—" if measured is None else f"{_fmt(float(measured))} {shown_unit}".rstrip()
    extra = [f"{name} {'✓' if ok else '✗'}" for name, ok in tests.items()]
    if verdict == NOT_TRAINED:
        extra.append("the runs stayed at the untrained model's level: no trend")
    elif verdict == INCONCLUSIVE:
        extra.append(f"positive control not detected ✗ (its criterion: {claim.control})")
    elif claim.control and claim.basis != "missing" and verdict != NEEDS_GPU:
        extra.append(f"positive control detected ✓ (its criterion: {claim.control})")
    if claim.basis == "model":
        extra.append(f"model: {claim.basis_detail}")
    elif claim.basis == "missing":
        extra.append(f"missing here: {claim.basis_detail}")
    elif claim.basis == "definition":
        extra.append(f"a definition: {claim.basis_detail}")
    elif claim.basis == "gpu" and measured is not None:
        extra.append(f"measured on {device}")  # nothing measured: the note says why
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
        direction=direction,
    )


def owner(claim_id: str) -> str:
    """The notebook that owns ``claim_id``'s verdict, e.g. ``'04_gradient_checkpointing'``."""
    return get_claim(claim_id).notebook


def judged_in(claim_id: str) -> str:
    """Where a notebook that shows a claim it does not own points the reader: ``'C10 is judged
    in notebook 04 (Gradient checkpointing)'``; ``'shown'`` for a definition (no run judges it)."""
    claim = get_claim(claim_id)
    number, _, topic = claim.notebook.partition("_")
    verb = "shown" if claim.basis == "definition" else "judged"
    return f"{claim_id} is {verb} in notebook {number} ({topic.replace('_', ' ').capitalize()})"


class ClaimsTable:
    """A notebook's claims check as one compact table: each claim in its words, the claimed and
    the measured value, the verdict and the criterion it was judged on (the notes stay in the
    log). Jupyter and the book show it as HTML, nothing cut; ``repr`` is the same table as text."""

    COLUMNS = ("claim", "claimed", "measured", "verdict", "judged on")

    def __init__(self, rows: list[ClaimRow]):
        self.rows = sorted(rows, key=lambda r: r.id)

    def cells(self, row: ClaimRow) -> tuple[str, ...]:
        """One row's five cells, in the order of :attr:`COLUMNS`."""
        value = "modelled " if row.basis == "model" else ""  # a model's figure, not a measurement
        # A row's criterion ends with its range test in brackets, tolerance included.
        criterion, _, comparison = " ".join(row.criterion.split()).rpartition(" [")
        claimed = comparison.removesuffix("]") or row.expected
        return (f"{row.id} · {row.claim}", claimed, value + row.measured, row.judgement,
                criterion)  # fmt: skip

    def frame(self) -> pd.DataFrame:
        """The table as a DataFrame, one row per claim."""
        return pd.DataFrame([self.cells(r) for r in self.rows], columns=list(self.COLUMNS))

    def __repr__(self) -> str:
        blocks = []
        for row in self.rows:
            claim, claimed, measured, verdict, criterion = self.cells(row)
            blocks.append(
                f"{claim}\n    {verdict} · claimed {claimed}, measured {measured}"
                + (f"\n    judged on: {criterion}" if criterion else "")
            )
        return "\n".join(blocks)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self.cells(r)) + "</tr>"
            for r in self.rows
        )
        return (
            f'<table class="claims-check"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
        )


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

    def table(self) -> ClaimsTable:
        """The claims checked so far, as the compact table a notebook ends with."""
        return ClaimsTable(list(self.rows.values()))


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


#: The committed record of the owners' rows of the last in-order ``make notebooks`` run.
RECORD_FILE = "claims_recorded.json"


def write_record(rows: list[ClaimRow], machine: str, path: Path | None = None) -> Path:
    """Merge the owners' ``rows`` of a run of the notebooks, with the ``machine`` they ran on,
    into the committed record (``data/claims_recorded.json``), so that the audit of a checkout
    shows every owner's verdict before anything runs. A claim this run measured replaces its
    recorded row; the others keep theirs. Rows of a notebook that does not own the claim are
    dropped."""
    claims = load_claims()
    try:
        target = path or data_file(RECORD_FILE)
    except FileNotFoundError:
        target = data_file("claims.csv").with_name(RECORD_FILE)
    entries = {}
    if target.exists():
        entries = {e["row"]["id"]: e for e in json.loads(target.read_text(encoding="utf-8"))}
    for row in rows:
        if row.id in claims and row.source == claims[row.id].notebook:
            entries[row.id] = {"machine": machine, "row": asdict(row)}
    payload = [entries[i] for i in sorted(entries)]
    target.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return target


def read_record(path: Path | None = None) -> dict[str, tuple[ClaimRow, str]]:
    """The committed record: for each claim, the owner's row and where it comes from
    (``'recorded 2026-12-02 on <machine>'``); empty when there is no record."""
    try:
        target = path or data_file(RECORD_FILE)
    except FileNotFoundError:
        return {}
    record = {}
    for entry in json.loads(target.read_text(encoding="utf-8")):
        row = ClaimRow(**entry["row"])
        record[row.id] = (row, f"recorded {row.measured_at[:10]} on {entry['machine']}")
    return record


def audit(directory: Path | None = None, *, record: Path | None | bool = None) -> pd.DataFrame:
    """All 30 claims, one row each: the latest verdict recorded by the claim's owner notebook
    in ``directory`` (this run's results; rows that other notebooks recorded, e.g. by an older
    version, are ignored); for a claim this run has not measured, the owner's row of the
    committed record (``record``: its path; False: none), and otherwise "not yet measured",
    naming the owner. The column ``shown`` says which: ``'this run'``, the record's provenance,
    or ``''``.
    """
    claims = load_claims()
    latest: dict[str, ClaimRow] = {}
    for row in recorded_rows(directory):
        claim = claims.get(row.id)
        if claim is None or row.source != claim.notebook:
            continue
        if row.id not in latest or row.measured_at >= latest[row.id].measured_at:
            latest[row.id] = row
    fallback = {} if record is False else read_record(record or None)
    records = []
    for claim in claims.values():
        if claim.id in latest:
            records.append({**asdict(latest[claim.id]), "shown": "this run"})
        elif claim.id in fallback and fallback[claim.id][0].source == claim.notebook:
            row, provenance = fallback[claim.id]
            records.append({**asdict(row), "shown": provenance})
        else:
            records.append(_not_yet_measured(claim))
    return pd.DataFrame(records, columns=[*ClaimRow.__dataclass_fields__, "shown"])


def _not_yet_measured(claim: Claim) -> dict:
    return {
        **_claim_fields(claim),
        "measured": "—",
        "verdict": NOT_YET_MEASURED,
        "note": f"audited in {claim.notebook}",
        "source": "",
        "measured_at": "",
        "criterion": f"{claim.criterion} [{claim.comparison()}]",
        "basis": claim.basis,
        "direction": "",
        "shown": "",
    }


def audit_text(frame: pd.DataFrame, width: int = 70) -> str:
    """The audit table as fixed-width text, one claim per line (``python -m chapter20 audit``);
    claims longer than ``width`` (>= 10) characters are cut."""
    width = check_int("width", width, 10, maximum=1000)
    lines = [f"{'id':<4} {'§':<8} {'verdict':<32} {'claim':<{width}}  claimed → measured  [source]"]
    for row in frame.itertuples(index=False):
        claim = row.claim if len(row.claim) <= width else row.claim[: width - 1] + "…"
        source = f"  [{row.source}]" if row.source else ""
        judged = verdict_with_direction(row.verdict, getattr(row, "direction", "") or "")
        lines.append(
            f"{row.id:<4} {row.section:<8} {judged:<32} {claim:<{width}}  "
            f"{row.expected} → {row.measured}{source}"
        )
    return "\n".join(lines)


def verdict_with_direction(verdict: str, direction: str = "") -> str:
    """A verdict with the direction of the measured value when it has one: ``'holds, larger than
    claimed'``, ``'does not hold: smaller than claimed'``, or the verdict alone."""
    if not direction:
        return verdict
    return f"{verdict}{', ' if verdict in (HOLDS, CONSISTENT) else ': '}{direction}"


def _claim_fields(claim: Claim) -> dict[str, str]:
    return {"id": claim.id, "section": claim.section, "claim": claim.claim,
            "expected": claim.expected()}  # fmt: skip
