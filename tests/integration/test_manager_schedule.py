"""The manager's long-running schedule against a real Pebble: never a hot loop.

Every managed certificate has an explicit next instant. These tests run the manager in
the background on a :class:`FakeClock` for simulated hours or days and count what it
did (owner checks, store reads, orders, events), never seconds.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from requests_seen import on_requests

from acmecerts import AcmeClient, Http01Server
from acmecerts._time import FakeClock
from acmecerts.errors import StorageError
from acmecerts.manager import (
    CertificateDeferred,
    CertificateEvent,
    CertificateFailed,
    CertificateManager,
    CertificateObtained,
    CertificateSpec,
    CertificateState,
    DeferredResult,
    IssuedResult,
)
from acmecerts.ratelimit import LETS_ENCRYPT, RateLimitLedger
from acmecerts.storage import FileStorage, StoredValue
from acmecerts.testing import PebbleServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def most_calls(
    seconds: float, *, floor: float = 5.0, cap: float = 300.0, jitter: float = 0.2
) -> int:
    """The most calls an error backoff (``floor`` doubling to ``cap``) allows in ``seconds``.

    Every delay is taken at its shortest (``1 - jitter`` of its step), so no schedule
    that keeps to the backoff can make more calls.
    """
    calls, elapsed, step = 1, 0.0, floor
    while True:
        elapsed += step * (1 - jitter)
        if elapsed > seconds:
            return calls
        calls += 1
        step = min(cap, step * 2)


async def eventually(condition: Callable[[], bool], what: str, *, limit: float = 60.0) -> None:
    """Wait (real time, ``limit`` seconds at most) until ``condition()`` holds."""
    for _ in range(int(limit / 0.005)):
        if condition():
            return
        await anyio.sleep(0.005)
    raise AssertionError(f"waited {limit} s for {what}")


async def run_until(clock: FakeClock, instant: dt.datetime, what: str) -> None:
    """Let the manager's scheduler move the fake clock until ``instant``."""
    await eventually(lambda: clock.now() >= instant, what)


async def test_invalid_input_and_a_failing_owner_guard_never_spin(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    """The issue's report: 16,249 owner checks and failure events in 3 s. Now: a schedule."""
    clock = FakeClock()
    orders: list[str] = []
    owner_checks = 0

    async def unreachable_api_server() -> bool:
        nonlocal owner_checks
        owner_checks += 1
        raise ConnectionError("the API server is briefly unreachable")

    async with AcmeClient(
        pebble.directory_url,
        ca_bundle=pebble.ca_bundle,
        clock=clock,
    ) as client:
        client.subscribe(on_requests(lambda m, u: orders.append(u) if "/order-plz" in u else None))
        manager = CertificateManager(client, solvers=[http01], clock=clock)
        [ok] = await manager.issue_many(["ok.schedule.example.test"])  # a real issuance first
        assert isinstance(ok, IssuedResult)
        events: list[CertificateEvent] = []
        manager.subscribe(events.append)
        manager.manage("wild", ["*.wild.example.test"])  # http-01 cannot prove a wildcard
        manager.manage("g", ["g.schedule.example.test"], owner=unreachable_api_server)
        start = clock.now()
        async with manager:
            await run_until(clock, start + dt.timedelta(days=1), "a simulated day")
        end = clock.now()

    failed = [e for e in events if isinstance(e, CertificateFailed)]
    assert [e.name for e in failed] == ["wild"]  # one failure event, then parked
    wild = manager.status("wild")
    assert wild is not None
    assert wild.state is CertificateState.PARKED
    assert wild.next_at is None
    assert wild.reason is not None
    assert "wildcard" in wild.reason
    # the owner guard is asked on the error backoff (5 s doubling to 5 min), not in a
    # loop. (A FakeClock moves at every sleep, also one that is woken early, so fewer
    # checks fit in a simulated day than on a real clock: the bound is what matters.)
    elapsed = (end - start).total_seconds()
    assert 20 <= owner_checks <= most_calls(elapsed), owner_checks
    deferred = [e for e in events if isinstance(e, CertificateDeferred) and e.name == "g"]
    assert len(deferred) == owner_checks
    g = manager.status("g")
    assert g is not None
    assert g.state is CertificateState.HELD
    assert g.next_at is not None
    assert g.next_at > end - dt.timedelta(seconds=1)
    assert g.reason == "the owner guard failed"
    assert len(orders) == 1  # only ok's order: nothing was sent for wild or g
    status = manager.status("ok.schedule.example.test")
    assert status is not None
    assert status.state is CertificateState.CURRENT


async def test_a_changed_spec_unparks_and_a_repaired_owner_guard_issues(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    clock = FakeClock()
    broken = True

    async def owner() -> bool:
        if broken:
            raise ConnectionError("unreachable")
        return True

    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        manager = CertificateManager(client, solvers=[http01], clock=clock)
        events: list[CertificateEvent] = []
        manager.subscribe(events.append)
        manager.manage("site", ["*.site.example.test"])
        manager.manage("guarded", ["guarded.example.test"], owner=owner)
        async with manager:
            await run_until(clock, clock.now() + dt.timedelta(minutes=30), "half an hour")
            assert [e.name for e in events if isinstance(e, CertificateFailed)] == ["site"]
            held = manager.status("guarded")  # (the loop runs on: held, or asking again)
            assert held is not None
            assert held.state in (CertificateState.HELD, CertificateState.IN_FLIGHT)
            assert held.next_at is not None
            # the operator fixes the resource: the new spec is unparked, due at once
            manager.manage("site", ["www.site.example.test"])
            fixed = manager.status("site")
            assert fixed is not None
            assert fixed.state is CertificateState.PENDING
            assert fixed.next_at is not None
            assert fixed.next_at <= clock.now()
        broken = False  # and the API server is back
        # (issued outside the background loop: a FakeClock moved by the scheduler's sleeps
        # would run past the attempt deadline while Pebble validates in real time)
        results = await manager.issue_many(["site", "guarded"])
    assert all(isinstance(r, IssuedResult) for r in results), results
    obtained = sorted(e.name for e in events if isinstance(e, CertificateObtained))
    assert obtained == ["guarded", "site"]
    site = manager.get("site")
    assert site is not None
    assert site.names == ("www.site.example.test",)
    for name in ("site", "guarded"):
        status = manager.status(name)
        assert status is not None
        assert status.state is CertificateState.CURRENT
        assert status.next_at is not None
        assert status.next_at > clock.now()


class FlakyStorage(FileStorage):
    """A real FileStorage whose reads fail while ``broken`` (a store that is down)."""

    broken = True
    loads = 0  # reads of a certificate's record (the first read of its state)

    async def load(self, key: str) -> StoredValue | None:
        self.loads += key.endswith("/certificate.json")
        if self.broken:
            raise StorageError(f"the store is down (reading {key})")
        return await super().load(key)


async def test_storage_errors_back_off_then_recover(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock()
    async with (
        FlakyStorage(tmp_path) as storage,
        AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client,
    ):
        manager = CertificateManager(client, solvers=[http01], clock=clock, storage=storage)
        events: list[CertificateEvent] = []
        manager.subscribe(events.append)
        manager.manage("stored.example.test")
        start = clock.now()
        async with manager:
            await run_until(clock, start + dt.timedelta(hours=2), "two simulated hours")
            failures = [e for e in events if isinstance(e, CertificateFailed)]
            # each failed read is one failure event, spaced on the error backoff
            assert 20 <= len(failures) <= most_calls((clock.now() - start).total_seconds())
            assert storage.loads == len(failures)
            for earlier, later in itertools.pairwise(failures):
                assert later.at >= earlier.at + dt.timedelta(seconds=4)
                assert earlier.next_attempt_at is not None
                assert later.at >= earlier.next_attempt_at
            status = manager.status("stored.example.test")
            assert status is not None
            assert status.state is CertificateState.HELD
            assert status.reason is not None
            assert "the store is down" in status.reason
            storage.broken = False
            await eventually(
                lambda: any(isinstance(e, CertificateObtained) for e in events),
                "the issuance once the store is back",
            )
    stored = await FileStorage(tmp_path).load(
        manager._store.layout.certificate("stored.example.test").record  # type: ignore[union-attr]
    )
    assert stored is not None  # issued and saved once the store came back


@pytest.mark.parametrize("mode", ["background", "issue_many"])
async def test_priority_reserves_the_budget_whatever_the_order_of_managing(
    pebble: PebbleServer, http01: Http01Server, mode: str
) -> None:
    """Budget for 5 and 10 wanted: the 5 of highest priority are issued, the rest wait."""
    ledger = RateLimitLedger(LETS_ENCRYPT.with_overrides({"certificates_per_registered_domain": 5}))
    names = [f"p{i}.{mode.replace('_', '-')}.prio.test" for i in range(10)]
    priority = {name: i for i, name in enumerate(names)}
    shuffled = names[:]
    random.Random(mode).shuffle(shuffled)
    shuffled.sort(key=priority.__getitem__)  # the lowest priorities are managed first
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, ledger=ledger
    ) as client:
        manager = CertificateManager(client, solvers=[http01], concurrency=10)
        events: list[CertificateEvent] = []
        manager.subscribe(events.append)
        specs = [CertificateSpec.of(name, priority=priority[name]) for name in shuffled]
        if mode == "issue_many":
            results = await manager.issue_many(specs)
            issued = sorted(r.name for r in results if isinstance(r, IssuedResult))
            waiting = [r for r in results if isinstance(r, DeferredResult)]
        else:
            for spec in specs:
                manager.manage(spec)
            async with manager:
                await eventually(
                    lambda: (
                        sum(
                            isinstance(e, (CertificateObtained, CertificateDeferred))
                            for e in events
                        )
                        >= 10
                    ),
                    "ten outcomes",
                )
            issued = sorted(e.name for e in events if isinstance(e, CertificateObtained))
            waiting = [e for e in events if isinstance(e, CertificateDeferred)]
    assert issued == sorted(names[5:])  # the five of highest priority
    assert len(waiting) == 5
    for item in waiting:
        assert item.name in names[:5]
        until = item.until
        assert until is not None
        assert until > dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
        status = manager.status(item.name)
        assert status is not None
        assert status.state is CertificateState.RETRYING
        assert status.next_at == until
        assert status.attempts == 0  # a deferral is not a failure
