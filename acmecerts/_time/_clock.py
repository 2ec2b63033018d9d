"""The injectable :class:`Clock` (:class:`SystemClock`, :class:`FakeClock`), deadlines on it
(:func:`cancel_at`, :func:`wait_until`) and aware UTC instants: the part of
:mod:`acmecerts._time` every other part uses. Import them from :mod:`acmecerts._time`,
whose ``__all__`` lists the names of all its parts.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import anyio
import anyio.lowlevel

from acmecerts.errors import InvalidInput

from ._durations import as_seconds

#: The latest instant a ``datetime`` holds: where adding a duration saturates.
_MAX_INSTANT = _dt.datetime.max.replace(tzinfo=_dt.UTC)


@runtime_checkable
class Clock(Protocol):
    """Where acmecerts gets the time and how it waits.

    Contract:

    * ``now()`` MUST return a timezone-aware UTC ``datetime`` and MUST be cheap.
    * ``sleep(seconds)`` MUST honour cancellation (anyio cancel scopes) and MUST return
      once the clock's ``now()`` has advanced by at least ``seconds``. A fake clock
      MAY return at once after advancing its own time.

    Deadlines (an issuance attempt's) are instants on this clock, and what waits for
    something that may never come (a solver, a request) is cancelled when the clock
    reaches the deadline, through :func:`cancel_at`. A clock MAY provide a method
    ``cancel_at(deadline)`` returning a context manager that yields an
    ``anyio.CancelScope`` which it cancels once its ``now()`` reaches ``deadline`` (as
    :class:`FakeClock` does, whose time moves only when told to). The method is optional
    and looked up when needed, so a clock without it still fits this protocol: its
    deadline is then ``deadline - now()`` seconds from the moment the scope is entered,
    on anyio's own clock, which suits every clock that keeps pace with real time.
    """

    def now(self) -> _dt.datetime:
        """Return the current instant, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (non-positive: return at once, still a checkpoint)."""
        ...


@contextlib.contextmanager
def cancel_at(clock: Clock, deadline: _dt.datetime) -> Iterator[anyio.CancelScope]:
    """A cancel scope cancelled when ``clock`` reaches ``deadline``: one deadline, one clock.

    The scope's ``cancelled_caught`` tells afterwards whether the deadline cut the body
    short. A clock with a ``cancel_at(deadline)`` method (see :class:`Clock`) decides
    when itself; for any other clock the scope's deadline is the time left on ``clock``
    (``deadline - clock.now()``) from now, on anyio's clock: the two agree for every
    clock that keeps pace with real time, such as :class:`SystemClock`. A deadline
    already reached cancels the body at its first checkpoint::

        deadline = clock.now() + timedelta(minutes=30)
        with cancel_at(clock, deadline) as scope:
            await something_that_may_hang()
        if scope.cancelled_caught:
            raise AttemptTimeout("...")
    """
    deadline = aware_utc(deadline, "deadline")
    own = getattr(clock, "cancel_at", None)
    if own is not None:
        with own(deadline) as scope:
            yield scope
        return
    remaining = (deadline - clock.now()).total_seconds()
    with anyio.CancelScope(deadline=anyio.current_time() + remaining) as scope:
        yield scope


async def wait_until(clock: Clock, instant: _dt.datetime) -> None:
    """Wait until ``clock`` reaches ``instant`` without ever moving it (cancellable).

    For background work that must follow time, never drive it, such as a lease's
    heartbeat. :meth:`Clock.sleep` on a clock whose time moves only when told to
    (:class:`FakeClock`) *is* the telling: a heartbeat sleeping there in a loop raced
    the fake time forward at the speed of its store writes, past the deadline of an
    attempt that was waiting for a real CA. Here a clock with a ``cancel_at`` method
    (see :class:`Clock`) is left to the tasks that do move it: the wait ends when one
    of them takes the time to ``instant`` or past it (at once if it is there already).
    On any other clock (:class:`SystemClock`, :class:`~acmecerts.VirtualClock`) time
    moves by itself, and this is a sleep of the time left.
    """
    with cancel_at(clock, instant):
        await anyio.sleep_forever()


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


def aware_utc(
    instant: _dt.datetime, name: str = "instant", *, assume_utc: bool = False
) -> _dt.datetime:
    """``instant`` in UTC.

    A naive ``datetime`` is a programming error (:class:`InvalidInput` naming ``name``),
    or, with ``assume_utc``, taken as UTC (for values from outside: a CA's timestamps).
    """
    if instant.tzinfo is _dt.UTC:  # the usual case: astimezone() would return it as it is
        return instant
    if instant.tzinfo is None or instant.utcoffset() is None:
        if assume_utc:
            return instant.replace(tzinfo=_dt.UTC)
        raise InvalidInput(f"{name} must be a timezone-aware datetime, got naive {instant!r}")
    return instant.astimezone(_dt.UTC)


def whole_second(instant: _dt.datetime) -> _dt.datetime:
    """``instant`` in UTC, rounded **up** to a whole second (what output shows).

    Up, not down: an instant meant as "not before" (a deferral, a renewal) is never shown
    earlier than it is.
    """
    instant = instant.astimezone(_dt.UTC)
    if instant.microsecond:
        instant = instant.replace(microsecond=0) + _dt.timedelta(seconds=1)
    return instant


def show_instant(instant: _dt.datetime) -> str:
    """``instant`` for people: ``2026-12-02 01:02:03 UTC`` (:func:`whole_second`)."""
    return f"{whole_second(instant):%Y-%m-%d %H:%M:%S} UTC"


def _after(now: _dt.datetime, seconds: float) -> _dt.datetime:
    """``now + seconds``, saturating at the largest representable instant."""
    try:
        return now + _dt.timedelta(seconds=seconds)
    except OverflowError:
        return _MAX_INSTANT


class FakeClock:
    """A :class:`Clock` for tests: time moves only when told to, sleeping is instant.

    ``sleep(seconds)`` records the request in :attr:`sleeps`, advances the clock by
    ``seconds`` (non-positive: not at all) and returns after one anyio checkpoint, so it
    still honours cancellation and lets other tasks run. Tests of hour- and week-long
    schedules therefore run in milliseconds::

        clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
        await clock.sleep(3600)
        assert clock.now() == datetime(2026, 1, 1, 1, tzinfo=UTC)
        assert clock.sleeps == [3600]

    Every sleeper advances the one shared time: concurrent sleepers do not overlap
    as they would on a real clock, so it suits code that sleeps in one task at a time.
    Background work that must follow the time rather than drive it (a lease's
    heartbeat) waits with :func:`wait_until` instead, which leaves it to the others.

    A deadline on it (:meth:`cancel_at`, what :func:`cancel_at` uses) is reached when
    its time is moved (by :meth:`sleep` or :meth:`advance`, from any task) to or past
    it: an await that hangs (a solver's, a request's) is then cancelled, in fake time.
    """

    def __init__(self, start: _dt.datetime | None = None) -> None:
        """Start at ``start`` (timezone-aware), or at the real current time if ``None``."""
        self._now = utcnow() if start is None else aware_utc(start, "start")
        #: Every ``sleep()`` request, in order, as given (seconds).
        self.sleeps: list[float] = []
        #: The cancel scopes of :meth:`cancel_at` still open, with their deadlines.
        self._deadlines: list[tuple[_dt.datetime, anyio.CancelScope]] = []

    def now(self) -> _dt.datetime:
        """Return the clock's current instant, timezone-aware UTC."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Record the request, advance the clock by ``seconds``, then checkpoint."""
        self.sleeps.append(seconds)
        if seconds > 0:
            self._move_to(_after(self._now, seconds))
        await anyio.lowlevel.checkpoint()

    def advance(self, seconds: float | _dt.timedelta) -> None:
        """Move the clock forward (never backward) without recording a sleep."""
        amount = as_seconds(seconds)
        if not amount >= 0:
            raise InvalidInput(f"a clock cannot go backward: advance({seconds!r})")
        self._move_to(_after(self._now, amount))

    @contextlib.contextmanager
    def cancel_at(self, deadline: _dt.datetime) -> Iterator[anyio.CancelScope]:
        """A cancel scope cancelled once this clock's time reaches ``deadline``.

        A deadline already reached cancels the body at its first checkpoint; otherwise
        the scope is cancelled by the :meth:`sleep` or :meth:`advance` that moves the
        time to or past ``deadline`` (whichever task calls it).
        """
        deadline = aware_utc(deadline, "deadline")
        with anyio.CancelScope() as scope:
            entry = (deadline, scope)
            self._deadlines.append(entry)
            try:
                if deadline <= self._now:
                    scope.cancel()
                yield scope
            finally:
                self._deadlines.remove(entry)

    def _move_to(self, instant: _dt.datetime) -> None:
        self._now = instant
        for deadline, scope in tuple(self._deadlines):
            if deadline <= instant:
                scope.cancel()

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()})"
