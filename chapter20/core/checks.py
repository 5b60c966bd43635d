"""Argument checks shared by every module: a bad value raises an error that names the argument
and what is allowed (ARCHITECTURE.md, "Code")."""

from __future__ import annotations

import math
import numbers
from typing import Any

#: The largest integer a size, count or index may be: what an int64 tensor element holds.
INT_MAX = 2**63 - 1


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int = INT_MAX) -> int:
    """``value`` as an int; TypeError unless it is an integer (not a bool), ValueError if below
    ``minimum`` or above ``maximum`` (by default what an int64 holds, so that no size beyond
    any machine reaches an allocation or a C library)."""
    allowed = "an int" if minimum is None else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be {allowed}, got {value}")
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return int(value)


def check_real(
    name: str,
    value: Any,
    *,
    finite: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive: bool = False,
) -> float:
    """``value`` as a float; TypeError unless it is a real number (not a bool); ValueError for
    NaN always, for infinities with ``finite=True``, and outside [``minimum``, ``maximum``]
    (the open interval with ``exclusive=True``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be finite (not NaN or infinity), got {value}")
    low = minimum is not None and (value <= minimum if exclusive else value < minimum)
    high = maximum is not None and (value >= maximum if exclusive else value > maximum)
    if low or high:
        left, right = ("(", ")") if exclusive else ("[", "]")
        bounds = f"{left}{'-inf' if minimum is None else minimum}, "
        bounds += f"{'inf' if maximum is None else maximum}{right}"
        raise ValueError(f"{name} must be in {bounds}, got {value}")
    return value


def check_positive(name: str, value: Any, *, zero: bool = False) -> float:
    """A finite real number > 0 (>= 0 with ``zero=True``): a time, a size in bytes, a rate."""
    value = check_real(name, value, finite=True)
    if value < 0 or (value == 0 and not zero):
        raise ValueError(f"{name} must be {'>= 0' if zero else '> 0'}, got {value}")
    return value


def check_optional_int(name: str, value: Any, minimum: int | None = None) -> int | None:
    """None, or :func:`check_int`."""
    return None if value is None else check_int(name, value, minimum)


def check_optional_positive(name: str, value: Any) -> float | None:
    """None, or a finite real number > 0 (a clipping norm, an interval that may be absent)."""
    return None if value is None else check_positive(name, value)
