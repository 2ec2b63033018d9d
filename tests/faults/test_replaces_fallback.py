"""The ``replaces`` fallback against a CA that refuses it, with the real Pebble behind the proxy.

Pebble 2.4 has no ARI; the :class:`FaultProxy` makes it look as if it had (``renewalInfo``
in the directory, a window that is already open for the first certificate) and answers
``409 alreadyReplaced`` to every ``newOrder`` whose JWS payload carries ``replaces``. The
manager must then order the renewal again without ``replaces``, ask the owner guard again
before that second order, and the rate-limit ledger must count the renewal once.

The manager runs on a :class:`FakeClock`, so the renewal is due at once and waits cost
nothing; assertions count requests at the proxy and calls of the guard.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from acmecerts import AcmeClient, FakeClock, Http01Server, IssuedCertificate
from acmecerts.manager import (
    CertificateCancelled,
    CertificateEvent,
    CertificateManager,
    CertificateObtained,
)
from acmecerts.protocol.ari import cert_id
from acmecerts.protocol.identifiers import parse_identifier
from acmecerts.ratelimit import (
    BudgetLine,
    Limit,
    RateLimitLedger,
    RateLimitModel,
    Scope,
    identifier_set_key,
)
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer
from tests.faults.proxy import (
    ALREADY_REPLACED,
    AriAnswer,
    FaultProxy,
    Match,
    RecordedRequest,
    Respond,
    Rule,
)
from tests.integration.conftest import assert_valid_chain

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

#: Pebble's newOrder path.
NEW_ORDER = "/order-plz"
#: Every order and every certificate spends a token; a year to refill a bucket of 50,
#: so whatever the fake clock does during a test, the counts stay exact.
STRICT = RateLimitModel(
    [
        Limit("orders", 50, dt.timedelta(days=365), Scope.ACCOUNT),
        Limit("certificates", 50, dt.timedelta(days=365), Scope.IDENTIFIER_SET),
    ],
    name="every-order-counts",
)


class Guard:
    """An owner guard that notes how many ``newOrder`` requests the proxy had seen."""

    def __init__(self, proxy: FaultProxy, answer: Callable[[int], bool]) -> None:
        self.proxy = proxy
        self.answer = answer
        #: For each call: the number of newOrder POSTs received before it.
        self.calls: list[int] = []

    async def __call__(self) -> bool:
        seen = len(self.proxy.requests_to(NEW_ORDER, "POST"))
        self.calls.append(seen)
        return self.answer(len(self.calls))


def _arrange(proxy: FaultProxy, clock: FakeClock) -> Rule:
    """ARI on the proxy: the first certificate is due at once, later ones in years;
    ``newOrder`` with ``replaces`` is refused."""
    now = clock.now()
    proxy.emulate_ari(
        AriAnswer(now + dt.timedelta(days=1000), now + dt.timedelta(days=1001), "86400")
    )
    proxy.add_rule(
        Match("/renewal-info/", "GET"),
        AriAnswer(now - dt.timedelta(days=1), now + dt.timedelta(seconds=1), "86400"),
        times=1,
    )
    return proxy.add_rule(
        Match(NEW_ORDER, "POST", payload_has="replaces"),
        Respond(409, ALREADY_REPLACED, "this certificate was already replaced"),
        times=None,
    )


def _certificate(event: CertificateEvent) -> IssuedCertificate:
    assert isinstance(event, CertificateObtained)
    assert event.certificate is not None
    return event.certificate


def _orders(proxy: FaultProxy) -> list[RecordedRequest]:
    return proxy.requests_to(NEW_ORDER, "POST")


def _spent(lines: list[BudgetLine], limit: str) -> dict[str, int]:
    """Tokens spent per scope key of ``limit`` (a full bucket has no line)."""
    return {
        line.scope_key: (line.capacity or 0) - line.remaining
        for line in lines
        if line.limit == limit
    }


async def test_refused_replaces_is_ordered_again_once_after_asking_the_owner(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server
) -> None:
    name = "fallback.replaces.example.test"
    clock = FakeClock()
    refuse = _arrange(proxy, clock)
    ledger = RateLimitLedger(STRICT, clock=clock)
    guard = Guard(proxy, lambda call: True)
    obtained: list[CertificateObtained] = []
    budget_after_renewal: list[BudgetLine] = []
    renewed = anyio.Event()

    async def on_event(event: CertificateEvent) -> None:
        if isinstance(event, CertificateObtained):
            obtained.append(event)
            if event.renewal:
                # read here, inside the renewal's flight: no fake time has passed since
                budget_after_renewal.extend(await ledger.budget())
                renewed.set()

    async with AcmeClient(
        proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock, ledger=ledger
    ) as client:
        manager = CertificateManager(client, solvers=[http01], clock=clock, rng=random.Random(14))
        manager.subscribe(on_event)
        manager.manage(name, [name], owner=guard)
        async with manager:
            with anyio.fail_after(60):
                await renewed.wait()
        account = client.account_url
    first, second = _certificate(obtained[0]), _certificate(obtained[1])

    # newOrder: the first issuance, the renewal naming the first certificate (refused),
    # the renewal again without replaces; nothing more
    orders = _orders(proxy)
    assert [r.payload.get("replaces") for r in orders] == [None, cert_id(first.chain.leaf), None]
    assert [r.status for r in orders] == [201, 409, 201]
    assert refuse.hits == 1
    assert all(r.payload["identifiers"] == [{"type": "dns", "value": name}] for r in orders)
    # the owner was asked before the first issuance, before the renewal, and once more
    # between the refused order and the one that replaced it
    assert guard.calls == [0, 1, 2]
    assert orders[1].responded is not None
    assert orders[2].arrival > orders[1].responded

    # the renewal is a new, valid certificate for the same name
    assert [e.renewal for e in obtained] == [False, True]
    assert second.serial != first.serial
    assert_valid_chain(second, pebble, [name])
    current = manager.get(name)
    assert isinstance(current, IssuedCertificate)
    assert current.serial == second.serial

    # the ledger counts two orders and two certificates: one issuance, one renewal
    assert account is not None
    assert _spent(budget_after_renewal, "orders") == {account: 2}
    assert _spent(budget_after_renewal, "certificates") == {
        identifier_set_key([parse_identifier(name)]): 2
    }


async def test_owner_gone_after_the_refusal_cancels_without_a_second_order(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server
) -> None:
    name = "gone.replaces.example.test"
    clock = FakeClock()
    refuse = _arrange(proxy, clock)
    ledger = RateLimitLedger(STRICT, clock=clock)
    guard = Guard(proxy, lambda call: call < 3)  # gone by the third question
    events: list[CertificateEvent] = []
    cancelled = anyio.Event()

    def on_event(event: CertificateEvent) -> None:
        events.append(event)
        if isinstance(event, CertificateCancelled):
            cancelled.set()

    async with AcmeClient(
        proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock, ledger=ledger
    ) as client:
        manager = CertificateManager(client, solvers=[http01], clock=clock, rng=random.Random(14))
        manager.subscribe(on_event)
        manager.manage(name, [name], owner=guard)
        async with manager:
            with anyio.fail_after(60):
                await cancelled.wait()
            assert manager.next_renewal(name) is None  # nothing more is planned
        account = client.account_url
        budget = await ledger.budget()

    [first] = [_certificate(e) for e in events if isinstance(e, CertificateObtained)]
    orders = _orders(proxy)
    assert [r.payload.get("replaces") for r in orders] == [None, cert_id(first.chain.leaf)]
    assert [r.status for r in orders] == [201, 409]
    assert refuse.hits == 1
    assert guard.calls == [0, 1, 2]
    [cancel] = [e for e in events if isinstance(e, CertificateCancelled)]
    assert cancel.reason == "owner gone"
    assert name not in [spec.name for spec in manager.managed()]
    # only the first issuance was counted: the refused order gave nothing to count
    assert account is not None
    assert _spent(budget, "orders") == {account: 1}
    assert _spent(budget, "certificates") == {identifier_set_key([parse_identifier(name)]): 1}


async def test_a_failing_owner_check_after_the_refusal_orders_nothing(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server
) -> None:
    name = "unsure.replaces.example.test"
    clock = FakeClock()
    _arrange(proxy, clock)
    failures: list[int] = []

    def answer(call: int) -> bool:
        if call == 3:  # the API server is unreachable right after the refusal...
            failures.append(call)
            raise ConnectionError("owner lookup failed")
        return call < 3  # ...and then says the owner is gone (ends the test)

    guard = Guard(proxy, answer)
    cancelled = anyio.Event()
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        manager = CertificateManager(client, solvers=[http01], clock=clock, rng=random.Random(14))
        manager.subscribe(
            lambda event: cancelled.set() if isinstance(event, CertificateCancelled) else None
        )
        manager.manage(name, [name], owner=guard)
        async with manager:
            with anyio.fail_after(60):
                await cancelled.wait()

    # the guard's failure ended that attempt: no order without replaces was sent, and
    # the next attempt began with the owner check again (which said gone)
    assert failures == [3]
    assert guard.calls == [0, 1, 2, 2]
    assert [r.status for r in _orders(proxy)] == [201, 409]
    assert "replaces" in _orders(proxy)[1].payload


async def test_with_a_store_the_refusal_leaves_no_order_to_look_for(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    # The manager records an intent before each newOrder (a process that dies before the
    # answer looks for the order on restart). A refused newOrder created nothing: the
    # second order must follow at once, not after a search of the account's orders.
    name = "stored.replaces.example.test"
    clock = FakeClock()
    _arrange(proxy, clock)
    storage = FileStorage(tmp_path / "store", clock=clock)
    guard = Guard(proxy, lambda call: True)
    obtained: list[CertificateObtained] = []
    renewed = anyio.Event()

    def on_event(event: CertificateEvent) -> None:
        if isinstance(event, CertificateObtained):
            obtained.append(event)
            if event.renewal:
                renewed.set()

    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        manager = CertificateManager(
            client, solvers=[http01], clock=clock, rng=random.Random(14), storage=storage
        )
        manager.subscribe(on_event)
        manager.manage(name, [name], owner=guard)
        async with manager:
            with anyio.fail_after(60):
                await renewed.wait()

    requests = proxy.requests
    orders = [i for i, r in enumerate(requests) if (r.method, r.path) == ("POST", NEW_ORDER)]
    assert [requests[i].status for i in orders] == [201, 409, 201]
    assert orders[2] == orders[1] + 1  # nothing in between: no account or order lookups
    assert guard.calls == [0, 1, 2]
    # renewed, and no order is left in flight in the store
    first, second = _certificate(obtained[0]), _certificate(obtained[1])
    assert second.serial != first.serial
    assert requests[orders[1]].payload["replaces"] == cert_id(first.chain.leaf)
    layout = KeyLayout(proxy.directory_url)
    stored = await storage.load(layout.certificate(name).record)
    assert stored is not None
    record = json.loads(stored.data)
    assert record["fullchain_pem"].startswith(second.certificate_pem)
    # the order record left is the finished one, of the certificate stored (dead by rule,
    # see manager/_persist.py): the third order's, not an intent of the refused one
    left = await storage.load(layout.order(name))
    assert left is not None
    assert json.loads(left.data)["order_url"] == record["order_url"]
    location = dict((k.lower(), v) for k, v in requests[orders[2]].response_headers)["location"]
    assert record["order_url"] == location
