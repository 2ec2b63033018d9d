"""The ledger in memory, on a fake clock: buckets, exemptions, failures, learning, budget."""

from __future__ import annotations

import datetime as dt

import anyio
import pytest

from acmecerts import FakeClock
from acmecerts.errors import (
    AuthorizationFailed,
    ErrorKind,
    IdentifierPaused,
    InvalidInput,
    ProblemType,
    RateLimitDeferred,
    RateLimited,
)
from acmecerts.ratelimit import (
    LETS_ENCRYPT,
    NO_LIMITS,
    Event,
    IssuanceRequest,
    Limit,
    RateLimitLedger,
    RateLimitModel,
    Scope,
)
from tests.ratelimit.conftest import ACCOUNT, T0

pytestmark = pytest.mark.anyio

DOMAIN_T = dt.timedelta(minutes=201, seconds=36)  # 7 days / 50
PER_DOMAIN = "certificates_per_registered_domain"
EXACT_SET = "certificates_per_exact_identifier_set"
NEW_ORDERS = "new_orders_per_account"
FAILURES = "authorization_failures_per_identifier_per_account"
CONSECUTIVE = "consecutive_authorization_failures_per_identifier_per_account"


def rate_limited(detail: str, retry_after: dt.datetime | None = None) -> RateLimited:
    return RateLimited(ProblemType.RATE_LIMITED, detail, status_code=429, retry_after=retry_after)


async def fill_domain(ledger: RateLimitLedger, domain: str = "example.com", n: int = 50) -> None:
    for i in range(n):
        decision = await ledger.reserve([f"h{i}.{domain}"], account=ACCOUNT)
        assert decision.allowed, (i, decision)


# -- token buckets -----------------------------------------------------------------------


async def test_a_full_bucket_allows_its_capacity_then_one_per_interval(
    ledger: RateLimitLedger, clock: FakeClock
) -> None:
    await fill_domain(ledger)
    denied = await ledger.reserve(["late.example.com"], account=ACCOUNT)
    assert not denied.allowed
    assert denied.limit == PER_DOMAIN
    assert denied.scope_key == "example.com"
    assert denied.not_before == T0 + DOMAIN_T

    clock.advance(DOMAIN_T - dt.timedelta(microseconds=1))
    assert not (await ledger.check(["late.example.com"], account=ACCOUNT)).allowed
    clock.advance(dt.timedelta(microseconds=1))
    assert (await ledger.reserve(["late.example.com"], account=ACCOUNT)).allowed
    # ... and the one after that waits a whole interval more.
    again = await ledger.check(["later.example.com"], account=ACCOUNT)
    assert again.not_before == T0 + 2 * DOMAIN_T


async def test_the_bucket_refills_evenly_and_never_beyond_capacity(
    ledger: RateLimitLedger, clock: FakeClock
) -> None:
    await fill_domain(ledger)
    clock.advance(10 * DOMAIN_T + dt.timedelta(minutes=1))
    [line] = await ledger.budget(limit=PER_DOMAIN)
    assert (line.scope_key, line.capacity, line.remaining) == ("example.com", 50, 10)
    assert line.full_at == T0 + dt.timedelta(days=7)
    assert line.next_slot == clock.now()

    clock.advance(dt.timedelta(days=30))  # idle for a month: still only 50 at once
    assert await ledger.budget(limit=PER_DOMAIN) == []
    await fill_domain(ledger, n=50)
    assert not (await ledger.check(["x.example.com"], account=ACCOUNT)).allowed


async def test_one_order_spends_one_token_per_registered_domain(
    ledger: RateLimitLedger,
) -> None:
    decision = await ledger.reserve(
        ["a.example.com", "b.example.com", "www.example.org"], account=ACCOUNT
    )
    assert decision.allowed
    lines = {line.scope_key: line.remaining for line in await ledger.budget(limit=PER_DOMAIN)}
    assert lines == {"example.com": 49, "example.org": 49}


async def test_another_domain_and_another_account_share_nothing_but_what_they_should(
    ledger: RateLimitLedger,
) -> None:
    await fill_domain(ledger)
    assert (await ledger.check(["a.example.net"], account=ACCOUNT)).allowed
    # Certificates per registered domain are shared by every account.
    other = await ledger.check(["a.example.com"], account="https://ca.test/acme/acct/2")
    assert other.limit == PER_DOMAIN


async def test_exact_identifier_set_allows_five_per_week(ledger: RateLimitLedger) -> None:
    names = ["b.example.com", "a.example.com"]
    for _ in range(5):
        assert (await ledger.reserve(names, account=ACCOUNT)).allowed
    sixth = await ledger.check(list(reversed(names)), account=ACCOUNT)
    assert sixth.limit == EXACT_SET
    assert sixth.scope_key == "a.example.com,b.example.com"
    assert sixth.not_before == T0 + dt.timedelta(hours=33, minutes=36)
    assert (await ledger.check(["a.example.com"], account=ACCOUNT)).allowed


async def test_new_orders_per_account(clock: FakeClock) -> None:
    model = LETS_ENCRYPT.with_overrides({NEW_ORDERS: (3, dt.timedelta(hours=3))})
    ledger = RateLimitLedger(model, clock=clock)
    for i in range(3):
        assert (await ledger.reserve([f"n{i}.example.com"], account=ACCOUNT)).allowed
    fourth = await ledger.check(["n9.example.net"], account=ACCOUNT)
    assert (fourth.limit, fourth.scope_key) == (NEW_ORDERS, ACCOUNT)
    assert fourth.not_before == T0 + dt.timedelta(hours=1)
    assert (await ledger.check(["n9.example.net"], account="https://other")).allowed


async def test_the_binding_limit_is_the_one_that_opens_last(clock: FakeClock) -> None:
    model = LETS_ENCRYPT.with_overrides({NEW_ORDERS: (1, dt.timedelta(hours=1))})
    ledger = RateLimitLedger(model, clock=clock)
    await fill_domain(ledger, n=1)
    blocked = await ledger.check(["h0.example.com"], account=ACCOUNT)
    assert (blocked.limit, blocked.not_before) == (NEW_ORDERS, T0 + dt.timedelta(hours=1))


# -- exemptions --------------------------------------------------------------------------


async def test_ari_renewals_are_exempt_from_every_limit(ledger: RateLimitLedger) -> None:
    await fill_domain(ledger)
    for _ in range(6):
        decision = await ledger.reserve(["h0.example.com"], account=ACCOUNT, replaces=True)
        assert decision.allowed
        assert decision.charges == ()
    for _ in range(5):
        await ledger.authorization_failed("h0.example.com", account=ACCOUNT)
    assert (await ledger.check(["h0.example.com"], account=ACCOUNT, replaces=True)).allowed


async def test_renewal_of_the_same_set_skips_per_domain_and_new_orders_only(
    ledger: RateLimitLedger,
) -> None:
    await fill_domain(ledger)
    names = ["h1.example.com"]
    renewal = await ledger.reserve(names, account=ACCOUNT, renewal_of=["H1.example.com"])
    assert renewal.allowed
    assert {limit for limit, _ in renewal.charges} == {EXACT_SET}
    # Not the same set: a new certificate, held back by the registered domain.
    changed = await ledger.check(
        ["h1.example.com", "new.example.com"], account=ACCOUNT, renewal_of=names
    )
    assert changed.limit == PER_DOMAIN
    # Renewals still count against the exact set: 5 per week.
    for _ in range(3):
        assert (await ledger.reserve(names, account=ACCOUNT, renewal_of=names)).allowed
    fifth = await ledger.check(names, account=ACCOUNT, renewal_of=names)
    assert fifth.limit == EXACT_SET


# -- authorization failures and pauses --------------------------------------------------


async def test_five_failed_authorizations_per_hour_hold_back_orders_for_that_name(
    ledger: RateLimitLedger, clock: FakeClock
) -> None:
    for _ in range(5):
        assert not await ledger.authorization_failed("www.example.com", account=ACCOUNT)
    decision = await ledger.check(["www.example.com", "api.example.com"], account=ACCOUNT)
    assert (decision.limit, decision.scope_key) == (FAILURES, f"www.example.com {ACCOUNT}")
    assert decision.not_before == T0 + dt.timedelta(minutes=12)
    assert (await ledger.check(["api.example.com"], account=ACCOUNT)).allowed
    assert (await ledger.check(["www.example.com"], account="https://other")).allowed
    # A wildcard is validated as its base name.
    assert not (await ledger.check(["*.www.example.com"], account=ACCOUNT)).allowed
    clock.advance(dt.timedelta(minutes=12))
    assert (await ledger.check(["www.example.com"], account=ACCOUNT)).allowed


async def test_consecutive_failures_pause_the_identifier_until_unpaused(
    clock: FakeClock,
) -> None:
    model = LETS_ENCRYPT.with_overrides({CONSECUTIVE: 3})
    ledger = RateLimitLedger(model, clock=clock)
    assert not await ledger.authorization_failed("www.example.com", account=ACCOUNT)
    assert not await ledger.authorization_failed("www.example.com", account=ACCOUNT)
    assert await ledger.authorization_failed("www.example.com", account=ACCOUNT)

    decision = await ledger.reserve(["www.example.com", "a.example.com"], account=ACCOUNT)
    assert not decision.allowed
    assert decision.paused == ("www.example.com",)
    assert decision.not_before is None
    with pytest.raises(IdentifierPaused) as caught:
        await ledger.preflight(["www.example.com"], account=ACCOUNT, replaces=True)
    assert caught.value.identifiers == ("www.example.com",)
    assert caught.value.kind is ErrorKind.PERMANENT
    with pytest.raises(IdentifierPaused):
        await ledger.when(["www.example.com"], account=ACCOUNT)
    clock.advance(dt.timedelta(days=365))  # time alone does not lift a pause
    assert (await ledger.check(["www.example.com"], account=ACCOUNT)).paused
    lines = await ledger.budget(limit=CONSECUTIVE)
    assert [(line.paused, line.next_slot) for line in lines if line.paused] == [(True, None)]

    assert await ledger.unpause("www.example.com", account=ACCOUNT)
    assert (await ledger.check(["www.example.com"], account=ACCOUNT)).allowed


async def test_a_valid_authorization_ends_the_run_of_failures(
    clock: FakeClock,
) -> None:
    model = LETS_ENCRYPT.with_overrides({CONSECUTIVE: 3})
    ledger = RateLimitLedger(model, clock=clock)
    await ledger.authorization_failed("www.example.com", account=ACCOUNT)
    await ledger.authorization_failed("www.example.com", account=ACCOUNT)
    await ledger.authorization_succeeded("www.example.com", account=ACCOUNT)
    assert not await ledger.authorization_failed("www.example.com", account=ACCOUNT)
    assert not await ledger.authorization_failed("www.example.com", account=ACCOUNT)
    assert await ledger.authorization_failed("www.example.com", account=ACCOUNT)


# -- reservations and the client's hooks -------------------------------------------------


async def test_release_gives_back_what_a_reservation_spent(ledger: RateLimitLedger) -> None:
    await fill_domain(ledger, n=49)
    decision = await ledger.reserve(["last.example.com"], account=ACCOUNT)
    assert decision.allowed
    assert not (await ledger.check(["x.example.com"], account=ACCOUNT)).allowed
    await ledger.release(decision)
    assert (await ledger.check(["x.example.com"], account=ACCOUNT)).allowed
    assert {line.limit for line in await ledger.budget()} == {EXACT_SET, NEW_ORDERS, PER_DOMAIN}


async def test_certificate_only_release_keeps_the_order_spent(clock: FakeClock) -> None:
    model = LETS_ENCRYPT.with_overrides({NEW_ORDERS: 1, PER_DOMAIN: 1})
    ledger = RateLimitLedger(model, clock=clock)
    decision = await ledger.reserve(["a.example.com"], account=ACCOUNT)
    await ledger.release(decision, certificate_only=True)
    after = await ledger.check(["b.example.com"], account=ACCOUNT)
    assert after.limit == NEW_ORDERS


async def test_preflight_raises_rate_limit_deferred_with_the_instant(
    ledger: RateLimitLedger,
) -> None:
    await fill_domain(ledger)
    with pytest.raises(RateLimitDeferred) as caught:
        await ledger.preflight(["z.example.com"], account=ACCOUNT)
    error = caught.value
    assert error.retry_after == T0 + DOMAIN_T
    assert (error.limit, error.scope_key) == (PER_DOMAIN, "example.com")
    assert error.identifiers == ("z.example.com",)
    assert error.kind is ErrorKind.RATE_LIMITED
    assert not error.reached_ca


async def test_attempt_ended_records_failures_and_refunds_unissued_certificates(
    ledger: RateLimitLedger,
) -> None:
    names = ["www.example.com"]
    await ledger.preflight(names, account=ACCOUNT)
    failure = AuthorizationFailed("www.example.com", None, authorization_url="https://authz")
    await ledger.attempt_ended(
        names,
        account=ACCOUNT,
        authorized=False,
        finalized=False,
        error=ExceptionGroup("attempt", [failure]),
    )
    lines = {line.limit: line for line in await ledger.budget()}
    assert set(lines) == {NEW_ORDERS, FAILURES, CONSECUTIVE}  # certificates given back
    assert lines[FAILURES].remaining == 4

    await ledger.preflight(names, account=ACCOUNT)
    await ledger.attempt_ended(names, account=ACCOUNT, authorized=True, finalized=True, error=None)
    lines = {line.limit: line for line in await ledger.budget()}
    assert CONSECUTIVE not in lines  # the run of failures is over
    assert lines[PER_DOMAIN].remaining == 49


async def test_order_refused_learns_and_gives_everything_back(ledger: RateLimitLedger) -> None:
    names = ["www.example.com"]
    decision = await ledger.preflight(names, account=ACCOUNT)
    until = T0 + dt.timedelta(hours=5)
    error = rate_limited('too many certificates (50) already issued for "example.com"', until)
    await ledger.order_refused(decision, error, names, account=ACCOUNT)
    after = await ledger.check(["other.example.com"], account=ACCOUNT)
    assert (after.limit, after.not_before) == (PER_DOMAIN, until)
    assert [line.limit for line in await ledger.budget()] == [PER_DOMAIN]


# -- learning from the CA ----------------------------------------------------------------


async def test_a_429_empties_the_bucket_until_the_cas_retry_after(
    ledger: RateLimitLedger, clock: FakeClock
) -> None:
    # The model thinks example.com is untouched; the CA knows better (another client).
    until = T0 + dt.timedelta(hours=2)
    detail = (
        'too many certificates (50) already issued for "example.com" in the last 168h0m0s, '
        "retry after 2026-01-01 02:00:00 UTC: see "
        "https://letsencrypt.org/docs/rate-limits/#new-certificates-per-registered-domain"
    )
    learned = await ledger.learn_from(
        rate_limited(detail, until), ["www.example.com"], account=ACCOUNT
    )
    assert (learned.limit, learned.scope_key, learned.not_before) == (
        PER_DOMAIN,
        "example.com",
        until,
    )
    assert (await ledger.check(["api.example.com"], account=ACCOUNT)).not_before == until
    assert (await ledger.check(["api.example.org"], account=ACCOUNT)).allowed
    clock.advance(dt.timedelta(hours=2))
    # The bucket now agrees with the CA: one certificate, then one per interval.
    assert (await ledger.reserve(["api.example.com"], account=ACCOUNT)).allowed
    next_one = await ledger.check(["b.example.com"], account=ACCOUNT)
    assert next_one.not_before == until + DOMAIN_T


async def test_the_quoted_domain_narrows_what_is_learned(ledger: RateLimitLedger) -> None:
    until = T0 + dt.timedelta(hours=1)
    error = rate_limited('too many certificates (50) already issued for "example.org"', until)
    await ledger.learn_from(error, ["a.example.com", "b.example.org"], account=ACCOUNT)
    assert (await ledger.check(["a.example.com"], account=ACCOUNT)).allowed
    assert not (await ledger.check(["www.example.org"], account=ACCOUNT)).allowed


async def test_retry_after_comes_from_the_detail_when_the_header_is_missing(
    ledger: RateLimitLedger,
) -> None:
    detail = (
        "too many new orders (300) from this account in the last 3h0m0s, "
        "retry after 2026-01-01 00:10:00 UTC"
    )
    learned = await ledger.learn_from(rate_limited(detail), ["a.example.com"], account=ACCOUNT)
    assert (learned.limit, learned.not_before) == (NEW_ORDERS, T0 + dt.timedelta(minutes=10))
    assert (await ledger.check(["z.example.net"], account=ACCOUNT)).limit == NEW_ORDERS


async def test_a_limit_the_model_lacks_is_learned_as_a_block(clock: FakeClock) -> None:
    ledger = RateLimitLedger(NO_LIMITS, clock=clock)
    until = T0 + dt.timedelta(minutes=30)
    detail = "too many certificates (5) already issued for this exact set of identifiers"
    await ledger.learn_from(rate_limited(detail, until), ["a.example.com"], account=ACCOUNT)
    blocked = await ledger.check(["a.example.com"], account=ACCOUNT)
    assert (blocked.limit, blocked.not_before) == (EXACT_SET, until)
    assert (await ledger.check(["a.example.com", "b.example.com"], account=ACCOUNT)).allowed
    assert (await ledger.check(["a.example.com"], account=ACCOUNT, replaces=True)).allowed
    [line] = await ledger.budget()
    assert (line.limit, line.capacity, line.next_slot) == (EXACT_SET, None, until)
    clock.advance(dt.timedelta(minutes=30))
    assert (await ledger.check(["a.example.com"], account=ACCOUNT)).allowed
    assert await ledger.budget() == []


async def test_an_unrecognised_429_holds_back_the_whole_account(clock: FakeClock) -> None:
    ledger = RateLimitLedger(NO_LIMITS, clock=clock)
    await ledger.learn_from(rate_limited("slow down"), ["a.example.com"], account=ACCOUNT)
    blocked = await ledger.check(["b.example.org"], account=ACCOUNT)
    assert (blocked.limit, blocked.not_before) == ("rate_limited", T0 + dt.timedelta(hours=1))
    assert (await ledger.check(["b.example.org"], account="https://other")).allowed


async def test_a_pause_answer_marks_the_identifier_paused(ledger: RateLimitLedger) -> None:
    detail = (
        'Your account is temporarily prevented from requesting certificates for "www.example.com"'
        " and possibly others. Please visit: https://portal.letsencrypt.org/sfe/v1/unpause"
    )
    await ledger.learn_from(
        rate_limited(detail), ["www.example.com", "api.example.com"], account=ACCOUNT
    )
    assert (await ledger.check(["www.example.com"], account=ACCOUNT)).paused
    assert (await ledger.check(["api.example.com"], account=ACCOUNT)).allowed


# -- accounts, plans, budget --------------------------------------------------------------


async def test_new_accounts_per_ip(ledger: RateLimitLedger, clock: FakeClock) -> None:
    for _ in range(10):
        assert (await ledger.check_new_account(source="198.51.100.7")).allowed
        await ledger.account_created(source="198.51.100.7")
    decision = await ledger.check_new_account(source="198.51.100.7")
    assert (decision.limit, decision.not_before) == (
        "new_accounts_per_ip",
        T0 + dt.timedelta(minutes=18),
    )
    assert (await ledger.check_new_account(source="198.51.100.8")).allowed


async def test_plan_queues_work_by_priority_and_says_when(ledger: RateLimitLedger) -> None:
    await fill_domain(ledger, n=48)
    requests = [
        IssuanceRequest(["new1.example.com"]),
        IssuanceRequest(["new2.example.com"]),
        IssuanceRequest(["ren.example.com"], expires_at=T0 + dt.timedelta(days=5)),
        IssuanceRequest(
            ["urgent.example.com", "x.example.com"],
            renewal_of=["urgent.example.com"],
            expires_at=T0 + dt.timedelta(days=1),
        ),
        IssuanceRequest(["vip.example.com"], priority=10),
        IssuanceRequest(["ari.example.com"], replaces=True, expires_at=T0 + dt.timedelta(days=9)),
    ]
    plan = await ledger.plan(requests, account=ACCOUNT)
    assert [(p.request.identifiers[0].value, p.at) for p in plan] == [
        ("vip.example.com", T0),
        ("urgent.example.com", T0),  # changed names: a new certificate for the domain
        ("ren.example.com", T0),  # same names: exempt from certificates per domain
        ("ari.example.com", T0),  # ARI: exempt from everything
        ("new1.example.com", T0 + DOMAIN_T),
        ("new2.example.com", T0 + 2 * DOMAIN_T),
    ]
    # Planning records nothing.
    assert (await ledger.check(["vip.example.com"], account=ACCOUNT)).allowed
    assert await ledger.when(["new1.example.com"], account=ACCOUNT) == T0


async def test_when_is_now_if_the_order_fits(ledger: RateLimitLedger, clock: FakeClock) -> None:
    assert await ledger.when(["a.example.com"], account=ACCOUNT) == T0
    await fill_domain(ledger)
    assert await ledger.when(["a.example.com"], account=ACCOUNT) == T0 + DOMAIN_T


async def test_custom_model_with_an_orders_per_ip_limit(clock: FakeClock) -> None:
    model = RateLimitModel(
        [Limit("orders_per_ip", 2, 60, Scope.SOURCE_ADDRESS, event=Event.NEW_ORDER)],
        name="tiny-ca",
    )
    ledger = RateLimitLedger(model, clock=clock)
    assert (await ledger.reserve(["a.example.com"], account="a1")).allowed
    assert (await ledger.reserve(["b.example.com"], account="a2")).allowed
    third = await ledger.check(["c.example.com"], account="a3")
    assert (third.limit, third.scope_key) == ("orders_per_ip", "local")


async def test_concurrent_reservations_never_overspend(ledger: RateLimitLedger) -> None:
    granted: list[bool] = []

    async def one(i: int) -> None:
        await anyio.lowlevel.checkpoint()
        granted.append((await ledger.reserve([f"c{i}.example.com"], account=ACCOUNT)).allowed)

    async with anyio.create_task_group() as tg:
        for i in range(200):
            tg.start_soon(one, i)
    assert granted.count(True) == 50


async def test_bad_arguments_are_refused(clock: FakeClock) -> None:
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock)
    with pytest.raises(InvalidInput):
        await ledger.check([], account=ACCOUNT)
    with pytest.raises(InvalidInput):
        await ledger.check(["a.example.com"], account="")
    with pytest.raises(InvalidInput):
        RateLimitLedger("lets-encrypt", clock=clock)  # type: ignore[arg-type]
