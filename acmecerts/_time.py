"""Time: the injectable :class:`Clock` and ``Retry-After`` parsing.

Everything in acmecerts that waits or compares instants asks a :class:`Clock`, so that
tests of hour- and week-long schedules run in milliseconds. Instants are always
timezone-aware UTC ``datetime`` objects.
"""

from __future__ import annotations

import datetime as _dt
from typing import Protocol, runtime_checkable

import anyio

__all__ = ["Clock", "SystemClock", "as_seconds", "utcnow"]


@runtime_checkable
class Clock(Protocol):
    """Where acmecerts gets the time and how it waits.

    Contract:

    * ``now()`` MUST return a timezone-aware UTC ``datetime`` and MUST be cheap.
    * ``sleep(seconds)`` MUST honour cancellation (anyio cancel scopes) and MUST return
      once the clock's ``now()`` has advanced by at least ``seconds``. A fake clock
      MAY return at once after advancing its own time.
    """

    def now(self) -> _dt.datetime:
        """Return the current instant, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (non-positive: return at once, still a checkpoint)."""
        ...


class SystemClock:
    """The real clock: ``datetime.now(UTC)`` and ``anyio.sleep``."""

    def now(self) -> _dt.datetime:
        """Return the current instant, timezone-aware UTC."""
        return _dt.datetime.now(_dt.UTC)

    async def sleep(self, seconds: float) -> None:
        """Sleep for ``seconds`` (cancellable)."""
        await anyio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


def utcnow() -> _dt.datetime:
    """Return the current instant, timezone-aware UTC."""
    return _dt.datetime.now(_dt.UTC)


def as_seconds(value: float | _dt.timedelta) -> float:
    """Normalise a duration given as seconds or a ``timedelta`` to seconds."""
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return float(value)
