"""Time: the injectable :class:`Clock`, durations, backoff, polling and ``Retry-After``.

Everything in acmecerts that waits or compares instants asks a :class:`Clock`, so that
tests of hour- and week-long schedules run in milliseconds (:class:`FakeClock`).
Instants are always timezone-aware UTC ``datetime`` objects (:func:`aware_utc`), and
durations are seconds or ``timedelta`` (:func:`duration_seconds` validates them).

:class:`Backoff` is the one value for a pause that grows (floor, cap, jitter, how far a
``Retry-After`` is obeyed), and :func:`poll_until` the one loop that sleeps on a clock
until a check is done or a deadline passes.

:func:`parse_retry_after` reads the ``Retry-After`` header (RFC 9110 §10.2.3) and
:func:`retry_after_from_detail` the "retry after" instant in Let's Encrypt's rate-limit
problem text. Both follow one rule, and neither raises for any text: unreadable means
``None`` (use your own backoff), the past means now, and the far future is clamped to
``max_delay`` (30 days by default). See ``docs/retries.md``.
"""

from __future__ import annotations

from ._clock import (
    Clock,
    FakeClock,
    SystemClock,
    aware_utc,
    cancel_at,
    show_instant,
    utcnow,
    wait_until,
    whole_second,
)
from ._durations import as_seconds, duration_seconds, growth_factor
from ._polling import Again, Backoff, poll_until
from ._polling import _running_loop as _running_loop  # private, for the solvers and transport
from ._retry_after import DEFAULT_MAX_RETRY_AFTER, parse_retry_after, retry_after_from_detail
from ._virtual import VirtualClock, VirtualEventLoop

__all__ = [
    "DEFAULT_MAX_RETRY_AFTER",
    "Again",
    "Backoff",
    "Clock",
    "FakeClock",
    "SystemClock",
    "VirtualClock",
    "VirtualEventLoop",
    "as_seconds",
    "aware_utc",
    "cancel_at",
    "duration_seconds",
    "growth_factor",
    "parse_retry_after",
    "poll_until",
    "retry_after_from_detail",
    "show_instant",
    "utcnow",
    "wait_until",
    "whole_second",
]
