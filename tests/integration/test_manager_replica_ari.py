"""Two replicas sharing one store share the renewalInfo polling (#26 (g)), on a real Pebble.

Replica A issues a certificate while replica B, which read the empty store first, waits
for the store's lock; B then finds A's certificate in the store (written by another
replica while it runs) and re-checks its ARI window ``replica_recheck_factor`` times as
rarely as Pebble's ``Retry-After`` (six hours), while A asks at Pebble's rate. Each
replica runs on its own fake clock for two days; the renewalInfo requests that reach
Pebble are counted per client, at the instant each was sent.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from requests_seen import on_requests

from acmecerts import AcmeClient, Http01Server
from acmecerts._time import FakeClock
from acmecerts.manager import (
    CertificateEvent,
    CertificateLoaded,
    CertificateManager,
    CertificateObtained,
    CertificateSpec,
    IssuedResult,
)
from acmecerts.manager._scheduler import RECHECK_GRID
from acmecerts.storage import FileStorage
from acmecerts.testing import PebbleServer
from tests.integration.test_manager_retention import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

NAME = "replica-ari.example.test"
#: Pebble 2.10 answers every renewalInfo request with ``Retry-After: 21600``.
RETRY_AFTER = dt.timedelta(hours=6)
#: How long both replicas run after the certificate is issued (fake time).
RUN = dt.timedelta(hours=48)
#: The manager's ARI re-check grid, in hours.
GRID_HOURS = RECHECK_GRID / 3600


class HorizonClock(FakeClock):
    """A :class:`FakeClock` that stops at :attr:`horizon`: a sleep past it never ends.

    A manager's scheduler sleeps only when it has nothing to do before its next instant,
    so a replica parked at the horizon has finished all its work before it.
    """

    def __init__(self, start: dt.datetime) -> None:
        super().__init__(start)
        self.horizon: dt.datetime | None = None
        #: Whether a sleep reached the horizon (the scheduler is idle there).
        self.parked = False

    async def sleep(self, seconds: float) -> None:
        horizon = self.horizon
        if horizon is not None and self.now() + dt.timedelta(seconds=seconds) > horizon:
            self.advance(max(dt.timedelta(0), horizon - self.now()))
            self.parked = True
            await anyio.sleep_forever()
        await super().sleep(seconds)


class Requests:
    """The requests one client sent, with the instant of its clock when each was sent."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.sent: list[tuple[dt.datetime, str]] = []

    def __call__(self, method: str, url: str) -> None:
        self.sent.append((self.clock.now(), url))

    def renewal_info(self) -> list[float]:
        """When renewalInfo was asked, in hours after the first time."""
        times = [at for at, url in self.sent if "/renewalInfo/" in url]
        return [(at - times[0]) / dt.timedelta(hours=1) for at in times]

    def new_orders(self) -> int:
        return sum(url.endswith("/order-plz") for _, url in self.sent)


@asynccontextmanager
async def replica(
    pebble: PebbleServer,
    storage: FileStorage,
    http01: Http01Server,
    start: dt.datetime,
    **options: Any,
) -> AsyncIterator[tuple[CertificateManager, HorizonClock, Requests]]:
    """One replica: its own account, client and fake clock, on the shared store."""
    clock = HorizonClock(start)
    requests = Requests(clock)
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        client.subscribe(on_requests(requests))
        manager = CertificateManager(client, solvers=[http01], storage=storage, **options)
        yield manager, clock, requests


def every(step: dt.timedelta) -> list[float]:
    """The hours ``0, step, 2 step...`` up to :data:`RUN` (included)."""
    return [step * k / dt.timedelta(hours=1) for k in range(int(RUN / step) + 1)]


@pytest.mark.parametrize(
    ("options", "factor"),
    [
        pytest.param({}, 4, id="default-factor"),
        pytest.param({"replica_recheck_factor": 1}, 1, id="factor-1"),
    ],
)
async def test_a_replica_asks_for_the_window_of_a_certificate_another_one_wrote_a_quarter_as_often(
    pebble: PebbleServer,
    http01: Http01Server,
    tmp_path: Path,
    options: dict[str, float],
    factor: int,
) -> None:
    start = dt.datetime.now(dt.UTC)  # Pebble's certificates start now, in real time
    a_may_issue, a_holds_the_lock = anyio.Event(), anyio.Event()

    async def gate() -> bool:
        """A's owner guard, asked under the store's lock: holds A there until told."""
        a_holds_the_lock.set()
        await a_may_issue.wait()
        return True

    spec_a = CertificateSpec.of(NAME, profile="shortlived", owner=gate)
    spec_b = CertificateSpec.of(NAME, profile="shortlived")
    async with (
        FileStorage(tmp_path) as storage,
        # A, the writer, asks for the window at issuance (by default hours later): both
        # replicas' re-checks then count from the same instant
        replica(pebble, storage, http01, start, first_ari_check=0) as (a, clock_a, seen_a),
        replica(pebble, storage, http01, start, **options) as (b, clock_b, seen_b),
    ):
        results: dict[str, IssuedResult] = {}
        events_b: list[CertificateEvent] = []
        b.subscribe(events_b.append)

        async def issue(name: str, manager: CertificateManager, spec: CertificateSpec) -> None:
            [result] = await manager.issue_many([spec])
            assert isinstance(result, IssuedResult), result
            results[name] = result

        async with anyio.create_task_group() as tg:
            tg.start_soon(issue, "a", a, spec_a)
            await a_holds_the_lock.wait()
            # B reads the store (empty) and waits for the lock A holds
            tg.start_soon(issue, "b", b, spec_b)
            await wait_until(
                lambda: NAME in b._entries and b._entries[NAME].loaded, "B reading the store"
            )
            a_may_issue.set()
        assert results["b"].certificate.serial == results["a"].certificate.serial
        assert seen_a.new_orders() == 1
        assert seen_b.new_orders() == 0  # B took A's certificate from the store
        assert seen_a.renewal_info() == [0]  # each asked once, just now
        assert seen_b.renewal_info() == [0]
        # B learnt of it the way a replica does: found in the store in place of none
        [loaded] = events_b
        assert isinstance(loaded, CertificateLoaded)
        assert loaded.certificate is not None
        assert loaded.certificate.serial == results["a"].certificate.serial

        # two days of re-checks: the window (83..131 h of a 160-hour certificate) is later
        for clock in (clock_a, clock_b):
            clock.horizon = clock.now() + RUN + dt.timedelta(minutes=30)
        async with a, b:
            await wait_until(lambda: clock_a.parked and clock_b.parked, "two days of re-checks")

    # (each re-check comes on the manager's 1-minute grid: up to a minute after the
    # Retry-After, B's stretched by its factor too)
    late = pytest.approx
    assert seen_a.renewal_info() == late(every(RETRY_AFTER), abs=GRID_HOURS)  # Pebble's rate, 9
    b_late = GRID_HOURS * (factor + 1)
    assert seen_b.renewal_info() == late(every(RETRY_AFTER * factor), abs=b_late)  # 3, or 9
    assert all(not isinstance(e, CertificateObtained) for e in events_b)
    assert seen_a.new_orders() + seen_b.new_orders() == 1  # nothing ordered again
    assert a.get(NAME) == b.get(NAME) == results["a"].certificate
