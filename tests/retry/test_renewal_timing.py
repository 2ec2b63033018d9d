"""Renewal on time for every lifetime: the policy, on a fake clock (no network).

Two rules, both pure:

* without ARI a certificate is renewed with a third of its lifetime left, or half of it
  under 10 days (``acmecerts.protocol.ari.fallback_renewal_time``; the boundary cases are
  in ``tests/protocol/test_ari.py``);
* a failed renewal never waits more than a quarter of the time its certificate has left
  (``AttemptSchedule.expiry_fraction``), not below ten minutes (``expiry_floor``), and
  the CA's ``Retry-After`` still wins.

The same rules against a real Pebble 2.10 are in ``tests/faults/test_renewal_lifetimes.py``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random

import pytest

from acmecerts._time import FakeClock
from acmecerts.errors import InvalidInput, OrderFailed, ProblemType, RateLimited
from acmecerts.protocol.ari import fallback_renewal_time
from acmecerts.retry import AttemptSchedule, AttemptState

T0 = dt.datetime(2027, 3, 1, tzinfo=dt.UTC)
SECOND = dt.timedelta(seconds=1)
MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
#: Three failures already: 1 min, 10 min and 100 min are spent, the next step is a day.
DAILY = AttemptState(attempts=3)


def failed_order() -> OrderFailed:
    return OrderFailed("order became invalid", order_url="https://ca.test/order/1")


def rate_limited(retry_after: dt.datetime) -> RateLimited:
    return RateLimited(
        ProblemType.RATE_LIMITED, "too many orders", status_code=429, retry_after=retry_after
    )


def next_wait(
    schedule: AttemptSchedule,
    state: AttemptState,
    *,
    left: dt.timedelta | None,
    error: Exception | None = None,
    rng: random.Random | None = None,
) -> dt.timedelta:
    """How long ``schedule`` waits after a failure at ``T0`` with ``left`` until expiry."""
    failed = schedule.after_failure(
        state,
        error or failed_order(),  # type: ignore[arg-type]
        now=T0,
        rng=rng,
        expires_at=None if left is None else T0 + left,
    )
    assert failed.next_attempt_at is not None
    return failed.next_attempt_at - T0


# -- the cut ---------------------------------------------------------------------------


def test_a_6_day_certificate_with_30_hours_left_does_not_wait_a_day() -> None:
    schedule = AttemptSchedule(jitter=0)
    assert next_wait(schedule, DAILY, left=30 * HOUR) == 7.5 * HOUR  # a quarter of 30 h
    # a first issuance has no certificate to lose: the schedule's day
    assert next_wait(schedule, DAILY, left=None) == DAY
    # the count still goes up: the cut shortens the wait, it does not reset the schedule
    state = schedule.after_failure(DAILY, failed_order(), now=T0, expires_at=T0 + 30 * HOUR)
    assert state.attempts == 4


def test_the_cut_is_jittered_down_never_past_the_quarter() -> None:
    schedule = AttemptSchedule()  # ±10 %
    waits = {
        next_wait(schedule, DAILY, left=30 * HOUR, rng=random.Random(seed)) for seed in range(50)
    }
    assert all(0.9 * 7.5 * HOUR <= wait <= 7.5 * HOUR for wait in waits)
    assert len(waits) > 40  # certificates that expire together do not retry together


def test_a_90_day_certificate_keeps_the_daily_step_until_its_last_days() -> None:
    schedule = AttemptSchedule(jitter=0)
    # renewed at 30 days left: the whole schedule as Let's Encrypt recommends it
    steps = [next_wait(schedule, AttemptState(attempts=n), left=30 * DAY) for n in range(5)]
    assert steps == [MINUTE, 10 * MINUTE, 100 * MINUTE, DAY, DAY]
    assert next_wait(schedule, DAILY, left=4 * DAY) == DAY  # a quarter of 4 days is a day
    assert next_wait(schedule, DAILY, left=3 * DAY) == 18 * HOUR


def test_short_steps_stay_and_the_cut_stops_at_ten_minutes() -> None:
    schedule = AttemptSchedule(jitter=0)
    # the first step (1 min) is shorter than any cut: it stays, even with 1 min left
    assert next_wait(schedule, AttemptState(), left=MINUTE) == MINUTE
    # a day's step with 20 min left: a quarter would be 5 min; the floor is 10 min
    assert next_wait(schedule, DAILY, left=20 * MINUTE) == 10 * MINUTE
    assert next_wait(schedule, DAILY, left=2 * HOUR) == 30 * MINUTE


def test_a_later_retry_after_wins_over_the_cut() -> None:
    """The CA's word: a failed renewal may then wait past a quarter of the time left."""
    schedule = AttemptSchedule(jitter=0)
    late = rate_limited(T0 + 20 * HOUR)
    assert next_wait(schedule, DAILY, left=30 * HOUR, error=late) == 20 * HOUR
    # even past the certificate's expiry, if that is what the CA said
    too_late = rate_limited(T0 + 40 * HOUR)
    assert next_wait(schedule, DAILY, left=30 * HOUR, error=too_late) == 40 * HOUR
    # an earlier Retry-After does not shorten the (cut) schedule
    early = rate_limited(T0 + HOUR)
    assert next_wait(schedule, DAILY, left=30 * HOUR, error=early) == 7.5 * HOUR


def test_an_expired_certificate_keeps_the_schedule() -> None:
    schedule = AttemptSchedule(jitter=0)
    assert next_wait(schedule, DAILY, left=-HOUR) == DAY
    assert next_wait(schedule, DAILY, left=dt.timedelta(0)) == DAY


def test_the_cut_is_configurable_and_checked() -> None:
    assert next_wait(AttemptSchedule(jitter=0, expiry_fraction=None), DAILY, left=30 * HOUR) == DAY
    third = AttemptSchedule(jitter=0, expiry_fraction=1 / 3, expiry_floor=dt.timedelta(hours=1))
    assert third.expiry_floor == 3600.0
    assert next_wait(third, DAILY, left=30 * HOUR) == 10 * HOUR
    assert next_wait(third, DAILY, left=2 * HOUR) == HOUR
    for fraction in (0.0, 1.0, -0.25, 1.5):
        with pytest.raises(InvalidInput, match="expiry_fraction"):
            AttemptSchedule(expiry_fraction=fraction)
    for floor in (0.0, -1.0, float("inf")):
        with pytest.raises(InvalidInput, match="expiry_floor"):
            AttemptSchedule(expiry_floor=floor)


# -- a whole failing renewal, simulated ---------------------------------------------------


async def failing_renewal(
    lifetime: dt.timedelta, *, seed: int, retry_after: dt.timedelta | None = None
) -> list[dt.datetime]:
    """Every attempt of a renewal that always fails, from its due instant to expiry.

    The certificate was issued at ``T0`` and is renewed without ARI; each attempt fails
    (with a ``Retry-After`` of ``retry_after`` when given) and the manager's default
    schedule says when the next one starts.
    """
    not_after = T0 + lifetime - SECOND  # notAfter is inclusive, as Let's Encrypt issues it
    due = fallback_renewal_time(T0, not_after)
    clock = FakeClock(due)
    schedule, state, rng = AttemptSchedule(), AttemptState(), random.Random(seed)
    attempts: list[dt.datetime] = []
    while clock.now() < not_after:
        attempts.append(clock.now())
        error = failed_order() if retry_after is None else rate_limited(clock.now() + retry_after)
        state = schedule.after_failure(state, error, now=clock.now(), rng=rng, expires_at=not_after)
        await clock.sleep(schedule.wait_seconds(state, clock.now()))
    return attempts


def assert_never_past_a_quarter(attempts: list[dt.datetime], not_after: dt.datetime) -> None:
    for earlier, later in itertools.pairwise(attempts):
        cut = max(10 * MINUTE, (not_after - earlier) / 4)
        assert later - earlier <= cut, (earlier, later, not_after)
        assert later - earlier >= 0.9 * MINUTE  # never a tight loop


@pytest.mark.anyio
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_failing_160_hour_renewal_keeps_trying_until_expiry(seed: int) -> None:
    lifetime = 160 * HOUR
    not_after = T0 + lifetime - SECOND
    attempts = await failing_renewal(lifetime, seed=seed)
    # due at half the lifetime (80 h left), not at a third (53 h 20 min left)
    assert attempts[0] == T0 + (lifetime - SECOND) / 2
    assert_never_past_a_quarter(attempts, not_after)
    # the old schedule would try 4 times in the first two hours, then 3 times a day apart
    # (the last one 6 h before expiry); now the attempts close in on expiry
    assert not_after - attempts[-1] <= 10 * MINUTE
    assert len([t for t in attempts if not_after - t <= 30 * HOUR]) >= 8
    # and do not spin: at most one every 10 minutes once the cut reaches its floor
    assert 15 <= len(attempts) <= 30, len(attempts)


@pytest.mark.anyio
async def test_a_failing_90_day_renewal_is_daily_until_its_last_four_days() -> None:
    lifetime = 90 * DAY
    not_after = T0 + lifetime - SECOND
    attempts = await failing_renewal(lifetime, seed=7)
    assert abs(attempts[0] - (not_after - 30 * DAY)) <= SECOND
    assert_never_past_a_quarter(attempts, not_after)
    gaps = [(b - a, not_after - a) for a, b in itertools.pairwise(attempts)]
    # from the fourth failure until 4 days are left: the daily step, jittered ±10 %
    daily = [gap for gap, left in gaps[3:] if left > 4.5 * DAY]
    assert len(daily) >= 24
    assert all(0.9 * DAY <= gap <= 1.1 * DAY for gap in daily)
    assert not_after - attempts[-1] <= 10 * MINUTE
    assert len(attempts) <= 60


@pytest.mark.anyio
async def test_a_retry_after_longer_than_the_cut_is_obeyed_to_expiry() -> None:
    """A CA that says "come back in 12 hours" every time: 12 hours it is, to the end."""
    lifetime = 160 * HOUR
    attempts = await failing_renewal(lifetime, seed=4, retry_after=12 * HOUR)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert all(gap >= 12 * HOUR for gap in gaps)
    assert len(attempts) == 7  # 80 hours at 12 hours each
