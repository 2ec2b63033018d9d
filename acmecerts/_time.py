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

import asyncio
import contextlib
import dataclasses
import datetime as _dt
import email.utils
import math
import random
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Generic, Protocol, TypeVar, runtime_checkable

import anyio
import anyio.lowlevel

from acmecerts.errors import AttemptTimeout, InvalidInput

__all__ = [
    "DEFAULT_MAX_RETRY_AFTER",
    "Again",
    "Backoff",
    "Clock",
    "FakeClock",
    "SystemClock",
    "as_seconds",
    "aware_utc",
    "cancel_at",
    "duration_seconds",
    "parse_retry_after",
    "poll_until",
    "retry_after_from_detail",
    "utcnow",
]


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


def duration_seconds(value: float | _dt.timedelta, name: str, *, positive: bool = False) -> float:
    """A duration given as seconds or ``timedelta``, validated, in seconds.

    Raises:
        InvalidInput: ``value`` is not a number of seconds or a ``timedelta``, is not
            finite (``inf``, NaN), or is negative (or zero, with ``positive``).
    """
    bound = "> 0" if positive else ">= 0"
    try:
        seconds = as_seconds(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not ((seconds > 0 if positive else seconds >= 0) and math.isfinite(seconds)):
        raise InvalidInput(f"{name} must be a finite number of seconds {bound}, got {value!r}")
    return seconds


def aware_utc(
    instant: _dt.datetime, name: str = "instant", *, assume_utc: bool = False
) -> _dt.datetime:
    """``instant`` in UTC.

    A naive ``datetime`` is a programming error (:class:`InvalidInput` naming ``name``),
    or, with ``assume_utc``, taken as UTC (for values from outside: a CA's timestamps).
    """
    if instant.tzinfo is None or instant.utcoffset() is None:
        if assume_utc:
            return instant.replace(tzinfo=_dt.UTC)
        raise InvalidInput(f"{name} must be a timezone-aware datetime, got naive {instant!r}")
    return instant.astimezone(_dt.UTC)


# ---------------------------------------------------------------------------
# Retry-After (RFC 9110 §10.2.3) and Let's Encrypt's "retry after" detail text
# ---------------------------------------------------------------------------

#: The default limit on how far in the future a ``Retry-After`` may point.
DEFAULT_MAX_RETRY_AFTER = _dt.timedelta(days=30)

_UTC = _dt.UTC
_MAX_INSTANT = _dt.datetime.max.replace(tzinfo=_UTC)
_MIN_INSTANT = _dt.datetime.min.replace(tzinfo=_UTC)

# RFC 9110 §5.6.7: obsolete rfc850-date has a two-digit year ("Sunday, 06-Nov-94 ...").
_RFC850_YEAR = re.compile(r"-[a-z]{3}-(?P<year>[0-9]{2})\s", re.ASCII | re.IGNORECASE)
# RFC 9110 §5.6.7: delta-seconds = 1*DIGIT. A decimal fraction is not allowed by the
# grammar but is seen in the wild; it is accepted and rounded up (never sooner).
_DELTA_SECONDS = re.compile(r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?", re.ASCII)
# Let's Encrypt (Boulder) rate-limit detail text:
#   "..., retry after 2026-01-01 00:00:00 UTC: see https://letsencrypt.org/docs/rate-limits/"
# also ISO 8601 ("2026-01-01T00:00:00Z", "...00:00:00.123456+00:00") and Go's default
# time format ("2026-01-01 00:00:00.123456789 +0000 UTC").
_DETAIL_RETRY_AFTER = re.compile(
    r"retry[ -]after:?\s+"
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})(?:T|\s+)"
    r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})(?::(?P<second>[0-9]{2})(?:[.,](?P<frac>[0-9]+))?)?"
    r"(?:\s*(?P<offset>Z|(?P<sign>[+-])(?P<oh>[0-9]{2}):?(?P<om>[0-9]{2})))?"
    r"(?:\s*(?:UTC|GMT)\b)?",
    re.ASCII | re.IGNORECASE,
)


def _limit_seconds(max_delay: float | _dt.timedelta) -> float:
    """``max_delay`` in seconds: a duration >= 0, or ``inf`` for no limit."""
    if max_delay == math.inf:
        return math.inf
    return duration_seconds(max_delay, "max_delay")


def _after(now: _dt.datetime, seconds: float) -> _dt.datetime:
    """``now + seconds``, saturating at the largest representable instant."""
    try:
        return now + _dt.timedelta(seconds=seconds)
    except OverflowError:
        return _MAX_INSTANT


def _clamp(instant: _dt.datetime, now: _dt.datetime, limit: float) -> _dt.datetime:
    """Apply the documented rule: past -> ``now``; beyond the limit -> ``now + limit``."""
    if instant <= now:
        return now
    latest = _after(now, limit)
    return latest if instant > latest else instant


def _parse_delta_seconds(text: str, now: _dt.datetime, limit: float) -> _dt.datetime | None:
    match = _DELTA_SECONDS.fullmatch(text)
    if match is None:
        return None
    whole, frac = match["int"], match["frac"]
    if not whole and not frac:
        return None  # "" or "."
    whole = whole.lstrip("0")
    # Avoid int() on huge digit strings (CPython refuses > 4300 digits, and it is slow):
    # anything with more than 15 significant digits is far beyond any limit we accept.
    if len(whole) > 15:
        return _after(now, limit)
    seconds = float(int(whole or "0"))
    if frac and frac.strip("0"):
        seconds += 1  # round a fraction up: never sooner than the server asked
    return _after(now, min(seconds, limit))


def _build_instant(
    year: int, month: int, day: int, hour: int, minute: int, second: int
) -> _dt.datetime | None:
    leap = second == 60  # a leap second (RFC 9110 §5.6.7 allows 60) means the next second
    try:
        instant = _dt.datetime(year, month, day, hour, minute, 59 if leap else second, tzinfo=_UTC)
        return instant + _dt.timedelta(seconds=1) if leap else instant
    except (ValueError, OverflowError):
        return None


def _parse_http_date(text: str, now: _dt.datetime) -> _dt.datetime | None:
    """An HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, RFC 850 or asctime), or ``None``.

    The standard library's e-mail date parser reads all three forms (it is what
    :func:`email.utils.parsedate_to_datetime` calls); its fields are taken rather than its
    ``datetime`` so that a leap second and RFC 9110's two-digit-year rule are honoured.
    """
    fields = email.utils.parsedate_tz(text)
    if fields is None:
        return None
    zone = text.rsplit(None, 1)[-1].upper()
    # GMT (or UTC) is the only zone an HTTP-date has; asctime has none (it ends in the year)
    if zone not in ("GMT", "UTC") and not (zone.isdigit() and zone.isascii()):
        return None
    year, month, day, hour, minute, second = fields[:6]
    two_digits = _RFC850_YEAR.search(text)
    if two_digits is not None:
        # RFC 9110 §5.6.7: a two-digit year that appears to be more than 50 years in
        # the future is the most recent past year with the same last two digits.
        year = int(two_digits["year"]) + now.year - now.year % 100
        if year > now.year + 50:
            year -= 100
    return _build_instant(year, month, day, hour, minute, second)


def parse_retry_after(
    value: str | None,
    *,
    now: _dt.datetime,
    max_delay: float | _dt.timedelta = DEFAULT_MAX_RETRY_AFTER,
) -> _dt.datetime | None:
    """Parse a ``Retry-After`` header value (RFC 9110 §10.2.3) into a UTC instant.

    Both forms of the field are understood::

        Retry-After: 120                              delta-seconds
        Retry-After: Fri, 31 Dec 1999 23:59:59 GMT    HTTP-date (IMF-fixdate)
        Retry-After: Friday, 31-Dec-99 23:59:59 GMT   obsolete RFC 850 date
        Retry-After: Fri Dec 31 23:59:59 1999         obsolete asctime date

    The rule, which never raises for any ``str``:

    * ``None``, empty, garbage, negative numbers, or impossible dates (``31 Feb``)
      return ``None``: the caller falls back to its own backoff.
    * delta-seconds are relative to ``now``. A decimal fraction (``"1.5"``, not allowed by
      the grammar but seen in the wild) is rounded *up* to whole seconds, so acmecerts
      never comes back sooner than asked. Digit strings of any length are accepted.
    * an HTTP-date in the past (or exactly ``now``) returns ``now``: retry at once.
    * anything more than ``max_delay`` after ``now`` (default 30 days) returns
      ``now + max_delay``: an absurd value cannot park a certificate forever.
    * the result is therefore ``None`` or an aware UTC instant in
      ``[now, now + max_delay]``.

    Surrounding whitespace is ignored; day and month names are matched
    case-insensitively, and ``UTC`` is accepted for ``GMT``. Per RFC 9110 §5.6.7, a
    two-digit RFC 850 year more than 50 years after ``now`` is taken from the past
    century.

    Args:
        value: the header value, or ``None`` when the header is absent.
        now: the current instant (timezone-aware; from the injected :class:`Clock`).
        max_delay: the longest wait accepted, seconds or ``timedelta``.

    Raises:
        InvalidInput: only for a naive ``now`` or a negative ``max_delay``
            (programming errors), never because of ``value``.
    """
    now = aware_utc(now, "now")
    limit = _limit_seconds(max_delay)
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text[0] in "0123456789.":
        return _parse_delta_seconds(text, now, limit)
    instant = _parse_http_date(text, now)
    return None if instant is None else _clamp(instant, now, limit)


def retry_after_from_detail(
    detail: str | None,
    *,
    now: _dt.datetime,
    max_delay: float | _dt.timedelta = DEFAULT_MAX_RETRY_AFTER,
) -> _dt.datetime | None:
    """Read the "retry after" instant from a rate-limit problem's ``detail`` text.

    Let's Encrypt states the instant in the human-readable detail of a ``rateLimited``
    problem, which matters when no ``Retry-After`` header came with it::

        too many certificates (5) already issued for this exact set of identifiers in
        the last 168h0m0s, retry after 2026-01-01 00:00:00 UTC: see
        https://letsencrypt.org/docs/rate-limits/

    Also understood: ISO 8601 (``2026-01-01T00:00:00Z``, ``...00:00:00.25+00:00``), Go's
    default format (``2026-01-01 00:00:00.123456789 +0000 UTC``), and fractional seconds
    (rounded up to the microsecond). A time without a zone is taken as UTC; a numeric
    offset is honoured. The first ``retry after`` that names a valid instant is used.

    The same rule as :func:`parse_retry_after` applies and it never raises for any
    ``str``: no recognisable instant gives ``None``; a past instant gives ``now``; more
    than ``max_delay`` away gives ``now + max_delay``.
    """
    now = aware_utc(now, "now")
    limit = _limit_seconds(max_delay)
    if not detail:
        return None
    for match in _DETAIL_RETRY_AFTER.finditer(detail):
        instant = _build_instant(
            int(match["year"]),
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"] or 0),
        )
        if instant is None:
            continue
        frac = match["frac"]
        if frac:
            micro = int(frac[:6].ljust(6, "0"))
            if frac[6:].strip("0"):
                micro += 1  # round up: never sooner than the CA said
            instant = _shift(instant, _dt.timedelta(microseconds=micro))
        if match["sign"]:
            offset = _dt.timedelta(hours=int(match["oh"]), minutes=int(match["om"]))
            instant = _shift(instant, -offset if match["sign"] == "+" else offset)
        if instant is None:
            continue
        return _clamp(instant, now, limit)
    return None


def _shift(instant: _dt.datetime | None, delta: _dt.timedelta) -> _dt.datetime | None:
    if instant is None:
        return None
    try:
        return instant + delta
    except OverflowError:
        return _MAX_INSTANT if delta > _dt.timedelta(0) else _MIN_INSTANT


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


# ---------------------------------------------------------------------------
# Backoff and polling: every "sleep until the deadline while the pause grows" loop
# ---------------------------------------------------------------------------

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
        if not (self.multiplier >= 1 and math.isfinite(self.multiplier)):
            raise InvalidInput(f"multiplier must be finite and >= 1, got {self.multiplier!r}")
        if not 0 <= self.jitter <= 1:
            raise InvalidInput(f"jitter must be in [0, 1], got {self.jitter!r}")
        longest = self.max_retry_after
        if longest != math.inf:
            longest = duration_seconds(longest, "max_retry_after")
        object.__setattr__(self, "floor", floor)
        object.__setattr__(self, "cap", cap)
        object.__setattr__(self, "initial", initial)
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
) -> T:
    """Await ``check()`` until it returns something other than :class:`Again`; return that.

    Between two checks it sleeps on ``clock``: the ``Again``'s ``pause`` if it gives one,
    else until its ``retry_after`` (bounded by ``backoff``), else ``backoff.pause(step)``,
    ``step`` counting the checks that asked for the backoff's pause or the server's. A
    pause never runs past ``deadline``: once a check is not done at or after it, the
    exception ``on_deadline()`` makes (default :class:`~acmecerts.errors.AttemptTimeout`)
    is raised. An exception from ``check`` propagates at once. A pause of zero is still a
    checkpoint (cancellation, other tasks).
    """
    step = 0
    while True:
        result = await check()
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
