"""Argument checks shared by every module: a bad value raises an error that names the argument
and what is allowed (DESIGN.md, "Code")."""

from __future__ import annotations

import math
import numbers
from typing import Any


def check_int(name: str, value: Any, minimum: int | None = None) -> int:
    """``value`` as an int; TypeError unless it is an integer (not a bool), ValueError if below
    ``minimum``."""
    allowed = "an int" if minimum is None else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be {allowed}, got {value}")
    return int(value)


def check_real(name: str, value: Any, *, finite: bool = False) -> float:
    """``value`` as a float; TypeError unless it is a real number (not a bool); with
    ``finite=True``, ValueError for NaN and infinities."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if finite and not math.isfinite(value):
        raise ValueError(f"{name} must be finite (not NaN or infinity), got {value}")
    return float(value)
