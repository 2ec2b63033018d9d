"""``acmecerts.storage.update``: read-modify-write by compare-and-swap, bounded in tries."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from acmecerts.errors import InvalidInput, StorageError
from acmecerts.storage import (
    ANY_VERSION,
    DELETE,
    UPDATE_TRIES,
    FileStorage,
    Outcome,
    StoredValue,
    UpdateConflict,
    VersionConflict,
    _files,
    update,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

KEY = "counters/x"


def add_one(current: StoredValue | None) -> bytes:
    return b"%d" % (0 if current is None else int(current.data) + 1)


class Racing(FileStorage):
    """A FileStorage that counts its calls and can run code between a read and a write."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.loads = 0
        self.stores = 0
        #: Awaited at the start of every store (before its compare-and-swap).
        self.before_store: list[object] = []
        self.rival: FileStorage | None = None
        self.pause_after_load = False

    async def load(self, key: str) -> StoredValue | None:
        self.loads += 1
        value = await super().load(key)
        if self.pause_after_load:
            await anyio.sleep(0.001)  # let the other updater read the same version
        return value

    async def _store(self, key: str, data: bytes, secret: bool, expect_version: object) -> str:
        self.stores += 1
        if self.rival is not None:  # another writer gets there first, every time
            await self.rival.store(key, b"%d" % (1000 + self.stores))
        return await super()._store(key, data, secret, expect_version)  # type: ignore[arg-type]


async def test_creates_changes_leaves_and_deletes(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    created = await update(store, KEY, add_one)
    assert created is not None
    assert created.data == b"0"
    assert await store.load(KEY) == created

    changed = await update(store, KEY, add_one)
    assert changed is not None
    assert changed.data == b"1"
    assert changed.version != created.version

    left = await update(store, KEY, lambda current: None)
    assert left == changed  # nothing written: same version

    assert await update(store, KEY, lambda current: DELETE) is None
    assert await store.load(KEY) is None
    assert await update(store, KEY, lambda current: DELETE) is None  # absent: no-op


async def test_two_concurrent_updaters_lose_no_update(tmp_path: Path) -> None:
    # Two stores on one directory (two processes' worth of state), each read paused so
    # that both updaters usually read the same version and one of them conflicts.
    stores = [Racing(tmp_path), Racing(tmp_path)]
    for store in stores:
        store.pause_after_load = True
    rounds = 25

    async def updater(store: Racing) -> None:
        for _ in range(rounds):
            await update(store, KEY, add_one, tries=2 * rounds)

    async with anyio.create_task_group() as tg:
        for store in stores:
            tg.start_soon(updater, store)
    final = await stores[0].load(KEY)
    assert final is not None
    assert int(final.data) == 2 * rounds - 1  # every increment is there (0-based)
    conflicts = sum(s.stores for s in stores) - 2 * rounds
    assert conflicts > 0  # the two really raced


@pytest.mark.parametrize("tries", [1, 3, UPDATE_TRIES])
async def test_a_writer_that_always_wins_gives_the_typed_error_after_exactly_n_tries(
    tmp_path: Path, tries: int
) -> None:
    store = Racing(tmp_path)
    store.rival = FileStorage(tmp_path)
    pauses: list[int] = []

    async def on_conflict(n: int) -> None:
        pauses.append(n)

    with pytest.raises(UpdateConflict) as caught:
        await update(store, KEY, add_one, tries=tries, on_conflict=on_conflict)
    assert store.stores == tries
    assert store.loads == tries  # one read before each try
    assert pauses == list(range(1, tries))  # after each conflict but the last
    error = caught.value
    assert (error.key, error.tries) == (KEY, tries)
    assert isinstance(error, VersionConflict)
    assert isinstance(error, StorageError)
    assert f"after {tries} tries" in str(error)
    value = await store.load(KEY)
    assert value is not None
    assert value.data == b"%d" % (1000 + tries)  # the rival's last: none of ours got in


async def test_the_default_bound_is_update_tries(tmp_path: Path) -> None:
    store = Racing(tmp_path)
    store.rival = FileStorage(tmp_path)
    with pytest.raises(UpdateConflict):
        await update(store, KEY, add_one)
    assert store.stores == UPDATE_TRIES == 8


async def test_current_is_tried_first_without_a_read(tmp_path: Path) -> None:
    store = Racing(tmp_path)
    first = await update(store, KEY, add_one)
    store.loads = 0
    second = await update(store, KEY, add_one, current=first)
    assert second is not None
    assert second.data == b"1"
    assert (store.loads, store.stores) == (0, 2)


async def test_a_stale_current_costs_a_conflict_and_a_read(tmp_path: Path) -> None:
    store = Racing(tmp_path)
    stale = await update(store, KEY, add_one)
    await update(store, KEY, add_one)
    store.loads = store.stores = 0
    result = await update(store, KEY, add_one, current=stale)
    assert result is not None
    assert result.data == b"2"
    assert (store.loads, store.stores) == (1, 2)


async def test_a_current_left_alone_is_read_again_to_check_it_is_current(tmp_path: Path) -> None:
    store = Racing(tmp_path)
    stale = await update(store, KEY, add_one)
    newer = await update(store, KEY, add_one)
    seen: list[bytes | None] = []

    def leave(current: StoredValue | None) -> Outcome:
        seen.append(None if current is None else current.data)
        return None

    store.loads = 0
    assert await update(store, KEY, leave, current=newer) == newer
    assert store.loads == 1
    assert await update(store, KEY, leave, current=stale) == newer  # asked again
    assert seen == [b"1", b"0", b"1"]


async def test_a_shielded_write_completes_when_the_caller_is_cancelled(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    with anyio.CancelScope() as scope:

        def change(current: StoredValue | None) -> bytes:
            scope.cancel()  # cancelled just before the write
            return b"written"

        await update(store, KEY, change, shield=True)
    value = await store.load(KEY)
    assert value is not None
    assert value.data == b"written"


async def test_bad_arguments(tmp_path: Path) -> None:
    store = Racing(tmp_path)
    for tries in (0, -1, 1.5, True):
        with pytest.raises(InvalidInput):
            await update(store, KEY, add_one, tries=tries)  # type: ignore[arg-type]
    assert store.loads == 0
    with pytest.raises(InvalidInput):
        await update(store, KEY, lambda current: "text")  # type: ignore[arg-type,return-value]


async def test_a_change_that_raises_writes_nothing(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    await store.store(KEY, b"7", expect_version=ANY_VERSION)

    def broken(current: StoredValue | None) -> bytes:
        raise StorageError("not a counter")

    with pytest.raises(StorageError, match="not a counter"):
        await update(store, KEY, broken)
    value = await store.load(KEY)
    assert value is not None
    assert value.data == b"7"


async def test_lease_files_are_not_fsynced_but_values_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def counting(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(_files.os, "fsync", counting)
    store = FileStorage(tmp_path)
    lease_file = tmp_path / ".locks" / "a" / "lock"
    async with store.lock("a/lock") as lease:  # taken, then released
        assert not lease.lost
        assert lease_file.is_file()
    assert not lease_file.exists()
    assert synced == []
    await store.store(KEY, b"1")
    # the root (the entry of counters/, created for the value), the value's file, then
    # counters/ (the rename); none of the lease's (.locks/a was created without one)
    root, counters = str(tmp_path), str(tmp_path / "counters")
    assert synced == [root, f"{counters}/.x.tmp", counters]
    await store.delete(KEY)
    assert synced[3:] == [counters]
