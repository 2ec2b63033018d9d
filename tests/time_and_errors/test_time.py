"""Retry-After parsing (RFC 9110 §10.2.3), Let's Encrypt detail text, FakeClock, durations,
Backoff and poll_until (on a FakeClock: sleeps counted, never wall time)."""

from __future__ import annotations

import datetime as dt
import math
import random
from email.utils import format_datetime

import anyio
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from waits import within

from acmecerts._time import (
    DEFAULT_MAX_RETRY_AFTER,
    Again,
    Backoff,
    Clock,
    FakeClock,
    SystemClock,
    aware_utc,
    cancel_at,
    duration_seconds,
    parse_retry_after,
    poll_until,
    retry_after_from_detail,
    wait_until,
)
from acmecerts._time._polling import _checkpoint
from acmecerts.errors import AttemptTimeout, InvalidInput

UTC = dt.UTC
NOW = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)

instants = st.datetimes(
    min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(9000, 1, 1), timezones=st.just(UTC)
)
limits = st.timedeltas(min_value=dt.timedelta(0), max_value=dt.timedelta(days=400))
header_like = st.one_of(
    st.text(),
    st.from_regex(r"\A\s*[-+.]?[0-9]{0,30}(\.[0-9]{0,10})?\s*\Z"),
    st.builds(
        lambda d: format_datetime(d, usegmt=True),
        st.datetimes(min_value=dt.datetime(1, 1, 1), timezones=st.just(UTC)),
    ),
    st.from_regex(
        r"\A(Mon|Sun|Sunday), [0-9]{1,2}[ -](Jan|Feb|Nov)[ -][0-9]{2,4} [0-9]{2}:[0-9]{2}:[0-9]{2}"
        r" (GMT|UTC)\Z"
    ),
)


def assert_within(result: dt.datetime | None, now: dt.datetime, limit: dt.timedelta) -> None:
    if result is None:
        return
    assert result.tzinfo is not None
    assert result.utcoffset() == dt.timedelta(0)
    assert now <= result <= now + limit


# --- parse_retry_after: properties -------------------------------------------------------


@given(value=header_like, now=instants, limit=limits)
@example(value="9" * 10_000, now=NOW, limit=DEFAULT_MAX_RETRY_AFTER)
@example(value="1e9", now=NOW, limit=DEFAULT_MAX_RETRY_AFTER)
@example(value="Thu, 01 Jan 0001 00:00:00 GMT", now=NOW, limit=DEFAULT_MAX_RETRY_AFTER)
def test_parser_never_raises_and_stays_within_now_and_limit(
    value: str, now: dt.datetime, limit: dt.timedelta
) -> None:
    assert_within(parse_retry_after(value, now=now, max_delay=limit), now, limit)


@given(
    when=st.datetimes(
        min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(9000, 1, 1), timezones=st.just(UTC)
    ),
    ahead=st.timedeltas(min_value=dt.timedelta(0), max_value=dt.timedelta(days=30)),
)
def test_round_trip_of_email_utils_dates(when: dt.datetime, ahead: dt.timedelta) -> None:
    when = when.replace(microsecond=0)
    now = when - ahead
    header = format_datetime(when, usegmt=True)
    assert parse_retry_after(header, now=now) == when


@given(seconds=st.integers(min_value=0, max_value=30 * 86400))
def test_round_trip_of_delta_seconds(seconds: int) -> None:
    assert parse_retry_after(str(seconds), now=NOW) == NOW + dt.timedelta(seconds=seconds)


# --- parse_retry_after: the fast path for plain delta-seconds ----------------------------


def _general(value: str, now: dt.datetime, max_delay: float | dt.timedelta) -> dt.datetime | None:
    """What the general path makes of ``value``: the same digits between blanks skip the
    fast path (blanks are stripped before anything else)."""
    return parse_retry_after(f" {value}\t", now=now, max_delay=max_delay)


FAST_EDGES = [
    "0",
    "00",
    "120",
    "007",
    "21600",
    str(30 * 86400),
    str(30 * 86400 + 1),
    "9" * 15,  # the most digits the fast path reads: far beyond any limit
    "9" * 16,
    "9" * 10_000,
    "1" + "0" * 14,
    "0" * 20 + "5",
]
LIMITS: list[float | dt.timedelta] = [
    DEFAULT_MAX_RETRY_AFTER,
    dt.timedelta(0),
    dt.timedelta(seconds=120),
    dt.timedelta(days=30),  # equal to the default, another object
    300,
    1.5,
    math.inf,
]


@pytest.mark.parametrize("value", FAST_EDGES)
@pytest.mark.parametrize("max_delay", LIMITS)
def test_fast_delta_seconds_agree_with_the_general_path(
    value: str, max_delay: float | dt.timedelta
) -> None:
    fast = parse_retry_after(value, now=NOW, max_delay=max_delay)
    assert fast == _general(value, NOW, max_delay)
    assert fast is not None
    assert fast.tzinfo is UTC


@given(
    digits=st.from_regex(r"\A[0-9]{1,20}\Z"),
    now=instants,
    limit=st.one_of(limits, st.just(DEFAULT_MAX_RETRY_AFTER), st.just(math.inf)),
)
@example(digits="9" * 15, now=dt.datetime(9000, 1, 1, tzinfo=UTC), limit=math.inf)
def test_fast_delta_seconds_agree_with_the_general_path_everywhere(
    digits: str, now: dt.datetime, limit: dt.timedelta | float
) -> None:
    assert parse_retry_after(digits, now=now, max_delay=limit) == _general(digits, now, limit)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (" 120 ", NOW + dt.timedelta(seconds=120)),  # blanks: the general path, same value
        ("-1", None),
        ("-0", None),
        ("+5", None),
        ("1_000", None),  # int() would read it; the grammar does not
        ("\u0661\u0662", None),  # Arabic-Indic digits: str.isdigit, not RFC 9110's DIGIT
        ("\u00b2", None),  # a superscript two
        ("12\n", NOW + dt.timedelta(seconds=12)),
        ("Sun, 01 Jun 2025 12:02:00 GMT", NOW + dt.timedelta(minutes=2)),  # HTTP-date
    ],
)
def test_what_the_fast_path_leaves_to_the_general_one(
    value: str, expected: dt.datetime | None
) -> None:
    assert parse_retry_after(value, now=NOW) == expected


def test_the_fast_path_still_refuses_a_naive_now() -> None:
    with pytest.raises(InvalidInput, match="now"):
        parse_retry_after("120", now=NOW.replace(tzinfo=None))


def test_aware_utc_returns_a_utc_instant_itself_and_converts_others() -> None:
    assert aware_utc(NOW) is NOW
    plus_two = dt.timezone(dt.timedelta(hours=2))
    other = aware_utc(dt.datetime(2025, 6, 1, 14, tzinfo=plus_two))
    assert other == NOW
    assert other.tzinfo is UTC


# --- parse_retry_after: the forms of RFC 9110 §5.6.7 -------------------------------------

RFC_INSTANT = dt.datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)
BEFORE_RFC_INSTANT = dt.datetime(1994, 11, 6, 8, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "header",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
        "Sunday, 06-Nov-94 08:49:37 GMT",  # obsolete RFC 850 format
        "Sun Nov  6 08:49:37 1994",  # ANSI C's asctime() format
        "  Sun, 06 Nov 1994 08:49:37 GMT\t",  # OWS around the value
        "sun, 06 nov 1994 08:49:37 gmt",  # lenient about case
        "Sun, 06 Nov 1994 08:49:37 UTC",  # and about UTC for GMT
        "Sunday, 06-Nov-1994 08:49:37 GMT",  # RFC 850 with a four-digit year
        "Sun Nov 06 08:49:37 1994",
    ],
)
def test_each_http_date_form(header: str) -> None:
    assert parse_retry_after(header, now=BEFORE_RFC_INSTANT) == RFC_INSTANT


def test_rfc850_two_digit_year_more_than_50_years_ahead_is_in_the_past_century() -> None:
    now = dt.datetime(2030, 1, 1, tzinfo=UTC)
    # "94" read as 2094 would be > 50 years ahead, so it is 1994: in the past -> now.
    assert parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now=now) == now
    # "30" is 2030.
    assert parse_retry_after("Tuesday, 01-Jan-30 00:01:00 GMT", now=now) == now + dt.timedelta(
        minutes=1
    )


def test_leap_second_means_the_next_second() -> None:
    expected = dt.datetime(2025, 6, 30, 0, 0, 0, tzinfo=UTC)
    assert parse_retry_after("Sun, 29 Jun 2025 23:59:60 GMT", now=NOW) == expected


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("120", 120),
        ("0", 0),
        ("  30 ", 30),
        ("007", 7),
        ("1.5", 2),  # a fraction is rounded up: never sooner than asked
        ("0.001", 1),
        ("2.000", 2),
        (".5", 1),
        ("5.", 5),
    ],
)
def test_delta_seconds(header: str, seconds: int) -> None:
    assert parse_retry_after(header, now=NOW) == NOW + dt.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "   ",
        "-1",
        "-0",
        "+5",
        "1e3",
        "12 s",
        "soon",
        ".",
        "0x10",
        "١٢٣",  # Arabic-Indic digits are not DIGIT
        "Sun, 31 Feb 2025 08:49:37 GMT",  # no such day
        "Sun, 06 Nov 1994 25:49:37 GMT",  # no such hour
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 PST",  # only GMT is allowed
        "2025-06-01T12:00:00Z",  # not an HTTP-date
    ],
)
def test_garbage_and_negative_give_none(header: str) -> None:
    assert parse_retry_after(header, now=NOW) is None


def test_missing_header_gives_none() -> None:
    assert parse_retry_after(None, now=NOW) is None


def test_past_date_means_now() -> None:
    assert parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", now=NOW) == NOW


def test_far_future_is_clamped_to_max_delay() -> None:
    assert parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now=NOW) == NOW + dt.timedelta(
        days=30
    )
    assert parse_retry_after("99999999", now=NOW, max_delay=3600) == NOW + dt.timedelta(hours=1)
    assert parse_retry_after("9" * 100_000, now=NOW) == NOW + DEFAULT_MAX_RETRY_AFTER


def test_result_is_utc_even_when_now_is_another_zone() -> None:
    paris = dt.timezone(dt.timedelta(hours=2))
    result = parse_retry_after("60", now=NOW.astimezone(paris))
    assert result == NOW + dt.timedelta(minutes=1)
    assert result is not None
    assert result.tzinfo is UTC


def test_naive_now_is_a_programming_error() -> None:
    with pytest.raises(InvalidInput):
        parse_retry_after("60", now=dt.datetime(2025, 1, 1))


# --- retry_after_from_detail ------------------------------------------------------------

LE_DETAIL = (
    "too many certificates (5) already issued for this exact set of identifiers in the last "
    "168h0m0s, retry after 2025-06-02 00:00:00 UTC: see https://letsencrypt.org/docs/rate-limits/"
)


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        (LE_DETAIL, dt.datetime(2025, 6, 2, tzinfo=UTC)),
        (
            "too many new orders (300) from this account in the last 3h0m0s, "
            "retry after 2025-06-01 12:24:13 UTC: see https://letsencrypt.org/docs/rate-limits/",
            dt.datetime(2025, 6, 1, 12, 24, 13, tzinfo=UTC),
        ),
        ("Retry after 2025-06-02T01:02:03Z", dt.datetime(2025, 6, 2, 1, 2, 3, tzinfo=UTC)),
        (
            "retry after 2025-06-02T01:02:03.25Z",
            dt.datetime(2025, 6, 2, 1, 2, 3, 250000, tzinfo=UTC),
        ),
        (
            "retry after 2025-06-02 00:00:00.123456789 +0000 UTC",  # Go's default format
            dt.datetime(2025, 6, 2, 0, 0, 0, 123457, tzinfo=UTC),  # rounded up
        ),
        (
            "retry after 2025-06-02T02:00:00+02:00",
            dt.datetime(2025, 6, 2, 0, 0, 0, tzinfo=UTC),
        ),
        ("retry after 2025-06-02 00:00", dt.datetime(2025, 6, 2, tzinfo=UTC)),
        (
            "retry after 2025-02-30 00:00:00 UTC, or retry after 2025-06-03 00:00:00 UTC",
            dt.datetime(2025, 6, 3, tzinfo=UTC),  # the first valid instant
        ),
    ],
)
def test_lets_encrypt_detail(detail: str, expected: dt.datetime) -> None:
    assert retry_after_from_detail(detail, now=NOW) == expected


@pytest.mark.parametrize(
    "detail",
    [None, "", "rate limited", "retry after a while", "retry after 2025-13-01 00:00:00 UTC"],
)
def test_detail_without_an_instant_gives_none(detail: str | None) -> None:
    assert retry_after_from_detail(detail, now=NOW) is None


def test_detail_clamping_follows_the_same_rule() -> None:
    assert retry_after_from_detail("retry after 2000-01-01 00:00:00 UTC", now=NOW) == NOW
    far = "retry after 9999-12-31T23:59:59.999999999-23:59"
    assert retry_after_from_detail(far, now=NOW, max_delay=60) == NOW + dt.timedelta(minutes=1)


@given(
    detail=st.one_of(
        st.text(),
        st.builds(lambda s: f"retry after {s}", st.text()),
        st.from_regex(
            r"\Aretry after [0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}"
            r"(:[0-9]{2}(\.[0-9]{1,12})?)?"
            r"( ?(Z|[+-][0-9]{2}:?[0-9]{2}))?( UTC)?\Z"
        ),
    ),
    now=instants,
    limit=limits,
)
def test_detail_never_raises_and_stays_within_now_and_limit(
    detail: str, now: dt.datetime, limit: dt.timedelta
) -> None:
    assert_within(retry_after_from_detail(detail, now=now, max_delay=limit), now, limit)


# --- FakeClock --------------------------------------------------------------------------


def test_fake_clock_is_a_clock() -> None:
    assert isinstance(FakeClock(NOW), Clock)


@pytest.mark.anyio
async def test_fake_clock_sleep_advances_instantly_and_records() -> None:
    clock = FakeClock(NOW)
    # real seconds: an hour's sleep that really slept would hit this limit
    with within(60, "FakeClock.sleep(3600) to return without sleeping"):
        await clock.sleep(3600)
        await clock.sleep(0)
        await clock.sleep(-5)
        await clock.sleep(0.5)
    assert clock.now() == NOW + dt.timedelta(hours=1, seconds=0.5)
    assert clock.sleeps == [3600, 0, -5, 0.5]


@pytest.mark.anyio
async def test_fake_clock_sleep_is_a_cancellation_checkpoint() -> None:
    clock = FakeClock(NOW)
    reached = False
    with anyio.CancelScope() as scope:
        scope.cancel()
        await clock.sleep(1)
        reached = True
    assert not reached
    assert scope.cancelled_caught


def test_fake_clock_advance() -> None:
    clock = FakeClock(NOW)
    clock.advance(60)
    clock.advance(dt.timedelta(minutes=1))
    assert clock.now() == NOW + dt.timedelta(minutes=2)
    assert clock.sleeps == []
    with pytest.raises(InvalidInput):
        clock.advance(-1)


def test_fake_clock_defaults_to_the_real_time_in_utc() -> None:
    before = dt.datetime.now(UTC)
    now = FakeClock().now()
    assert before <= now <= dt.datetime.now(UTC)
    assert now.tzinfo is UTC


# --- cancel_at: one deadline on one clock ----------------------------------------------


@pytest.mark.anyio
async def test_fake_time_reaching_a_deadline_cancels_a_hung_await() -> None:
    clock = FakeClock(NOW)
    deadline = NOW + dt.timedelta(minutes=30)
    waiting = anyio.Event()
    never = anyio.Event()
    outcome: list[bool] = []

    async def hang() -> None:
        with cancel_at(clock, deadline) as scope:
            waiting.set()
            await never.wait()  # nothing will ever set it
        outcome.append(scope.cancelled_caught)

    with within(60, "the fake deadline to cancel the hung await"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hang)
            await waiting.wait()
            clock.advance(dt.timedelta(minutes=29, seconds=59))  # one second early
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
            assert outcome == []  # still waiting
            await clock.sleep(1)  # reaches the deadline: sleep() moves time too
    assert outcome == [True]
    assert clock._deadlines == []  # the scope is forgotten once left


@pytest.mark.anyio
async def test_a_deadline_already_reached_cancels_at_the_first_checkpoint() -> None:
    clock = FakeClock(NOW)
    reached = False
    with cancel_at(clock, NOW) as scope:
        await anyio.lowlevel.checkpoint()
        reached = True
    assert not reached
    assert scope.cancelled_caught


@pytest.mark.anyio
async def test_a_body_that_ends_before_the_deadline_is_not_cancelled() -> None:
    clock = FakeClock(NOW)
    with cancel_at(clock, NOW + dt.timedelta(seconds=1)) as scope:
        await anyio.lowlevel.checkpoint()
    clock.advance(3600)  # after the scope is left: nothing to cancel any more
    assert not scope.cancel_called
    assert clock._deadlines == []


class _PlainClock:
    """A third-party clock: ``now()`` and ``sleep()`` only, no ``cancel_at``."""

    def __init__(self, now: dt.datetime) -> None:
        self.instant = now
        self.calls = 0

    def now(self) -> dt.datetime:
        self.calls += 1
        return self.instant

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


@pytest.mark.anyio
@pytest.mark.parametrize("ahead", [-10.0, 0.0, 30.0, 3600.0])
async def test_a_clock_without_cancel_at_gets_the_time_left_on_anyios_clock(ahead: float) -> None:
    clock = _PlainClock(NOW)
    assert isinstance(clock, Clock)  # the protocol did not grow a required method
    before = anyio.current_time()
    with cancel_at(clock, NOW + dt.timedelta(seconds=ahead)) as scope:
        after = anyio.current_time()
        # the scope's deadline is the time left on the clock (now() asked once), from now
        assert before + ahead <= scope.deadline <= after + ahead
    assert clock.calls == 1


@pytest.mark.anyio
async def test_the_system_clock_deadline_is_the_time_left() -> None:
    clock = SystemClock()
    before = anyio.current_time()
    with cancel_at(clock, clock.now() + dt.timedelta(minutes=30)) as scope:
        assert scope.deadline - before == pytest.approx(1800, abs=60)
    assert not scope.cancel_called


@pytest.mark.anyio
async def test_cancel_at_refuses_a_naive_deadline() -> None:
    clock = FakeClock(NOW)
    with pytest.raises(InvalidInput, match="deadline"), cancel_at(clock, dt.datetime(2026, 1, 1)):
        await clock.sleep(1)  # pragma: no cover
    assert clock.sleeps == []


# --- wait_until: follow a clock, never move it -------------------------------------------


@pytest.mark.anyio
async def test_wait_until_on_a_fake_clock_waits_for_another_task_to_move_it() -> None:
    clock = FakeClock(NOW)
    woke: list[dt.datetime] = []

    async def follower() -> None:
        await wait_until(clock, NOW + dt.timedelta(seconds=20))
        woke.append(clock.now())

    with within(60, "the follower to wake when the time was moved"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follower)
            await anyio.wait_all_tasks_blocked()
            assert clock.now() == NOW  # waiting moved nothing
            clock.advance(19)
            await anyio.wait_all_tasks_blocked()
            assert woke == []
            await clock.sleep(5)  # another task's sleep moves it past the instant
    assert woke == [NOW + dt.timedelta(seconds=24)]
    assert clock.sleeps == [5]
    assert clock._deadlines == []


@pytest.mark.anyio
async def test_wait_until_an_instant_reached_returns_at_once() -> None:
    clock = FakeClock(NOW)
    with within(10, "a wait for an instant already reached"):
        await wait_until(clock, NOW)
        await wait_until(clock, NOW - dt.timedelta(days=1))
    assert clock.now() == NOW


@pytest.mark.anyio
async def test_wait_until_on_a_real_clock_sleeps_the_time_left() -> None:
    clock = SystemClock()
    start = anyio.current_time()
    await wait_until(clock, clock.now() + dt.timedelta(seconds=0.05))
    assert anyio.current_time() - start >= 0.04


# --- durations and instants ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "positive"),
    [(-1, False), (math.nan, False), (math.inf, False), (0, True), ("soon", False)],
)
def test_duration_seconds_refuses_what_is_no_duration(value: object, positive: bool) -> None:
    with pytest.raises(InvalidInput, match="lease must be a finite number of seconds"):
        duration_seconds(value, "lease", positive=positive)  # type: ignore[arg-type]


def test_duration_seconds_takes_seconds_and_timedeltas() -> None:
    assert duration_seconds(dt.timedelta(minutes=2), "x") == 120.0
    assert duration_seconds(0, "x") == 0.0
    assert duration_seconds(1.5, "x", positive=True) == 1.5


def test_aware_utc_refuses_naive_unless_told_it_is_utc() -> None:
    naive = dt.datetime(2025, 6, 1, 12)
    with pytest.raises(InvalidInput, match="deadline must be a timezone-aware"):
        aware_utc(naive, "deadline")
    assert aware_utc(naive, assume_utc=True) == NOW
    paris = dt.timezone(dt.timedelta(hours=2))
    assert aware_utc(dt.datetime(2025, 6, 1, 14, tzinfo=paris)).tzinfo is UTC


# --- Backoff --------------------------------------------------------------------------------


class _Top(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b


class _Bottom(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return a


def test_backoff_grows_from_initial_within_floor_and_cap() -> None:
    backoff = Backoff(initial=0.25, multiplier=2, floor=0.5, cap=3)
    assert [backoff.pause(n) for n in range(1, 6)] == [0.5, 0.5, 1.0, 2.0, 3.0]
    assert backoff.pause(10_000) == 3.0  # no overflow, just the cap


def test_backoff_jitter_is_a_share_of_the_window() -> None:
    full = Backoff(floor=1, cap=100, jitter=1)
    assert full.pause(4, rng=_Top()) == 8.0
    assert full.pause(4, rng=_Bottom()) == 1.0
    half = Backoff(floor=1, cap=100, jitter=0.5)
    assert half.pause(4, rng=_Bottom()) == 4.5  # the upper half of [1, 8]
    rng = random.Random(3)
    pauses = [full.pause(4, rng=rng) for _ in range(200)]
    assert all(1 <= p <= 8 for p in pauses)
    assert len(set(pauses)) > 100  # spread, not lockstep


def test_backoff_retry_after_is_bounded_by_floor_and_max_retry_after() -> None:
    backoff = Backoff(floor=2, cap=10, max_retry_after=60)
    assert backoff.until(NOW + dt.timedelta(seconds=30), NOW) == 30
    assert backoff.until(NOW - dt.timedelta(seconds=30), NOW) == 2  # never a tight loop
    assert backoff.until(NOW + dt.timedelta(days=1), NOW) == 60


@pytest.mark.parametrize(
    "bad",
    [
        {"floor": -1, "cap": 1},
        {"floor": 2, "cap": 1},
        {"floor": 1, "cap": 2, "multiplier": 0.5},
        {"floor": 1, "cap": 2, "jitter": 1.5},
        {"floor": 1, "cap": 2, "max_retry_after": -1},
    ],
)
def test_backoff_refuses_bad_settings(bad: dict[str, float]) -> None:
    with pytest.raises(InvalidInput):
        Backoff(**bad)


# --- poll_until -----------------------------------------------------------------------------


class _Checks:
    """A check that is done on its ``done_on``-th call; until then, ``answers`` say why."""

    def __init__(self, done_on: int, answers: list[Again[str]] | None = None) -> None:
        self.done_on = done_on
        self.answers = answers or []
        self.calls = 0

    async def __call__(self) -> str | Again[str]:
        self.calls += 1
        if self.calls >= self.done_on:
            return "done"
        return self.answers[self.calls - 1] if self.answers else Again()


@pytest.mark.anyio
async def test_poll_until_sleeps_the_growing_pause_between_checks() -> None:
    clock = FakeClock(NOW)
    check = _Checks(done_on=5)
    backoff = Backoff(initial=1, multiplier=2, floor=0.5, cap=5)
    assert await poll_until(check, clock=clock, backoff=backoff) == "done"
    assert check.calls == 5
    assert clock.sleeps == [1, 2, 4, 5]  # one sleep between two checks, none after the last


@pytest.mark.anyio
async def test_poll_until_starts_from_a_first_result_the_caller_had() -> None:
    clock = FakeClock(NOW)
    check = _Checks(done_on=2)
    backoff = Backoff(initial=1, multiplier=2, floor=0.5, cap=5)
    done = await poll_until(check, clock=clock, backoff=backoff, first=Again(pause=7))
    assert done == "done"
    # the first result's pause, then the check's own first Again and its backoff pause
    assert clock.sleeps == [7, 1]
    assert check.calls == 2


@pytest.mark.anyio
async def test_poll_until_obeys_retry_after_and_exact_pauses() -> None:
    clock = FakeClock(NOW)
    later = NOW + dt.timedelta(seconds=30)
    check = _Checks(done_on=4, answers=[Again(retry_after=later), Again(pause=0), Again()])
    backoff = Backoff(initial=1, multiplier=3, floor=0.5, cap=100)
    assert await poll_until(check, clock=clock, backoff=backoff) == "done"
    # the server's 30 s replace step 1; the exact pause 0 is a checkpoint, not a sleep and
    # no step; the next computed pause is step 2's
    assert clock.sleeps == [30, 3]


@pytest.mark.anyio
async def test_poll_until_never_sleeps_past_the_deadline() -> None:
    clock = FakeClock(NOW)
    check = _Checks(done_on=1_000)
    deadline = NOW + dt.timedelta(seconds=10)
    backoff = Backoff(initial=4, multiplier=1, floor=1, cap=4)
    with pytest.raises(AttemptTimeout):
        await poll_until(check, clock=clock, backoff=backoff, deadline=deadline)
    assert clock.sleeps == [4, 4, 2]  # the last pause cut to the deadline
    assert clock.now() == deadline
    assert check.calls == 4  # checked once more at the deadline, then gave up


@pytest.mark.anyio
async def test_poll_until_raises_the_callers_error_at_the_deadline() -> None:
    clock = FakeClock(NOW)

    class Late(Exception):
        pass

    with pytest.raises(Late):
        await poll_until(
            _Checks(done_on=1_000),
            clock=clock,
            backoff=Backoff(floor=1, cap=1),
            deadline=NOW,
            on_deadline=Late,
        )
    assert clock.sleeps == []


@pytest.mark.anyio
async def test_poll_until_lets_errors_of_the_check_through() -> None:
    clock = FakeClock(NOW)

    async def broken() -> Again[str]:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        await poll_until(broken, clock=clock, backoff=Backoff(floor=1, cap=1))
    assert clock.sleeps == []


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_checkpoint_lets_others_run_and_honours_cancellation(backend: str) -> None:
    pytest.importorskip(backend)

    async def main() -> list[str]:
        order: list[str] = []

        async def other() -> None:
            order.append("other")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            await _checkpoint()  # the other task runs here
            order.append("after")
        with anyio.CancelScope() as scope:
            scope.cancel()
            await _checkpoint()
            order.append("not cancelled")
        assert scope.cancelled_caught
        return order

    assert anyio.run(main, backend=backend) == ["other", "after"]
