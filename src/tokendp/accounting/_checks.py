"""Validation of privacy parameters shared by the accounting modules.

Every check raises :class:`~tokendp.errors.InvalidParameterError` with a message that says
what is wrong and what to do. Booleans are rejected where numbers are expected.
"""

from __future__ import annotations

import math
import numbers

from tokendp.errors import InvalidParameterError


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_nonnegative(name: str, value: object) -> float:
    """A finite number >= 0."""
    if not _is_real(value) or not math.isfinite(float(value)) or float(value) < 0:
        raise InvalidParameterError(f"{name} must be a finite number >= 0, got {value!r}; pass 0 or a positive value")
    return float(value)


def check_positive(name: str, value: object) -> float:
    """A finite number > 0."""
    if not _is_real(value) or not math.isfinite(float(value)) or float(value) <= 0:
        raise InvalidParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_order(value: object, name: str = "alpha") -> float:
    """A Renyi order: finite and > 1."""
    if not _is_real(value) or not math.isfinite(float(value)) or float(value) <= 1:
        raise InvalidParameterError(
            f"Renyi order {name} must be a finite number > 1, got {value!r}; typical choices are 2 to 10"
        )
    return float(value)


def check_delta(value: object) -> float:
    """A failure probability strictly between 0 and 1."""
    if not _is_real(value) or not (0 < float(value) < 1):
        raise InvalidParameterError(
            f"delta must lie strictly between 0 and 1, got {value!r}; a common choice is below 1/(number of records)"
        )
    return float(value)


def check_count(name: str, value: object, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (a number of tokens, groups, references, ...)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_rate(name: str, value: object) -> float:
    """A probability in [0, 1]."""
    if not _is_real(value) or not (0 <= float(value) <= 1):
        raise InvalidParameterError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)
