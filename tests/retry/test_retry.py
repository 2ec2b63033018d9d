"""Retry policy: request-level backoff and the attempt schedule, proven with FakeClock."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import random
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acmecerts._time import FakeClock
from acmecerts.errors import (
    AcmeCertsError,
    AuthorizationFailed,
    BadNonce,
    BadServerResponse,
    ConnectError,
    ErrorKind,
    InvalidInput,
    Malformed,
    OrderFailed,
    ProblemType,
    RateLimited,
    RequestTimeout,
    ServerBusy,
    StorageError,
)
from acmecerts.retry import (
    LETS_ENCRYPT_DELAYS,
    AttemptSchedule,
    AttemptState,
    RequestRetry,
    retry_request,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

UTC = dt.UTC
START = dt.datetime(2026, 1, 1, tzinfo=UTC)
DAY = 86400.0


class MaxRandom(random.Random):
    """Jitter that always picks the top of the window."""

    def uniform(self, a: float, b: float) -> float:
        return b


class MinRandom(random.Random):
    """Jitter that always picks the bottom of the window."""

    def uniform(self, a: float, b: float) -> float:
        return a


class Script:
    """A request that fails with the given errors, in order, then answers ``"ok"``."""

    def __init__(self, clock: FakeClock, errors: Sequence[AcmeCertsError | Exception]) -> None:
        self.clock = clock
        self.errors = list(errors)
        self.calls: list[dt.datetime] = []

    async def __call__(self) -> str:
        self.calls.append(self.clock.now())
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def not_sent() -> ConnectError:
    return ConnectError("connection refused", reached_ca=False)


def timed_out() -> RequestTimeout:
    return RequestTimeout("no answer within 10 s", reached_ca=True)


def bad_nonce() -> BadNonce:
    return BadNonce(ProblemType.BAD_NONCE, "JWS has an invalid anti-replay nonce", status_code=400)


def rate_limited(retry_after: dt.datetime | None) -> RateLimited:
    return RateLimited(
        ProblemType.RATE_LIMITED, "too many new orders", status_code=429, retry_after=retry_after
    )


def server_busy(retry_after: dt.datetime | None) -> ServerBusy:
    return ServerBusy(ProblemType.SERVER_INTERNAL, "maintenance", retry_after=retry_after)


def failed_order() -> OrderFailed:
    return OrderFailed("order became invalid", order_url="https://ca.test/order/1")


# --- RequestRetry.delay ------------------------------------------------------------------


@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    rng=st.randoms(use_true_random=False),
    floor=st.floats(min_value=0.001, max_value=10),
    extra=st.floats(min_value=0, max_value=100),
    multiplier=st.floats(min_value=1, max_value=10),
)
def test_delay_is_within_floor_and_window(
    attempt: int, rng: random.Random, floor: float, extra: float, multiplier: float
) -> None:
    cap = floor + extra
    policy = RequestRetry(floor=floor, cap=cap, multiplier=multiplier)
    delay = policy.delay(attempt, retry_after=None, now=START, rng=rng)
    try:
        window = min(cap, floor * multiplier ** (attempt - 1))
    except OverflowError:
        window = cap
    assert floor <= delay <= max(floor, window)


def test_delay_window_grows_exponentially_up_to_the_cap() -> None:
    policy = RequestRetry()  # floor 0.5, multiplier 2, cap 30
    tops = [policy.delay(n, retry_after=None, now=START, rng=MaxRandom()) for n in range(1, 10)]
    assert tops == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    bottoms = [policy.delay(n, retry_after=None, now=START, rng=MinRandom()) for n in range(1, 10)]
    assert bottoms == [0.5] * 9


def test_delay_full_jitter_spreads_over_the_window() -> None:
    policy = RequestRetry()
    rng = random.Random(1)
    delays = [policy.delay(6, retry_after=None, now=START, rng=rng) for _ in range(500)]
    assert 0.5 <= min(delays) < 2
    assert 14 < max(delays) <= 16


def test_later_retry_after_wins_over_backoff_even_beyond_the_cap() -> None:
    policy = RequestRetry()
    later = START + dt.timedelta(seconds=45)
    assert policy.delay(1, retry_after=later, now=START) == 45


def test_earlier_retry_after_does_not_shorten_the_backoff() -> None:
    policy = RequestRetry()
    past = START - dt.timedelta(hours=1)
    assert policy.delay(3, retry_after=past, now=START, rng=MaxRandom()) == 2.0
    assert policy.delay(3, retry_after=START, now=START, rng=MinRandom()) == 0.5


def test_request_retry_accepts_timedelta_and_validates() -> None:
    policy = RequestRetry(floor=dt.timedelta(seconds=1), cap=dt.timedelta(minutes=1))
    assert policy.floor == 1.0
    assert policy.cap == 60.0
    assert dataclasses.replace(policy, cap=5).cap == 5.0
    for bad in (
        {"floor": 10, "cap": 1},
        {"floor": -1},
        {"floor": 0},
        {"multiplier": 0.5},
        {"max_attempts": 0},
        {"max_bad_nonce": -1},
        {"max_wait": math.inf},
    ):
        with pytest.raises(InvalidInput):
            RequestRetry(**bad)


# --- retry_request -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_transient_errors_are_retried_with_backoff_between_floor_and_cap() -> None:
    clock = FakeClock(START)
    call = Script(clock, [not_sent(), timed_out(), not_sent(), timed_out()])
    result = await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=True)
    assert result == "ok"
    assert len(call.calls) == 5
    assert len(clock.sleeps) == 4
    assert all(0.5 <= s <= 30 for s in clock.sleeps)
    gaps = [(b - a).total_seconds() for a, b in zip(call.calls, call.calls[1:], strict=False)]
    assert gaps == pytest.approx(clock.sleeps)


@pytest.mark.anyio
async def test_never_tighter_than_the_floor_nor_looser_than_the_cap() -> None:
    policy = RequestRetry(max_attempts=20, floor=2, cap=10, multiplier=3)
    for seed in range(50):
        clock = FakeClock(START)
        call = Script(clock, [not_sent() for _ in range(19)])
        await retry_request(
            call, policy=policy, clock=clock, idempotent=False, rng=random.Random(seed)
        )
        assert len(clock.sleeps) == 19
        assert all(2 <= s <= 10 for s in clock.sleeps)


@pytest.mark.anyio
async def test_attempt_limit_is_honoured_and_the_last_error_raised_unwrapped() -> None:
    clock = FakeClock(START)
    errors = [timed_out() for _ in range(10)]
    call = Script(clock, errors)
    with pytest.raises(RequestTimeout) as caught:
        await retry_request(call, policy=RequestRetry(max_attempts=3), clock=clock, idempotent=True)
    assert len(call.calls) == 3
    assert len(clock.sleeps) == 2
    assert caught.value is errors[2]  # the third error, as it was raised


@pytest.mark.anyio
async def test_bad_nonce_is_replayed_at_once_up_to_the_limit() -> None:
    clock = FakeClock(START)
    call = Script(clock, [bad_nonce() for _ in range(10)])
    assert await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=False) == "ok"
    assert len(call.calls) == 11
    assert clock.sleeps == []
    assert clock.now() == START


@pytest.mark.anyio
async def test_bad_nonce_beyond_the_limit_is_raised() -> None:
    clock = FakeClock(START)
    call = Script(clock, [bad_nonce() for _ in range(4)])
    with pytest.raises(BadNonce):
        await retry_request(
            call, policy=RequestRetry(max_bad_nonce=3), clock=clock, idempotent=True
        )
    assert len(call.calls) == 4
    assert clock.sleeps == []


@pytest.mark.anyio
async def test_bad_nonce_replays_do_not_count_as_attempts() -> None:
    clock = FakeClock(START)
    call = Script(clock, [not_sent(), bad_nonce(), bad_nonce(), not_sent(), bad_nonce()])
    policy = RequestRetry(max_attempts=3, max_bad_nonce=3)
    assert await retry_request(call, policy=policy, clock=clock, idempotent=False) == "ok"
    assert len(call.calls) == 6
    assert len(clock.sleeps) == 2  # only the two transient errors slept


@pytest.mark.anyio
async def test_non_idempotent_post_that_reached_the_ca_is_not_replayed() -> None:
    clock = FakeClock(START)
    error = timed_out()
    call = Script(clock, [error])
    with pytest.raises(RequestTimeout) as caught:
        await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=False)
    assert caught.value is error
    assert len(call.calls) == 1
    assert clock.sleeps == []


@pytest.mark.anyio
async def test_non_idempotent_post_is_retried_when_it_never_reached_the_ca() -> None:
    clock = FakeClock(START)
    call = Script(clock, [not_sent(), not_sent()])
    assert await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=False) == "ok"
    assert len(call.calls) == 3


@pytest.mark.anyio
async def test_5xx_without_problem_is_retried_when_idempotent() -> None:
    clock = FakeClock(START)
    error = BadServerResponse("502 Bad Gateway", status_code=502, kind=ErrorKind.TRANSIENT)
    call = Script(clock, [error, error])
    assert await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=True) == "ok"
    assert len(clock.sleeps) == 2


@pytest.mark.anyio
async def test_rate_limited_waits_until_retry_after_then_retries() -> None:
    clock = FakeClock(START)
    retry_after = START + dt.timedelta(seconds=42)
    call = Script(clock, [rate_limited(retry_after)])
    # a 429 is a refusal, so even a non-idempotent POST is replayed at the named time
    assert await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=False) == "ok"
    assert clock.sleeps == [42]
    assert call.calls == [START, retry_after]


@pytest.mark.anyio
async def test_server_busy_with_retry_after_waits_and_retries() -> None:
    clock = FakeClock(START)
    retry_after = START + dt.timedelta(seconds=0.1)  # sooner than the backoff floor
    call = Script(clock, [server_busy(retry_after), server_busy(retry_after)])
    assert await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=True) == "ok"
    assert len(clock.sleeps) == 2
    assert all(s >= 0.5 for s in clock.sleeps)  # the floor still holds
    assert call.calls[1] >= retry_after


@pytest.mark.anyio
async def test_503_problem_is_transient_and_its_retry_after_is_obeyed() -> None:
    clock = FakeClock(START)
    retry_after = START + dt.timedelta(seconds=50)  # beyond the 30 s cap
    error = ServerBusy(
        ProblemType.SERVER_INTERNAL, "busy", status_code=503, retry_after=retry_after
    )
    assert error.kind is ErrorKind.TRANSIENT
    call = Script(clock, [error])
    assert await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=True) == "ok"
    assert clock.sleeps == [50]
    assert call.calls[1] == retry_after


@pytest.mark.anyio
@pytest.mark.parametrize("make", [rate_limited, server_busy], ids=["rate-limited", "server-busy"])
async def test_retry_after_beyond_max_wait_is_raised_to_the_caller(make: Any) -> None:
    clock = FakeClock(START)
    error = make(START + dt.timedelta(seconds=61))
    call = Script(clock, [error])
    with pytest.raises(AcmeCertsError) as caught:
        await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=True)
    assert caught.value is error
    assert clock.sleeps == []


@pytest.mark.anyio
async def test_max_wait_is_configurable() -> None:
    clock = FakeClock(START)
    call = Script(clock, [rate_limited(START + dt.timedelta(minutes=5))])
    policy = RequestRetry(max_wait=dt.timedelta(minutes=10))
    assert await retry_request(call, policy=policy, clock=clock, idempotent=True) == "ok"
    assert clock.sleeps == [300]


@pytest.mark.anyio
@pytest.mark.parametrize("make", [rate_limited, server_busy], ids=["rate-limited", "server-busy"])
async def test_rate_limited_or_busy_without_retry_after_is_raised(make: Any) -> None:
    clock = FakeClock(START)
    call = Script(clock, [make(None)])
    with pytest.raises(AcmeCertsError):
        await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=True)
    assert len(call.calls) == 1


@pytest.mark.anyio
async def test_permanent_errors_are_raised_at_once() -> None:
    clock = FakeClock(START)
    call = Script(clock, [Malformed(ProblemType.MALFORMED, "bad JWS", status_code=400)])
    with pytest.raises(Malformed):
        await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=True)
    assert len(call.calls) == 1


@pytest.mark.anyio
async def test_foreign_exceptions_are_not_retried() -> None:
    clock = FakeClock(START)
    call = Script(clock, [KeyError("bug")])
    with pytest.raises(KeyError):
        await retry_request(call, policy=RequestRetry(), clock=clock, idempotent=True)
    assert len(call.calls) == 1


@pytest.mark.anyio
async def test_on_retry_reports_each_retry() -> None:
    clock = FakeClock(START)
    errors: list[AcmeCertsError] = [bad_nonce(), not_sent(), rate_limited(START)]
    seen: list[tuple[int, AcmeCertsError, float]] = []
    call = Script(clock, errors[:])
    await retry_request(
        call,
        policy=RequestRetry(),
        clock=clock,
        idempotent=True,
        on_retry=lambda n, e, d: seen.append((n, e, d)),
    )
    assert [n for n, _, _ in seen] == [1, 2, 3]
    assert [e for _, e, _ in seen] == errors
    assert [d for _, _, d in seen] == [0.0, *clock.sleeps]


# --- AttemptSchedule ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_default_schedule_is_followed_exactly_with_jitter_zero() -> None:
    schedule = AttemptSchedule(jitter=0)
    clock = FakeClock(START)
    state = AttemptState()
    for _ in range(5):
        await clock.sleep(schedule.wait_seconds(state, clock.now()))
        assert schedule.ready(state, clock.now())
        state = schedule.after_failure(state, failed_order(), now=clock.now())
        assert not schedule.ready(state, clock.now())
    await clock.sleep(schedule.wait_seconds(state, clock.now()))
    assert clock.sleeps == [0, 60, 600, 6000, 86400, 86400]
    assert state.attempts == 5
    assert schedule.ready(state, clock.now())


def test_lets_encrypt_delays_are_the_default() -> None:
    schedule = AttemptSchedule(jitter=0)
    assert LETS_ENCRYPT_DELAYS == (60, 600, 6000, DAY)
    assert [schedule.delay(n) for n in range(1, 8)] == [60, 600, 6000, DAY, DAY, DAY, DAY]


def test_default_jitter_is_ten_percent() -> None:
    schedule = AttemptSchedule()
    rng = random.Random(7)
    for n, base in enumerate(LETS_ENCRYPT_DELAYS, start=1):
        delays = [schedule.delay(n, rng=rng) for _ in range(200)]
        assert all(0.9 * base <= d <= 1.1 * base for d in delays)
        assert max(delays) - min(delays) > 0.1 * base  # really spread


def test_ready_exactly_at_next_attempt_at() -> None:
    schedule = AttemptSchedule(jitter=0)
    state = schedule.after_failure(AttemptState(), failed_order(), now=START)
    assert state.next_attempt_at == START + dt.timedelta(minutes=1)
    assert not schedule.ready(state, START + dt.timedelta(seconds=59))
    assert schedule.wait_seconds(state, START + dt.timedelta(seconds=59)) == 1
    assert schedule.ready(state, START + dt.timedelta(minutes=1))
    assert schedule.wait_seconds(state, START + dt.timedelta(hours=1)) == 0


def test_later_retry_after_wins_over_the_schedule() -> None:
    schedule = AttemptSchedule(jitter=0)
    later = START + dt.timedelta(hours=3)
    state = schedule.after_failure(AttemptState(), rate_limited(later), now=START)
    assert state.attempts == 1
    assert state.next_attempt_at == later
    assert state.last_error_kind == "rate-limited"


def test_earlier_retry_after_does_not_shorten_the_schedule() -> None:
    schedule = AttemptSchedule(jitter=0)
    state = AttemptState(attempts=2)
    state = schedule.after_failure(state, rate_limited(START + dt.timedelta(seconds=5)), now=START)
    assert state.next_attempt_at == START + dt.timedelta(seconds=6000)


def test_transient_error_that_never_reached_the_ca_does_not_escalate() -> None:
    schedule = AttemptSchedule(jitter=0)
    state = AttemptState()
    for _ in range(3):
        state = schedule.after_failure(state, failed_order(), now=START)
    assert state.attempts == 3
    state = schedule.after_failure(state, not_sent(), now=START)
    assert state.attempts == 3
    assert state.next_attempt_at == START + dt.timedelta(minutes=1)
    assert state.last_error == "ConnectError: connection refused"
    assert state.last_error_kind == "transient"
    # ... but a transient error that reached the CA does escalate
    state = schedule.after_failure(state, timed_out(), now=START)
    assert state.attempts == 4
    assert state.next_attempt_at == START + dt.timedelta(days=1)


def test_a_503_the_ca_answered_escalates_though_nothing_was_spent() -> None:
    # issue #26 (d): a 503 without Retry-After is TRANSIENT and reached_ca is false (the
    # CA created nothing), but the CA answered: it is failing, so the schedule escalates
    from acmecerts.errors import ProxyError
    from acmecerts.protocol.problems import synthetic_problem

    schedule = AttemptSchedule(jitter=0)
    state = AttemptState()
    waits = []
    for _ in range(4):
        busy = synthetic_problem(
            503, url="https://ca.test/new-order", retry_after=None, reason="", reached_ca=False
        )  # as the transport builds a 503
        assert busy.kind is ErrorKind.TRANSIENT
        assert busy.reached_ca is False
        state = schedule.after_failure(state, busy, now=START)
        assert state.next_attempt_at is not None
        waits.append((state.next_attempt_at - START).total_seconds())
    assert state.attempts == 4
    assert waits == [60, 600, 6000, 86400]
    # a proxy's answer to CONNECT is no answer of the CA: no escalation
    proxied = ProxyError("proxy refused the tunnel", status_code=503)
    assert schedule.after_failure(state, proxied, now=START).attempts == 4


def test_after_success_starts_over() -> None:
    schedule = AttemptSchedule(jitter=0)
    state = schedule.after_failure(AttemptState(attempts=7), failed_order(), now=START)
    assert schedule.after_success(state) == AttemptState()
    assert schedule.after_success() == AttemptState()
    assert schedule.ready(AttemptState(), START)


def test_from_delays_repeating_the_last() -> None:
    schedule = AttemptSchedule.from_delays([30, dt.timedelta(minutes=5)], jitter=0)
    assert [schedule.delay(n) for n in range(1, 5)] == [30, 300, 300, 300]
    assert not schedule.exhausted(AttemptState(attempts=100))


def test_from_delays_without_repeat_gives_up() -> None:
    schedule = AttemptSchedule.from_delays([30, 300], repeat_last=False, jitter=0)
    state = AttemptState()
    for expected in (30, 300):
        state = schedule.after_failure(state, failed_order(), now=START)
        assert schedule.wait_seconds(state, START) == expected
    state = schedule.after_failure(state, failed_order(), now=START)
    assert state.attempts == 3
    assert schedule.exhausted(state)
    assert state.next_attempt_at is None
    assert not schedule.ready(state, START + dt.timedelta(days=365))
    assert schedule.wait_seconds(state, START) == math.inf
    assert schedule.ready(schedule.after_success(state), START)


def test_exponential_schedule() -> None:
    schedule = AttemptSchedule.exponential(jitter=0)
    assert [schedule.delay(n) for n in range(1, 7)] == [60, 600, 6000, 60000, DAY, DAY]
    custom = AttemptSchedule.exponential(
        base=dt.timedelta(seconds=10), multiplier=2, cap=dt.timedelta(minutes=1), jitter=0
    )
    assert [custom.delay(n) for n in range(1, 7)] == [10, 20, 40, 60, 60, 60]
    assert custom.delay(10_000) == 60


def test_schedule_validation() -> None:
    with pytest.raises(InvalidInput):
        AttemptSchedule(jitter=1)
    with pytest.raises(InvalidInput):
        AttemptSchedule(jitter=-0.1)
    with pytest.raises(InvalidInput):
        AttemptSchedule.from_delays([])
    with pytest.raises(InvalidInput):
        AttemptSchedule.from_delays([-1])
    with pytest.raises(InvalidInput):
        AttemptSchedule.exponential(base=60, cap=10)
    with pytest.raises(InvalidInput):
        AttemptSchedule(jitter=0).delay(0)


def test_authorization_failure_escalates() -> None:
    schedule = AttemptSchedule(jitter=0)
    error = AuthorizationFailed("example.com", None, authorization_url="https://ca.test/authz/1")
    state = schedule.after_failure(AttemptState(), error, now=START)
    assert state.attempts == 1
    assert state.last_error_kind == "permanent"


# --- AttemptState JSON -------------------------------------------------------------------

states = st.builds(
    AttemptState,
    attempts=st.integers(min_value=0, max_value=10**9),
    next_attempt_at=st.none() | st.datetimes(timezones=st.just(UTC)),
    last_error=st.none() | st.text(),
    last_error_kind=st.none() | st.sampled_from([kind.value for kind in ErrorKind]),
    parked=st.none() | st.text(),
    solvers=st.none() | st.text(),
)


@given(state=states)
def test_attempt_state_json_round_trip(state: AttemptState) -> None:
    text = json.dumps(state.to_json())
    assert AttemptState.from_json(json.loads(text)) == state


def test_attempt_state_json_is_utc_iso8601() -> None:
    state = AttemptSchedule(jitter=0).after_failure(AttemptState(), failed_order(), now=START)
    assert state.to_json() == {
        "attempts": 1,
        "next_attempt_at": "2026-01-01T00:01:00+00:00",
        "last_error": "OrderFailed: order became invalid",
        "last_error_kind": "permanent",
    }


def test_attempt_state_from_json_normalises_to_utc_and_ignores_unknown_keys() -> None:
    state = AttemptState.from_json(
        {"attempts": 2, "next_attempt_at": "2026-01-01T02:00:00+02:00", "future": True}
    )
    assert state == AttemptState(attempts=2, next_attempt_at=START)
    assert state.next_attempt_at is not None
    assert state.next_attempt_at.tzinfo is UTC


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "attempts",
        {},
        {"attempts": -1},
        {"attempts": "1"},
        {"attempts": True},
        {"attempts": 1.5},
        {"attempts": None},
        {"attempts": 1, "next_attempt_at": "tomorrow"},
        {"attempts": 1, "next_attempt_at": "2026-01-01T00:00:00"},  # no time zone
        {"attempts": 1, "next_attempt_at": 1767225600},
        {"attempts": 1, "last_error": 5},
        {"attempts": 1, "last_error_kind": "weird"},
        {"attempts": 1, "last_error_kind": 3},
        {"attempts": 1, "parked": 5},
        {"attempts": 1, "solvers": ["http-01"]},
    ],
)
def test_corrupt_attempt_state_raises_storage_error(data: Any) -> None:
    with pytest.raises(StorageError):
        AttemptState.from_json(data)
