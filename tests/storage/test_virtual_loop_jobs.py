"""FileStorage's jobs on a VirtualClock's loop run on the loop's own thread (issue #26).

The loop runs them when it has nothing else to run (where it would wait for a worker
thread); results, errors and cancellation reach the caller as a worker's do, time stands
still, and a job that would wait for a lock goes to a worker thread instead. On any
other loop, jobs run in worker threads as before.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import acmecerts.storage._files as files
import acmecerts.storage._workers as workers
from acmecerts import VirtualClock
from acmecerts.errors import StorageError
from acmecerts.storage import FileStorage, VersionConflict

pytestmark = pytest.mark.timeout(20)

START = _dt.datetime(2027, 1, 1, tzinfo=_dt.UTC)


def _no_worker_threads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record every job handed to the worker threads."""
    handed: list[Any] = []
    submit = workers._pool.submit

    def recording(job: Any) -> None:
        handed.append(job)
        submit(job)

    monkeypatch.setattr(workers._pool, "submit", recording)
    return handed


def _record_threads(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """The threads that open files (every store operation opens one)."""
    idents: set[int] = set()
    real_open = os.open

    def recording_open(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        idents.add(threading.get_ident())
        return real_open(path, flags, mode, **kw)

    monkeypatch.setattr(files.os, "open", recording_open)
    return idents


def test_store_operations_run_on_the_virtual_loops_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = _no_worker_threads(monkeypatch)
    idents = _record_threads(monkeypatch)
    clock = VirtualClock(START)
    seen: dict[str, Any] = {}

    async def main() -> None:
        seen["loop"] = threading.get_ident()
        store = FileStorage(tmp_path, clock=clock)
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(store.store, f"k/v{i}", b"%d" % i)
        seen["loaded"] = [await store.load(f"k/v{i}") for i in range(20)]
        seen["listed"] = await store.list("k/")
        seen["deleted"] = await store.delete("k/v0")
        seen["gone"] = await store.load("k/v0")
        seen["job"] = await workers.in_worker(threading.get_ident)
        async with store.lock("leader", lease=60):
            seen["locked"] = await store.load("k/v1")

    clock.run(main)
    assert handed == []  # no job went to a worker thread
    assert idents == {seen["loop"]}
    assert seen["job"] == seen["loop"]
    assert [v.data for v in seen["loaded"]] == [b"%d" % i for i in range(20)]
    assert seen["listed"] == sorted(f"k/v{i}" for i in range(20))
    assert seen["deleted"] is True
    assert seen["gone"] is None
    assert seen["locked"].data == b"1"


def test_errors_reach_the_caller_as_from_a_worker(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    seen: dict[str, Any] = {}

    def fails() -> None:
        raise ValueError("from the job")

    async def main() -> None:
        store = FileStorage(tmp_path, clock=clock)
        version = await store.store("e/value", b"1")
        with pytest.raises(VersionConflict):
            await store.store("e/value", b"2", expect_version="0" * 32)
        (tmp_path / "e" / "broken").write_bytes(b"not an envelope")
        with pytest.raises(StorageError, match="corrupt"):
            await store.load("e/broken")
        with pytest.raises(ValueError, match="from the job"):
            await workers.in_worker(fails)
        value = await store.load("e/value")
        seen["kept"] = value is not None and value.version == version

    clock.run(main)
    assert seen["kept"]


def test_time_stands_still_during_a_store_operation(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    seen: dict[str, Any] = {}

    async def main() -> None:
        store = FileStorage(tmp_path, clock=clock)
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.sleep, 3600)  # a timer an hour ahead: the jump it may not make
            for i in range(10):
                await store.store(f"t/v{i}", b"x" * 1000)
                await workers.in_worker(lambda: threading.Event().wait(0.02))
            seen["now"], seen["jumps"] = clock.now(), clock.jumps
            tg.cancel_scope.cancel()
        await clock.sleep(60)
        seen["later"] = clock.now()

    clock.run(main)
    assert seen["now"] == START
    assert seen["jumps"] == 0
    assert seen["later"] == START + _dt.timedelta(minutes=1)


def test_a_deferred_job_whose_caller_is_cancelled_does_not_run() -> None:
    clock = VirtualClock(START)
    ran: list[int] = []
    seen: dict[str, Any] = {}

    async def caller(scopes: list[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await workers.in_worker(lambda: ran.append(1))
        seen["caught"] = scope.cancelled_caught

    async def canceller(scopes: list[anyio.CancelScope]) -> None:
        scopes[0].cancel()  # same iteration: the job is deferred, not run yet

    async def main() -> None:
        await workers.in_worker(lambda: None)  # the loop's port exists
        scopes: list[anyio.CancelScope] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller, scopes)
            tg.start_soon(canceller, scopes)

    clock.run(main)
    assert ran == []
    assert seen["caught"]


def test_a_job_that_would_wait_for_a_lock_goes_to_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop's own code holds the directory's flock (like another process's writer)
    # and lets go only after some iterations: waited for on the loop's thread, the
    # write would block the loop 30 s and fail; a worker thread waits instead.
    handed = _no_worker_threads(monkeypatch)
    writers: set[int] = set()
    real_write = files.write

    def recording_write(*args: Any) -> None:
        writers.add(threading.get_ident())
        real_write(*args)

    monkeypatch.setattr(files, "write", recording_write)
    clock = VirtualClock(START)
    seen: dict[str, Any] = {}

    async def main() -> None:
        seen["loop"] = threading.get_ident()
        store = FileStorage(tmp_path, clock=clock)
        await store.store("busy/first", b"1")
        fd = os.open(tmp_path / "busy", os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            async with anyio.create_task_group() as tg:
                tg.start_soon(store.store, "busy/second", b"2")
                for _ in range(10_000):  # busy iterations: the loop still runs the job
                    if handed:
                        break
                    await anyio.lowlevel.checkpoint()
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        seen["value"] = await store.load("busy/second")
        seen["now"] = clock.now()

    clock.run(main)
    assert len(handed) == 1
    assert seen["loop"] in writers  # the first write
    assert len(writers) == 2  # the second, in a worker thread
    assert seen["value"].data == b"2"
    assert seen["now"] == START


@pytest.mark.anyio
async def test_on_a_plain_loop_jobs_still_run_in_worker_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = _no_worker_threads(monkeypatch)
    store = FileStorage(tmp_path)
    await store.store("p/v", b"1")
    assert await workers.in_worker(threading.get_ident) != threading.get_ident()
    assert len(handed) == 2
