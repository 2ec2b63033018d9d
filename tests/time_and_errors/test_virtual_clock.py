"""The VirtualClock's loop and worker threads: time stands still while a store thread
works, and the loop waits for the thread's wake-up rather than spinning (issue #26)."""

from __future__ import annotations

import asyncio
import datetime as _dt
import selectors
import time
from pathlib import Path
from typing import Any

import anyio

from acmecerts import VirtualClock
from acmecerts._time import wait_until
from acmecerts.storage import FileStorage
from acmecerts.storage._workers import before_waiting, in_worker

START = _dt.datetime(2027, 1, 1, tzinfo=_dt.UTC)


class _CountingSelector:
    """Counts the real selector's waits (a timeout above zero) and what they waited for."""

    def __init__(self, real: selectors.BaseSelector) -> None:
        self.real = real
        self.waits: list[float | None] = []

    def select(self, timeout: float | None = None) -> Any:
        if timeout is None or timeout > 0:
            self.waits.append(timeout)
        return self.real.select(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _count_waits(loop: asyncio.AbstractEventLoop) -> _CountingSelector:
    virtual = loop._selector  # type: ignore[attr-defined]
    counting = _CountingSelector(virtual._real)
    virtual._real = counting
    return counting


def test_a_slow_store_thread_holds_time_and_the_loop_waits_for_its_wake_up() -> None:
    clock = VirtualClock(START)
    seen: dict[str, Any] = {}

    async def main() -> None:
        counting = _count_waits(asyncio.get_running_loop())
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.sleep, 3600)  # a timer an hour ahead: the jump it may not make
            began = time.perf_counter()
            # a job that would wait for a lock runs in a worker thread, even here
            await in_worker(lambda: (before_waiting(), time.sleep(0.3)))
            seen["real"] = time.perf_counter() - began
            seen["now"] = clock.now()
            seen["waits"] = list(counting.waits)
            tg.cancel_scope.cancel()

    clock.run(main)
    assert seen["now"] == START  # 0.3 s of a thread's work: no time went by
    assert seen["real"] >= 0.3
    # waited in slices of up to 50 ms (~6), not of 1 ms (~300 before)
    assert 1 <= len(seen["waits"]) <= 20, seen["waits"]


def test_a_store_write_ends_the_wait_at_once_and_time_moves_on_afterwards(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    seen: dict[str, Any] = {}

    async def main() -> None:
        counting = _count_waits(asyncio.get_running_loop())
        store = FileStorage(tmp_path, clock=clock)
        for i in range(20):
            await store.store(f"k/v{i}", b"x" * 100)
            assert clock.now() == START
        seen["waits"] = len(counting.waits)
        await clock.sleep(86_400)  # nothing in flight now: this is a jump, not a wait
        seen["now"] = clock.now()
        await store.aclose()

    clock.run(main)
    assert seen["now"] == START + _dt.timedelta(days=1)
    assert clock.jumps >= 1
    # each write's wake-up ends its wait (a write, its fsync included, is one or two
    # waits, not one per millisecond)
    assert seen["waits"] <= 60, seen["waits"]


def test_wait_until_on_a_virtual_clock_ends_at_the_instant_in_virtual_time() -> None:
    clock = VirtualClock(START)

    async def main() -> tuple[_dt.datetime, float]:
        real = time.monotonic()
        await wait_until(clock, START + _dt.timedelta(hours=6))
        return clock.now(), time.monotonic() - real

    reached, took = clock.run(main)
    assert reached == START + _dt.timedelta(hours=6)
    assert took < 5  # a jump, not six hours
