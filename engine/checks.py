"""Value checks shared by every boundary (the run configuration, refinement, verify, risk)."""

from __future__ import annotations

import math
import numbers

from .errors import EngineError


def is_int(x) -> bool:
    """A whole number given as an integer (not a bool, not a float)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_finite_number(x) -> bool:
    """A finite real number (an integer or a float, not a bool, not NaN or infinite)."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def check_whole(value, name: str, minimum: int) -> int:
    """``value`` as an int, or one line naming ``name``: not a whole number, or below ``minimum``."""
    if not is_int(value):
        raise EngineError(f"{name} must be a whole number, got {value!r}")
    if value < minimum:
        raise EngineError(f"{name} must be at least {minimum}, got {value}")
    return int(value)
