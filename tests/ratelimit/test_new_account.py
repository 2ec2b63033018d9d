"""The ledger gates ``newAccount`` like every other spend it models.

* The ledger's part (pure, on a :class:`FakeClock`): ``reserve_new_account`` spends
  atomically (replicas on one store never overspend), ``release`` / ``account_refused``
  give back what no account came of, a ``rateLimited`` answer is learned, and
  ``cached_budget`` answers without awaiting.
* The client's part, against the real Pebble behind the fault proxy (which records every
  request and its JWS): with no room left, a second new key's ``register()`` raises
  :class:`RateLimitDeferred` with the exact instant and Pebble never sees its
  ``newAccount``; a key that has an account is looked up (``onlyReturnExisting``) and
  registers all the same; an existing key with room spends nothing in the end.
* The CLI's ``account create`` goes through the same gate (exit 3, or the existing account).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any

import anyio
import josepy
import pytest

from acmecerts import (
    AccountKey,
    AcmeClient,
    FakeClock,
    Http01Server,
    RateLimitDeferred,
    RateLimited,
)
from acmecerts.errors import AcmeProblem, ProblemType, TransportError
from acmecerts.ratelimit import NO_LIMITS, Limit, RateLimitLedger, RateLimitModel, Scope
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer
from tests.faults.proxy import RATE_LIMITED, FaultProxy, Match, RecordedRequest, Respond
from tests.ratelimit.conftest import T0

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

HOUR = dt.timedelta(hours=1)
LIMIT = "new_accounts_per_ip"
#: One new account per hour (the next one an hour after the first).
ONE_PER_HOUR = RateLimitModel([Limit(LIMIT, 1, HOUR, Scope.SOURCE_ADDRESS)], name="tiny")
#: Two per hour: one token back every 30 minutes.
TWO_PER_HOUR = RateLimitModel([Limit(LIMIT, 2, HOUR, Scope.SOURCE_ADDRESS)], name="two")


def remaining(ledger: RateLimitLedger, limit: str = LIMIT) -> int | None:
    """Tokens left for ``limit`` (the whole capacity when no line is listed)."""
    lines = ledger.cached_budget(limit=limit)
    if lines is None:
        return None
    return min((line.remaining for line in lines), default=ledger.model[limit].capacity)


# -- the ledger --------------------------------------------------------------------------


async def test_reserve_new_account_spends_and_says_when_the_next_fits(clock: FakeClock) -> None:
    ledger = RateLimitLedger(TWO_PER_HOUR, clock=clock)
    first = await ledger.reserve_new_account()
    second = await ledger.reserve_new_account()
    third = await ledger.reserve_new_account()
    assert first.allowed
    assert second.allowed
    assert first.charges == ((LIMIT, "local"),)
    assert not third.allowed
    assert third.not_before == T0 + HOUR / 2  # one token back every 30 minutes
    assert (third.limit, third.scope_key) == (LIMIT, "local")
    assert remaining(ledger) == 0
    await ledger.release(second)  # the CA said 200: nothing was created
    assert remaining(ledger) == 1
    assert (await ledger.check_new_account()).allowed
    clock.advance(HOUR / 2)
    assert remaining(ledger) == 2


async def test_other_sources_have_their_own_bucket(clock: FakeClock) -> None:
    ledger = RateLimitLedger(ONE_PER_HOUR, clock=clock)
    assert (await ledger.reserve_new_account(source="192.0.2.1")).allowed
    assert not (await ledger.reserve_new_account(source="192.0.2.1")).allowed
    assert (await ledger.reserve_new_account(source="192.0.2.2")).allowed


async def test_a_model_without_account_limits_reserves_nothing(clock: FakeClock) -> None:
    ledger = RateLimitLedger(NO_LIMITS, clock=clock)
    decisions = [await ledger.reserve_new_account() for _ in range(20)]
    assert all(d.allowed and d.charges == () for d in decisions)
    assert await ledger.budget() == []


async def test_account_refused_gives_back_unless_the_account_may_exist(clock: FakeClock) -> None:
    ledger = RateLimitLedger(TWO_PER_HOUR, clock=clock)
    problem = AcmeProblem(ProblemType.SERVER_INTERNAL, "boom", status_code=500)
    never_sent = TransportError("connection refused", reached_ca=False)
    maybe_created = TransportError("read timeout", reached_ca=True)
    for error, kept in ((problem, 0), (never_sent, 0), (maybe_created, 1), (anyio_cancel(), 1)):
        before = remaining(ledger)
        decision = await ledger.reserve_new_account()
        assert decision.allowed, error
        await ledger.account_refused(decision, error)
        assert remaining(ledger) == (before or 0) - kept, error


def anyio_cancel() -> BaseException:
    """A cancellation as the client sees it (the request may have been sent)."""
    return anyio.get_cancelled_exc_class()()


async def test_a_rate_limited_answer_holds_new_accounts_back_until_the_ca_says(
    clock: FakeClock,
) -> None:
    until = T0 + 3 * HOUR
    answer = RateLimited(
        ProblemType.RATE_LIMITED,
        "too many new registrations (10) from this IP address",
        retry_after=until,
    )
    for model in (ONE_PER_HOUR, NO_LIMITS):  # a bucket emptied, or a learned block
        ledger = RateLimitLedger(model, clock=clock)
        decision = await ledger.reserve_new_account()
        assert decision.allowed
        await ledger.account_refused(decision, answer)
        refusal = await ledger.check_new_account()
        assert not refusal.allowed, model
        assert refusal.not_before == until, model
        assert refusal.limit == LIMIT
        # orders are not held back by it
        assert (await ledger.check(["a.example.com"], account="acct")).allowed


async def test_replicas_sharing_a_store_never_create_more_accounts_than_allowed(
    clock: FakeClock, tmp_path: Path
) -> None:
    key = KeyLayout("https://ca.test/dir").ledger()
    replicas = [
        RateLimitLedger(TWO_PER_HOUR, clock=clock, storage=FileStorage(tmp_path), key=key)
        for _ in range(4)
    ]
    allowed: list[bool] = []

    async def one(ledger: RateLimitLedger) -> None:
        allowed.append((await ledger.reserve_new_account()).allowed)

    async with anyio.create_task_group() as tg:
        for i in range(12):
            tg.start_soon(one, replicas[i % 4])
    assert sorted(allowed) == [False] * 10 + [True] * 2
    fresh = RateLimitLedger(TWO_PER_HOUR, clock=clock, storage=FileStorage(tmp_path), key=key)
    assert not (await fresh.check_new_account()).allowed


async def test_cached_budget_answers_without_awaiting(clock: FakeClock, tmp_path: Path) -> None:
    memory = RateLimitLedger(TWO_PER_HOUR, clock=clock)
    assert memory.cached_budget() == []  # known at once: nothing spent
    await memory.reserve_new_account()
    assert remaining(memory) == 1

    key = KeyLayout("https://ca.test/dir").ledger()
    stored = RateLimitLedger(TWO_PER_HOUR, clock=clock, storage=FileStorage(tmp_path), key=key)
    other = RateLimitLedger(TWO_PER_HOUR, clock=clock, storage=FileStorage(tmp_path), key=key)
    assert stored.cached_budget() is None  # not read yet: unknown, not "full"
    await other.reserve_new_account()
    await stored.budget()
    assert remaining(stored) == 1  # the other replica's spend, read from the store
    await stored.reserve_new_account()
    assert remaining(stored) == 0  # its own spend, at once
    refused = await other.reserve_new_account()  # no room left: refused, nothing spent
    assert not refused.allowed
    await other.release(refused)  # releasing a refusal gives nothing back
    await stored.budget()
    assert remaining(stored) == 0
    clock.advance(HOUR / 2)
    assert remaining(stored) == 1  # refilled by the clock, no read needed


# -- the client, against Pebble -------------------------------------------------------------


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def jws_of(request: RecordedRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """The protected header and the payload of a recorded JWS request."""
    body = json.loads(request.body)
    payload = json.loads(_b64(body["payload"])) if body["payload"] else {}
    return json.loads(_b64(body["protected"])), payload


def new_accounts(proxy: FaultProxy, key: AccountKey | None = None) -> list[dict[str, Any]]:
    """The payloads of the ``newAccount`` requests the proxy saw (of ``key`` only)."""
    found = []
    for request in proxy.requests_to("/sign-me-up", "POST"):
        protected, payload = jws_of(request)
        jwk = josepy.JWK.from_json(protected["jwk"])
        if key is None or jwk.thumbprint() == key.jwk.thumbprint():
            found.append(payload)
    return found


def creating(proxy: FaultProxy, key: AccountKey | None = None) -> int:
    """How many ``newAccount`` requests could have created an account."""
    return sum(1 for p in new_accounts(proxy, key) if not p.get("onlyReturnExisting"))


def client(
    proxy: FaultProxy, pebble: PebbleServer, ledger: RateLimitLedger, **kw: Any
) -> AcmeClient:
    return AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, ledger=ledger, **kw)


async def test_no_room_for_a_second_account_defers_it_and_nothing_is_sent(
    pebble: PebbleServer, proxy: FaultProxy, clock: FakeClock, http01: Http01Server
) -> None:
    ledger = RateLimitLedger(ONE_PER_HOUR, clock=clock)
    first_key, second_key = AccountKey.generate(), AccountKey.generate()
    async with client(proxy, pebble, ledger, account_key=first_key) as first:
        account = await first.register()
    assert proxy.requests_to("/sign-me-up", "POST")[-1].status == 201

    async with client(proxy, pebble, ledger, account_key=second_key) as second:
        with pytest.raises(RateLimitDeferred) as caught:
            await second.register()
        deferred = caught.value
        assert deferred.retry_after == T0 + HOUR  # exact: the FakeClock did not move
        assert deferred.limit == LIMIT
        assert deferred.scope_key == "local"
        assert not deferred.reached_ca
        assert second.account_url is None
        # issuing with that key is deferred the same way, before any newOrder
        with pytest.raises(RateLimitDeferred) as again:
            await second.issue(["deferred.account.example.test"], solver=http01)
        assert again.value.retry_after == T0 + HOUR

    # Pebble never saw a newAccount that could create the second account: only lookups
    assert creating(proxy, second_key) == 0
    assert new_accounts(proxy, second_key) == [{"onlyReturnExisting": True}] * 2
    assert proxy.requests_to("/order-plz") == []
    assert creating(proxy) == 1

    # the first key, restarted without its URL, is found, not held back
    async with client(proxy, pebble, ledger, account_key=first_key) as restarted:
        assert (await restarted.register()).url == account.url
        assert restarted.account_url == account.url
    assert creating(proxy) == 1

    # an hour later there is room again
    clock.advance(HOUR)
    async with client(proxy, pebble, ledger, account_key=second_key) as second:
        created = await second.register()
    assert created.url != account.url
    assert creating(proxy, second_key) == 1
    assert remaining(ledger) == 0


async def test_an_existing_key_with_room_gives_its_token_back(
    pebble: PebbleServer, proxy: FaultProxy, clock: FakeClock
) -> None:
    ledger = RateLimitLedger(TWO_PER_HOUR, clock=clock)
    key = AccountKey.generate()
    async with client(proxy, pebble, ledger, account_key=key) as c:
        url = (await c.register()).url
    assert remaining(ledger) == 1
    async with client(proxy, pebble, ledger, account_key=key) as c:
        assert (await c.register()).url == url  # newAccount answered 200: existing
    statuses = [r.status for r in proxy.requests_to("/sign-me-up", "POST")]
    assert statuses == [201, 200]
    assert remaining(ledger) == 1  # reserved, then given back


async def test_a_rate_limited_new_account_is_learned(
    pebble: PebbleServer, proxy: FaultProxy, clock: FakeClock
) -> None:
    # an HTTP-date the client's (real) clock sees as far off, so it is not waited out
    until = (dt.datetime.now(dt.UTC) + 2 * HOUR).replace(microsecond=0)
    ledger = RateLimitLedger(NO_LIMITS, clock=clock)  # the model knows of no such limit
    proxy.add_rule(
        Match("/sign-me-up", "POST"),
        Respond(
            429,
            RATE_LIMITED,
            detail="too many new registrations (10) from this IP address",
            retry_after=until.strftime("%a, %d %b %Y %H:%M:%S GMT"),
        ),
    )
    async with client(proxy, pebble, ledger) as c:
        with pytest.raises(RateLimited):
            await c.register()
    async with client(proxy, pebble, ledger) as c:
        with pytest.raises(RateLimitDeferred) as caught:
            await c.register()
    assert caught.value.retry_after == until
    statuses = [r.status for r in proxy.requests_to("/sign-me-up", "POST")]
    assert statuses == [429, 400]  # the refused creation, then a lookup: no account
    assert creating(proxy) == 1


async def test_replicas_registering_at_once_create_only_what_the_shared_ledger_allows(
    pebble: PebbleServer, proxy: FaultProxy, clock: FakeClock, tmp_path: Path
) -> None:
    key = KeyLayout(proxy.directory_url).ledger()
    outcomes: list[str] = []

    async def replica() -> None:
        ledger = RateLimitLedger(ONE_PER_HOUR, clock=clock, storage=FileStorage(tmp_path), key=key)
        async with client(proxy, pebble, ledger) as c:
            try:
                await c.register()
            except RateLimitDeferred as exc:
                outcomes.append(f"deferred to {exc.retry_after}")
            else:
                outcomes.append("created")

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(replica)
    assert sorted(outcomes) == ["created"] + [f"deferred to {T0 + HOUR}"] * 4
    assert creating(proxy) == 1
    assert [r.status for r in proxy.requests_to("/sign-me-up", "POST")].count(201) == 1


async def test_without_a_ledger_register_sends_newaccount_as_before(
    pebble: PebbleServer, proxy: FaultProxy
) -> None:
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle) as c:
        await c.register()
        await c.register()
    assert [r.status for r in proxy.requests_to("/sign-me-up", "POST")] == [201, 200]


async def test_a_burst_of_attempts_without_room_looks_the_key_up_once(
    pebble: PebbleServer, proxy: FaultProxy, clock: FakeClock, http01: Http01Server
) -> None:
    ledger = RateLimitLedger(ONE_PER_HOUR, clock=clock)
    await ledger.account_created()  # the hour's account is spent
    deferred: list[dt.datetime | None] = []
    # the client shares the fake clock: "moments later" is exact
    async with client(proxy, pebble, ledger, clock=clock) as c:

        async def attempt(i: int) -> None:
            try:
                await c.issue([f"b{i}.burst.example.test"], solver=http01)
            except RateLimitDeferred as exc:
                deferred.append(exc.retry_after)

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(attempt, i)
        assert deferred == [T0 + HOUR] * 20
        assert new_accounts(proxy) == [{"onlyReturnExisting": True}]  # one lookup for all

        clock.advance(31)  # later on, the key is looked up again
        with pytest.raises(RateLimitDeferred):
            await c.issue(["late.burst.example.test"], solver=http01)
    assert new_accounts(proxy) == [{"onlyReturnExisting": True}] * 2
    assert proxy.requests_to("/order-plz") == []
