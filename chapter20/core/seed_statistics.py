"""Statistics over seeds and over repeats of a timing, one convention for every notebook
(ARCHITECTURE.md, "Notebooks" and "Measuring"): §20.2–§20.7's quality comparisons and every
timing table.

- **Seeds** (a quality figure trained from 3–5 seeds): the mean ± the sample standard
  deviation (:func:`summarize_seeds`, :func:`versus_reference`); two groups differ beyond seed
  noise when their means are more than twice the larger standard deviation apart
  (:func:`beyond_noise`).
- **Repeats of a timing** (3–15 timed calls): the median and the range, min–max
  (:func:`median_and_range`, :func:`timing_spread_ms`, :func:`range_text`); two medians closer
  than the wider range are reported as indistinguishable (``chapter20.core.findings.compare``).

Why the range and not the interquartile range: with the 3–5 repeats a notebook can afford, the
quartiles are interpolated between two or three observations (with 3, the 25th percentile is
the midpoint of the two lowest), so an IQR shows a figure no run produced and hides the
slowest repeat, which is the one a shared machine's noise makes. The range is what was
measured, and the widest honest statement of it; it grows with more repeats, which errs on the
side of calling two timings indistinguishable. The standard deviation serves seeds, whose
quality figures are averaged, not timings, whose outliers are one-sided.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from chapter20.core.checks import check_int, check_real

__all__ = [
    "beyond_noise",
    "median_and_range",
    "range_text",
    "summarize_seeds",
    "timing_spread_ms",
    "versus_reference",
]


# --- seeds ------------------------------------------------------------------------------------


def summarize_seeds(frame: pd.DataFrame, by: str = "method", columns=("pearson", "spearman")):
    """Mean and (sample) standard deviation over seeds of each ``columns`` per ``by`` group, as
    a frame with ``<column>_mean``, ``<column>_std`` and ``seeds``, groups in first-seen order
    (§20.2–§20.7 quality comparisons; a single seed's standard deviation is 0)."""
    groups = frame.groupby(by, sort=False)
    out = pd.DataFrame({"seeds": groups.size()})
    for column in columns:
        out[f"{column}_mean"] = groups[column].mean()
        out[f"{column}_std"] = groups[column].std(ddof=1).fillna(0.0)
    return out.reset_index()


def versus_reference(
    frame: pd.DataFrame, *, by: str, reference: str, column: str, chance: float
) -> pd.DataFrame:
    """A quality comparison over seeds, one row per ``by`` group (first-seen order): seeds,
    mean and standard deviation of ``column``, its weakest run as a multiple of ``chance``
    (``weakest_vs_chance``), and ``gap``, the relative difference of the group's mean from the
    ``reference`` group's mean (0 for the reference). The criteria that judge it — "every run
    at least 5× chance", "gap within 5%" — are stated by the notebook before the run."""
    if column not in frame.columns or by not in frame.columns:
        raise ValueError(
            f"frame must have columns {by!r} and {column!r}, got {list(frame.columns)}"
        )
    chance = check_real("chance", chance, finite=True, minimum=0, exclusive=True)
    out = summarize_seeds(frame, by=by, columns=(column,))
    if reference not in set(out[by]):
        raise ValueError(f"reference must be one of {list(out[by])}, got {reference!r}")
    out["weakest_vs_chance"] = frame.groupby(by, sort=False)[column].min().values / chance
    base = float(out.loc[out[by] == reference, f"{column}_mean"].iloc[0])
    out["gap"] = (out[f"{column}_mean"] - base) / base
    return out


def beyond_noise(summary: pd.DataFrame, better: str, worse: str, *, by: str, column: str) -> bool:
    """Whether group ``better``'s mean ``column`` exceeds group ``worse``'s by more than twice
    the larger of their two standard deviations over seeds (``summary`` as returned by
    :func:`summarize_seeds` or :func:`versus_reference`): the rule by which the notebooks call
    a difference between two variants real rather than seed noise."""
    rows = summary.set_index(by)
    for name, value in (("better", better), ("worse", worse)):
        if value not in rows.index:
            raise ValueError(f"{name} must be one of {list(rows.index)}, got {value!r}")
    spread = max(rows.loc[better, f"{column}_std"], rows.loc[worse, f"{column}_std"])
    return bool(rows.loc[better, f"{column}_mean"] - rows.loc[worse, f"{column}_mean"] > 2 * spread)


# --- repeats of a timing ----------------------------------------------------------------------


def _measurements(name: str, values: Iterable[float]) -> np.ndarray:
    """At least one real number >= 0 (a time, a rate; infinity allowed: a rate over no time)."""
    array = np.asarray([check_real(name, v, minimum=0) for v in values], dtype=float)
    if array.size == 0:
        raise ValueError(f"{name} must hold at least one measurement")
    return array


def median_and_range(values: Iterable[float]) -> tuple[float, float, float]:
    """``(median, min, max)`` of repeated measurements (a time, a rate): the figure a table
    reports and its spread under the project's one convention (module docstring). ValueError
    for no value, a NaN or a negative value."""
    array = _measurements("values", values)
    return float(np.median(array)), float(array.min()), float(array.max())


def timing_spread_ms(seconds: Iterable[float]) -> dict[str, float]:
    """Repeated timings in seconds as table columns in milliseconds (§20 "Measuring"):
    ``{"ms", "min_ms", "max_ms", "range_ms"}`` — the median, the fastest and slowest repeat,
    and the range, the threshold under which two medians are reported as indistinguishable
    (``chapter20.core.findings.compare(spread=...)``)."""
    median, low, high = median_and_range(1e3 * _measurements("seconds", seconds))
    return {"ms": median, "min_ms": low, "max_ms": high, "range_ms": high - low}


def range_text(lows: Sequence[float], highs: Sequence[float], decimals: int = 1) -> list[str]:
    """Each (low, high) pair as ``"low–high"`` with ``decimals`` places: the spread column a
    table prints next to its median (e.g. ``range_text(frame.min_ms, frame.max_ms)``).
    ValueError for a NaN, or a low above its high."""
    decimals = check_int("decimals", decimals, 0, maximum=20)
    lows = [check_real("lows", low) for low in lows]
    highs = [check_real("highs", high) for high in highs]
    if len(lows) != len(highs):
        raise ValueError(f"lows and highs must have one length, got {len(lows)} and {len(highs)}")
    for low, high in zip(lows, highs):
        if low > high:
            raise ValueError(f"each of lows must be <= its entry of highs, got {low} > {high}")
    return [f"{low:.{decimals}f}–{high:.{decimals}f}" for low, high in zip(lows, highs)]
