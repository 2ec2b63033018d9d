"""The one lease lock, as a state machine on a FakeClock over an in-memory compare-and-swap.

Every store's lock is :class:`acmecerts.storage._lease.LeaseLocks` over the store's CAS
backend; here the backend is a dict that counts its reads and swaps, so each test says
how many sleeps and how many compare-and-swaps a step of the protocol costs (acquire,
wait, heartbeat, expiry, loss, release), never how many seconds it took. The heartbeat
never moves the clock (it follows it: ``wait_until``), so its tests move it themselves,
as the rest of a program would.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import math

import anyio
import anyio.lowlevel
import pytest

from acmecerts._time import Backoff, FakeClock
from acmecerts.errors import InvalidInput, StorageError
from acmecerts.storage import HeldLease, Lease, LeaseLocks, LeaseRecord, LockTimeout, ObservedLease

pytestmark = pytest.mark.anyio

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
NAME = "a/lock"


class MemoryLeases:
    """A LeaseBackend in a dict: versions are serial numbers, released records stay."""

    backoff = Backoff(initial=0.005, floor=0.0025, cap=0.25, jitter=0.5)

    def __init__(self, *, guess: bool = True) -> None:
        self.records: dict[str, ObservedLease] = {}
        self.guess = guess
        self.reads = 0
        self.swaps = 0
        #: Swaps that completed (not failed, not cancelled in flight).
        self.answered = 0
        self.fail = False
        self.dead: set[str] = set()
        self.gate: anyio.Event | None = None
        self.in_swap = anyio.Event()
        #: The clock the swaps are timed on, and the instant of each swap.
        self.clock: FakeClock | None = None
        self.swapped_at: list[dt.datetime] = []
        self._serial = 0
        self._holders = 0

    def put(self, name: str, record: LeaseRecord) -> ObservedLease:
        """Write ``record`` as another process would (a new version)."""
        self._serial += 1
        self.records[name] = ObservedLease(record, f"v{self._serial}")
        return self.records[name]

    def lease_seconds(self, requested: float) -> float:
        return requested

    def new_holder(self) -> str:
        self._holders += 1
        return f"me/{self._holders}"

    def where(self, name: str) -> str | None:
        return f"memory:{name}"

    def abandoned(self, record: LeaseRecord) -> bool:
        return record.holder in self.dead

    async def peek(self, name: str) -> ObservedLease | None:
        return None if self.guess else await self.read(name)

    async def read(self, name: str) -> ObservedLease | None:
        self.reads += 1
        await anyio.lowlevel.checkpoint()
        return self.records.get(name)

    async def swap(
        self, name: str, expect: str | None, record: LeaseRecord
    ) -> tuple[bool, ObservedLease | None]:
        self.swaps += 1
        if self.clock is not None:
            self.swapped_at.append(self.clock.now())
        self.in_swap.set()
        if self.gate is not None:
            await self.gate.wait()
        else:
            await anyio.lowlevel.checkpoint()
        if self.fail:
            raise StorageError("the store is unreachable")
        self.answered += 1
        current = self.records.get(name)
        if (current.version if current is not None else None) != expect:
            return False, current
        return True, self.put(name, record)


def held_by(holder: str, seconds: float, *, duration: float | None = None) -> LeaseRecord:
    return LeaseRecord(
        holder=holder,
        expires_at=START + dt.timedelta(seconds=seconds),
        acquired_at=START,
        duration=duration,
    )


def setup(*, guess: bool = True) -> tuple[FakeClock, MemoryLeases, LeaseLocks]:
    clock = FakeClock(START)
    backend = MemoryLeases(guess=guess)
    backend.clock = clock
    return clock, backend, LeaseLocks(backend, clock)


# -- acquire ------------------------------------------------------------------------------


async def test_a_free_lock_costs_one_swap_to_take_and_one_to_give_back() -> None:
    _, backend, locks = setup()
    async with locks.hold(NAME, 30, None) as lease:
        assert isinstance(lease, Lease)
        assert lease.expires_at == START + dt.timedelta(seconds=30)
        assert not lease.lost
        assert backend.swaps == 1
        record = backend.records[NAME].record
        assert record.holder == lease.holder
        assert record.transitions == 0
    assert backend.swaps == 2
    assert backend.reads == 0
    assert backend.records[NAME].record.holder is None  # released, not renewed


async def test_a_held_lock_is_polled_with_growing_pauses_until_its_holder_expires() -> None:
    clock, backend, locks = setup()
    backend.put(NAME, held_by("other", 2.0))

    held = await locks.acquire(NAME, 30, None)

    # First the guess "free" is refused by a swap, then one read after every pause, then
    # the claim: two swaps in all.
    assert backend.swaps == 2
    assert backend.reads == len(clock.sleeps)
    assert held.holder != "other"
    assert backend.records[NAME].record.transitions == 1
    waited = clock.now() - START
    assert dt.timedelta(seconds=2) <= waited <= dt.timedelta(seconds=2.002)  # not past expiry
    pauses = clock.sleeps
    assert max(pauses) <= MemoryLeases.backoff.cap
    assert all(p >= MemoryLeases.backoff.floor for p in pauses[:-1])  # the last: to expiry
    assert pauses[4] > pauses[0]  # the pause grows
    assert len(pauses) < 30  # not a tight loop


async def test_timeout_zero_tries_once_and_names_the_holder() -> None:
    clock, backend, locks = setup()
    backend.put(NAME, held_by("other", 60))
    with pytest.raises(
        LockTimeout, match=r"'a/lock' not acquired within 0s: held by other"
    ) as caught:
        await locks.acquire(NAME, 30, 0)
    assert caught.value.path == "memory:a/lock"
    assert (backend.swaps, backend.reads, clock.sleeps) == (1, 0, [])


async def test_the_timeout_cuts_the_last_pause() -> None:
    clock, backend, locks = setup()
    backend.put(NAME, held_by("other", 60))
    with pytest.raises(LockTimeout):
        await locks.acquire(NAME, 30, 1.0)
    assert math.isclose(sum(clock.sleeps), 1.0, abs_tol=1e-5)
    assert clock.now() == START + dt.timedelta(seconds=1)
    assert backend.swaps == 1
    assert backend.reads == len(clock.sleeps)


async def test_a_lease_seen_unchanged_for_its_whole_duration_is_taken_over() -> None:
    """A holder whose clock runs an hour ahead cannot keep the lock past one lease."""
    clock, backend, locks = setup(guess=False)
    backend.put(NAME, held_by("ahead", 3600, duration=5))
    await locks.acquire(NAME, 30, None)
    waited = (clock.now() - START).total_seconds()
    assert 5 <= waited <= 5.002
    assert backend.swaps == 1  # read first (no guess), then one claim


async def test_a_dead_holder_is_taken_over_at_once() -> None:
    clock, backend, locks = setup()
    backend.put(NAME, held_by("ghost", 3600))
    backend.dead.add("ghost")
    await locks.acquire(NAME, 30, None)
    assert (backend.swaps, clock.sleeps) == (2, [])


async def test_a_release_wakes_a_waiter_of_the_same_store_at_once() -> None:
    class StoppedClock(FakeClock):
        async def sleep(self, seconds: float) -> None:
            self.sleeps.append(seconds)
            await anyio.sleep_forever()  # only a release can end the wait

    clock = StoppedClock(START)
    backend = MemoryLeases()
    locks = LeaseLocks(backend, clock)
    first = await locks.acquire(NAME, 3600, None)
    got: list[HeldLease] = []

    async def waiter() -> None:
        got.append(await locks.acquire(NAME, 30, None))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            while not clock.sleeps:
                await anyio.lowlevel.checkpoint()
            await locks.release(first, quiet=False)
    assert len(got) == 1
    assert clock.now() == START  # woken by the release, not by time
    assert backend.records[NAME].record.holder == got[0].holder


async def test_cancelled_while_claiming_leaves_the_lock_free() -> None:
    _, backend, locks = setup()
    backend.gate = anyio.Event()
    with anyio.fail_after(10), anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def take() -> None:
                async with locks.hold(NAME, 30, None):
                    await anyio.sleep_forever()

            tg.start_soon(take)
            await backend.in_swap.wait()
            scope.cancel()  # while the claim is on its way
            backend.gate.set()
    assert backend.swaps == 2  # the claim completed (shielded), then the release
    assert backend.records[NAME].record.holder is None


@pytest.mark.parametrize(("lease", "wait"), [(0, None), (math.inf, None), (1, -1), (1, math.nan)])
async def test_lock_arguments_are_checked_before_any_io(lease: float, wait: float) -> None:
    _, backend, locks = setup()
    with pytest.raises(InvalidInput):
        locks.hold(NAME, lease, wait)
    with pytest.raises(InvalidInput):
        locks.hold("../escape", 1, None)
    assert (backend.swaps, backend.reads) == (0, 0)


# -- heartbeat, loss ----------------------------------------------------------------------


#: How far the tests move the clock at a time while a heartbeat runs (exact in binary).
TICK = 1 / 64


async def run_heartbeat(locks: LeaseLocks, held: HeldLease, seconds: float, until: int) -> None:
    """Run the heartbeat until ``until`` swaps were answered or tried (or it ends).

    The heartbeat follows the clock: this moves it :data:`TICK` at a time, each time
    once the heartbeat is waiting again (as the other tasks of a program would).
    """
    backend = locks._backend
    assert isinstance(backend, MemoryLeases)
    clock = backend.clock
    assert clock is not None
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def beat() -> None:
                await locks.heartbeat(held, seconds)
                tg.cancel_scope.cancel()  # ended by itself: the lease is lost

            tg.start_soon(beat)
            while max(backend.answered, backend.swaps if backend.fail else 0) < until:
                await anyio.wait_all_tasks_blocked()
                clock.advance(TICK)
            tg.cancel_scope.cancel()


def gaps(backend: MemoryLeases, since: dt.datetime) -> list[float]:
    """Seconds between the swaps after ``since`` (the first: from ``since``)."""
    times = [since, *(t for t in backend.swapped_at if t > since)]
    return [(b - a).total_seconds() for a, b in itertools.pairwise(times)]


async def test_the_heartbeat_renews_every_third_of_the_lease() -> None:
    clock, backend, locks = setup()
    held = await locks.acquire(NAME, 3.0, None)
    await run_heartbeat(locks, held, 3.0, until=1 + 4)
    assert gaps(backend, START)[:4] == [1.0, 1.0, 1.0, 1.0]
    assert held.expires_at == START + dt.timedelta(seconds=4 + 3)  # the 4th renewal
    assert not held.lost
    assert backend.records[NAME].record.holder == held.holder
    assert clock.sleeps == []  # the heartbeat never moved the clock


async def test_the_heartbeat_never_moves_a_fake_clock() -> None:
    """Nothing else moves the time: the lease cannot run out, and is not renewed."""
    clock, backend, locks = setup()
    with anyio.fail_after(10):
        async with locks.hold(NAME, 3.0, None) as lease:
            for _ in range(100):
                await anyio.wait_all_tasks_blocked()
            assert clock.now() == START
            assert backend.swaps == 1  # the claim only
            clock.advance(0.5)  # not yet a third of the lease
            await anyio.wait_all_tasks_blocked()
            assert backend.swaps == 1
            clock.advance(0.5)  # a third: one renewal, at once
            await anyio.wait_all_tasks_blocked()
            assert backend.swapped_at[1:] == [START + dt.timedelta(seconds=1)]
            assert lease.expires_at == START + dt.timedelta(seconds=1 + 3)
            clock.advance(10)  # a jump past two renewals: one renewal, at the new time
            await anyio.wait_all_tasks_blocked()
            assert backend.swapped_at[2:] == [START + dt.timedelta(seconds=11)]
            assert not lease.lost
    assert clock.sleeps == []


async def test_a_lease_taken_over_is_lost_and_its_new_holder_kept() -> None:
    _, backend, locks = setup()
    held = await locks.acquire(NAME, 3.0, None)
    thief = backend.put(NAME, held_by("thief", 60))
    await run_heartbeat(locks, held, 3.0, until=10)
    assert held.lost
    assert backend.swaps == 2  # the claim, one renewal that found the thief; no more
    await locks.release(held, quiet=False)
    assert backend.swaps == 2  # not ours: not touched
    assert backend.records[NAME] == thief


async def test_a_store_failing_until_expiry_loses_the_lease() -> None:
    clock, backend, locks = setup()
    held = await locks.acquire(NAME, 3.0, None)
    backend.fail = True
    await run_heartbeat(locks, held, 3.0, until=1000)
    assert held.lost
    waits = gaps(backend, START)
    assert waits[0] == 1.0
    # retries: a tenth of the lease (each at the first tick that reaches it)
    assert all(0.3 <= w < 0.3 + TICK for w in waits[1:]), waits
    assert len(waits) == backend.swaps - 1 >= 6
    assert clock.now() >= held.expires_at


async def test_a_renewal_whose_answer_was_lost_is_adopted_and_retried() -> None:
    _, backend, locks = setup()
    held = await locks.acquire(NAME, 3.0, None)
    # Our own record at a version we never saw (a renewal whose answer did not arrive).
    observed = backend.records[NAME]
    backend.put(NAME, dataclasses.replace(observed.record))
    await run_heartbeat(locks, held, 3.0, until=1 + 2)
    assert not held.lost
    first, retry = gaps(backend, START)[:2]
    assert first == 1.0
    assert 0.3 <= retry < 0.3 + TICK  # the conflict, then a quick retry that won
    assert held.observed is not None
    assert held.observed.version == backend.records[NAME].version


async def test_a_failed_release_is_raised_when_the_block_succeeded() -> None:
    _, backend, locks = setup()
    with pytest.raises(StorageError, match="cannot release lock 'a/lock'"):
        async with locks.hold(NAME, 30, None):
            backend.fail = True
    backend.fail = False

    async def failing_block() -> None:
        async with locks.hold("b/lock", 30, None):
            backend.fail = True
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):  # the block's own error, unwrapped
        await failing_block()
