"""One lease lock for every store, on a compare-and-swap of one lease record per lock.

Public (:mod:`acmecerts.storage`), so that a third-party
:class:`~acmecerts.storage.Storage` gets the same locks as acmecerts' own stores: it
implements :class:`LeaseBackend` over its own compare-and-swap and answers
:meth:`~acmecerts.storage.Storage.lock` with ``LeaseLocks(backend, clock).hold(name,
lease, timeout)``::

    class MyStore:
        def __init__(self) -> None:
            self._locks = LeaseLocks(MyLeaseBackend(...), SystemClock())

        def lock(self, name, *, lease=60.0, timeout=None):
            return self._locks.hold(name, lease, timeout)

A store provides a :class:`LeaseBackend`: it reads a lock's lease record with its
version, and swaps it for a new one only if the version is still the one expected
(FileStorage: the lease file, rewritten under its directory's ``flock``; Kubernetes: the
``coordination.k8s.io`` Lease object, updated with its ``resourceVersion``). Everything
else is here, once:

* **acquire**: claim the record when nobody holds it, its lease has run out by the
  store's clock, its holder is known to be dead (:meth:`LeaseBackend.abandoned`), or it
  has been seen unchanged for a whole lease (a holder whose clock runs ahead cannot keep
  a lock forever; only where the record says its lease). Otherwise wait through
  :func:`~acmecerts._time.poll_until` on the store's clock: the backend's
  :class:`~acmecerts._time.Backoff` (floor, cap, jitter), never past the holder's expiry,
  and woken at once when another task of the same store releases the lock. The winning
  swap is shielded from cancellation: its outcome must be known, or the lock would stay
  held by nobody who knows it until its lease ran out.
* **heartbeat**: while the ``async with`` block runs, renew every ``lease / 3`` by a swap
  from the version last written. It waits with :func:`~acmecerts._time.wait_until`: it
  follows the clock and never moves it, so on a :class:`~acmecerts.FakeClock` its
  renewals come as the other tasks move the time, not at the speed of its own writes.
  A swap that finds another holder (or no record) means the lock was taken over: the
  lease is *lost*. A failing store is retried until the lease has run out, then the
  lease is lost too.
* **release**: swap our record for a released one (no holder), shielded and bounded in
  time; a record that is no longer ours is left alone. A failure is raised when the
  block itself succeeded (the lock then expires on its own), else logged.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import os
import socket
from typing import Protocol

import anyio
import anyio.abc

from acmecerts._time import (
    Again,
    Backoff,
    Clock,
    duration_seconds,
    poll_until,
    show_instant,
    wait_until,
)
from acmecerts.errors import StorageError
from acmecerts.storage._base import LockTimeout
from acmecerts.storage.keys import validate_key

__all__ = ["HeldLease", "LeaseBackend", "LeaseLocks", "LeaseRecord", "ObservedLease"]

log = logging.getLogger("acmecerts.storage")

# How long leaving a block may spend releasing its lock (it expires on its own anyway).
_RELEASE_WAIT = 5.0
# Attempts to release when the record changed under us but still names us.
_RELEASE_TRIES = 5
# Renewal retries after a failure: a tenth of the lease, within these bounds.
_RETRY_FLOOR = 0.01
_RETRY_CAP = 0.5
_HOST = socket.gethostname()


@dataclasses.dataclass(slots=True)
class LeaseRecord:
    """What a lock's lease record says, whatever the store's format.

    ``holder`` is ``None`` when nobody holds the lock (a released record). ``duration``
    is the holder's lease in seconds where the record states it (Kubernetes), else
    ``None``. ``transitions`` counts changes of holder (Kubernetes ``leaseTransitions``);
    ``host`` and ``pid`` name the holder's process (FileStorage).
    """

    holder: str | None
    expires_at: _dt.datetime | None
    acquired_at: _dt.datetime | None = None
    duration: float | None = None
    transitions: int = 0
    host: str = ""
    pid: int = 0

    def describe(self) -> str:
        """Who holds the lock and until when, for messages."""
        where = f" (pid {self.pid} on {self.host})" if self.host else ""
        until = show_instant(self.expires_at) if self.expires_at is not None else "?"
        return f"{self.holder}{where} until {until}"


@dataclasses.dataclass(frozen=True, slots=True)
class ObservedLease:
    """A lease record as stored, with the version a swap compares against."""

    record: LeaseRecord
    version: str


class LeaseBackend(Protocol):
    """The compare-and-swap a store provides for :class:`LeaseLocks`.

    Every method MUST honour cancellation and MUST raise only
    :class:`~acmecerts.errors.StorageError` for a store that fails.
    """

    #: How waiters poll a held lock (floor, cap, jitter).
    backoff: Backoff

    def lease_seconds(self, requested: float) -> float:
        """The lease the store can record for ``requested`` seconds (e.g. rounded up)."""
        ...

    def new_holder(self) -> str:
        """A holder id unique to one acquisition (two tasks never share one)."""
        ...

    def where(self, name: str) -> str | None:
        """Where lock ``name`` lives, for errors (a path), if anywhere."""
        ...

    def abandoned(self, record: LeaseRecord) -> bool:
        """Whether ``record``'s holder is known to be gone (its lease need not run out)."""
        ...

    async def peek(self, name: str) -> ObservedLease | None:
        """Lock ``name``'s record, or a guess at it made without I/O.

        A wrong guess is cheap: the first :meth:`swap` answers with the record as stored.
        """
        ...

    async def read(self, name: str) -> ObservedLease | None:
        """Lock ``name``'s record as stored now; ``None`` if there is none."""
        ...

    async def swap(
        self, name: str, expect: str | None, record: LeaseRecord
    ) -> tuple[bool, ObservedLease | None]:
        """Write ``record`` for lock ``name`` if its version is ``expect`` (``None``: absent).

        ``(True, what was written)`` on success (``None`` if a released record is stored
        as no record at all); ``(False, the record as stored now)`` on a conflict.
        """
        ...


class HeldLease:
    """The :class:`~acmecerts.storage.Lease` handed to the holder of a lock."""

    __slots__ = ("_clock", "_expires_at", "_lost", "_name", "holder", "observed")

    def __init__(self, name: str, holder: str, observed: ObservedLease, clock: Clock) -> None:
        self._name = name
        #: This acquisition's holder id, as written in the record.
        self.holder = holder
        #: Our record as last written (the version the next swap expects).
        self.observed: ObservedLease | None = observed
        expires_at = observed.record.expires_at
        assert expires_at is not None  # a claim always says when it runs out
        self._expires_at = expires_at
        self._clock = clock
        self._lost = False

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._name

    @property
    def lost(self) -> bool:
        """Whether the lease was taken over or ran out without being renewed."""
        return self._lost or self._clock.now() >= self._expires_at

    @property
    def expires_at(self) -> _dt.datetime:
        """When the lease runs out unless renewed (aware UTC)."""
        return self._expires_at

    def __repr__(self) -> str:
        state = "lost" if self.lost else f"until {self._expires_at.isoformat()}"
        return f"<Lease {self._name!r} {state}>"


class _Wakeable:
    """A :class:`Clock` whose ``sleep`` also ends when a release is announced."""

    __slots__ = ("_clock", "event")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.event: anyio.Event | None = None

    def now(self) -> _dt.datetime:
        return self._clock.now()

    async def sleep(self, seconds: float) -> None:
        event = self.event
        if event is None or event.is_set():
            await self._clock.sleep(seconds if event is None else 0)
            return
        async with anyio.create_task_group() as tg:

            async def sleeper() -> None:
                await self._clock.sleep(seconds)
                tg.cancel_scope.cancel()

            tg.start_soon(sleeper)
            await event.wait()
            tg.cancel_scope.cancel()


class LeaseLocks:
    """Acquire, heartbeat and release leases of one store's locks over its backend.

    One per store, built with the store's :class:`LeaseBackend` and
    :class:`~acmecerts.Clock`; :meth:`hold` is what the store's
    :meth:`~acmecerts.storage.Storage.lock` returns. It keeps the store's waiters (a
    release wakes this store's tasks waiting for that lock at once).
    """

    def __init__(self, backend: LeaseBackend, clock: Clock) -> None:
        self._backend = backend
        self._clock = clock
        # Wakes this store's waiters for a lock when one of its tasks releases it.
        self._released: dict[str, anyio.Event] = {}

    def hold(
        self, name: str, lease: float | _dt.timedelta, timeout: float | _dt.timedelta | None
    ) -> LockBlock:
        """The ``async with`` block that holds lock ``name`` (see :meth:`Storage.lock`).

        Raises :class:`~acmecerts.errors.InvalidInput` for a bad name, a lease that is not
        a finite duration > 0 or a timeout that is not one >= 0, before any I/O.
        """
        validate_key(name)
        seconds = duration_seconds(lease, "lease", positive=True)
        patience = None if timeout is None else duration_seconds(timeout, "timeout")
        return LockBlock(self, name, self._backend.lease_seconds(seconds), patience)

    def _claim(
        self, holder: str, now: _dt.datetime, seconds: float, prior: ObservedLease | None
    ) -> LeaseRecord:
        transitions = 0
        if prior is not None:
            transitions = prior.record.transitions + (1 if prior.record.holder else 0)
        return LeaseRecord(
            holder=holder,
            expires_at=now + _dt.timedelta(seconds=seconds),
            acquired_at=now,
            duration=seconds,
            transitions=transitions,
            host=_HOST,
            pid=os.getpid(),
        )

    async def acquire(self, name: str, seconds: float, patience: float | None) -> HeldLease:
        """Take lock ``name`` for ``seconds``; :class:`LockTimeout` after ``patience`` s."""
        start = self._clock.now()
        holder = self._backend.new_holder()
        observed = await self._backend.peek(name)
        if observed is None or self._free(observed.record, start, None):
            # The usual case, a free lock: one swap, and no waiting machinery set up.
            won, observed = await self._swap_claim(name, holder, seconds, observed)
            if won and observed is not None:
                return HeldLease(name, holder, observed, self._clock)
        return await self._wait(name, holder, seconds, patience, start, observed)

    async def _swap_claim(
        self, name: str, holder: str, seconds: float, prior: ObservedLease | None
    ) -> tuple[bool, ObservedLease | None]:
        """Claim the lock over ``prior`` (the record as last seen)."""
        claim = self._claim(holder, self._clock.now(), seconds, prior)
        # Shielded: a cancellation arriving while the swap is under way would otherwise
        # lose its outcome, leaving the lock held by nobody who knows it. The caller
        # releases it if it is cancelled afterwards (no checkpoint until its ``try``).
        expect = prior.version if prior is not None else None
        with anyio.CancelScope(shield=True):
            outcome = await self._backend.swap(name, expect, claim)
        return outcome

    async def _wait(
        self,
        name: str,
        holder: str,
        seconds: float,
        patience: float | None,
        start: _dt.datetime,
        observed: ObservedLease | None,
    ) -> HeldLease:
        """Poll a held lock until it can be claimed (see the module docstring)."""
        backend, clock = self._backend, self._clock
        deadline = None if patience is None else start + _dt.timedelta(seconds=patience)
        waker = _Wakeable(clock)
        seen: tuple[str, _dt.datetime] | None = None  # (version, when first seen)
        step = 0

        async def attempt() -> HeldLease | Again[HeldLease]:
            nonlocal observed, seen, step
            event = self._released.get(name)
            if event is None:
                event = self._released[name] = anyio.Event()
            waker.event = event
            if step:  # waited: look again
                observed = await backend.read(name)
            while True:
                now = clock.now()
                record = observed.record if observed is not None else None
                if observed is not None and (seen is None or seen[0] != observed.version):
                    seen = (observed.version, now)
                if record is None or self._free(record, now, seen):
                    won, observed = await self._swap_claim(name, holder, seconds, observed)
                    if won and observed is not None:
                        return HeldLease(name, holder, observed, clock)
                    continue  # someone else wrote meanwhile: judge the record as it is now
                step += 1
                pause = backend.backoff.pause(step)
                if record.expires_at is not None:  # never past the holder's expiry
                    pause = min(pause, (record.expires_at - now).total_seconds() + 0.001)
                if record.duration is not None and seen is not None:
                    unchanged_until = seen[1] + _dt.timedelta(seconds=record.duration)
                    pause = min(pause, (unchanged_until - now).total_seconds() + 0.001)
                return Again(pause=max(pause, 0.0))

        def timed_out() -> LockTimeout:
            held_by = observed.record.describe() if observed is not None else "another holder"
            return LockTimeout(
                f"lock {name!r} not acquired within {patience:g}s: held by {held_by}",
                path=backend.where(name),
            )

        return await poll_until(
            attempt, clock=waker, backoff=backend.backoff, deadline=deadline, on_deadline=timed_out
        )

    def _free(
        self, record: LeaseRecord, now: _dt.datetime, seen: tuple[str, _dt.datetime] | None
    ) -> bool:
        if record.holder is None or record.expires_at is None or record.expires_at <= now:
            return True
        if (
            record.duration is not None
            and seen is not None
            and (now - seen[1]).total_seconds() >= record.duration
        ):
            return True  # unchanged for a whole lease: its holder stopped renewing
        return self._backend.abandoned(record)

    async def heartbeat(self, held: HeldLease, seconds: float) -> None:
        """Renew ``held`` every ``seconds / 3`` until cancelled or lost."""
        backend, clock = self._backend, self._clock
        interval = seconds / 3
        retry = min(max(seconds / 10, _RETRY_FLOOR), _RETRY_CAP)
        while True:
            # follows the clock, never moves it (a FakeClock: see wait_until)
            await wait_until(clock, clock.now() + _dt.timedelta(seconds=interval))
            observed = held.observed
            assert observed is not None
            now = clock.now()
            renewed = dataclasses.replace(
                observed.record, expires_at=now + _dt.timedelta(seconds=seconds)
            )
            try:
                won, current = await backend.swap(held.name, observed.version, renewed)
            except StorageError as exc:
                if clock.now() >= held.expires_at:
                    log.warning("lock %r lost: its lease could not be renewed: %s", held.name, exc)
                    held._lost = True
                    return
                log.warning("renewing the lease of lock %r failed (retrying): %s", held.name, exc)
                interval = retry
                continue
            if current is None or current.record.holder != held.holder:
                log.warning("lock %r lost: another holder took it over", held.name)
                held._lost = True
                held.observed = None
                return
            held.observed = current
            if won:
                assert current.record.expires_at is not None
                held._expires_at = current.record.expires_at
                interval = seconds / 3
            else:
                interval = retry  # our record at a version we did not see written: again

    async def release(self, held: HeldLease, *, quiet: bool) -> None:
        """Give the lock back if the record is still ours (see the module docstring)."""
        try:
            with anyio.move_on_after(_RELEASE_WAIT, shield=True):
                observed = held.observed
                for _ in range(_RELEASE_TRIES):
                    if observed is None or observed.record.holder != held.holder:
                        return
                    released = dataclasses.replace(observed.record, holder=None)
                    won, observed = await self._backend.swap(held.name, observed.version, released)
                    if won:
                        return
        except StorageError as exc:
            if not quiet:
                raise StorageError(
                    f"cannot release lock {held.name!r} (it expires on its own at "
                    f"{show_instant(held.expires_at)}): {exc}",
                    path=self._backend.where(held.name),
                ) from exc
            log.warning("cannot release lock %r: %s", held.name, exc)
        finally:
            held.observed = None
            event = self._released.pop(held.name, None)
            if event is not None:
                event.set()


class LockBlock:
    """``async with store.lock(name)``: acquire, heartbeat, release.

    A class rather than an ``asynccontextmanager`` so that the heartbeat's task group
    does not wrap exceptions raised by the block (they propagate unchanged).
    """

    __slots__ = ("_held", "_locks", "_name", "_seconds", "_tg", "_timeout")

    def __init__(self, locks: LeaseLocks, name: str, seconds: float, timeout: float | None) -> None:
        self._locks = locks
        self._name = name
        self._seconds = seconds
        self._timeout = timeout
        self._held: HeldLease | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> HeldLease:
        held = await self._locks.acquire(self._name, self._seconds, self._timeout)
        try:  # no checkpoint before this line: a cancelled caller still releases
            tg = anyio.create_task_group()
            await tg.__aenter__()
        except BaseException:
            await self._locks.release(held, quiet=True)
            raise
        tg.start_soon(self._locks.heartbeat, held, self._seconds)
        self._held, self._tg = held, tg
        return held

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        held, tg = self._held, self._tg
        self._held = self._tg = None
        assert held is not None
        assert tg is not None
        tg.cancel_scope.cancel()
        try:
            # The block's exception is not the task group's business: pass none.
            await tg.__aexit__(None, None, None)
        except BaseException:
            await self._locks.release(held, quiet=True)
            raise
        await self._locks.release(held, quiet=exc_type is not None)
