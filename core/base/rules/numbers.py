"""What counts as a number, once for the whole project (pure).

JSON, TOML and Chroma metadata all hand back Python values where `True` is an `int` and `NaN`
is a `float`; neither is a number anyone meant. Every check of "a finite number, not a bool"
(config values, alert thresholds, chunk stamps and `ingestedAt`, archived embeddings) is this
one.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def is_real_number(value: Any) -> TypeGuard[int | float]:
    """True for a finite int or float; False for bool (an int subclass), NaN, ±inf, strings."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_whole_number(value: Any) -> TypeGuard[int]:
    """True for an int that is not a bool (TOML `true` is not a count, a version or a time)."""
    return isinstance(value, int) and not isinstance(value, bool)


def valid_max_age(value: Any) -> bool:
    """A usable `maxAgeMs`: a finite real number > 0."""
    return is_real_number(value) and math.isfinite(value) and value > 0


def valid_max_count(value: Any) -> bool:
    """A usable `maxCount`: an integer >= 0 (a float like 2.0 is not: the original's
    `Number.isInteger` accepts it, TOML keeps the two apart, so an integer is asked for)."""
    return type(value) is int and value >= 0
