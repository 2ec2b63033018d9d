"""FileStorage: what the contract cannot see — files, modes, crashes, other processes.

The contract suite (``test_contract.py``) covers the protocol; these tests look at the
directory itself and use child processes (``tests/storage/children.py``) for what must
hold across processes: locks, compare-and-swap, SIGKILL in the middle of a write.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import anyio
import pytest
from waits import within

from acmecerts.errors import InvalidInput, StorageError
from acmecerts.storage import (
    FileStorage,
    LockTimeout,
    Storage,
    StoredValue,
    VersionConflict,
    _read_batches,
    load_each,
    load_many,
)
from acmecerts.storage.filesystem import MAX_VALUE_SIZE
from tests.storage.children import child, expect_line, finish

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]

KEY = "ca/accounts/default/key.pem"
HEADER = re.compile(rb"acmecerts-v1 ([0-9a-f]{32}) ([0-9]+) ([0-9a-f]{64})\n")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


# -- files and modes ------------------------------------------------------------------


async def test_is_a_storage(tmp_path: Path) -> None:
    assert isinstance(FileStorage(tmp_path), Storage)


async def test_keys_are_files_under_root(tmp_path: Path) -> None:
    store = FileStorage(tmp_path / "store")

    await store.store(KEY, b"secret", secret=True)

    assert store.path_for(KEY) == str(tmp_path / "store" / "ca/accounts/default/key.pem")
    assert files_under(tmp_path / "store") == ["ca/accounts/default/key.pem"]


async def test_on_disk_format_is_a_checked_envelope(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    data = b"-----BEGIN CERTIFICATE-----\n"

    version = await store.store("a/cert.pem", data)

    raw = (tmp_path / "a" / "cert.pem").read_bytes()
    header = HEADER.match(raw)
    assert header is not None
    assert header[1].decode() == version
    assert int(header[2]) == len(data)
    assert raw[header.end() :] == data


@pytest.mark.parametrize("umask", [0o022, 0o000])
async def test_files_0600_and_directories_0700(tmp_path: Path, umask: int) -> None:
    root = tmp_path / "new" / "store"
    store = FileStorage(root)
    old = os.umask(umask)
    try:
        await store.store(KEY, b"private key", secret=True)
        await store.store("ca/ledger.json", b"{}")
        async with store.lock("ca/accounts/default/account", timeout=1):
            lease_file = root / ".locks/ca/accounts/default/account"
            assert mode(lease_file) == 0o600
            assert mode(root / ".locks") == 0o700
    finally:
        os.umask(old)

    assert mode(root) == 0o700
    for directory in ("ca", "ca/accounts", "ca/accounts/default"):
        assert mode(root / directory) == 0o700
    assert mode(root / KEY) == 0o600
    assert mode(root / "ca/ledger.json") == 0o600  # not secret, still private


async def test_no_temp_files_left(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    for i in range(20):
        await store.store("a/value", str(i).encode())
    async with store.lock("a/lock", timeout=1):
        pass
    await store.store("a/gone", b"x")
    await store.delete("a/gone")

    assert files_under(tmp_path) == ["a/value"]


async def test_list_skips_temp_lock_and_stray_files(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    await store.store("a/value", b"1")
    (tmp_path / "a" / ".value.tmp").write_bytes(b"half a wri")
    (tmp_path / "a" / "README.TXT").write_text("an operator's note")
    (tmp_path / "a" / "link").symlink_to(tmp_path / "a" / "value")

    async with store.lock("a/lock", timeout=1):
        assert await store.list("") == ["a/value"]


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    async with FileStorage(tmp_path) as store:
        await store.store("a/value", b"1")

    with pytest.raises(StorageError, match="closed"):
        await store.load("a/value")
    await store.aclose()  # idempotent


# -- keys that must never become paths -------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["../escape", "a/../../escape", "/tmp/escape", "a/./b", ".locks/x", "a/.b.tmp", "a\\..\\b"],
)
async def test_path_traversal_refused(tmp_path: Path, key: str) -> None:
    store = FileStorage(tmp_path / "store")

    with pytest.raises(InvalidInput):
        await store.store(key, b"x")
    with pytest.raises(InvalidInput):
        await store.load(key)
    with pytest.raises(InvalidInput):
        store.lock(key)

    assert os.listdir(tmp_path) == []  # nothing written anywhere, not even the root


async def test_symlink_is_not_followed(tmp_path: Path) -> None:
    store = FileStorage(tmp_path / "store")
    outside = tmp_path / "outside"
    outside.write_bytes(b"not yours")
    await store.store("a/placeholder", b"x")
    (tmp_path / "store" / "a" / "value").symlink_to(outside)

    with pytest.raises(StorageError, match="symbolic link") as caught:
        await store.load("a/value")
    assert caught.value.path == str(tmp_path / "store" / "a" / "value")

    await store.store("a/value", b"replaces the link, not its target")
    assert outside.read_bytes() == b"not yours"


async def test_special_files_are_errors(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    await store.store("a/placeholder", b"x")
    os.mkfifo(tmp_path / "a" / "fifo")

    with (
        within(30, "a FIFO to be refused instead of opened (which would block)"),
        pytest.raises(StorageError, match="not a file"),
    ):
        await store.load("a/fifo")


async def test_oversized_values_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        await FileStorage(tmp_path).store("a/huge", bytes(MAX_VALUE_SIZE + 1))


async def test_a_key_cannot_also_be_a_prefix(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    await store.store("a", b"file")
    await store.store("x/y", b"file")

    with pytest.raises(StorageError, match="prefix"):
        await store.store("a/b", b"under a file")
    with pytest.raises(StorageError, match="prefix"):
        await store.store("x", b"over a directory")

    assert await store.load("a/b") is None
    assert await store.load("x") is None
    assert await store.delete("x") is False
    assert await store.list("") == ["a", "x/y"]


# -- several keys at once ---------------------------------------------------------


async def test_load_many_is_one_hop_to_the_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStorage(tmp_path)
    keys = [f"ca/certificates/n{i}/certificate.json" for i in range(4)]
    for key in keys[:3]:
        await store.store(key, key.encode())
    hops = 0
    real_run = _read_batches.run_sync

    async def counting(func: Callable[..., object], *args: object) -> object:
        nonlocal hops
        hops += 1
        return await real_run(func, *args)

    monkeypatch.setattr(_read_batches, "run_sync", counting)
    values = await store.load_many(keys)
    assert hops == 1
    assert [v and v.data for v in values] == [k.encode() for k in keys[:3]] + [None]
    with pytest.raises(InvalidInput):
        await store.load_many([keys[0], "../x"])
    assert hops == 1  # the keys are checked before any I/O
    await load_many(store, keys)  # the public functions ask the store's own
    await load_each(store, keys)
    assert hops == 3


async def test_reads_asked_for_together_share_one_hop_and_each_gets_its_own_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads asked for while a read job waits for a worker join it (see _read_batches.py)."""
    store = FileStorage(tmp_path)
    for i in range(40):
        await store.store(f"ca/v/{i}", f"value {i}".encode())
    hops = 0
    real_run = _read_batches.run_sync
    go = anyio.Event()

    async def counting(func: Callable[..., object], *args: object) -> object:
        nonlocal hops
        hops += 1
        await go.wait()  # every worker busy: the job waits, others join it
        return await real_run(func, *args)

    monkeypatch.setattr(_read_batches, "run_sync", counting)
    found: dict[int, object] = {}

    async def read(i: int) -> None:
        if i % 2:
            value = await store.load(f"ca/v/{i}")
            found[i] = value and value.data
        else:
            values = await store.load_many([f"ca/v/{i}", "ca/v/none", f"ca/v/{i + 1}"])
            found[i] = [v and v.data for v in values]

    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(read, i)
        await anyio.wait_all_tasks_blocked()
        go.set()
    assert hops == 1
    for i in range(30):
        if i % 2:
            assert found[i] == f"value {i}".encode()
        else:
            assert found[i] == [f"value {i}".encode(), None, f"value {i + 1}".encode()]
    # a read asked for after the job started makes a job of its own
    assert (await store.load("ca/v/39")) is not None
    assert hops == 2


async def test_a_cancelled_reader_leaves_the_others_of_its_job_their_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStorage(tmp_path)
    await store.store("ca/a", b"a")
    await store.store("ca/b", b"b")
    real_run = _read_batches.run_sync
    go = anyio.Event()

    async def slow(func: Callable[..., object], *args: object) -> object:
        await go.wait()
        return await real_run(func, *args)

    monkeypatch.setattr(_read_batches, "run_sync", slow)
    got: list[object] = []

    async def second() -> None:
        value = await store.load("ca/b")
        got.append(value and value.data)

    async with anyio.create_task_group() as tg:
        first = anyio.CancelScope()

        async def first_reader() -> None:
            with first:
                await store.load("ca/a")
                got.append("first finished")

        tg.start_soon(first_reader)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(second)
        await anyio.wait_all_tasks_blocked()
        first.cancel()  # the job's starter goes; the job still ends, for the second
        await anyio.wait_all_tasks_blocked()
        go.set()
    assert got == [b"b"]


async def test_load_many_of_a_store_without_it_loads_each_key(tmp_path: Path) -> None:
    """A third-party store (here: one that only forwards ``load``) is read key by key."""

    class OnlyLoad:
        def __init__(self, inner: FileStorage) -> None:
            self.inner, self.keys = inner, list[str]()

        async def load(self, key: str) -> StoredValue | None:
            self.keys.append(key)
            return await self.inner.load(key)

    inner = FileStorage(tmp_path)
    await inner.store(KEY, b"key")
    only = OnlyLoad(inner)
    values = await load_many(cast(Storage, only), [KEY, "ca/none.json"])
    assert [v and v.data for v in values] == [b"key", None]
    assert only.keys == [KEY, "ca/none.json"]
    each = await load_each(cast(Storage, only), ["ca/none.json", KEY])
    assert [v and v.data for v in each] == [None, b"key"]
    assert only.keys[-2:] == ["ca/none.json", KEY]


async def test_a_corrupt_value_raises_in_load_many_and_stands_in_its_place_in_load_each(
    tmp_path: Path,
) -> None:
    store = FileStorage(tmp_path)
    await store.store(KEY, b"value")
    await store.store("ca/ledger.json", b"{}")
    path = tmp_path / KEY
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(StorageError) as caught:
        await store.load_many(["ca/ledger.json", KEY])
    assert caught.value.path == str(path)
    ledger, damaged, absent = await load_each(store, ["ca/ledger.json", KEY, "ca/no.json"])
    assert isinstance(ledger, StoredValue)
    assert ledger.data == b"{}"
    assert isinstance(damaged, StorageError)
    assert damaged.path == str(path)
    assert absent is None


async def test_a_subclass_that_reads_its_own_way_is_read_with_its_load(tmp_path: Path) -> None:
    class Down(FileStorage):
        async def load(self, key: str) -> StoredValue | None:
            raise StorageError(f"down (reading {key})")

    found = await load_each(Down(tmp_path), [KEY, "ca/ledger.json"])
    assert [str(e) for e in found] == [f"down (reading {k})" for k in (KEY, "ca/ledger.json")]


# -- corruption ---------------------------------------------------------------------

CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda raw: raw[:-7],
    "header only": lambda raw: raw[: raw.index(b"\n") + 1],
    "cut in header": lambda raw: raw[:20],
    "empty": lambda raw: b"",
    "flipped bit": lambda raw: raw[:-1] + bytes([raw[-1] ^ 0x01]),
    "no header": lambda raw: raw[raw.index(b"\n") + 1 :],
    "longer": lambda raw: raw + b"\n",
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
async def test_corrupt_file_is_reported_and_left_alone(tmp_path: Path, corruption: str) -> None:
    store = FileStorage(tmp_path)
    version = await store.store(KEY, b"-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMG\n", secret=True)
    await store.store("ca/ledger.json", b"{}")
    path = tmp_path / KEY
    damaged = CORRUPTIONS[corruption](path.read_bytes())
    path.write_bytes(damaged)

    with pytest.raises(StorageError) as caught:
        await store.load(KEY)
    assert not isinstance(caught.value, VersionConflict)
    assert caught.value.path == str(path)
    assert str(path) in str(caught.value)
    assert "corrupt" in str(caught.value)

    # A compare-and-swap must read the old value first, so it refuses too.
    for attempt in (
        store.store(KEY, b"new", expect_version=version),
        store.store(KEY, b"new", expect_version=None),
        store.delete(KEY, expect_version=version),
    ):
        with pytest.raises(StorageError, match="corrupt"):
            await attempt

    assert path.read_bytes() == damaged  # never replaced or deleted
    ledger = await store.load("ca/ledger.json")  # the other files are fine
    assert ledger is not None
    assert ledger.data == b"{}"
    assert await store.list("ca/") == ["ca/accounts/default/key.pem", "ca/ledger.json"]


async def test_unconditional_store_replaces_a_corrupt_file(tmp_path: Path) -> None:
    """Only a deliberate write without compare-and-swap repairs a corrupt value."""
    store = FileStorage(tmp_path)
    await store.store("a/value", b"old")
    (tmp_path / "a" / "value").write_bytes(b"garbage")

    version = await store.store("a/value", b"restored from backup")

    loaded = await store.load("a/value")
    assert loaded is not None
    assert (loaded.data, loaded.version) == (b"restored from backup", version)


async def test_corrupt_lease_file_is_reported(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    async with store.lock("a/lock", timeout=1):
        pass
    lease_file = tmp_path / ".locks" / "a" / "lock"
    lease_file.parent.mkdir(parents=True, exist_ok=True)
    lease_file.write_bytes(b"acmecerts-v1 trash")

    with pytest.raises(StorageError, match="corrupt") as caught:
        async with store.lock("a/lock", timeout=1):
            pass
    assert caught.value.path == str(lease_file)
    assert lease_file.read_bytes() == b"acmecerts-v1 trash"


# -- locks --------------------------------------------------------------------------


async def test_lease_file_names_the_holder(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    lease_file = tmp_path / ".locks" / "a" / "lock"

    async with store.lock("a/lock", lease=30, timeout=1) as lease:
        raw = lease_file.read_bytes()
        record = json.loads(raw[raw.index(b"\n") + 1 :])
        assert record["pid"] == os.getpid()
        assert f":{os.getpid()}:" in record["holder"]
        assert record["expires_at"] == lease.expires_at.isoformat()
        with pytest.raises(LockTimeout, match=f"pid {os.getpid()}"):
            async with FileStorage(tmp_path).lock("a/lock", timeout=0):
                pass

    assert not lease_file.exists()


@pytest.mark.parametrize(
    ("lease", "wait"), [(0, None), (-1, None), (float("inf"), None), (1, -1), (float("nan"), 1)]
)
async def test_lock_arguments_are_checked(tmp_path: Path, lease: float, wait: float) -> None:
    with pytest.raises(InvalidInput):
        FileStorage(tmp_path).lock("a/lock", lease=lease, timeout=wait)


# -- several processes --------------------------------------------------------------


async def test_lock_excludes_other_processes(tmp_path: Path) -> None:
    root, log, go = tmp_path / "store", tmp_path / "log", tmp_path / "go"
    script = """
    root, log, go = ARGS

    async def main():
        store = FileStorage(root)
        wait_for_go(go)
        for _ in range(5):
            async with store.lock("shared/lock", lease=10, timeout=8):
                fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                os.write(fd, f"enter {os.getpid()}\\n".encode())
                await anyio.sleep(0.005)
                os.write(fd, f"exit {os.getpid()}\\n".encode())
                os.close(fd)
        print("done", flush=True)

    anyio.run(main)
    """
    with (
        child(script, str(root), str(log), str(go)) as a,
        child(script, str(root), str(log), str(go)) as b,
        child(script, str(root), str(log), str(go)) as c,
    ):
        for proc in (a, b, c):
            await expect_line(proc, "ready")
        go.touch()
        for proc in (a, b, c):
            await expect_line(proc, "done")
            await finish(proc)

    lines = log.read_text().splitlines()
    assert len(lines) == 30
    for enter, leave in zip(lines[::2], lines[1::2], strict=True):
        assert enter.startswith("enter ")
        assert leave == "exit " + enter.removeprefix("enter ")  # nobody in between
    assert len({line.split()[1] for line in lines}) == 3


async def test_compare_and_swap_across_processes(tmp_path: Path) -> None:
    root, go = tmp_path / "store", tmp_path / "go"
    script = """
    root, go = ARGS

    async def main():
        store = FileStorage(root)
        wait_for_go(go)
        for _ in range(15):
            await increment(store, "shared/counter.json")
        print("done", flush=True)

    anyio.run(main)
    """
    with (
        child(script, str(root), str(go)) as a,
        child(script, str(root), str(go)) as b,
        child(script, str(root), str(go)) as c,
    ):
        for proc in (a, b, c):
            await expect_line(proc, "ready")
        go.touch()
        for proc in (a, b, c):
            await finish(proc)

    loaded = await FileStorage(root).load("shared/counter.json")
    assert loaded is not None
    assert json.loads(loaded.data) == {"count": 45}


async def test_sigkilled_holder_lease_expires_and_is_taken_over(tmp_path: Path) -> None:
    root = tmp_path / "store"
    script = """
    async def main():
        store = FileStorage(ARGS[0])
        async with store.lock("shared/lock", lease=1.0, timeout=5):
            print("locked", flush=True)
            await anyio.sleep_forever()

    anyio.run(main)
    """
    store = FileStorage(root)
    with child(script, str(root)) as holder:
        await expect_line(holder, "locked")
        # Alive, its heartbeat keeps the 1 s lease for longer than 1 s.
        with pytest.raises(LockTimeout, match=f"pid {holder.pid}"):
            async with store.lock("shared/lock", timeout=1.5):
                pass

        holder.send_signal(signal.SIGKILL)
        holder.wait()
        started = time.monotonic()
        async with store.lock("shared/lock", lease=30, timeout=5) as lease:
            waited = time.monotonic() - started
            assert not lease.lost

    assert waited < 1.5  # at most the rest of the dead holder's 1 s lease


async def test_sigkill_in_the_middle_of_a_write_keeps_the_old_value(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = FileStorage(root)
    old_version = await store.store("a/value", b"old value")
    script = """
    import acmecerts.storage.filesystem as fs

    def stall(fd):  # the new value is in the temp file; stop before the rename
        print("stalled", flush=True)
        time.sleep(60)

    fs.os.fsync = stall
    anyio.run(FileStorage(ARGS[0]).store, "a/value", b"new value " * 1000)
    """
    with child(script, str(root)) as writer:
        await expect_line(writer, "stalled")
        assert (root / "a" / ".value.tmp").exists()
        writer.send_signal(signal.SIGKILL)
        writer.wait()

    loaded = await store.load("a/value")
    assert loaded is not None
    assert (loaded.data, loaded.version) == (b"old value", old_version)
    assert await store.list("") == ["a/value"]

    # The crashed writer's directory lock died with it; its temp file goes with the next write.
    with anyio.fail_after(2):
        await store.store("a/value", b"newer", expect_version=old_version)
    assert files_under(root) == ["a/value"]


async def test_sigkill_at_a_random_moment_never_corrupts(tmp_path: Path) -> None:
    root = tmp_path / "store"
    values = {b"a" * 300_000, b"b" * 100_000}
    script = """
    async def main():
        store = FileStorage(ARGS[0])
        first = True
        while True:
            for value in (b"a" * 300_000, b"b" * 100_000):
                await store.store("a/value", value)
                if first:
                    print("writing", flush=True)
                    first = False

    anyio.run(main)
    """
    for _ in range(2):
        with child(script, str(root)) as writer:
            await expect_line(writer, "writing")
            await anyio.sleep(random.uniform(0.01, 0.2))
            writer.send_signal(signal.SIGKILL)
            writer.wait()

        loaded = await FileStorage(root).load("a/value")
        assert loaded is not None
        assert loaded.data in values


async def test_a_new_directory_is_durable_in_its_parent_before_the_write_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync of a file and of its directory does not make the directory's own entry
    durable: every directory a write creates has its parent fsynced, once."""
    import acmecerts.storage._files as files

    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", recording_fsync)
    root = tmp_path / "store"  # created by the first write too
    store = FileStorage(root)
    await store.store("ca/certificates/a/certificate.json", b"a")
    made = [root, root / "ca", root / "ca" / "certificates", root / "ca/certificates/a"]
    # deepest first, then the directory of the rename itself
    assert synced == [str(p.parent) for p in reversed(made)] + [str(made[-1])]
    synced.clear()
    await store.store("ca/certificates/a/other.json", b"b")  # no directory created
    assert synced == [str(made[-1])]
    synced.clear()
    await store.store("ca/certificates/b/certificate.json", b"c")
    assert synced == [str(made[2]), str(made[2] / "b")]


async def test_writers_of_one_process_queue_without_polling_and_every_write_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import acmecerts.storage._files as files

    store = FileStorage(tmp_path)
    await store.store("a/first", b"0")
    real_fsync = os.fsync
    synced_files: list[int] = []
    directory_syncs = 0

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"a writer polled the directory lock (slept {seconds}s)")

    def counting_fsync(fd: int) -> None:
        nonlocal directory_syncs
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            directory_syncs += 1
        else:
            synced_files.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(files.time, "sleep", no_sleep)  # the flock is never busy within a process
    monkeypatch.setattr(files.os, "fsync", counting_fsync)
    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(store.store, f"a/value-{i}", b"%d" % i)
        tg.start_soon(store.delete, "a/first")

    assert len(synced_files) == 40  # every value's data, before its rename
    assert 1 <= directory_syncs <= 41  # the renames and the unlink, some in shared fsyncs
    assert await store.list("a/") == [f"a/value-{i}" for i in sorted(range(40), key=str)]
    for i in range(40):
        value = await store.load(f"a/value-{i}")
        assert value is not None
        assert value.data == b"%d" % i


# -- the store's worker threads -------------------------------------------------------


async def test_file_io_runs_in_the_stores_own_bounded_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import acmecerts.storage._files as files
    import acmecerts.storage._workers as workers

    store = FileStorage(tmp_path)
    threads: set[str] = set()
    real_open = os.open

    def recording_open(path: str, flags: int, mode: int = 0o777) -> int:
        threads.add(threading.current_thread().name)
        return real_open(path, flags, mode)

    monkeypatch.setattr(files.os, "open", recording_open)
    idents: set[int] = set()

    async def one(i: int) -> None:
        await store.store(f"p/v{i}", b"%d" % i)
        value = await store.load(f"p/v{i}")
        assert value is not None
        assert value.data == b"%d" % i

    def note_ident() -> None:
        idents.add(threading.get_ident())

    async with anyio.create_task_group() as tg:
        for i in range(60):
            tg.start_soon(one, i)

    assert threads == {"acmecerts-storage"}  # not the event loop, not anyio's workers
    for _ in range(60):
        await workers.in_worker(note_ident)
    assert threading.get_ident() not in idents
    assert len([t for t in threading.enumerate() if t.name == "acmecerts-storage"]) <= (
        workers.MAX_WORKERS
    )


async def test_a_write_waiting_for_a_busy_directory_honours_cancellation(tmp_path: Path) -> None:
    import fcntl

    store = FileStorage(tmp_path)
    await store.store("busy/first", b"1")
    # Another open file description of the directory: like another process's writer.
    fd = os.open(tmp_path / "busy", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # Without the cancellation reaching the worker, it would wait 30 s for the
        # directory and this test would time out.
        with anyio.move_on_after(0.2) as scope:
            await store.store("busy/second", b"2")
        assert scope.cancelled_caught
        assert await store.load("busy/second") is None  # the write gave up
    finally:
        os.close(fd)
    await store.store("busy/second", b"2")  # the directory is usable again
    assert await store.list("busy/") == ["busy/first", "busy/second"]


async def test_an_already_cancelled_caller_does_not_write(tmp_path: Path) -> None:
    store = FileStorage(tmp_path)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.store("c/never", b"x")
    assert scope.cancelled_caught
    assert await store.load("c/never") is None


def test_one_store_serves_event_loops_in_several_threads(tmp_path: Path) -> None:
    import threading

    store = FileStorage(tmp_path)
    errors: list[BaseException] = []

    read: dict[int, list[bytes | None]] = {}

    def loop(n: int) -> None:
        async def load(i: int) -> None:
            value = await store.load(f"t{n}/v{i}")
            read[n][i] = value and value.data

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                for i in range(30):
                    tg.start_soon(store.store, f"t{n}/v{i}", b"%d" % i)
            # reads of all three loops at once: each loop's reads share jobs of its own
            read[n] = [None] * 30
            async with anyio.create_task_group() as tg:
                for i in range(30):
                    tg.start_soon(load, i)

        try:
            anyio.run(main)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(8)
    assert not errors
    assert not any(thread.is_alive() for thread in threads)
    for n in range(3):
        found = anyio.run(store.list, f"t{n}/")
        assert len(found) == 30
        assert read[n] == [b"%d" % i for i in range(30)]
