"""The ledger against the real Pebble, behind a proxy that enforces Let's Encrypt's limit.

The proxy (``tests/faults/limits.py``) counts certificates per registered domain like
Let's Encrypt (50 per week, refilled one per 201.6 minutes) and answers 429
``rateLimited`` with ``Retry-After`` when a domain has none left. A fleet asks for 120
certificates under two registered domains:

* with the ledger, exactly 100 are issued, 20 are deferred before anything is sent (with
  the instant the next certificate fits), and the proxy never answers 429, even across a
  restart halfway through (new ledger and client objects on the same store); one refill
  interval of fake time later exactly one more fits per domain, still without a 429;
* without the ledger, the same run is answered 429s.

The ledger and the proxy share a :class:`FakeClock` (hours pass in an instant); the
client polls Pebble on the real clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from acmecerts import (
    AcmeClient,
    FakeClock,
    Http01Server,
    PollPolicy,
    RateLimitDeferred,
    RateLimited,
)
from acmecerts.errors import StorageError, Unauthorized
from acmecerts.ratelimit import LETS_ENCRYPT, IssuanceRequest, RateLimitLedger
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer
from tests.faults.limits import CertificatesPerDomain
from tests.faults.proxy import FaultProxy, Match, Respond

UNAUTHORIZED = "urn:ietf:params:acme:error:unauthorized"

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

WEEK = dt.timedelta(days=7)
INTERVAL = WEEK / 50  # 201.6 minutes
PER_DOMAIN = "certificates_per_registered_domain"
# Pebble (PEBBLE_VA_NOSLEEP) answers within milliseconds: poll it quickly.
FAST_POLL = PollPolicy(initial=0.02, multiplier=1.5, floor=0.01)


@dataclasses.dataclass
class Outcome:
    issued: list[str] = dataclasses.field(default_factory=list)
    deferred: list[RateLimitDeferred] = dataclasses.field(default_factory=list)
    limited: list[RateLimited] = dataclasses.field(default_factory=list)


def fleet(tag: str) -> tuple[list[str], tuple[str, str]]:
    """120 names, 60 under each of two registered domains (PSL: ``co.uk``, ``com``)."""
    domains = (f"{tag}-one.co.uk", f"{tag}-two.com")
    names = [f"c{i}.shop.{domains[i % 2]}" for i in range(120)]
    return names, domains


async def issue_all(client: AcmeClient, solver: Http01Server, names: Sequence[str]) -> Outcome:
    outcome = Outcome()
    limiter = anyio.CapacityLimiter(16)

    async def one(name: str) -> None:
        async with limiter:
            try:
                await client.issue([name], solver=solver)
            except RateLimitDeferred as exc:
                outcome.deferred.append(exc)
            except RateLimited as exc:
                outcome.limited.append(exc)
            else:
                outcome.issued.append(name)

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(one, name)
    return outcome


def registered(name: str) -> str:
    return name.split(".", 2)[2]


def answered_429(proxy: FaultProxy) -> int:
    return sum(1 for r in proxy.requests if r.status == 429)


async def test_with_the_ledger_100_are_issued_20_deferred_and_no_429(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock()
    t0 = clock.now()
    limits = CertificatesPerDomain(capacity=50, period=WEEK, now=clock.now).install(proxy)
    names, domains = fleet("ledger")
    key = KeyLayout(proxy.directory_url).ledger()

    def ledger() -> RateLimitLedger:
        """A new ledger object on a new store object: what a restarted process builds."""
        return RateLimitLedger(LETS_ENCRYPT, clock=clock, storage=FileStorage(tmp_path), key=key)

    first_half, second_half = names[:60], names[60:]
    async with AcmeClient(
        proxy.directory_url, ca_bundle=pebble.ca_bundle, poll=FAST_POLL, ledger=ledger()
    ) as client:
        before = await issue_all(client, http01, first_half)
        account_key, account_url = client.account_key, client.account_url
    assert len(before.issued) == 60
    assert before.deferred == before.limited == []

    # Restart: new ledger, store and client objects; only the directory on disk remains.
    async with AcmeClient(
        proxy.directory_url,
        ca_bundle=pebble.ca_bundle,
        poll=FAST_POLL,
        account_key=account_key,
        account_url=account_url,
        ledger=ledger(),
    ) as client:
        after = await issue_all(client, http01, second_half)
        assert account_url is not None
        plan = await client.ledger.plan(  # type: ignore[union-attr]
            [IssuanceRequest(d.identifiers) for d in after.deferred], account=account_url
        )

    issued = before.issued + after.issued
    assert len(issued) == 100
    assert limits.issued == {domains[0]: 50, domains[1]: 50}
    assert len(after.deferred) == 20
    assert after.limited == []
    for deferred in after.deferred:
        assert deferred.limit == PER_DOMAIN
        assert deferred.retry_after == t0 + INTERVAL  # the next certificate of the domain
        assert not deferred.reached_ca
    assert sorted(d.scope_key or "" for d in after.deferred) == sorted(list(domains) * 10)
    # Nothing was sent for the deferred orders, and the CA never had to say 429.
    assert len(proxy.requests_to("/order-plz", "POST")) == 100
    assert limits.refusals == []
    assert answered_429(proxy) == 0
    # When will each deferred certificate be issued? One per interval per domain.
    for domain in domains:
        instants = sorted(
            p.at for p in plan if p.request.identifiers[0].value.endswith(domain) and p.at
        )
        assert instants == [t0 + k * INTERVAL for k in range(1, 11)]

    # One refill interval of fake time later, exactly one more fits per domain; a week
    # later, all of them.
    clock.advance(INTERVAL)
    async with AcmeClient(
        proxy.directory_url,
        ca_bundle=pebble.ca_bundle,
        poll=FAST_POLL,
        account_key=account_key,
        account_url=account_url,
        ledger=ledger(),
    ) as client:
        late = await issue_all(client, http01, [d.identifiers[0] for d in after.deferred])
        assert len(late.issued) == 2
        assert sorted(registered(n) for n in late.issued) == sorted(domains)
        assert [d.retry_after for d in late.deferred] == [t0 + 2 * INTERVAL] * 18
        clock.advance(WEEK)
        assert await client.ledger.when(late.issued, account=account_url) == clock.now()  # type: ignore[union-attr]
    assert late.limited == []
    assert answered_429(proxy) == 0
    assert limits.issued == {domains[0]: 51, domains[1]: 51}


async def test_without_the_ledger_the_same_run_gets_429s(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    clock = FakeClock()
    limits = CertificatesPerDomain(capacity=50, period=WEEK, now=clock.now).install(proxy)
    names, domains = fleet("noledger")
    async with AcmeClient(
        proxy.directory_url, ca_bundle=pebble.ca_bundle, poll=FAST_POLL
    ) as client:
        outcome = await issue_all(client, http01, names)

    assert len(outcome.issued) == 100  # the CA itself keeps the limit...
    assert limits.issued == {domains[0]: 50, domains[1]: 50}
    assert outcome.deferred == []
    assert len(outcome.limited) == 20  # ...by refusing the rest with 429s
    assert answered_429(proxy) == len(limits.refusals) >= 20
    assert len(proxy.requests_to("/order-plz", "POST")) == 120
    for error in outcome.limited:
        assert error.retry_after is not None
        assert "already issued for" in error.detail


async def test_the_ledger_learns_a_429_it_could_not_predict(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    # The CA allows 2 per week, the ledger's model believes 50: the first 429 teaches it.
    clock = FakeClock()
    CertificatesPerDomain(capacity=2, period=WEEK, now=clock.now).install(proxy)
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock)
    async with AcmeClient(
        proxy.directory_url, ca_bundle=pebble.ca_bundle, poll=FAST_POLL, ledger=ledger
    ) as c:
        for i in range(2):
            await c.issue([f"n{i}.learn.example.org"], solver=http01)
        with pytest.raises(RateLimited) as caught:
            await c.issue(["n2.learn.example.org"], solver=http01)
        retry_after = caught.value.retry_after
        assert retry_after is not None
        with pytest.raises(RateLimitDeferred) as deferred:
            await c.issue(["n3.learn.example.org"], solver=http01)
    assert deferred.value.limit == PER_DOMAIN
    assert deferred.value.retry_after == retry_after
    assert answered_429(proxy) == 1
    assert len(proxy.requests_to("/order-plz", "POST")) == 3


async def test_a_ledger_that_cannot_record_an_outcome_does_not_undo_the_attempt(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    # A store-backed ledger whose store is unreachable when the attempt ends (seen end to
    # end: the API server cut off while certificates were being downloaded) must neither
    # drop the certificate just downloaded nor hide why an attempt failed.
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=FakeClock())
    recorded: list[BaseException | None] = []

    async def unreachable(*args: object, error: BaseException | None, **kwargs: object) -> None:
        recorded.append(error)
        raise StorageError("cannot reach the store")

    ledger.attempt_ended = unreachable  # type: ignore[method-assign]
    async with AcmeClient(
        proxy.directory_url, ca_bundle=pebble.ca_bundle, poll=FAST_POLL, ledger=ledger
    ) as c:
        issued = await c.issue(["kept.ledger-down.example.org"], solver=http01)
        proxy.add_rule(Match("/chalZ/", "POST"), Respond(403, UNAUTHORIZED, "no"), times=1)
        with pytest.raises(Unauthorized) as failed:
            await c.issue(["failed.ledger-down.example.org"], solver=http01)
    assert issued.chain.leaf.serial_number > 0
    assert len(recorded) == 2  # the ledger was asked both times (and failed both times)
    assert recorded[0] is None
    assert recorded[1] is failed.value  # what the caller sees, not the ledger's error
