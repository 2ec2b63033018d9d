"""Deleted owners: a certificate no longer managed is kept for a while, then forgotten.

Against a real Pebble and a real FileStorage, on a FakeClock: a certificate deleted and
applied again within the retention (same name, or another name with the same
identifiers) comes back without a new order; after the retention its files are gone.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from requests_seen import on_requests

from acmecerts import AcmeClient, Http01Server
from acmecerts._time import FakeClock
from acmecerts.errors import InvalidInput, StorageError
from acmecerts.manager import (
    CancelledResult,
    CertificateEvent,
    CertificateLoaded,
    CertificateManager,
    CertificateObtaining,
    CertificateSpec,
    IssuedResult,
)
from acmecerts.manager._persist import CertificateStore
from acmecerts.manager._records import OrderRecord
from acmecerts.retry import AttemptState
from acmecerts.storage import FileStorage, KeyLayout, Storage
from acmecerts.storage.keys import certificate_slug
from acmecerts.testing import PebbleServer
from tests.held_storage import HeldLoad

pytestmark = pytest.mark.anyio

START = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
WEEK = dt.timedelta(days=7)


#: The files a certificate the manager issued leaves: its record and its order record
#: (kept once finished: it names the record's order).
KEPT = 2


def files_of(root: Path, name: str) -> list[str]:
    """Every stored file of certificate ``name`` (certificate, key, meta, state, order)."""
    slug = certificate_slug(name)
    found = []
    for path in root.rglob("*"):
        if not path.is_file() or any(part.startswith(".") for part in path.parts):
            continue
        parts = path.relative_to(root).parts
        if slug in parts or f"{slug}.json" in parts:
            found.append(str(path.relative_to(root)))
    return sorted(found)


def retired_records(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("retired/*.json") if p.is_file())


def purged(root: Path, name: str) -> bool:
    """Whether the purge of ``name`` is complete: its files and its record are gone."""
    if files_of(root, name):
        return False
    for path in retired_records(root):
        try:
            if name in path.read_text(errors="replace"):
                return False
        except FileNotFoundError:
            continue  # deleted while we looked
    return True


class Orders:
    """Counts the newOrder requests a client sends."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def __call__(self, method: str, url: str) -> None:
        if url.endswith("/order-plz"):
            self.urls.append(url)

    def __len__(self) -> int:
        return len(self.urls)


@asynccontextmanager
async def client_for(
    pebble: PebbleServer, clock: FakeClock, orders: Callable[[str, str], None]
) -> AsyncIterator[AcmeClient]:
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        client.subscribe(on_requests(orders))
        yield client


async def wait_until(condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
    """Poll ``condition`` (real time) until it holds; fail naming ``what``."""
    for _ in range(int(seconds * 100)):
        if condition():
            return
        await anyio.sleep(0.01)
    pytest.fail(f"waited {seconds} s for {what}")


def manager_for(
    client: AcmeClient, solver: Http01Server, storage: Storage, **kwargs: Any
) -> CertificateManager:
    return CertificateManager(client, solvers=[solver], storage=storage, **kwargs)


async def issue(manager: CertificateManager, name: str, identifiers: list[str]) -> IssuedResult:
    [result] = await manager.issue_many([CertificateSpec.of(name, identifiers)])
    assert isinstance(result, IssuedResult), result
    return result


async def test_applied_again_under_a_new_name_the_stored_certificate_comes_back_without_an_order(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    orders = Orders()
    events: list[CertificateEvent] = []
    async with FileStorage(tmp_path) as storage, client_for(pebble, clock, orders) as client:
        manager = manager_for(client, http01, storage)
        manager.subscribe(events.append)
        first = await issue(manager, "release-1", ["app.helm.example.test"])
        await manager.unmanage("release-1")
        assert len(files_of(tmp_path, "release-1")) == KEPT
        assert len(retired_records(tmp_path)) == 1
        clock.advance(dt.timedelta(days=2))  # a Helm reinstall two days later
        again = await issue(manager, "release-2", ["app.helm.example.test"])
        assert len(orders) == 1  # no new order
        assert again.certificate.serial == first.certificate.serial
        assert again.certificate.fullchain_pem == first.certificate.fullchain_pem
        assert manager.renewal_at("release-2") is not None  # renewed on its schedule
        loaded = [e for e in events if isinstance(e, CertificateLoaded)]
        assert [(e.name, e.certificate) for e in loaded] == [("release-2", again.certificate)]
        assert not any(
            isinstance(e, CertificateObtaining) and e.name == "release-2" for e in events
        )
        # the old name's copy is due for deletion at once
        assert manager._retired is not None
        due = manager._retired.next_purge_at()
        assert due is not None
        assert due <= clock.now()
        assert await manager._retired.purge_due(clock.now()) == 1
        assert files_of(tmp_path, "release-1") == []
        assert retired_records(tmp_path) == []
        # the certificate is stored under the new name: a restarted manager uses it
        restarted = manager_for(client, http01, storage)
        [result] = await restarted.issue_many(
            [CertificateSpec.of("release-2", ["app.helm.example.test"])]
        )
    assert isinstance(result, IssuedResult)
    assert result.certificate.serial == first.certificate.serial
    assert len(orders) == 1


async def test_an_adoption_drops_the_finished_order_of_the_certificate_it_replaces(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    """A finished order record is dead only while its certificate is stored: adopting a
    retired certificate in its place deletes it, so that asking for the first
    identifiers again orders anew instead of resuming that old, valid order."""
    clock = FakeClock(START)
    orders = Orders()
    layout = KeyLayout(pebble.directory_url)
    first_ids, other_ids = ["one.swap.example.test"], ["two.swap.example.test"]
    async with FileStorage(tmp_path) as storage, client_for(pebble, clock, orders) as client:
        manager = manager_for(client, http01, storage)
        kept = await issue(manager, "old", other_ids)
        await manager.unmanage("old")  # retired: adoptable for other_ids
        first = await issue(manager, "cur", first_ids)
        assert await storage.load(layout.order("cur")) is not None  # finished, kept
        assert len(orders) == 2

        adopted = await issue(manager, "cur", other_ids)  # stale: the retired one fits
        assert adopted.certificate.serial == kept.certificate.serial
        assert len(orders) == 2
        assert await storage.load(layout.order("cur")) is None

        back = await issue(manager, "cur", first_ids)
    assert len(orders) == 3  # a new order, not the first one resumed
    assert back.certificate.serial != first.certificate.serial


@pytest.mark.timeout(60)
async def test_after_the_retention_certificate_key_and_state_are_deleted_by_the_manager(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    orders = Orders()
    async with FileStorage(tmp_path) as storage, client_for(pebble, clock, orders) as client:
        manager = manager_for(client, http01, storage)
        await issue(manager, "gone.example.test", ["gone.example.test"])
        # state a failed renewal would leave: attempt schedule and an order in flight
        store = CertificateStore(storage, KeyLayout(pebble.directory_url))
        await store.save_attempt_state("gone.example.test", AttemptState(attempts=2))
        await store.save_order(
            "gone.example.test",
            OrderRecord(None, (), "-----BEGIN PRIVATE KEY-----", created_at=clock.now()),
        )
        assert len(files_of(tmp_path, "gone.example.test")) == 3
        await manager.unmanage("gone.example.test")
        retired_at = clock.now()
        assert manager._retired is not None
        assert manager._retired.next_purge_at() == START  # the records were never listed
        await manager._retired.scan()
        assert manager._retired.next_purge_at() == retired_at + WEEK
        async with manager:  # the scheduler sleeps (a fake clock) until the purge is due
            await wait_until(lambda: purged(tmp_path, "gone.example.test"), "the purge")
            purged_at = clock.now()
        assert await storage.list(KeyLayout(pebble.directory_url).retired_prefix()) == []
    assert retired_records(tmp_path) == []
    assert retired_at + WEEK <= purged_at < retired_at + WEEK + dt.timedelta(seconds=1)
    assert len(orders) == 1


@pytest.mark.timeout(60)
async def test_a_name_managed_again_before_the_purge_keeps_its_certificate(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    orders = Orders()
    events: list[CertificateEvent] = []
    async with FileStorage(tmp_path) as storage, client_for(pebble, clock, orders) as client:
        manager = manager_for(client, http01, storage, retention=dt.timedelta(days=1))
        first = await issue(manager, "back.example.test", ["back.example.test"])
        await manager.unmanage("back.example.test")
        manager.subscribe(events.append)
        clock.advance(dt.timedelta(hours=12))  # the namespace is applied again
        manager.manage("back.example.test")
        async with manager:
            await wait_until(lambda: manager.get("back.example.test") is not None, "the load")
            await wait_until(lambda: clock.now() > START + dt.timedelta(days=3), "3 days")
        kept = manager.get("back.example.test")
        assert files_of(tmp_path, "back.example.test")
    assert kept is not None
    assert kept.serial == first.certificate.serial
    assert retired_records(tmp_path) == []  # the retirement was cancelled
    assert len(orders) == 1
    assert not any(isinstance(e, CertificateObtaining) for e in events)


@pytest.mark.timeout(60)
async def test_managed_again_while_its_retirement_is_recorded_the_retirement_is_cancelled(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    """A resource deleted and applied again at once: its entry comes back mid-retirement.

    The retirement of the old entry is still being written when the new entry reads its
    state; the new entry cancels it after it is written, never before (a retirement
    recorded for a name in use would have its files purged from under it).
    """
    clock = FakeClock(START)
    orders = Orders()
    events: list[CertificateEvent] = []
    name = "again.example.test"
    async with (
        HeldLoad(tmp_path, matching="/retired/") as storage,
        client_for(pebble, clock, orders) as client,
    ):
        manager = manager_for(client, http01, storage)
        first = await issue(manager, name, [name])
        manager.subscribe(events.append)
        storage.armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(manager.unmanage, name)
            with anyio.fail_after(10):
                await storage.held.wait()  # the retirement is being recorded
            manager.manage(name, [name])  # applied again meanwhile
            async with manager:
                await anyio.sleep(0.2)  # the new entry's state is read (or waits) meanwhile
                storage.release.set()
                # the load ends with its event, after the renewal plan (Pebble 2.10's ARI
                # answer is awaited first): wait for the event, not only for the entry
                await wait_until(
                    lambda: any(isinstance(e, CertificateLoaded) for e in events), "the load"
                )
        assert [s.name for s in manager.managed()] == [name]
        assert retired_records(tmp_path) == []  # recorded, then cancelled: in this order
    loaded = [e for e in events if isinstance(e, CertificateLoaded)]
    assert [(e.name, e.certificate.serial if e.certificate else None) for e in loaded] == [
        (name, first.certificate.serial)
    ]
    assert len(orders) == 1


async def test_a_name_another_replica_manages_again_is_not_purged_by_the_one_that_retired_it(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    orders = Orders()
    async with (
        FileStorage(tmp_path) as storage,
        client_for(pebble, clock, orders) as client_a,
        client_for(pebble, clock, orders) as client_b,
    ):
        replica_a = manager_for(client_a, http01, storage, retention=3600)
        replica_b = manager_for(client_b, http01, storage, retention=3600)
        first = await issue(replica_a, "moved.example.test", ["moved.example.test"])
        await replica_a.unmanage("moved.example.test")
        assert len(retired_records(tmp_path)) == 1
        # replica B takes the resource over: it reads the stored certificate
        again = await issue(replica_b, "moved.example.test", ["moved.example.test"])
        assert again.certificate.serial == first.certificate.serial
        assert retired_records(tmp_path) == []  # the retirement is cancelled in the store
        clock.advance(dt.timedelta(hours=2))
        assert replica_a._retired is not None
        await replica_a._retired.scan()
        assert await replica_a._retired.purge_due(clock.now()) == 0
        assert len(files_of(tmp_path, "moved.example.test")) == KEPT
    assert len(orders) == 1


@pytest.mark.timeout(60)
async def test_a_restarted_manager_purges_at_the_recorded_instant(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    orders = Orders()
    async with FileStorage(tmp_path) as storage:
        async with client_for(pebble, clock, orders) as client:
            first = manager_for(client, http01, storage)
            await issue(first, "restart.example.test", ["restart.example.test"])
            await first.unmanage("restart.example.test")
        retired_at = clock.now()
        clock.advance(dt.timedelta(days=1))  # down for a day
        async with client_for(pebble, clock, orders) as client:
            restarted = manager_for(client, http01, storage)
            assert restarted._retired is not None
            assert restarted._retired.next_purge_at() == clock.now()  # list the records first
            await restarted._retired.scan()
            assert restarted._retired.next_purge_at() == retired_at + WEEK
            assert files_of(tmp_path, "restart.example.test")
            async with restarted:
                await wait_until(lambda: purged(tmp_path, "restart.example.test"), "the purge")
                purged_at = clock.now()
    assert retired_at + WEEK <= purged_at < retired_at + WEEK + dt.timedelta(seconds=1)
    assert retired_records(tmp_path) == []
    assert len(orders) == 1


@pytest.mark.timeout(60)
async def test_an_unreadable_record_is_logged_and_skipped_and_good_certificates_stay(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="acmecerts.manager")
    clock = FakeClock(START)
    orders = Orders()
    layout = KeyLayout(pebble.directory_url)
    store_keys = {
        "garbage": layout.retired(["dns:stuck.example.test"]),
        "bad entry": layout.retired(["dns:bad-entry.example.test"]),
    }
    async with FileStorage(tmp_path) as storage, client_for(pebble, clock, orders) as client:
        await storage.store(store_keys["garbage"], b"{not json")
        await storage.store(
            store_keys["bad entry"],
            b'{"format": 1, "identifiers": ["bad-entry.example.test"],'
            b' "entries": [{"name": "x", "retired_at": "yesterday", "state": "retired"}]}',
        )
        manager = manager_for(client, http01, storage, retention=3600)
        good = await issue(manager, "good.example.test", ["good.example.test"])
        await issue(manager, "old.example.test", ["old.example.test"])
        stuck = await issue(manager, "stuck.example.test", ["stuck.example.test"])
        await manager.unmanage("old.example.test")
        # its record is the unreadable one: not overwritten, the certificate stays
        await manager.unmanage("stuck.example.test")
        async with manager:
            await wait_until(lambda: purged(tmp_path, "old.example.test"), "the purge")
        for key in store_keys.values():
            assert await storage.load(key) is not None  # never repaired or deleted
        stored = CertificateStore(storage, layout)
        kept = await stored.load_certificate("stuck.example.test")
        still = await stored.load_certificate("good.example.test")
    assert kept is not None
    assert kept.serial == stuck.certificate.serial
    assert still is not None
    assert still.serial == good.certificate.serial
    assert manager.get("good.example.test") == good.certificate
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("stuck.example.test: cannot record its retirement" in w for w in warnings)
    unreadable = [w for w in warnings if "cannot be read" in w]
    assert len(unreadable) == 2  # each logged once
    assert any("not valid JSON" in w for w in unreadable)
    assert any("not a valid retired record" in w for w in unreadable)
    assert len(orders) == 3


@pytest.mark.timeout(60)
async def test_two_replicas_on_one_store_adopt_once_and_purge_idempotently(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    orders = Orders()
    async with (
        FileStorage(tmp_path) as storage,
        client_for(pebble, clock, orders) as client_a,
        client_for(pebble, clock, orders) as client_b,
    ):
        replica_a = manager_for(client_a, http01, storage)
        replica_b = manager_for(client_b, http01, storage)
        await replica_b._retired.scan()  # type: ignore[union-attr]  # B listed before A retires
        first = await issue(replica_a, "ns1.web", ["web.replicas.example.test"])
        await replica_a.unmanage("ns1.web")
        clock.advance(dt.timedelta(hours=1))
        # the resource comes back in another namespace, and replica B handles it
        again = await issue(replica_b, "ns2.web", ["web.replicas.example.test"])
        assert again.certificate.serial == first.certificate.serial
        assert len(orders) == 1
        # both replicas purge the old name's files at once; one deletes, neither fails
        counts: list[int] = []

        async def purge(manager: CertificateManager) -> None:
            assert manager._retired is not None
            await manager._retired.scan()
            counts.append(await manager._retired.purge_due(clock.now()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(purge, replica_a)
            tg.start_soon(purge, replica_b)
        assert sorted(counts) == [0, 1]
        assert files_of(tmp_path, "ns1.web") == []
        assert len(files_of(tmp_path, "ns2.web")) == 1
        assert retired_records(tmp_path) == []


async def test_a_certificate_a_managed_name_waits_for_is_not_purged_from_under_it(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    orders = Orders()
    async with FileStorage(tmp_path) as storage, client_for(pebble, clock, orders) as client:
        manager = manager_for(client, http01, storage, retention=60)
        first = await issue(manager, "w-old", ["waits.example.test"])
        await manager.unmanage("w-old")
        manager.manage("w-new", ["waits.example.test"])  # not started yet
        clock.advance(120)  # the retention is over
        assert manager._retired is not None
        assert await manager._retired.purge_due(clock.now()) == 0  # postponed
        assert len(files_of(tmp_path, "w-old")) == KEPT
        again = await issue(manager, "w-new", ["waits.example.test"])
        assert again.certificate.serial == first.certificate.serial
        assert await manager._retired.purge_due(clock.now()) == 1
        assert files_of(tmp_path, "w-old") == []
    assert len(orders) == 1


async def test_retention_zero_forgets_at_once_and_none_keeps_forever(
    pebble_2_4: PebbleServer, tmp_path: Path
) -> None:
    # Pebble 2.4: five-year certificates, still valid after the year this test skips
    pebble = pebble_2_4
    clock = FakeClock(START)
    orders = Orders()
    async with (
        Http01Server(host="127.0.0.1", port=pebble.http_port) as http01,
        FileStorage(tmp_path) as storage,
        client_for(pebble, clock, orders) as client,
    ):
        at_once = manager_for(client, http01, storage, retention=0)
        await issue(at_once, "zero.example.test", ["zero.example.test"])
        await at_once.unmanage("zero.example.test")
        assert files_of(tmp_path, "zero.example.test") == []
        assert retired_records(tmp_path) == []

        forever = manager_for(client, http01, storage, retention=None)
        await issue(forever, "forever.example.test", ["forever.example.test"])
        await forever.unmanage("forever.example.test")
        clock.advance(dt.timedelta(days=365))
        assert forever._retired is not None
        await forever._retired.scan()
        assert forever._retired.next_purge_at() is None
        assert await forever._retired.purge_due(clock.now()) == 0
        assert len(files_of(tmp_path, "forever.example.test")) == KEPT
        # still taken back, a year later, while it is valid (Pebble: 5 years)
        back = await issue(forever, "forever-2", ["forever.example.test"])
        assert back.certificate.not_after > clock.now()
    assert len(orders) == 2


async def test_retention_must_be_a_duration(client: AcmeClient, http01: Http01Server) -> None:
    for bad in (-1, float("nan"), float("inf"), "7d", dt.timedelta(seconds=-1)):
        with pytest.raises(InvalidInput):
            CertificateManager(client, solvers=[http01], retention=bad)  # type: ignore[arg-type]
    manager = CertificateManager(client, solvers=[http01], retention=dt.timedelta(hours=2))
    assert manager.retention == 7200
    assert CertificateManager(client, solvers=[http01]).retention == WEEK.total_seconds()


class FailOnce:
    """A FileStorage whose first delete of a key ending in ``suffix`` fails."""

    def __init__(self, inner: FileStorage, suffix: str) -> None:
        self.inner = inner
        self.suffix = suffix
        self.failed = False

    async def load(self, key: str) -> Any:
        return await self.inner.load(key)

    async def store(self, key: str, data: bytes, **kwargs: Any) -> str:
        return await self.inner.store(key, data, **kwargs)

    async def delete(self, key: str, **kwargs: Any) -> bool:
        if key.endswith(self.suffix) and not self.failed:
            self.failed = True
            raise StorageError(f"injected: cannot delete {key}", path=key)
        return await self.inner.delete(key, **kwargs)

    async def list(self, prefix: str) -> list[str]:
        return await self.inner.list(prefix)

    def lock(self, name: str, **kwargs: Any) -> Any:
        return self.inner.lock(name, **kwargs)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_an_interrupted_purge_leaves_no_loadable_half_and_is_finished_later(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    orders = Orders()
    async with FileStorage(tmp_path) as inner, client_for(pebble, clock, orders) as client:
        storage = FailOnce(inner, "/certificate.json")
        manager = manager_for(client, http01, storage, retention=60)  # type: ignore[arg-type]
        await issue(manager, "half.example.test", ["half.example.test"])
        await manager.unmanage("half.example.test")
        clock.advance(61)
        assert manager._retired is not None
        assert await manager._retired.purge_due(clock.now()) == 0  # failed: the record stays
        assert storage.failed
        store = CertificateStore(inner, KeyLayout(pebble.directory_url))
        # one record: the certificate is whole (chain with its key) or gone, never half
        kept = await store.load_certificate("half.example.test")
        assert kept is not None
        assert kept.identifiers[0].value == "half.example.test"
        assert files_of(tmp_path, "half.example.test")
        due = manager._retired.next_purge_at()
        assert due is not None
        assert due > clock.now()  # tried again later, not in a loop
        clock.advance(dt.timedelta(hours=1))
        assert await manager._retired.purge_due(clock.now()) == 1
        assert files_of(tmp_path, "half.example.test") == []
        assert retired_records(tmp_path) == []


async def test_an_owner_gone_retires_the_certificate(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    orders = Orders()
    async with FileStorage(tmp_path) as storage, client_for(pebble, clock, orders) as client:
        first = manager_for(client, http01, storage, retention=3600)
        issued = await issue(first, "owned.example.test", ["owned.example.test"])
        # after a restart, the owner (a Kubernetes resource) turns out to be gone

        async def gone() -> bool:
            return False

        restarted = manager_for(client, http01, storage, retention=3600)
        spec = CertificateSpec.of("owned.example.test", owner=gone)
        [result] = await restarted.issue_many([spec])
        assert isinstance(result, CancelledResult)
        assert len(retired_records(tmp_path)) == 1
        assert len(files_of(tmp_path, "owned.example.test")) == KEPT  # kept for the retention
        assert restarted._retired is not None
        await restarted._retired.scan()
        assert restarted._retired.next_purge_at() == clock.now() + dt.timedelta(hours=1)
        # the resource is applied again in time: the certificate comes back
        again = await issue(restarted, "owned.example.test", ["owned.example.test"])
        assert again.certificate.serial == issued.certificate.serial
        assert retired_records(tmp_path) == []
    assert len(orders) == 1


class ListFails:
    """A FileStorage whose ``list`` fails while ``failing`` (the store is unreachable)."""

    def __init__(self, inner: FileStorage) -> None:
        self.inner = inner
        self.failing = False
        self.lists = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def list(self, prefix: str) -> list[str]:
        self.lists += 1
        if self.failing:
            raise StorageError("injected: the store is unreachable")
        return await self.inner.list(prefix)


async def test_a_store_that_cannot_be_listed_is_tried_again_later_not_in_a_loop(
    client: AcmeClient, http01: Http01Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(START)
    async with FileStorage(tmp_path) as inner:
        storage = ListFails(inner)
        manager = CertificateManager(
            client,
            solvers=[http01],
            storage=storage,  # type: ignore[arg-type]
            clock=clock,
        )
        retired = manager._retired
        assert retired is not None
        assert retired.next_purge_at() == START  # the first listing
        await retired.purge_due(clock.now())
        assert storage.lists == 1
        assert retired.next_purge_at() is None  # nothing retired: nothing to wake for
        assert await retired.purge_due(clock.now()) == 0
        assert storage.lists == 1  # listed again only when stale
        clock.advance(dt.timedelta(hours=23))
        await retired.purge_due(clock.now())
        assert storage.lists == 1  # a listing is stale after a day
        clock.advance(dt.timedelta(hours=1))
        storage.failing = True
        await retired.purge_due(clock.now())
        assert storage.lists == 2
        failed_at = clock.now()
        assert retired.next_purge_at() == failed_at + dt.timedelta(minutes=1)
        # rounds of the scheduler before that instant list nothing
        for _ in range(3):
            await retired.purge_due(clock.now())
        assert storage.lists == 2
        clock.advance(60)
        await retired.purge_due(clock.now())
        assert storage.lists == 3
        assert retired.next_purge_at() == clock.now() + dt.timedelta(minutes=2)  # doubled
        storage.failing = False
        clock.advance(120)
        await retired.purge_due(clock.now())
        assert storage.lists == 4
        assert retired.next_purge_at() is None
    assert any("cannot list retired certificates" in r.getMessage() for r in caplog.records)
