"""The rows of the claims table, ``data/claims.csv``: each claim's claimed range and its
criterion (serves every section).

A :class:`Claim` is one row: the claim's text, the claimed range (``low``, ``high``, ``unit``,
``rel_tol``: the tolerance of an "about" claim), the side of the range on which its effect is at
least as large as claimed (``favourable``), the criterion in our words, the **basis** of its
verdict (:data:`BASES`) and the notebook that owns it. It says whether a value lies in the range
and which way it misses (:data:`LARGER`, :data:`SMALLER`). :func:`read_claims` reads and checks
the table; ``chapter20.core.claims`` judges measured values against these rows.
:func:`section_order` puts the claims' sections in the chapter's order.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BASES",
    "FAVOURABLE",
    "LARGER",
    "SMALLER",
    "Claim",
    "read_claims",
    "section_order",
]

#: Which side of the claimed range a measured value may pass and the claim still hold.
FAVOURABLE = ("higher", "lower", "")
LARGER, SMALLER = "larger than claimed", "smaller than claimed"
#: How a claim's verdict is reached (the ``basis`` column, before any ``:``).
BASES = ("measured", "gpu", "model", "missing", "definition")


@dataclass(frozen=True)
class Claim:
    """One quantitative claim of the chapter, restated in our words (see data/claims.csv).

    ``low``/``high`` bound the claimed value in ``unit`` (None: unbounded on that side);
    ``rel_tol`` widens them for claims stated as "about". ``criterion`` says what is measured,
    on which workload, and how it is compared; ``basis`` is one of :data:`BASES` and
    ``basis_detail`` names the model (``model``) or what is missing here (``missing``).
    ``notebook`` owns the verdict. ``favourable`` is the side of the range on which the
    claim's effect is at least as large as claimed (``"higher"``: a speed-up, a saving;
    ``"lower"``: a cost, a ratio that shrinks; ``""``: an exact figure, both sides miss).
    ``control`` names the harmful variant a quality claim's metric must detect.
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
    favourable: str = ""
    control: str = ""

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

    def direction(self, value: float) -> str:
        """``""`` when ``value`` is in the range (with its tolerance), else which way it misses:
        :data:`LARGER` or :data:`SMALLER` than claimed."""
        if self.contains(value):
            return ""
        return SMALLER if self.low is not None and value < self.low else LARGER

    def favours(self, direction: str) -> bool:
        """Whether a value beyond the range in ``direction`` still means the claim holds."""
        return (direction, self.favourable) in ((LARGER, "higher"), (SMALLER, "lower"))

    def comparison(self) -> str:
        """The range test as text, e.g. ``'1.5–2 × speed-up, ±10%'``."""
        tolerance = f", ±{100 * self.rel_tol:g}%" if self.rel_tol else ""
        return f"{self.expected()}{tolerance}"


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
    if kind in ("model", "missing", "definition") and not detail:
        raise ValueError(f"basis {kind!r} must name the {kind} after a colon, got {text!r}")
    return kind, detail


def read_claims(path: Path) -> dict[str, Claim]:
    """The claims of the CSV file ``path`` (the columns of ``data/claims.csv``), keyed by id,
    each row validated: ``ValueError`` naming the file and line of a malformed row or a
    duplicate id."""
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
                    favourable=(row.get("favourable") or "").strip(),
                    control=(row.get("control") or "").strip(),
                )
                if claim.favourable not in FAVOURABLE:
                    raise ValueError(f"favourable must be one of {FAVOURABLE}")
            except (KeyError, ValueError, AttributeError) as exc:
                raise ValueError(f"{path.name} line {line}: malformed row ({exc})") from exc
            if claim.id in claims:
                raise ValueError(f"{path.name} line {line}: duplicate claim id {claim.id}")
            claims[claim.id] = claim
    return claims


def section_order(section: str) -> tuple:
    """Where a claim's section falls in the chapter, as a sort key: the overview first, then
    the numbered sections by number (20.1.1 < 20.2 < 20.2.1 < 20.10), then the note."""
    if section == "overview":
        return (0,)
    parts = section.split(".")
    return (1, *map(int, parts)) if all(p.isdigit() for p in parts) else (2, section)
