"""Durations: the one parser of acmecerts' duration options (:func:`duration_seconds`) and
the one check of a backoff's growth factor (:func:`growth_factor`).

The standard library only (no anyio): whatever reads an option can check it. Import them
from :mod:`acmecerts._time` (or :func:`acmecerts.duration_seconds`).
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers

from acmecerts.errors import InvalidInput

__all__ = ["as_seconds", "duration_seconds", "growth_factor"]


def as_seconds(value: float | _dt.timedelta) -> float:
    """Normalise a duration given as seconds or a ``timedelta`` to seconds."""
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return float(value)


def duration_seconds(
    value: float | _dt.timedelta, name: str, *, positive: bool = False, unbounded: bool = False
) -> float:
    """A duration option given as seconds or ``timedelta``, validated, in seconds.

    The one parser of acmecerts' duration options (the library's keyword arguments and the
    command line's ``--timeout``-style options alike): a real number of seconds (``int``,
    ``float``, ``fractions.Fraction``...) or a ``datetime.timedelta``, finite, and at least
    0 (more than 0 with ``positive``). ``name`` names the option in the error. Infinity
    is refused too, except with ``unbounded`` (for an option whose ``inf`` means "no
    limit", such as :func:`parse_retry_after`'s ``max_delay``).

    Raises:
        InvalidInput: ``value`` is of another type (``bool`` and ``str`` included: ``True``
            is no duration, and text is parsed where it is read), is NaN, is infinite
            (without ``unbounded``), or is negative (or zero, with ``positive``).
    """
    bound = "> 0" if positive else ">= 0"
    finite = "" if unbounded else "finite "
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidInput(
            f"{name} must be a {finite}number of seconds {bound} or a timedelta, "
            f"got {type(value).__name__} {value!r}"
        )
    in_range = seconds > 0 if positive else seconds >= 0
    if not (in_range and (math.isfinite(seconds) or (unbounded and seconds == math.inf))):
        raise InvalidInput(f"{name} must be a {finite}number of seconds {bound}, got {value!r}")
    return seconds


def growth_factor(value: float, name: str) -> float:
    """A backoff's growth factor (each wait this many times the last), validated.

    A real number, finite and at least 1 (1: the waits do not grow).

    Raises:
        InvalidInput: ``value`` is of another type (``bool`` included), NaN, infinite or
            below 1, with ``name`` in the message.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not (value >= 1 and math.isfinite(value))
    ):
        raise InvalidInput(f"{name} must be a finite number >= 1, got {value!r}")
    return float(value)
