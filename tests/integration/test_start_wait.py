"""A CA's ``Retry-After`` at the start of work, waited out within a budget, against a real
Pebble behind the fault proxy: ``call_within_wait`` (what the CLI's ``--max-wait`` uses
before anything is ordered)."""

from __future__ import annotations

import datetime as _dt

import pytest

from acmecerts.client import AcmeClient
from acmecerts.errors import AcmeCertsError, ErrorKind, RateLimitDeferred
from acmecerts.manager import WaitBeyondBudget, call_within_wait, told_to_wait
from acmecerts.retry import RequestRetry
from acmecerts.testing import PebbleServer
from tests.faults.proxy import FaultProxy, Match, Respond

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

NONCE = "/nonce-plz"


def client(pebble: PebbleServer, proxy: FaultProxy) -> AcmeClient:
    # the transport waits half a second at most: longer waits come up to the caller
    return AcmeClient(
        proxy.directory_url,
        ca_bundle=pebble.ca_bundle,
        terms_of_service_agreed=True,
        request_retry=RequestRetry(max_wait=0.5),
    )


async def test_a_busy_ca_is_waited_for_within_the_budget(
    pebble: PebbleServer, proxy: FaultProxy
) -> None:
    proxy.add_rule(Match(NONCE), Respond(503, retry_after="2", replay_nonce=False), times=1)
    waits: list[tuple[float, ErrorKind]] = []
    started = _dt.datetime.now(_dt.UTC)
    async with client(pebble, proxy) as acme:
        await call_within_wait(
            acme.register, max_wait=30, on_wait=lambda delay, e: waits.append((delay, e.kind))
        )
        assert acme.account_url is not None
    elapsed = (_dt.datetime.now(_dt.UTC) - started).total_seconds()
    assert len(waits) == 1
    assert waits[0][1] is ErrorKind.SERVER_BUSY
    assert waits[0][0] >= 1.0
    assert elapsed >= 1.9  # never sooner than the CA said (a lower bound only)
    statuses = [r.status for r in proxy.requests_to(NONCE)]
    assert statuses[:2] == [503, 200]


async def test_a_wait_past_the_budget_stops_at_once(
    pebble: PebbleServer, proxy: FaultProxy
) -> None:
    proxy.add_rule(Match(NONCE), Respond(503, retry_after="3600", replay_nonce=False), times=1)
    waits: list[float] = []
    async with client(pebble, proxy) as acme:
        with pytest.raises(WaitBeyondBudget) as raised:
            await call_within_wait(
                acme.register, max_wait=5, on_wait=lambda delay, e: waits.append(delay)
            )
        assert acme.account_url is None
    assert waits == []
    beyond = raised.value
    assert beyond.error.kind is ErrorKind.SERVER_BUSY
    ahead = (beyond.until - _dt.datetime.now(_dt.UTC)).total_seconds()
    assert 3500 < ahead <= 3600
    # one answer, nothing sent after it
    assert [r.status for r in proxy.requests_to(NONCE)] == [503]
    assert proxy.requests_to("/sign-me-up", "POST") == []


async def test_an_error_waiting_does_not_cure_comes_up_as_it_is(
    pebble: PebbleServer, proxy: FaultProxy
) -> None:
    proxy.add_rule(
        Match("/sign-me-up", "POST"),
        Respond(400, problem_type="urn:ietf:params:acme:error:malformed", detail="no"),
        times=1,
    )
    calls = 0

    async def register(acme: AcmeClient) -> None:
        nonlocal calls
        calls += 1
        await acme.register()

    async with client(pebble, proxy) as acme:
        with pytest.raises(AcmeCertsError) as raised:
            await call_within_wait(lambda: register(acme), max_wait=30)
    assert not isinstance(raised.value, WaitBeyondBudget)
    assert raised.value.kind is ErrorKind.PERMANENT
    assert calls == 1


def test_the_ledgers_own_deferral_is_not_the_cas_retry_after() -> None:
    until = _dt.datetime(2030, 1, 1)
    deferred = RateLimitDeferred("the ledger says wait", retry_after=until, limit=None)
    assert told_to_wait(deferred) is None
