"""The :class:`~acmecerts.storage.Storage` contract, as tests every store must pass.

:class:`StorageContract` is run by ``tests/storage/test_contract.py`` against every kind
in ``STORE_KINDS`` (``tests/storage/conftest.py``). Tests only use the public protocol,
never a store's internals, and every key and lock name starts with a random segment, so
stores whose state outlives a test (an API server) need no cleanup between tests.

``store_factory()`` returns a new store sharing state with the others of the test: tasks
that use different stores act like different replicas.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import threading
import time
from typing import ClassVar, Protocol

import anyio
import pytest

from acmecerts.errors import InvalidInput
from acmecerts.storage import (
    ANY_VERSION,
    Lease,
    LockTimeout,
    Storage,
    StoredValue,
    VersionConflict,
    load_many,
)


class StoreFactory(Protocol):
    """Makes a new store sharing state with the others made in the same test."""

    async def __call__(self) -> Storage: ...


def unique() -> str:
    """A fresh first segment, so a test never sees another test's keys."""
    return f"t{secrets.token_hex(6)}"


INVALID_KEYS = [
    "",
    "/",
    "/abs",
    "a/",
    "a//b",
    "..",
    "../x",
    "a/../b",
    "a/./b",
    ".hidden",
    "a/.b",
    "Upper",
    "a b",
    "a\\b",
    "caf\u00e9",
    "a\x00b",
    "-dash",
    "trailing-",
    "x" * 201,
]


async def increment(store: Storage, key: str) -> int:
    """Read-modify-write a JSON counter with compare-and-swap, retrying on conflicts."""
    while True:
        current = await store.load(key)
        count = 0 if current is None else json.loads(current.data)["count"]
        try:
            await store.store(
                key,
                json.dumps({"count": count + 1}).encode(),
                expect_version=None if current is None else current.version,
            )
        except VersionConflict:
            continue
        return count + 1


class StorageContract:
    """What every store promises. Subclass it in a test module to run it."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    # -- values -----------------------------------------------------------------------

    async def test_is_a_storage(self, store_factory: StoreFactory) -> None:
        assert isinstance(await store_factory(), Storage)

    async def test_round_trip(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        key = f"{unique()}/a/value.json"
        data = bytes(range(256)) * 3

        version = await store.store(key, data)
        loaded = await store.load(key)

        assert isinstance(loaded, StoredValue)
        assert loaded.data == data
        assert loaded.version == version
        assert str(len(data)) in repr(loaded)
        assert "\\x00" not in repr(loaded)  # the repr never shows the value

    async def test_load_many_reads_as_load_does(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        first = unique()
        keys = [f"{first}/b.json", f"{first}/absent.json", f"{first}/a.json"]
        await store.store(keys[0], b"b")
        await store.store(keys[2], b"a", secret=True)

        many = await load_many(store, keys)

        singles = [await store.load(key) for key in keys]
        assert [v and (v.data, v.version) for v in many] == [
            v and (v.data, v.version) for v in singles
        ]
        assert many[1] is None
        assert many[0] is not None
        assert many[0].data == b"b"
        assert await load_many(store, []) == []
        with pytest.raises(InvalidInput):
            await load_many(store, [keys[0], "a//b"])

    async def test_empty_and_secret_values(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        base = unique()
        await store.store(f"{base}/empty", b"")
        await store.store(f"{base}/key.pem", b"-----BEGIN PRIVATE KEY-----\n", secret=True)

        empty = await store.load(f"{base}/empty")
        secret = await store.load(f"{base}/key.pem")

        assert empty is not None
        assert empty.data == b""
        assert secret is not None
        assert secret.data == b"-----BEGIN PRIVATE KEY-----\n"

    async def test_other_replicas_see_writes(self, store_factory: StoreFactory) -> None:
        one, two = await store_factory(), await store_factory()
        key = f"{unique()}/shared"

        version = await one.store(key, b"from one")

        loaded = await two.load(key)
        assert loaded == StoredValue(b"from one", version)

    async def test_missing_key_is_none(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        assert await store.load(f"{unique()}/nothing/here") is None

    async def test_changed_and_changed_back_is_a_new_version(
        self, store_factory: StoreFactory
    ) -> None:
        store = await store_factory()
        key = f"{unique()}/value"

        versions = [await store.store(key, data) for data in (b"a", b"b", b"a")]

        assert len(set(versions)) == 3  # no ABA: a stale compare-and-swap cannot succeed

    # -- compare-and-swap -------------------------------------------------------------

    async def test_store_with_current_version_succeeds(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        key = f"{unique()}/value"
        first = await store.store(key, b"1")

        second = await store.store(key, b"2", expect_version=first)

        loaded = await store.load(key)
        assert loaded == StoredValue(b"2", second)

    async def test_store_with_stale_version_conflicts(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        key = f"{unique()}/value"
        stale = await store.store(key, b"1")
        current = await store.store(key, b"2")

        with pytest.raises(VersionConflict):
            await store.store(key, b"3", expect_version=stale)

        assert await store.load(key) == StoredValue(b"2", current)

    async def test_store_with_version_of_missing_key_conflicts(
        self, store_factory: StoreFactory
    ) -> None:
        store = await store_factory()
        key = f"{unique()}/value"
        version = await store.store(key, b"1")
        await store.delete(key)

        with pytest.raises(VersionConflict):
            await store.store(key, b"2", expect_version=version)

        assert await store.load(key) is None

    async def test_create_only_if_absent(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        key = f"{unique()}/value"

        version = await store.store(key, b"first", expect_version=None)
        with pytest.raises(VersionConflict):
            await store.store(key, b"second", expect_version=None)

        assert await store.load(key) == StoredValue(b"first", version)

    async def test_unconditional_store_ignores_versions(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        key = f"{unique()}/value"
        await store.store(key, b"1")

        version = await store.store(key, b"2", expect_version=ANY_VERSION)

        assert await store.load(key) == StoredValue(b"2", version)

    async def test_one_of_many_concurrent_creators_wins(self, store_factory: StoreFactory) -> None:
        stores = [await store_factory() for _ in range(4)]
        key = f"{unique()}/created-once"
        winners: list[int] = []

        async def create(i: int) -> None:
            try:
                await stores[i % len(stores)].store(key, str(i).encode(), expect_version=None)
            except VersionConflict:
                return
            winners.append(i)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(create, i)

        assert len(winners) == 1
        loaded = await stores[0].load(key)
        assert loaded is not None
        assert loaded.data == str(winners[0]).encode()

    async def test_concurrent_writers_lose_no_update(self, store_factory: StoreFactory) -> None:
        stores = [await store_factory() for _ in range(4)]
        key = f"{unique()}/ledger.json"
        writers, increments = 8, 10

        async def writer(i: int) -> None:
            for _ in range(increments):
                await increment(stores[i % len(stores)], key)

        async with anyio.create_task_group() as tg:
            for i in range(writers):
                tg.start_soon(writer, i)

        loaded = await stores[0].load(key)
        assert loaded is not None
        assert json.loads(loaded.data) == {"count": writers * increments}

    # -- delete -----------------------------------------------------------------------

    async def test_delete(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        key = f"{unique()}/value"
        await store.store(key, b"1")

        assert await store.delete(key) is True
        assert await store.load(key) is None
        assert await store.delete(key) is False

    async def test_delete_with_current_version(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        key = f"{unique()}/value"
        version = await store.store(key, b"1")

        assert await store.delete(key, expect_version=version) is True
        assert await store.load(key) is None

    async def test_delete_with_stale_version_conflicts(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        key = f"{unique()}/value"
        stale = await store.store(key, b"1")
        current = await store.store(key, b"2")

        with pytest.raises(VersionConflict):
            await store.delete(key, expect_version=stale)

        assert await store.load(key) == StoredValue(b"2", current)

    async def test_delete_missing_key(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        key = f"{unique()}/never/stored"

        assert await store.delete(key) is False
        assert await store.delete(key, expect_version=None) is False
        with pytest.raises(VersionConflict):
            await store.delete(key, expect_version="some-version")

    async def test_delete_only_if_absent_conflicts_when_present(
        self, store_factory: StoreFactory
    ) -> None:
        store = await store_factory()
        key = f"{unique()}/value"
        version = await store.store(key, b"1")

        with pytest.raises(VersionConflict):
            await store.delete(key, expect_version=None)

        assert await store.load(key) == StoredValue(b"1", version)

    # -- list -------------------------------------------------------------------------

    async def test_list_by_prefix_sorted(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        base = unique()
        keys = [
            f"{base}/certs/b.example/cert.pem",
            f"{base}/certs/a.example/meta.json",
            f"{base}/certs/a.example/cert.pem",
            f"{base}/certificate",
            f"{base}/ledger.json",
            f"{base}x/other",
        ]
        for key in keys:
            await store.store(key, b"v")

        assert await store.list(f"{base}/certs/") == [
            f"{base}/certs/a.example/cert.pem",
            f"{base}/certs/a.example/meta.json",
            f"{base}/certs/b.example/cert.pem",
        ]
        assert await store.list(f"{base}/cert") == [  # a plain string prefix
            f"{base}/certificate",
            f"{base}/certs/a.example/cert.pem",
            f"{base}/certs/a.example/meta.json",
            f"{base}/certs/b.example/cert.pem",
        ]
        assert await store.list(base) == sorted(keys)
        assert await store.list(f"{base}/") == sorted(keys[:5])
        assert await store.list(f"{base}/nothing/") == []

    async def test_list_forgets_deleted_keys(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        base = unique()
        await store.store(f"{base}/a/one", b"1")
        await store.store(f"{base}/a/two", b"2")

        await store.delete(f"{base}/a/one")

        assert await store.list(f"{base}/") == [f"{base}/a/two"]

    # -- keys -------------------------------------------------------------------------

    @pytest.mark.parametrize("key", INVALID_KEYS)
    async def test_invalid_keys_are_refused(self, store_factory: StoreFactory, key: str) -> None:
        store = await store_factory()

        with pytest.raises(InvalidInput):
            await store.load(key)
        with pytest.raises(InvalidInput):
            await store.store(key, b"x")
        with pytest.raises(InvalidInput):
            await store.delete(key)
        with pytest.raises(InvalidInput):
            async with store.lock(key, timeout=0):
                pass

    async def test_invalid_prefixes_are_refused(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        for prefix in ("/", "../", "a/../", "a//", "A/", "a b"):
            with pytest.raises(InvalidInput):
                await store.list(prefix)

    # -- locks ------------------------------------------------------------------------

    async def test_lock_gives_a_lease(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        name = f"{unique()}/locks/one"
        before = dt.datetime.now(dt.UTC)

        async with store.lock(name, lease=30, timeout=5) as lease:
            assert isinstance(lease, Lease)
            assert lease.name == name
            assert not lease.lost
            assert lease.expires_at.tzinfo is not None
            assert before < lease.expires_at <= before + dt.timedelta(seconds=40)

    async def test_lock_is_free_again_after_release(self, store_factory: StoreFactory) -> None:
        one, two = await store_factory(), await store_factory()
        name = f"{unique()}/lock"

        async with one.lock(name, lease=30, timeout=5):
            pass
        async with two.lock(name, lease=30, timeout=0):
            pass

    async def test_lock_mutual_exclusion(self, store_factory: StoreFactory) -> None:
        stores = [await store_factory() for _ in range(4)]
        name = f"{unique()}/contended"
        inside = 0
        overlaps = 0
        entered: list[int] = []

        async def contender(i: int) -> None:
            nonlocal inside, overlaps
            async with stores[i % len(stores)].lock(name, lease=10, timeout=30):
                inside += 1
                if inside > 1:
                    overlaps += 1
                entered.append(i)
                await anyio.sleep(0.01)
                inside -= 1

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(contender, i)

        assert overlaps == 0
        assert sorted(entered) == list(range(20))

    async def test_lock_timeout(self, store_factory: StoreFactory) -> None:
        one, two = await store_factory(), await store_factory()
        name = f"{unique()}/held"

        async with one.lock(name, lease=30, timeout=5):
            with pytest.raises(LockTimeout):
                async with two.lock(name, lease=30, timeout=0):
                    pass
            started = time.monotonic()
            with pytest.raises(LockTimeout):
                async with two.lock(name, lease=30, timeout=dt.timedelta(seconds=0.3)):
                    pass
            assert 0.25 <= time.monotonic() - started < 5

    async def test_waiting_for_a_lock_honours_cancellation(
        self, store_factory: StoreFactory
    ) -> None:
        one, two = await store_factory(), await store_factory()
        name = f"{unique()}/held"
        reached = False

        async with one.lock(name, lease=30, timeout=5):
            started = time.monotonic()
            with anyio.move_on_after(0.3) as scope:
                async with two.lock(name, lease=30):  # no timeout: waits until cancelled
                    reached = True
            assert scope.cancelled_caught
            assert time.monotonic() - started < 3
        assert not reached

    async def test_lock_released_when_the_block_raises(self, store_factory: StoreFactory) -> None:
        store = await store_factory()
        name = f"{unique()}/lock"

        with pytest.raises(ZeroDivisionError):  # unchanged, not an ExceptionGroup
            async with store.lock(name, lease=30, timeout=5):
                1 / 0  # noqa: B018

        async with store.lock(name, lease=30, timeout=0):
            pass

    async def test_lock_released_when_the_block_is_cancelled(
        self, store_factory: StoreFactory
    ) -> None:
        store = await store_factory()
        name = f"{unique()}/lock"

        with anyio.move_on_after(0.1):
            async with store.lock(name, lease=30, timeout=5):
                await anyio.sleep(10)

        async with store.lock(name, lease=30, timeout=0):
            pass

    async def test_cancelled_acquisition_leaves_the_lock_free(
        self, store_factory: StoreFactory
    ) -> None:
        store = await store_factory()
        name = f"{unique()}/lock"

        for i in range(20):  # cancel at different moments of taking the lock
            with anyio.move_on_after(i * 0.002):
                async with store.lock(name, lease=30, timeout=5):
                    await anyio.sleep(10)
            async with store.lock(name, lease=30, timeout=0):
                pass

    async def test_live_holder_keeps_the_lock_past_its_lease(
        self, store_factory: StoreFactory
    ) -> None:
        holder, waiter = await store_factory(), await store_factory()
        name = f"{unique()}/renewed"

        async with holder.lock(name, lease=1.5, timeout=5) as lease:
            with pytest.raises(LockTimeout):
                async with waiter.lock(name, lease=1.5, timeout=3):
                    pass
            assert not lease.lost  # the heartbeat renewed it several times meanwhile

    async def test_dead_holder_lease_expires_and_is_taken_over(
        self, store_factory: StoreFactory
    ) -> None:
        """A holder whose process stops (here: its event loop is blocked) loses the lock.

        The holder runs in its own thread and event loop, takes the lock with a 1 s
        lease, then blocks its loop for 3.5 s so its heartbeat cannot run, as if the
        process hung or died. Another replica takes the lock over once the lease ran
        out; when the holder wakes up its lease is lost and leaving its block does not
        release the new holder's lock.
        """
        name = f"{unique()}/abandoned"
        locked, awake = threading.Event(), threading.Event()
        outcome: dict[str, object] = {}

        def frozen_holder() -> None:
            async def main() -> None:
                store = await store_factory()
                try:
                    async with store.lock(name, lease=1, timeout=5) as lease:
                        locked.set()
                        time.sleep(3.5)  # noqa: ASYNC251 - blocks this loop on purpose
                        await anyio.sleep(1.0)  # awake again: the heartbeat notices
                        outcome["lost"] = lease.lost
                except BaseException as exc:  # reported to the test below
                    outcome["error"] = exc
                finally:
                    awake.set()
                    await store.aclose()

            anyio.run(main)

        waiter, observer = await store_factory(), await store_factory()
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, frozen_holder)
            assert await anyio.to_thread.run_sync(locked.wait, 10, abandon_on_cancel=True)
            started = time.monotonic()
            async with waiter.lock(name, lease=30, timeout=3) as lease:
                taken_after = time.monotonic() - started
                # Stay in the block until the old holder has woken up and left its own.
                assert await anyio.to_thread.run_sync(awake.wait, 10, abandon_on_cancel=True)
                with pytest.raises(LockTimeout):
                    async with observer.lock(name, lease=30, timeout=0):
                        pass
                assert not lease.lost

        assert "error" not in outcome, outcome.get("error")
        assert outcome["lost"] is True
        assert 0.5 <= taken_after < 3.0
