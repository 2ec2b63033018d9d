"""Properties of the token buckets, for any limit and any arrival pattern (hypothesis).

A token bucket of ``capacity`` tokens refilled one per ``T = period / capacity`` grants
at most ``capacity + floor(L / T)`` requests in any window of length ``L``: never more
than ``capacity`` in a burst, never more than ``2 * capacity`` in any ``period`` (and on
average ``capacity`` per ``period``). It also never refuses a request that fits: the
instant it names is exactly when the request fits.
"""

from __future__ import annotations

import datetime as dt

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from acmecerts import FakeClock
from acmecerts.protocol.identifiers import parse_identifiers
from acmecerts.ratelimit import Limit, RateLimitLedger, RateLimitModel, Scope
from acmecerts.ratelimit._state import LedgerState, OrderRequest, to_us
from tests.ratelimit.conftest import ACCOUNT, T0

limits = st.builds(
    lambda capacity, seconds: Limit("per_domain", capacity, seconds, Scope.REGISTERED_DOMAIN),
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=1, max_value=10_000),
)
# Gaps between arrivals (seconds, possibly zero: bursts) and which of 3 domains.
arrivals = st.lists(
    st.tuples(st.floats(min_value=0, max_value=3_000, allow_nan=False), st.integers(0, 2)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(limit=limits, pattern=arrivals)
def test_never_more_than_capacity_plus_refill_in_any_window(
    limit: Limit, pattern: list[tuple[float, int]]
) -> None:
    model = RateLimitModel([limit])
    clock = FakeClock(T0)
    ledger = RateLimitLedger(model, clock=clock)
    granted: dict[int, list[int]] = {0: [], 1: [], 2: []}

    async def run() -> None:
        for gap, domain in pattern:
            clock.advance(gap)
            decision = await ledger.reserve([f"x.d{domain}.example"], account=ACCOUNT)
            if decision.allowed:
                granted[domain].append(to_us(clock.now()))
            else:
                assert decision.not_before is not None
                assert decision.not_before > clock.now()

    anyio.run(run)
    t = limit.interval_us
    for times in granted.values():
        for a in range(len(times)):
            for b in range(a, len(times)):
                count = b - a + 1
                assert count <= limit.capacity + (times[b] - times[a]) // t
        period_us = limit.period // dt.timedelta(microseconds=1)
        for a in range(len(times)):
            in_period = [x for x in times[a:] if x - times[a] < period_us]
            assert len(in_period) <= 2 * limit.capacity


@settings(max_examples=60, deadline=None)
@given(
    limit=limits,
    pattern=arrivals,
)
def test_the_instant_named_is_exactly_when_the_request_fits(
    limit: Limit, pattern: list[tuple[float, int]]
) -> None:
    model = RateLimitModel([limit])
    state = LedgerState()
    now = to_us(T0)
    for gap, domain in pattern:
        now += int(gap * 1_000_000)
        request = OrderRequest(parse_identifiers([f"x.d{domain}.example"]), ACCOUNT)
        decision = state.evaluate(model, request, now)
        if decision.allowed:
            state.apply(model, decision.charges, now)
            continue
        assert decision.not_before is not None
        at = to_us(decision.not_before)
        assert at > now
        assert state.evaluate(model, request, at).allowed
        assert not state.evaluate(model, request, at - 1).allowed


@settings(max_examples=40, deadline=None)
@given(limit=limits, spends=st.integers(min_value=0, max_value=20))
def test_release_undoes_a_reservation(limit: Limit, spends: int) -> None:
    model = RateLimitModel([limit])
    state = LedgerState()
    now = to_us(T0)
    request = OrderRequest(parse_identifiers(["a.example.com"]), ACCOUNT)
    for _ in range(spends):
        state.spend(limit, "example.com", now)
    before = state.evaluate(model, request, now)
    before_budget = state.budget(model, now)
    for _ in range(3):
        decision = state.evaluate(model, request, now)
        if not decision.allowed:
            break
        state.apply(model, decision.charges, now)
        state.release(model, decision.charges, now)
    assert state.evaluate(model, request, now) == before
    assert state.budget(model, now) == before_budget
