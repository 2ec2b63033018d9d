"""The default store: files under one directory, safe for several processes on one machine.

On disk (``root`` is created 0700 if missing)::

    <root>/<segment>/.../<segment>        one file per key, 0600, in directories 0700
    <root>/<dir>/.<segment>.tmp           a write in progress (or left by a crash)
    <root>/.locks/<lock name>             one lease file per held lock

Every file holds an *integrity envelope*: one ASCII header line, then the value's bytes
unchanged::

    acmecerts-v1 <version> <length> <sha256 hex of the value>\\n<value>

``version`` is 32 random hex digits chosen at each write, so a compare-and-swap can
never be fooled by a value that was changed and changed back (no ABA). A file whose
header is missing or malformed, whose length differs (truncation) or whose digest differs
(corruption) is reported as :class:`~acmecerts.errors.StorageError` naming the file; it
is never repaired, replaced or deleted by a read or a compare-and-swap, and other keys
stay readable. (An unconditional ``store`` does overwrite it: that is a deliberate
write by the caller.) These files are acmecerts' own state; certificates for web servers
are exported elsewhere.

Design:

* **Atomic writes.** A value is written to ``.<segment>.tmp`` in the same directory
  (``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600), fsynced, renamed over the key's file with
  ``os.replace`` and the directory is fsynced before the call returns: a crash at any
  instant leaves the old value or the new one.
* **Every file is 0600, every directory 0700**, not only ``secret`` values: the ledger
  and order state are nobody else's business either, and one rule is harder to get wrong.
* **Compare-and-swap across processes.** Writers and deleters hold an exclusive
  ``fcntl.flock`` on the key's *directory* while they check the version and replace the
  file. The directory is never replaced, so the lock always guards the current file, and
  because only lock holders create temp files, a temp file found under the lock is a
  crashed writer's and is removed. Readers take no lock: ``rename`` is atomic. Threads
  of one process first queue on a mutex per directory (no polling), so the ``flock`` is
  contended only by other processes; the directory's fsync happens after both are let
  go, and one fsync covers every change made in the directory before it started.
* **Locks are leases.** ``lock(name)`` writes ``.locks/<name>`` (the same envelope, JSON
  inside: holder id, pid, host, acquired and expiry instants) under the directory flock
  when that file is absent or its lease has run out. While the ``async with`` block
  runs, a heartbeat task renews the lease every ``lease / 3`` seconds; leaving the block
  deletes the file if it is still ours. A holder that dies (even SIGKILL) or hangs stops
  renewing and the lock is free ``lease`` seconds after its last renewal. Waiters poll
  with jittered exponential backoff (5 ms up to 250 ms, and never past the holder's
  expiry); tasks of the same :class:`FileStorage` are woken at once by a release.
* **Listing** walks the directories under the prefix and returns every regular file
  whose path is a valid key: temp files and ``.locks`` (names starting with ``.``),
  symbolic links and stray files (``README.TXT``) are skipped.
* **Off the event loop, in the store's own threads.** File I/O runs in a small pool of
  worker threads shared by every :class:`FileStorage` of the process (up to 16, started
  on demand, ending after 10 s idle), not through ``anyio.to_thread``: that hop (capacity
  limiter, cancel scope, an extra event-loop turn, one loop wake-up per call) cost more
  CPU than a cached read itself. Here a call is queued; a worker that finishes a job
  takes the next queued one without sleeping, and the answers of all jobs finished
  meanwhile reach the event loop in one wake-up, through the running anyio backend's
  ``run_sync_soon`` (asyncio and trio alike; with anyio older than 4.11, which lacks
  event-loop tokens, calls go through ``anyio.to_thread`` as before). A cancelled caller
  waits (shielded) for its job to end, as ``anyio.to_thread.run_sync`` does: a job not
  started yet is skipped, and a job waiting for a directory lock sees the cancellation
  within milliseconds and gives up, so every method honours cancellation within
  milliseconds and no write continues behind a caller's back. These threads do not
  count against anyio's default thread limiter.

Lease instants come from the injected :class:`~acmecerts.Clock` (wall-clock UTC with the
default :class:`~acmecerts.SystemClock`), so processes sharing a store must share a clock:
one machine. The store needs a local file system with working ``flock`` (not NFS).
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import itertools
import json
import logging
import os
import random
import secrets
import socket
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import anyio

from acmecerts._time import Clock, SystemClock, duration_seconds
from acmecerts.errors import InvalidInput, StorageError
from acmecerts.storage import _files
from acmecerts.storage._base import (
    ANY_VERSION,
    Lease,
    LockTimeout,
    StoredValue,
    _AnyVersion,
)
from acmecerts.storage._files import MAX_VALUE_SIZE, os_error
from acmecerts.storage._workers import run_sync
from acmecerts.storage.keys import validate_key, validate_prefix

__all__ = ["MAX_VALUE_SIZE", "FileStorage"]

log = logging.getLogger("acmecerts.storage")

_T = TypeVar("_T")

_LOCKS_DIR = ".locks"
# Holder ids: host, pid, then a random prefix drawn once per process and a serial number
# (unique per acquisition like a random id, without a getrandom() call on the event loop).
_HOLDER_PREFIX = secrets.token_hex(8)
_holder_serial = itertools.count(1)
# Lock polling: first retry, cap, and the most a waiter sleeps past the holder's expiry.
_POLL_FIRST = 0.005
_POLL_CAP = 0.25
_RELEASE_WAIT = 5.0


class _LeaseRecord:
    """What a lease file says: who holds the lock and until when."""

    __slots__ = ("acquired_at", "expires_at", "holder", "host", "pid")

    def __init__(
        self,
        holder: str,
        expires_at: _dt.datetime,
        acquired_at: _dt.datetime,
        host: str = "",
        pid: int = 0,
    ) -> None:
        self.holder = holder
        self.expires_at = expires_at
        self.acquired_at = acquired_at
        self.host = host
        self.pid = pid

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "holder": self.holder,
                "host": self.host,
                "pid": self.pid,
                "acquired_at": self.acquired_at.isoformat(),
                "expires_at": self.expires_at.isoformat(),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, name: str, path: str) -> _LeaseRecord:
        try:
            obj = json.loads(data)
            expires_at = _dt.datetime.fromisoformat(obj["expires_at"])
            acquired_at = _dt.datetime.fromisoformat(obj["acquired_at"])
            holder = obj["holder"]
            if not isinstance(holder, str) or expires_at.tzinfo is None:
                raise TypeError("bad holder or naive expiry")
            return cls(holder, expires_at, acquired_at, str(obj.get("host", "")), obj.get("pid", 0))
        except (ValueError, TypeError, KeyError) as exc:
            raise StorageError(
                f"lease file of lock {name!r} in {path} is corrupt ({exc}); it was left as "
                "it is: delete it once no process uses the lock",
                path=path,
            ) from None

    def describe(self) -> str:
        where = f" (pid {self.pid} on {self.host})" if self.host else ""
        return f"{self.holder}{where} until {self.expires_at.isoformat()}"


class _FileLease:
    """The :class:`~acmecerts.storage.Lease` handed out by :meth:`FileStorage.lock`."""

    __slots__ = ("_clock", "_expires_at", "_lost", "_name", "holder")

    def __init__(self, name: str, holder: str, expires_at: _dt.datetime, clock: Clock) -> None:
        self._name = name
        #: This acquisition's unique holder id (also written into the lease file).
        self.holder = holder
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


class FileStorage:
    """A :class:`~acmecerts.storage.Storage` in a local directory (the default store).

    ``root`` is created (0700) on the first write if it does not exist. Several
    :class:`FileStorage` objects, in one process or many on the same machine, may share a
    root. See the module documentation for the on-disk format and guarantees.
    """

    def __init__(self, root: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        """Store under ``root``; ``clock`` stamps and times leases (default: system)."""
        self._root = os.path.abspath(os.fspath(root))
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._closed = False
        # Wakes waiters of this instance when a lock is released (other processes poll).
        self._released: dict[str, anyio.Event] = {}
        self._host = socket.gethostname()
        # This process's writers queue per directory here before taking its flock.
        self._dirs = _files.DirLocks()

    @property
    def root(self) -> str:
        """The absolute path of the store's directory."""
        return self._root

    def path_for(self, key: str) -> str:
        """The file that holds ``key`` (for messages and tooling; do not write it)."""
        return os.path.join(self._root, *validate_key(key).split("/"))

    def _lock_path(self, name: str) -> str:
        return os.path.join(self._root, _LOCKS_DIR, *validate_key(name).split("/"))

    def __repr__(self) -> str:
        return f"FileStorage({self._root!r})"

    # -- plumbing ---------------------------------------------------------------------

    async def _run(self, func: Callable[..., _T], *args: Any, check_open: bool = True) -> _T:
        if check_open and self._closed:
            raise StorageError(f"{self!r} is closed", path=self._root)
        return await run_sync(func, *args)

    # -- values -----------------------------------------------------------------------

    def _load_sync(self, key: str) -> StoredValue | None:
        return _files.read(self.path_for(key), key)

    def _store_sync(self, key: str, data: bytes, expect: str | _AnyVersion | None) -> str:
        path = self.path_for(key)
        dirpath = os.path.dirname(path)
        try:
            with self._dirs.locked(dirpath, create=True) as locked:
                if not isinstance(expect, _AnyVersion):
                    _files.check_version(_files.read(path, key), expect, key, path)
                version = secrets.token_hex(16)
                _files.write(locked, path, _files.encode(version, data))
            return version
        except NotADirectoryError as exc:
            raise StorageError(
                f"cannot write {key!r}: a file is in the way of {dirpath} "
                "(a key cannot also be the prefix of another key)",
                path=path,
            ) from exc
        except OSError as exc:
            raise os_error("write", path, exc) from exc

    def _delete_sync(self, key: str, expect: str | _AnyVersion | None) -> bool:
        path = self.path_for(key)
        dirpath = os.path.dirname(path)
        try:
            with self._dirs.locked(dirpath) as locked:
                if not isinstance(expect, _AnyVersion):
                    _files.check_version(_files.read(path, key), expect, key, path)
                try:
                    if stat.S_ISDIR(os.lstat(path).st_mode):
                        return False
                    os.unlink(path)
                except FileNotFoundError:
                    return False
                locked.sync = True
            return True
        except (FileNotFoundError, NotADirectoryError):
            # No directory, so no value: only an expected version makes that a conflict.
            if isinstance(expect, str):
                _files.check_version(None, expect, key, path)
            return False
        except OSError as exc:
            raise os_error("delete", path, exc) from exc

    def _list_sync(self, prefix: str) -> builtins.list[str]:
        head = prefix.rpartition("/")[0]
        base = os.path.join(self._root, *head.split("/")) if head else self._root
        found: builtins.list[str] = []

        def walk(dirpath: str, relative: str) -> None:
            try:
                entries = builtins.list(os.scandir(dirpath))
            except (FileNotFoundError, NotADirectoryError):
                return
            except OSError as exc:
                raise os_error("list", dirpath, exc) from exc
            for entry in entries:
                if entry.name.startswith("."):
                    continue  # temp files, lock files: never keys
                key = f"{relative}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    if key.startswith(prefix) or prefix.startswith(f"{key}/"):
                        walk(entry.path, f"{key}/")
                elif entry.is_file(follow_symlinks=False) and key.startswith(prefix):
                    with contextlib.suppress(InvalidInput):
                        found.append(validate_key(key))  # skip stray files

        walk(base, f"{head}/" if head else "")
        return sorted(found)

    async def load(self, key: str) -> StoredValue | None:
        """Read ``key``; ``None`` if it does not exist; StorageError if corrupt."""
        validate_key(key)
        return await self._run(self._load_sync, key)

    async def store(
        self,
        key: str,
        data: bytes,
        *,
        secret: bool = False,
        expect_version: str | _AnyVersion | None = ANY_VERSION,
    ) -> str:
        """Write ``key`` atomically (file mode 0600 whatever ``secret``); return its version."""
        validate_key(key)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidInput(f"a stored value must be bytes, got {type(data).__name__}")
        if len(data) > MAX_VALUE_SIZE:
            raise InvalidInput(f"a stored value must be at most {MAX_VALUE_SIZE} bytes")
        return await self._run(self._store_sync, key, bytes(data), expect_version)

    async def delete(
        self, key: str, *, expect_version: str | _AnyVersion | None = ANY_VERSION
    ) -> bool:
        """Remove ``key``; ``False`` if it did not exist."""
        validate_key(key)
        return await self._run(self._delete_sync, key, expect_version)

    async def list(self, prefix: str) -> builtins.list[str]:
        """Every key that starts with ``prefix`` (a plain string prefix), sorted."""
        validate_prefix(prefix)
        return await self._run(self._list_sync, prefix)

    # -- locks ------------------------------------------------------------------------

    def _read_lease(self, path: str, name: str) -> _LeaseRecord | None:
        value = _files.read(path, f"lock {name}")
        return None if value is None else _LeaseRecord.from_json(value.data, name, path)

    def _try_acquire_sync(
        self, name: str, holder: str, lease: float
    ) -> tuple[_LeaseRecord | None, _LeaseRecord | None]:
        """Take the lock if free: ``(ours, None)``, else ``(None, current holder's)``."""
        path = self._lock_path(name)
        dirpath = os.path.dirname(path)
        with self._dirs.locked(dirpath, create=True) as locked:
            current = self._read_lease(path, name)
            now = self._clock.now()
            if (
                current is not None
                and current.holder != holder
                and current.expires_at > now
                and not self._holder_died(current)
            ):
                return None, current
            record = _LeaseRecord(
                holder, now + _dt.timedelta(seconds=lease), now, self._host, os.getpid()
            )
            _files.write(locked, path, _files.encode(secrets.token_hex(16), record.to_json()))
        return record, None

    def _holder_died(self, record: _LeaseRecord) -> bool:
        """Whether the lock's holder was a process on this machine that no longer exists.

        Such a lock is taken over at once instead of after its lease (a process killed
        with SIGKILL releases nothing). A reused PID only makes us wait for the lease.
        """
        if record.host != self._host or record.pid <= 0 or record.pid == os.getpid():
            return False
        try:
            os.kill(record.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # alive, another user's
        return False

    def _renew_sync(self, name: str, holder: str, lease: float) -> _dt.datetime | None:
        """Extend our lease; ``None`` if someone else holds the lock now."""
        path = self._lock_path(name)
        with self._dirs.locked(os.path.dirname(path)) as locked:
            current = self._read_lease(path, name)
            if current is None or current.holder != holder:
                return None
            current.expires_at = self._clock.now() + _dt.timedelta(seconds=lease)
            _files.write(locked, path, _files.encode(secrets.token_hex(16), current.to_json()))
        return current.expires_at

    def _release_sync(self, name: str, holder: str) -> None:
        path = self._lock_path(name)
        with self._dirs.locked(os.path.dirname(path)) as locked:
            try:
                current = self._read_lease(path, name)
            except StorageError:
                return  # not ours to judge; leave it for an operator
            if current is not None and current.holder == holder:
                os.unlink(path)
                locked.sync = True

    async def _wait(self, seconds: float, event: anyio.Event) -> None:
        """Sleep ``seconds`` on the clock, or until ``event`` is set."""
        async with anyio.create_task_group() as tg:

            async def sleeper() -> None:
                await self._clock.sleep(seconds)
                tg.cancel_scope.cancel()

            tg.start_soon(sleeper)
            await event.wait()
            tg.cancel_scope.cancel()

    async def _acquire(self, name: str, lease: float, patience: float | None) -> _FileLease:
        holder = f"{self._host}:{os.getpid()}:{_HOLDER_PREFIX}{next(_holder_serial)}"
        now = self._clock.now()
        deadline = None if patience is None else now + _dt.timedelta(seconds=patience)
        delay = _POLL_FIRST
        while True:
            event = self._released.get(name)
            if event is None:
                event = self._released[name] = anyio.Event()
            # Shielded: a cancellation that arrived while the thread took the lock would
            # otherwise lose the lease, leaving the lock held by nobody until it expires.
            # The caller releases it if it is cancelled (no checkpoint until its ``try``).
            with anyio.CancelScope(shield=True):
                try:
                    ours, theirs = await self._run(self._try_acquire_sync, name, holder, lease)
                except OSError as exc:
                    raise os_error("take lock", self._lock_path(name), exc) from exc
            if ours is not None:
                return _FileLease(name, holder, ours.expires_at, self._clock)
            assert theirs is not None
            now = self._clock.now()
            if deadline is not None and now >= deadline:
                raise LockTimeout(
                    f"lock {name!r} not acquired within {patience:g}s: held by {theirs.describe()}",
                    path=self._lock_path(name),
                )
            nap = random.uniform(0.5, 1.0) * delay  # jitter: waiters do not move in step
            nap = min(nap, (theirs.expires_at - now).total_seconds() + 0.001)
            if deadline is not None:
                nap = min(nap, (deadline - now).total_seconds())
            await self._wait(max(nap, 0.0), event)
            delay = min(delay * 2, _POLL_CAP)

    async def _heartbeat(self, lease: _FileLease, seconds: float) -> None:
        interval = seconds / 3
        while True:
            await self._clock.sleep(interval)
            try:
                expires_at = await self._run(self._renew_sync, lease.name, lease.holder, seconds)
            except (OSError, StorageError) as exc:
                if self._clock.now() >= lease.expires_at:
                    log.warning("lock %r lost: its lease could not be renewed: %s", lease.name, exc)
                    lease._lost = True
                    return
                log.warning("renewing the lease of lock %r failed (retrying): %s", lease.name, exc)
                interval = max(seconds / 10, 0.01)
                continue
            if expires_at is None:
                log.warning("lock %r lost: another holder took it over", lease.name)
                lease._lost = True
                return
            lease._expires_at = expires_at
            interval = seconds / 3

    async def _release(self, lease: _FileLease, *, quiet: bool) -> None:
        try:
            with anyio.move_on_after(_RELEASE_WAIT, shield=True):
                await self._run(self._release_sync, lease.name, lease.holder, check_open=False)
        except (OSError, StorageError) as exc:
            if not quiet:
                raise StorageError(
                    f"cannot release lock {lease.name!r} (it expires on its own at "
                    f"{lease.expires_at.isoformat()}): {exc}",
                    path=self._lock_path(lease.name),
                ) from exc
            log.warning("cannot release lock %r: %s", lease.name, exc)
        finally:
            event = self._released.pop(lease.name, None)
            if event is not None:
                event.set()

    @contextlib.asynccontextmanager
    async def _hold(self, name: str, lease: float, patience: float | None) -> AsyncIterator[Lease]:
        held = await self._acquire(name, lease, patience)
        try:  # no checkpoint before this line: a cancelled caller still releases
            body_error: Exception | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._heartbeat, held, lease)
                try:
                    yield held
                except Exception as exc:
                    body_error = exc  # re-raised below, not wrapped in an ExceptionGroup
                finally:
                    tg.cancel_scope.cancel()
            if body_error is not None:
                raise body_error
        except BaseException:
            await self._release(held, quiet=True)
            raise
        await self._release(held, quiet=False)

    def lock(
        self,
        name: str,
        *,
        lease: float | _dt.timedelta = 60.0,
        timeout: float | _dt.timedelta | None = None,
    ) -> AbstractAsyncContextManager[Lease]:
        """Hold lock ``name`` across processes; see :meth:`Storage.lock`.

        Not re-entrant: a task that already holds ``name`` waits for itself.
        """
        validate_key(name)
        lease_s = duration_seconds(lease, "lease", positive=True)
        timeout_s = None if timeout is None else duration_seconds(timeout, "timeout")
        return self._hold(name, lease_s, timeout_s)

    async def aclose(self) -> None:
        """Close the store (idempotent); held locks are released by their ``async with``."""
        self._closed = True

    async def __aenter__(self) -> FileStorage:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
