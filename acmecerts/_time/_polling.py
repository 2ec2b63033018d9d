"""Backoff and polling: every "sleep until the deadline while the pause grows" loop
(:class:`Backoff`, :class:`Again`, :func:`poll_until`), and the asyncio probe
(:func:`_running_loop`). Import them from :mod:`acmecerts._time`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import math
import random
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio.lowlevel

from acmecerts.errors import AttemptTimeout, InvalidInput

from ._clock import Clock, aware_utc
from ._durations import duration_seconds, growth_factor

T = TypeVar("T")
_RNG = random.Random()  # noqa: S311 - jitter only spreads retries, nothing secret


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Backoff:
    """A pause that grows, and how far a server's ``Retry-After`` is obeyed.

    The pause after the ``step``-th try (1 = the first) lies in a window whose top is
    ``initial * multiplier ** (step - 1)``, kept within ``[floor, cap]``. ``jitter``
    is the share of ``[floor, top]`` the pause is drawn from, uniformly at random: ``0``
    is exactly the top, ``1`` anywhere from ``floor`` to the top ("full jitter"), so a
    fleet does not come back in lockstep. A ``Retry-After`` replaces the computed pause,
    bounded to ``[floor, max_retry_after]``. Durations are seconds::

        Backoff(floor=0.5, cap=30, jitter=1)                  # 0.5, <=1, <=2, ... <=30 s
        Backoff(initial=0.25, multiplier=1.6, floor=0.05, cap=10, max_retry_after=600)
    """

    #: The shortest pause (never a tight loop).
    floor: float
    #: The longest computed pause.
    cap: float
    #: The top of the first window (``None``: ``floor``).
    initial: float | None = None
    #: How fast the window grows, ``>= 1``.
    multiplier: float = 2.0
    #: The share of the window ``[floor, top]`` that is random, in ``[0, 1]``.
    jitter: float = 0.0
    #: The longest ``Retry-After`` obeyed as it is (a longer one is cut to this).
    max_retry_after: float = math.inf

    def __post_init__(self) -> None:
        floor = duration_seconds(self.floor, "floor")
        cap = duration_seconds(self.cap, "cap")
        initial = floor if self.initial is None else duration_seconds(self.initial, "initial")
        if cap < floor:
            raise InvalidInput(f"cap ({cap} s) must not be below floor ({floor} s)")
        multiplier = growth_factor(self.multiplier, "multiplier")
        if not 0 <= self.jitter <= 1:
            raise InvalidInput(f"jitter must be in [0, 1], got {self.jitter!r}")
        longest = duration_seconds(self.max_retry_after, "max_retry_after", unbounded=True)
        object.__setattr__(self, "floor", floor)
        object.__setattr__(self, "cap", cap)
        object.__setattr__(self, "initial", initial)
        object.__setattr__(self, "multiplier", multiplier)
        object.__setattr__(self, "max_retry_after", longest)

    def top(self, step: int) -> float:
        """The top of the window after the ``step``-th try (1 = the first)."""
        if step < 1:
            raise InvalidInput(f"step counts from 1, got {step!r}")
        try:
            top = (self.initial or self.floor) * self.multiplier ** (step - 1)
        except OverflowError:
            top = self.cap
        return max(self.floor, min(self.cap, top))

    def pause(self, step: int, *, rng: random.Random | None = None) -> float:
        """Seconds to pause after the ``step``-th try: in the window, jittered."""
        high = self.top(step)
        if not self.jitter:
            return high
        floor = self.floor
        low = floor if self.jitter >= 1 else high - self.jitter * (high - floor)
        return min(max((rng or _RNG).uniform(low, high), floor), high)

    def until(self, retry_after: _dt.datetime, now: _dt.datetime) -> float:
        """Seconds from ``now`` until ``retry_after``, within ``[floor, max_retry_after]``."""
        wait = (aware_utc(retry_after, "retry_after") - aware_utc(now, "now")).total_seconds()
        return min(max(self.floor, wait), self.max_retry_after)


@dataclasses.dataclass(frozen=True, slots=True)
class Again(Generic[T]):
    """What a :func:`poll_until` check returns when it is not done yet.

    ``retry_after``: the instant the server named (``Retry-After``); it replaces the
    backoff's pause. ``pause``: exactly this many seconds instead (``0``: at once, e.g. a
    ``badNonce`` replay), counted as no step of the backoff.
    """

    retry_after: _dt.datetime | None = None
    pause: float | None = None


async def poll_until(
    check: Callable[[], Awaitable[T | Again[T]]],
    *,
    clock: Clock,
    backoff: Backoff,
    deadline: _dt.datetime | None = None,
    on_deadline: Callable[[], BaseException] | None = None,
    rng: random.Random | None = None,
    first: Again[T] | None = None,
) -> T:
    """Await ``check()`` until it returns something other than :class:`Again`; return that.

    Between two checks it sleeps on ``clock``: the ``Again``'s ``pause`` if it gives one,
    else until its ``retry_after`` (bounded by ``backoff``), else ``backoff.pause(step)``,
    ``step`` counting the checks that asked for the backoff's pause or the server's. A
    pause never runs past ``deadline``: once a check is not done at or after it, the
    exception ``on_deadline()`` makes (default :class:`~acmecerts.errors.AttemptTimeout`)
    is raised. An exception from ``check`` propagates at once. A pause of zero is still a
    checkpoint (cancellation, other tasks). ``first``: the result of a check the caller
    already made (its pause comes first, as if this loop had made it).
    """
    step = 0
    while True:
        result: T | Again[T] = first if first is not None else await check()
        first = None
        if not isinstance(result, Again):
            return result
        now = clock.now()
        if result.pause is not None:
            pause = result.pause
        else:
            step += 1
            retry_after = result.retry_after
            if retry_after is not None:
                pause = backoff.until(retry_after, now)
            else:
                pause = backoff.pause(step, rng=rng)
        if deadline is not None:
            remaining = (deadline - now).total_seconds()
            if remaining <= 0:
                raise (
                    on_deadline()
                    if on_deadline is not None
                    else AttemptTimeout("the deadline passed while polling")
                )
            pause = min(pause, remaining)
        if pause > 0:
            await clock.sleep(pause)
        else:
            await _checkpoint()


async def _checkpoint() -> None:
    """``anyio.lowlevel.checkpoint()``, and under asyncio what it does there, directly.

    anyio finds its backend for every checkpoint (about a microsecond, more than the
    yield itself under load); under asyncio its checkpoint is ``asyncio.sleep(0)``.
    """
    if _running_loop() is not None:
        await asyncio.sleep(0)
    else:
        await anyio.lowlevel.checkpoint()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio event loop, ``None`` under another event loop (trio).

    The one probe for the asyncio fast paths (the solvers' callback servers, the
    transport's pool): the lowest layer both may import, beside the clock that sleeps.
    """
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
