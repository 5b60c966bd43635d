"""Findings computed from a run's numbers, never typed: the "reading" line under a table.

A sentence such as "bf16 is faster" is true on one machine and false on another; written in a
notebook's prose it contradicts the numbers the next time they are recorded. Every comparison
of measured values that a notebook states is printed by :func:`compare` (two values of one
quantity: faster / slower, smaller / larger, higher / lower, or indistinguishable within the
measurement's own spread) or :func:`share` (a part of a whole), from the numbers of that run;
:func:`compare_times` reads two timed variants by their medians and their repeats' spread.

    print(compare("bf16 step", 95.5, "fp32 step", 70.7, quantity="time", unit="ms"))
    # bf16 step: 1.35× slower than fp32 step (95.5 vs 70.7 ms)
"""

from __future__ import annotations

import math

from chapter20.core.checks import check_real

__all__ = ["QUANTITIES", "compare", "compare_times", "share"]

#: Quantity → (word when the value is lower, word when higher): time and memory are better
#: lower, a rate better higher; a plain value is only higher or lower.
QUANTITIES = {
    "time": ("faster", "slower"),
    "rate": ("slower", "faster"),
    "memory": ("smaller", "larger"),
    "value": ("lower", "higher"),
}


def _number(value: float, unit: str) -> str:
    text = f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}".rstrip()


def compare(
    name: str,
    value: float,
    reference_name: str,
    reference: float,
    *,
    quantity: str = "value",
    unit: str = "",
    spread: float = 0.0,
    tolerance: float = 0.02,
) -> str:
    """One line that compares ``value`` of ``name`` with ``reference`` of ``reference_name``
    (same ``quantity`` and ``unit``): ``"<name>: 1.35× slower than <reference_name> (95.5 vs
    70.7 ms)"``. The two count as indistinguishable when they differ by no more than
    ``spread`` (e.g. the repeats' range, in the same unit) or by a relative ``tolerance``; the
    line then says so instead of choosing a word. Both values must be positive."""
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity must be one of {', '.join(QUANTITIES)}, got {quantity!r}")
    value = check_real("value", value, minimum=0, exclusive=True, finite=True)
    reference = check_real("reference", reference, minimum=0, exclusive=True, finite=True)
    spread = check_real("spread", spread, minimum=0, finite=True)
    tolerance = check_real("tolerance", tolerance, minimum=0, finite=True)
    numbers = f"({_number(value, unit)} vs {_number(reference, unit)})"
    difference = abs(value - reference)
    if difference <= spread or difference <= tolerance * reference:
        why = (
            f"within the spread of {_number(spread, unit)}" if spread else f"within {tolerance:.0%}"
        )
        return f"{name}: indistinguishable from {reference_name} {numbers}, {why}"
    lower, higher = QUANTITIES[quantity]
    word = lower if value < reference else higher
    ratio = max(value, reference) / min(value, reference)
    return f"{name}: {ratio:.2f}× {word} than {reference_name} {numbers}"


def share(name: str, part: float, whole: float, *, of: str = "the whole") -> str:
    """One line with the share ``part / whole`` (e.g. the communication hidden under backward):
    ``"<name>: 62% of <of> (0.31 of 0.50)"``; a negative share is printed as such, with the
    word "negative", so it cannot read as an overlap that did not happen."""
    part = check_real("part", part, finite=True)
    whole = check_real("whole", whole, minimum=0, exclusive=True, finite=True)
    fraction = part / whole
    sign = "negative: " if fraction < 0 else ""
    shown = f"{part:.3g} of {whole:.3g}"
    if math.isclose(fraction, 0.0, abs_tol=5e-3):
        return f"{name}: none of {of} ({shown})"
    return f"{name}: {sign}{fraction:.0%} of {of} ({shown})"


def compare_times(name: str, row, reference_name: str, reference) -> str:
    """The reading of two timed variants (rows with ``chapter20.core.measure.timing_columns``'
    fields), printed by :func:`compare` from the medians in ms: "indistinguishable" when they
    differ by no more than the wider of the two repeats' min–max ranges, else how many times
    faster or slower. So the sentence follows the run, whichever way it went."""
    spread = max(row.seconds_max - row.seconds_min, reference.seconds_max - reference.seconds_min)
    return compare(
        name, row.seconds * 1e3, reference_name, reference.seconds * 1e3,
        quantity="time", unit="ms", spread=spread * 1e3,
    )  # fmt: skip
