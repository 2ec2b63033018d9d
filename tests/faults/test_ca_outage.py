"""A CA that answers ``503`` to a manager's attempts, with the real Pebble behind the proxy.

The :class:`FaultProxy` answers ``503 serverInternal`` without ``Retry-After`` (a load
balancer in front of a CA that is down) to every ``newOrder``. A 503 means nothing was
created at the CA, but the CA did answer: it is failing, so the manager's attempt
schedule must escalate (1 min, 10 min, 100 min, then a day: Let's Encrypt's spacing)
instead of trying again every minute, and between two attempts the manager probes the
CA once with a directory ``GET`` rather than spending a certificate's attempt (and its
store operations) on it. The manager runs on a :class:`FakeClock`; the assertions count
requests at the proxy.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import anyio
import pytest

from acmecerts import AcmeClient, AttemptSchedule, FakeClock, Http01Server, RequestRetry
from acmecerts.manager import (
    CertificateEvent,
    CertificateFailed,
    CertificateManager,
    CertificateObtained,
)
from acmecerts.storage import FileStorage
from acmecerts.testing import PebbleServer
from tests.faults.proxy import SERVER_INTERNAL, AriAnswer, FaultProxy, Match, Respond
from tests.integration.conftest import assert_valid_chain

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

NEW_ORDER = "/order-plz"
#: Two calls of each request at most, quickly: an attempt sends two newOrders.
RETRY = RequestRetry(max_attempts=2, floor=0.1, cap=0.2)


async def test_503_to_every_order_escalates_the_attempt_schedule(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    name = "outage.escalates.example.test"
    clock = FakeClock()
    down = proxy.add_rule(
        Match(NEW_ORDER, "POST"), Respond(503, SERVER_INTERNAL, "the CA is down"), times=None
    )
    failed: list[CertificateFailed] = []
    issued = anyio.Event()
    obtained: list[CertificateObtained] = []

    def on_event(event: CertificateEvent) -> None:
        if isinstance(event, CertificateFailed):
            failed.append(event)
            if len(failed) == 4:  # the CA is back after the fourth attempt
                proxy.remove_rule(down)
        elif isinstance(event, CertificateObtained):
            obtained.append(event)
            issued.set()

    async with AcmeClient(
        proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock, request_retry=RETRY
    ) as client:
        manager = CertificateManager(
            client,
            solvers=[http01],
            clock=clock,
            rng=random.Random(26),
            schedule=AttemptSchedule(jitter=0),
            storage=FileStorage(tmp_path, clock=clock),
        )
        manager.subscribe(on_event)
        manager.manage(name, [name])
        async with manager:
            with anyio.fail_after(60):
                await issued.wait()

    # each failed attempt counts: 1, 2, 3, 4, each waiting its step of the schedule
    assert [f.attempt for f in failed] == [1, 2, 3, 4]
    waits = [(f.next_attempt_at - f.at).total_seconds() for f in failed if f.next_attempt_at]
    assert waits == [60, 600, 6000, 86400]
    assert all(f.error is not None and f.error.kind.value == "transient" for f in failed)
    # four attempts of two calls each, then the order that went through
    orders = proxy.requests_to(NEW_ORDER, "POST")
    assert [r.status for r in orders] == [503] * 8 + [201]
    # between two attempts the CA was asked once, by a directory GET (the probe)
    directory = [r for r in proxy.requests_to("/dir", "GET") if orders[1].arrival < r.arrival]
    assert 4 <= len(directory) <= 5, [r.path for r in directory]
    assert_valid_chain(obtained[0].certificate, pebble, [name])


async def test_renewal_info_failing_keeps_the_window_the_ca_named(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server
) -> None:
    # The CA named a late window (days 80-81 of a 90-day certificate); then renewalInfo
    # answers 503 three times. The window stands: the renewal comes in it, not at the
    # fallback (a third of the lifetime left, about day 60) as if the CA had no ARI.
    name = "outage.ari.example.test"
    clock = FakeClock()
    start = clock.now()
    window = (start + dt.timedelta(days=80), start + dt.timedelta(days=81))
    proxy.emulate_ari(AriAnswer(*window, retry_after="21600"))
    obtained: list[CertificateObtained] = []
    renewed = anyio.Event()

    def on_event(event: CertificateEvent) -> None:
        if isinstance(event, CertificateObtained):
            obtained.append(event)
            if len(obtained) == 1:  # the first window is known: renewalInfo fails now
                proxy.add_rule(
                    Match("/renewal-info/", "GET"),
                    Respond(503, SERVER_INTERNAL, "the CA is down"),
                    times=3,
                )
            else:
                renewed.set()

    async with AcmeClient(
        proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock, request_retry=RETRY
    ) as client:
        # the window asked for at issuance: it is known before renewalInfo starts failing
        manager = CertificateManager(
            client, solvers=[http01], clock=clock, rng=random.Random(9), first_ari_check=0
        )
        manager.subscribe(on_event)
        manager.manage(name, [name], profile="classic")
        async with manager:
            with anyio.fail_after(60):
                await renewed.wait()

    refused = [r for r in proxy.requests_to("/renewal-info/", "GET") if r.status == 503]
    assert len(refused) == 3
    first, renewal = obtained
    assert not first.renewal
    assert renewal.renewal
    assert window[0] <= renewal.at <= window[1], renewal.at - start
