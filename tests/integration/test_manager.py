"""CertificateManager against a real Pebble: parallelism, single-flight, cancellation."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import anyio
import pytest
from requests_seen import on_requests

from acmecerts import AcmeClient, AttemptTimeout, AuthorizationFailed, ChallengeTask, Http01Server
from acmecerts._time import FakeClock
from acmecerts.manager import (
    CertificateCancelled,
    CertificateEvent,
    CertificateFailed,
    CertificateManager,
    CertificateObtained,
    CertificateSpec,
    DeferredResult,
    FailedResult,
    IssuedResult,
)
from acmecerts.manager._scheduler import RECHECK_GRID, on_recheck_grid
from acmecerts.protocol.identifiers import Identifier
from acmecerts.retry import AttemptSchedule
from acmecerts.testing import PebbleServer
from tests.servers.a2c import Acme2CertifierServer

from .conftest import assert_valid_chain

pytestmark = pytest.mark.anyio


class RoutingSolver:
    """http-01 through a real server, except names that never validate or never finish."""

    challenge_type = "http-01"

    def __init__(self, server: Http01Server) -> None:
        self.server = server
        self.presented: list[str] = []
        self.cleaned: list[str] = []
        self.blocked = anyio.Event()

    def supports(self, identifier: Identifier) -> bool:
        return not identifier.is_wildcard

    async def present(self, task: ChallengeTask) -> None:
        self.presented.append(task.identifier.value)
        if task.identifier.value.startswith("never."):
            return  # nothing served: validation fails
        if task.identifier.value.startswith("stuck."):
            self.blocked.set()
            await anyio.sleep_forever()
        await self.server.present(task)

    async def cleanup(self, task: ChallengeTask) -> None:
        self.cleaned.append(task.identifier.value)
        await self.server.cleanup(task)


@pytest.fixture
async def routing(http01: Http01Server) -> RoutingSolver:
    return RoutingSolver(http01)


@pytest.mark.timeout(180)
async def test_hundred_in_parallel_one_failure_and_one_stall_hold_up_nobody(
    pebble: PebbleServer, routing: RoutingSolver
) -> None:
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, attempt_timeout=40
    ) as client:
        manager = CertificateManager(client, solvers=[routing], concurrency=16)
        # the order things happened in (not how long they took)
        happened: list[str] = []
        manager.subscribe(
            lambda e: (
                happened.append(f"{type(e).__name__} {e.name}")
                if isinstance(e, CertificateObtained | CertificateFailed)
                else None
            )
        )
        specs = [CertificateSpec.of(f"m{i}.hundred.example.test") for i in range(98)]
        specs.insert(10, CertificateSpec.of("never.hundred.example.test"))
        specs.insert(50, CertificateSpec.of("stuck.hundred.example.test"))
        results = await manager.issue_many(specs)
    by_name = {r.name: r for r in results}
    assert len(results) == 100
    issued = [r for r in results if isinstance(r, IssuedResult)]
    assert len(issued) == 98
    never = by_name["never.hundred.example.test"]
    assert isinstance(never, FailedResult)
    assert isinstance(never.error, AuthorizationFailed)
    stuck = by_name["stuck.hundred.example.test"]
    assert isinstance(stuck, FailedResult)
    assert isinstance(stuck.error, AttemptTimeout)
    # the 98 were all done before the stuck one gave up at its 40 s deadline
    assert happened[-1] == "CertificateFailed stuck.hundred.example.test", happened[-3:]
    assert sum(h.startswith("CertificateObtained") for h in happened) == 98
    for result in issued[:3]:
        assert_valid_chain(result.certificate, pebble, [result.name])


async def test_concurrent_issue_many_for_the_same_certificate_orders_once(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    orders: list[str] = []
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        client.subscribe(on_requests(lambda m, u: orders.append(u) if "/order-plz" in u else None))
        manager = CertificateManager(client, solvers=[http01])
        spec = CertificateSpec.of("same", ["same.single.example.test"])
        alias = CertificateSpec.of("alias", ["same.single.example.test"])
        results: list[list[object]] = []

        async def batch(specs: list[CertificateSpec]) -> None:
            results.append(list(await manager.issue_many(specs)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(batch, [spec])
            tg.start_soon(batch, [spec])
            tg.start_soon(batch, [alias])
    assert len(orders) == 1
    serials = {r[0].certificate.serial for r in results}  # type: ignore[attr-defined]
    assert len(serials) == 1
    # asking again returns the stored certificate without a new order
    again = await manager.issue_many(["same"])
    assert isinstance(again[0], IssuedResult)
    assert len(orders) == 1


async def test_unmanage_during_validation_stops_everything_and_deactivates(
    pebble: PebbleServer, routing: RoutingSolver
) -> None:
    seen: list[str] = []
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        client.subscribe(on_requests(lambda m, u: seen.append(u)))
        async with CertificateManager(client, solvers=[routing]) as manager:
            events: list[CertificateEvent] = []
            reasons: list[tuple[str, str]] = []
            manager.subscribe(events.append)
            manager.on_cancel(lambda name, reason: reasons.append((name, reason)))
            manager.manage("stuck.unmanage.example.test")
            with anyio.fail_after(20):
                await routing.blocked.wait()  # the challenge is being presented
            await manager.unmanage("stuck.unmanage.example.test")
            count = len(seen)
            await anyio.sleep(1.0)
            assert len(seen) == count  # nothing more is sent for it
            assert manager.get("stuck.unmanage.example.test") is None
        authz_urls = [u for u in seen if "/authZ/" in u]
        authz = await client.get_authorization(authz_urls[0])
    assert authz.status == "deactivated"
    assert routing.cleaned == ["stuck.unmanage.example.test"]
    assert reasons == [("stuck.unmanage.example.test", "unmanaged")]
    assert any(isinstance(e, CertificateCancelled) for e in events)


async def test_owner_gone_prevents_the_renewal_order(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    clock = FakeClock()
    orders: list[str] = []
    owner_alive = True

    async def owner() -> bool:
        return owner_alive

    async with AcmeClient(
        pebble.directory_url,
        ca_bundle=pebble.ca_bundle,
        clock=clock,
    ) as client:
        client.subscribe(on_requests(lambda m, u: orders.append(u) if "/order-plz" in u else None))
        manager = CertificateManager(client, solvers=[http01], schedule=AttemptSchedule(jitter=0))
        cancelled = anyio.Event()
        manager.on_cancel(lambda name, reason: cancelled.set())
        spec = CertificateSpec.of("owned.example.test", owner=owner)
        [first] = await manager.issue_many([spec])
        assert isinstance(first, IssuedResult)
        due = manager.next_renewal("owned.example.test")
        assert due is not None
        # Pebble 2.10's ARI window: a day either side of a third of the lifetime left;
        # the next work before it is the re-check at its Retry-After (6 h)
        lifetime = first.certificate.not_after - first.certificate.not_before
        expected = first.certificate.not_after - lifetime / 3
        assert due <= on_recheck_grid(clock.now() + dt.timedelta(hours=6, seconds=1))
        owner_alive = False
        async with manager:
            with anyio.fail_after(20):
                await cancelled.wait()  # the scheduler reached the renewal and asked the owner
    assert len(orders) == 1  # no renewal order was sent
    assert clock.now() >= expected - dt.timedelta(days=1, seconds=1)  # asked when due
    assert manager.next_renewal("owned.example.test") is None  # nothing scheduled any more


async def test_renewal_happens_when_due(pebble: PebbleServer, http01: Http01Server) -> None:
    clock = FakeClock()
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        manager = CertificateManager(client, solvers=[http01])
        renewed = anyio.Event()
        manager.subscribe(
            lambda e: renewed.set() if isinstance(e, CertificateObtained) and e.renewal else None
        )
        [first] = await manager.issue_many(["renew.example.test"])
        assert isinstance(first, IssuedResult)
        async with manager:
            with anyio.fail_after(30):
                await renewed.wait()
        second = manager.get("renew.example.test")
    assert second is not None
    assert second.serial != first.certificate.serial


class _NoopSolver:
    """Presents nothing: enough for acme2certifier with validation disabled."""

    challenge_type = "http-01"

    def supports(self, identifier: Identifier) -> bool:
        return not identifier.is_wildcard

    async def present(self, task: ChallengeTask) -> None:
        return None

    async def cleanup(self, task: ChallengeTask) -> None:
        return None


async def test_ari_window_and_renewal_with_replaces_on_acme2certifier(
    a2c: Acme2CertifierServer, tmp_path: Path
) -> None:
    """The renewal instant comes from the CA's window; the renewal order names the old cert."""
    async with AcmeClient(a2c.directory_url, ca_bundle=a2c.ca_bundle) as client:
        # the window asked for at issuance (by default it is first asked hours later: the
        # renewal below finds the open window that way)
        manager = CertificateManager(client, solvers=[_NoopSolver()], first_ari_check=0)
        [issued] = await manager.issue_many(["window.example.test"])
        assert isinstance(issued, IssuedResult)
        info = await client.renewal_info(issued.certificate.chain.leaf)
        renew_at = manager.renewal_at("window.example.test")
        recheck = manager.next_renewal("window.example.test")
    assert renew_at is not None
    assert info.window_start <= renew_at <= info.window_end
    assert recheck is not None
    # at the Retry-After, rounded up to the manager's 1-minute re-check grid
    assert recheck == on_recheck_grid(recheck)
    assert -5 < (recheck - info.retry_after).total_seconds() < RECHECK_GRID + 5
    # a CA whose window is already open: the manager renews at once, with replaces
    with Acme2CertifierServer(tmp_path / "a2c-forced", renewal_force=True) as forced:
        await _renew_with_replaces(forced)


async def _renew_with_replaces(a2c: Acme2CertifierServer) -> None:
    clock = FakeClock()
    sent: list[dict[str, object]] = []
    async with AcmeClient(a2c.directory_url, ca_bundle=a2c.ca_bundle, clock=clock) as client:
        original_post = client.transport.post

        async def recording_post(url: str, **kwargs: object):  # type: ignore[no-untyped-def]
            if url.endswith("/neworders") or ("order" in url and kwargs.get("payload")):
                payload = kwargs.get("payload")
                if isinstance(payload, dict) and "identifiers" in payload:
                    sent.append(payload)
            return await original_post(url, **kwargs)  # type: ignore[arg-type]

        client.transport.post = recording_post  # type: ignore[method-assign]
        manager = CertificateManager(client, solvers=[_NoopSolver()])
        renewed = anyio.Event()
        manager.subscribe(
            lambda e: renewed.set() if isinstance(e, CertificateObtained) and e.renewal else None
        )
        [first] = await manager.issue_many(["ari.example.test"])
        assert isinstance(first, IssuedResult)
        info = await client.renewal_info(first.certificate.chain.leaf)
        async with manager:
            with anyio.fail_after(30):
                await renewed.wait()
        second = manager.get("ari.example.test")
    assert second is not None
    assert second.serial != first.certificate.serial
    assert "replaces" not in sent[0]
    from acmecerts.protocol.ari import cert_id

    assert sent[-1]["replaces"] == cert_id(first.certificate.chain.leaf)
    assert clock.now() >= info.window_start


async def test_ledger_deferrals_do_not_escalate_the_schedule_and_priority_goes_first(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    from acmecerts.ratelimit import LETS_ENCRYPT, RateLimitLedger

    clock = FakeClock()
    ledger = RateLimitLedger(
        LETS_ENCRYPT.with_overrides({"certificates_per_registered_domain": 2}), clock=clock
    )
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock, ledger=ledger
    ) as client:
        manager = CertificateManager(client, solvers=[http01], concurrency=1)
        specs = [
            CertificateSpec.of("low1.budget.test"),
            CertificateSpec.of("low2.budget.test"),
            CertificateSpec.of("vip.budget.test", priority=10),
        ]
        results = await manager.issue_many(specs)
    by_name = {r.name: r for r in results}
    assert isinstance(by_name["vip.budget.test"], IssuedResult)  # asked last, served first
    assert isinstance(by_name["low1.budget.test"], IssuedResult)
    deferred = by_name["low2.budget.test"]
    assert isinstance(deferred, DeferredResult)
    assert deferred.until > clock.now()
    # a deferral is not a failure: the attempt schedule did not move
    assert manager.next_renewal("low2.budget.test") == deferred.until
    entry_state = manager._entries["low2.budget.test"].state
    assert entry_state.attempts == 0


async def test_the_scheduler_starts_due_work_by_priority_then_due_time_then_declaration(
    client: AcmeClient, http01: Http01Server
) -> None:
    clock = FakeClock(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    manager = CertificateManager(client, solvers=[http01], clock=clock)
    for name, priority in [("a.sched.test", 0), ("b.sched.test", 5), ("c.sched.test", 0)]:
        manager.manage(name, priority=priority)
    due, next_due = manager._plan_tick(clock.now())
    assert [e.spec.name for e in due] == ["b.sched.test", "a.sched.test", "c.sched.test"]
    assert next_due is None
    # started work is not started again until it changes; a change plans it again
    assert manager._plan_tick(clock.now()) == ([], None)
    manager.manage("a.sched.test", priority=1)
    assert [e.spec.name for e in manager._plan_tick(clock.now())[0]] == ["a.sched.test"]
    await manager.unmanage("c.sched.test")
    manager.manage("c.sched.test")
    assert [e.spec.name for e in manager._plan_tick(clock.now())[0]] == ["c.sched.test"]
    assert manager.next_renewal("a.sched.test") == clock.now()
