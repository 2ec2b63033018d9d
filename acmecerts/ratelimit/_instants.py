"""Instants as integer microseconds since the Unix epoch: the ledger's and throttle's time.

Exact arithmetic and compact JSON; every instant given must be timezone-aware.
"""

from __future__ import annotations

import datetime as _dt

from acmecerts._time import aware_utc

__all__ = ["ONE_US", "from_us", "to_us"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
#: One microsecond, the unit of every instant here.
ONE_US = _dt.timedelta(microseconds=1)


def to_us(instant: _dt.datetime) -> int:
    """An aware instant as integer microseconds since the epoch."""
    return (aware_utc(instant) - _EPOCH) // ONE_US


def from_us(us: int) -> _dt.datetime:
    """Integer microseconds since the epoch as an aware UTC instant."""
    return _EPOCH + _dt.timedelta(microseconds=us)
