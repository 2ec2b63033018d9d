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
import collections
import contextlib
import datetime as _dt
import errno
import fcntl
import functools
import hashlib
import itertools
import json
import logging
import os
import random
import re
import secrets
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.lowlevel import RunVar

from acmecerts._time import Clock, SystemClock, as_seconds
from acmecerts.errors import InvalidInput, StorageError
from acmecerts.storage._base import (
    ANY_VERSION,
    Lease,
    LockTimeout,
    StoredValue,
    VersionConflict,
    _AnyVersion,
)
from acmecerts.storage.keys import validate_key, validate_prefix

__all__ = ["MAX_VALUE_SIZE", "FileStorage"]

log = logging.getLogger("acmecerts.storage")

_T = TypeVar("_T")

_MAGIC = b"acmecerts-v1"
_VERSION_RE = re.compile(rb"[0-9a-f]{32}")
_DIGEST_RE = re.compile(rb"[0-9a-f]{64}")
_LENGTH_RE = re.compile(rb"0|[1-9][0-9]{0,11}")
_MAX_HEADER = 160
#: The largest value a FileStorage accepts (acmecerts stores kilobytes).
MAX_VALUE_SIZE = 32 * 1024 * 1024
_MAX_FILE = MAX_VALUE_SIZE + _MAX_HEADER
_FILE_MODE = 0o600
_DIR_MODE = 0o700
_LOCKS_DIR = ".locks"
# How long a thread waits for another process's directory flock (held for milliseconds
# by a live writer) before reporting the store as stuck.
_DIR_LOCK_WAIT = 30.0
# Holder ids: host, pid, then a random prefix drawn once per process and a serial number
# (unique per acquisition like a random id, without a getrandom() call on the event loop).
_HOLDER_PREFIX = secrets.token_hex(8)
_holder_serial = itertools.count(1)
# Lock polling: first retry, cap, and the most a waiter sleeps past the holder's expiry.
_POLL_FIRST = 0.005
_POLL_CAP = 0.25
_RELEASE_WAIT = 5.0


def _encode(version: str, data: bytes) -> bytes:
    digest = hashlib.sha256(data).hexdigest()
    header = b"%s %s %d %s\n" % (_MAGIC, version.encode("ascii"), len(data), digest.encode())
    return header + data


def _corrupt(key: str, path: str, reason: str) -> StorageError:
    return StorageError(
        f"stored value {key!r} in {path} is corrupt ({reason}); it was left as it is: "
        "restore it from a backup, or delete it to start over",
        path=path,
    )


def _decode(raw: bytes, key: str, path: str) -> StoredValue:
    newline = raw.find(b"\n", 0, _MAX_HEADER)
    if newline < 0:
        reason = "empty file" if not raw else "no acmecerts-v1 header"
        raise _corrupt(key, path, reason)
    fields = raw[:newline].split(b" ")
    if len(fields) != 4 or fields[0] != _MAGIC:
        raise _corrupt(key, path, "no acmecerts-v1 header")
    _, version, length, digest = fields
    if not (
        _VERSION_RE.fullmatch(version)
        and _LENGTH_RE.fullmatch(length)
        and _DIGEST_RE.fullmatch(digest)
    ):
        raise _corrupt(key, path, "malformed header")
    data = raw[newline + 1 :]
    if len(data) != int(length):
        raise _corrupt(key, path, f"truncated: {len(data)} of {int(length)} bytes")
    if hashlib.sha256(data).hexdigest().encode() != digest:
        raise _corrupt(key, path, "checksum mismatch")
    return StoredValue(data=data, version=version.decode("ascii"))


def _os_error(action: str, path: str, exc: OSError) -> StorageError:
    reason = exc.strerror or str(exc)
    return StorageError(f"cannot {action} {path}: {reason}", path=path)


def _check_cancelled() -> None:
    """Raise the host task's cancellation inside a worker thread (no-op elsewhere)."""
    job: _Job | None = getattr(_local, "job", None)
    if job is not None:
        if job.cancelled:
            raise _Cancelled
        return
    with contextlib.suppress(RuntimeError):
        anyio.from_thread.check_cancelled()


# -- worker threads -------------------------------------------------------------------
#
# FileStorage's own pool instead of ``anyio.to_thread.run_sync`` (measured: the hop was
# the largest part of a cached load). A call costs one queue append and, when no worker
# is idle, nothing more: a worker that finishes a job takes the next queued one without
# sleeping, and the answers of every job finished meanwhile reach the event loop in one
# wake-up (``run_sync_soon`` of the loop's anyio backend, so asyncio and trio alike).

_MAX_WORKERS = 16
# A worker with nothing to do for this long ends (a new one starts on demand).
_WORKER_IDLE = 10.0


class _Cancelled(BaseException):
    """Raised in a worker by :func:`_check_cancelled` when the job's caller was cancelled."""


class _Job:
    """One call to run in a worker thread, and its outcome."""

    __slots__ = ("cancelled", "done", "error", "func", "port", "result")

    def __init__(self, func: Callable[[], Any], port: _Port) -> None:
        self.func = func
        self.port = port
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        #: Set by the event loop when the caller is cancelled; read by the worker.
        self.cancelled = False


class _Port:
    """One event loop's door for finished jobs: wakes the loop once per batch."""

    __slots__ = ("_finished", "_lock", "_scheduled", "_token")

    def __init__(self, token: Any) -> None:
        self._token = token
        self._lock = threading.Lock()
        self._finished: list[_Job] = []
        self._scheduled = False

    def post(self, job: _Job) -> None:
        """Hand a finished job back (from a worker thread)."""
        with self._lock:
            self._finished.append(job)
            if self._scheduled:
                return  # the loop has a delivery pending that will take this one too
            self._scheduled = True
        try:
            self._token.backend_class.run_sync_soon(self._deliver, (), self._token.native_token)
        except Exception:  # the loop has ended: nobody waits for these answers
            with self._lock:
                self._finished.clear()
                self._scheduled = False

    def _deliver(self) -> None:
        with self._lock:
            finished, self._finished = self._finished, []
            self._scheduled = False
        for job in finished:
            job.done.set()


class _Pool:
    """Up to ``_MAX_WORKERS`` threads, started on demand, shared by every FileStorage."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[_Job] = collections.deque()
        self._idle: list[_Worker] = []
        self._workers = 0

    def submit(self, job: _Job) -> None:
        with self._lock:
            if self._idle:
                worker = self._idle.pop()
                worker.job = job
                worker.wake.release()
                return
            if self._workers >= _MAX_WORKERS:
                self._queue.append(job)
                return
            self._workers += 1
        _Worker(self, job).start()

    def next_job(self, worker: _Worker) -> _Job | None:
        """The worker's next job; ``None`` when it should end (idle too long)."""
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            self._idle.append(worker)
        if worker.wake.acquire(timeout=_WORKER_IDLE):
            return worker.take()
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                self._workers -= 1
                return None
        worker.wake.acquire()  # handed a job just as it timed out
        return worker.take()

    def reset(self) -> None:
        """Forget the threads (in a child after ``fork``: they do not exist there)."""
        self._lock = threading.Lock()
        self._queue = collections.deque()
        self._idle = []
        self._workers = 0


class _Worker(threading.Thread):
    def __init__(self, pool: _Pool, job: _Job) -> None:
        super().__init__(name="acmecerts-storage", daemon=True)
        self._pool = pool
        self.job: _Job | None = job
        self.wake = threading.Lock()
        self.wake.acquire()

    def take(self) -> _Job | None:
        job, self.job = self.job, None
        return job

    def run(self) -> None:
        job = self.take()
        while job is not None:
            if job.cancelled:
                job.error = _Cancelled()
            else:
                _local.job = job
                try:
                    job.result = job.func()
                except BaseException as exc:
                    job.error = exc
                finally:
                    _local.job = None
            job.port.post(job)
            del job
            job = self._pool.next_job(self)


_local = threading.local()
_HAS_TOKEN = hasattr(anyio.lowlevel, "current_token")
_pool = _Pool()
_port_var: RunVar[_Port] = RunVar("acmecerts.storage.filesystem.port")
os.register_at_fork(after_in_child=_pool.reset)


async def _in_worker(func: Callable[[], _T]) -> _T:
    """Run ``func`` in a pool thread; a cancelled caller waits for it (see _check_cancelled)."""
    await anyio.lowlevel.checkpoint_if_cancelled()
    port = _port_var.get(None)
    if port is None:
        port = _Port(anyio.lowlevel.current_token())
        _port_var.set(port)
    job = _Job(func, port)
    _pool.submit(job)
    try:
        await job.done.wait()
    except BaseException:
        job.cancelled = True  # the worker's _check_cancelled() now raises
        with anyio.CancelScope(shield=True):
            await job.done.wait()
        raise
    if job.error is not None:
        error, job.error = job.error, None
        raise error
    return job.result  # type: ignore[no-any-return]


def _seconds(value: float | _dt.timedelta, name: str, *, positive: bool) -> float:
    seconds = as_seconds(value)
    if not (seconds > 0 if positive else seconds >= 0) or seconds == float("inf"):
        bound = "> 0" if positive else ">= 0"
        raise InvalidInput(f"{name} must be a finite number of seconds {bound}, got {value!r}")
    return seconds


class _DirMutex:
    """This process's lock on one directory, how many threads use it, and its fsyncs.

    Group commit of the directory's fsync: ``changed`` counts renames and removals made
    under the lock, ``synced`` is the count the last completed fsync covered (an fsync
    makes durable every change made before it started). A thread whose change is already
    covered returns without an fsync of its own; otherwise one thread at a time
    (``sync_lock``) fsyncs for every change made so far.
    """

    __slots__ = ("changed", "lock", "sync_lock", "synced", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.sync_lock = threading.Lock()
        self.changed = 0
        self.synced = 0

    def sync(self, fd: int, change: int) -> None:
        """Make change number ``change`` (and all before it) durable: fsync ``fd`` if needed."""
        with self.sync_lock:
            if self.synced >= change:
                return  # an fsync that started after our change has completed
            target = self.changed
            os.fsync(fd)
            self.synced = max(self.synced, target)


class _LockedDir:
    """A directory held by :meth:`FileStorage._dir_locked`: its fd, and whether to fsync it."""

    __slots__ = ("fd", "sync")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        #: Set by a body that renamed or removed a file in the directory.
        self.sync = False


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
        self._mutexes: dict[str, _DirMutex] = {}
        self._mutexes_lock = threading.Lock()

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
        call = functools.partial(func, *args)
        if _HAS_TOKEN:
            return await _in_worker(call)
        return await anyio.to_thread.run_sync(call)  # anyio < 4.11: no current_token()

    def _ensure_dir(self, dirpath: str) -> None:
        """Create ``dirpath`` and missing parents up to ``root`` with mode 0700."""
        missing: list[str] = []
        current = dirpath
        while not os.path.isdir(current):
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for path in reversed(missing):
            try:
                os.mkdir(path, _DIR_MODE)
            except FileExistsError:
                if not os.path.isdir(path):
                    raise StorageError(
                        f"cannot create directory {path}: a file is in the way "
                        "(a key cannot also be the prefix of another key)",
                        path=path,
                    ) from None
                continue
            except OSError as exc:
                raise _os_error("create directory", path, exc) from exc
            with contextlib.suppress(OSError):
                os.chmod(path, _DIR_MODE)  # mkdir's mode is filtered by the umask

    @contextlib.contextmanager
    def _dir_locked(self, dirpath: str, *, create: bool = False) -> Iterator[_LockedDir]:
        """Hold ``dirpath``'s lock: first against this process's threads, then others.

        ``create``: make ``dirpath`` (and missing parents, 0700) if it does not exist;
        only then, so the usual case costs no ``stat`` before the ``open``.

        Threads of this process queue on a mutex per directory (no polling, first come
        first served); the holder then takes the exclusive ``flock`` that other processes
        contend for. A body that renamed or removed a file sets ``sync``: the directory
        is fsynced after both locks are released (so the next writer goes on meanwhile)
        and before this returns, so the change is durable before the caller is answered.
        """
        deadline = time.monotonic() + _DIR_LOCK_WAIT
        with self._mutexes_lock:
            entry = self._mutexes.get(dirpath)
            if entry is None:
                entry = self._mutexes[dirpath] = _DirMutex()
            entry.users += 1
        try:
            while not entry.lock.acquire(timeout=0.05):
                if time.monotonic() >= deadline:
                    raise StorageError(
                        f"directory {dirpath} stayed locked for {_DIR_LOCK_WAIT:.0f}s "
                        "by this process (is a write stuck?)",
                        path=dirpath,
                    )
                _check_cancelled()
            change = 0
            try:
                locked = _LockedDir(self._open_dir(dirpath, create))
                try:
                    self._flock(locked.fd, dirpath, deadline)
                    try:
                        yield locked
                        if locked.sync:
                            entry.changed += 1
                            change = entry.changed
                    finally:
                        fcntl.flock(locked.fd, fcntl.LOCK_UN)
                except BaseException:
                    os.close(locked.fd)
                    raise
            finally:
                entry.lock.release()
            try:
                if change:
                    entry.sync(locked.fd, change)
            except OSError as exc:
                raise _os_error("sync directory", dirpath, exc) from exc
            finally:
                os.close(locked.fd)
        finally:
            with self._mutexes_lock:
                entry.users -= 1
                if entry.users == 0:
                    del self._mutexes[dirpath]

    def _open_dir(self, dirpath: str, create: bool) -> int:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        try:
            return os.open(dirpath, flags)
        except FileNotFoundError:
            if not create:
                raise
        self._ensure_dir(dirpath)
        return os.open(dirpath, flags)

    @staticmethod
    def _flock(fd: int, dirpath: str, deadline: float) -> None:
        """Take the exclusive ``flock`` on the directory ``fd`` (other processes hold it)."""
        delay = 0.0005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            except OSError as exc:
                raise _os_error("lock directory", dirpath, exc) from exc
            if time.monotonic() >= deadline:
                raise StorageError(
                    f"directory {dirpath} stayed locked for {_DIR_LOCK_WAIT:.0f}s "
                    "(is a process that uses this store stopped?)",
                    path=dirpath,
                )
            _check_cancelled()
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def _read(self, path: str, key: str) -> StoredValue | None:
        """Read and verify one file; ``None`` if there is no value at ``path``."""
        try:
            # O_NONBLOCK: a FIFO planted at a key must not hang the reader (no effect on files).
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StorageError(
                    f"stored value {key!r}: {path} is a symbolic link; refusing to follow it",
                    path=path,
                ) from None
            raise _os_error("read", path, exc) from exc
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                return None  # only a prefix of other keys
            if not stat.S_ISREG(info.st_mode):
                raise StorageError(f"stored value {key!r}: {path} is not a file", path=path)
            if info.st_size > _MAX_FILE:
                raise _corrupt(key, path, f"{info.st_size} bytes is too large")
            # One read of the size fstat saw, plus one byte: a short read is the end of
            # the file, so the usual read takes one call (a file that grew meanwhile is
            # read on to its end, and then found corrupt or not by its envelope).
            raw = os.read(fd, info.st_size + 1)
            if len(raw) > info.st_size:
                chunks = [raw]
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
                raw = b"".join(chunks)
        except OSError as exc:
            raise _os_error("read", path, exc) from exc
        finally:
            os.close(fd)
        return _decode(raw, key, path)

    def _write(self, locked: _LockedDir, path: str, content: bytes) -> None:
        """Replace ``path`` atomically with ``content``; the caller holds the dir lock.

        The temp file's data is fsynced before the rename; the rename is made durable by
        the directory's fsync when the lock is let go (``locked.sync``).
        """
        dirpath, name = os.path.split(path)
        tmp = os.path.join(dirpath, f".{name}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            try:
                fd = os.open(tmp, flags, _FILE_MODE)
            except FileExistsError:
                # Left by a writer that crashed (we hold the directory lock): replace it.
                os.unlink(tmp)
                fd = os.open(tmp, flags, _FILE_MODE)
        except OSError as exc:
            raise _os_error("write", tmp, exc) from exc
        try:
            try:
                os.fchmod(fd, _FILE_MODE)
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            locked.sync = True
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, IsADirectoryError):
                raise StorageError(
                    f"cannot write {path}: it is a directory "
                    "(a key cannot also be the prefix of another key)",
                    path=path,
                ) from None
            if isinstance(exc, OSError):
                raise _os_error("write", path, exc) from exc
            raise

    @staticmethod
    def _check_version(
        current: StoredValue | None, expect: str | None, key: str, path: str
    ) -> None:
        if expect is None and current is not None:
            raise VersionConflict(f"{key!r} already exists", path=path)
        if isinstance(expect, str) and (current is None or current.version != expect):
            found = "it does not exist" if current is None else f"it is at {current.version}"
            raise VersionConflict(
                f"{key!r} changed: expected version {expect}, but {found}", path=path
            )

    # -- values -----------------------------------------------------------------------

    def _load_sync(self, key: str) -> StoredValue | None:
        return self._read(self.path_for(key), key)

    def _store_sync(self, key: str, data: bytes, expect: str | _AnyVersion | None) -> str:
        path = self.path_for(key)
        dirpath = os.path.dirname(path)
        try:
            with self._dir_locked(dirpath, create=True) as locked:
                if not isinstance(expect, _AnyVersion):
                    self._check_version(self._read(path, key), expect, key, path)
                version = secrets.token_hex(16)
                self._write(locked, path, _encode(version, data))
            return version
        except NotADirectoryError as exc:
            raise StorageError(
                f"cannot write {key!r}: a file is in the way of {dirpath} "
                "(a key cannot also be the prefix of another key)",
                path=path,
            ) from exc
        except OSError as exc:
            raise _os_error("write", path, exc) from exc

    def _delete_sync(self, key: str, expect: str | _AnyVersion | None) -> bool:
        path = self.path_for(key)
        dirpath = os.path.dirname(path)
        try:
            with self._dir_locked(dirpath) as locked:
                if not isinstance(expect, _AnyVersion):
                    self._check_version(self._read(path, key), expect, key, path)
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
                self._check_version(None, expect, key, path)
            return False
        except OSError as exc:
            raise _os_error("delete", path, exc) from exc

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
                raise _os_error("list", dirpath, exc) from exc
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
        value = self._read(path, f"lock {name}")
        return None if value is None else _LeaseRecord.from_json(value.data, name, path)

    def _try_acquire_sync(
        self, name: str, holder: str, lease: float
    ) -> tuple[_LeaseRecord | None, _LeaseRecord | None]:
        """Take the lock if free: ``(ours, None)``, else ``(None, current holder's)``."""
        path = self._lock_path(name)
        dirpath = os.path.dirname(path)
        with self._dir_locked(dirpath, create=True) as locked:
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
            self._write(locked, path, _encode(secrets.token_hex(16), record.to_json()))
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
        with self._dir_locked(os.path.dirname(path)) as locked:
            current = self._read_lease(path, name)
            if current is None or current.holder != holder:
                return None
            current.expires_at = self._clock.now() + _dt.timedelta(seconds=lease)
            self._write(locked, path, _encode(secrets.token_hex(16), current.to_json()))
        return current.expires_at

    def _release_sync(self, name: str, holder: str) -> None:
        path = self._lock_path(name)
        with self._dir_locked(os.path.dirname(path)) as locked:
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
                    raise _os_error("take lock", self._lock_path(name), exc) from exc
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
        lease_s = _seconds(lease, "lease", positive=True)
        timeout_s = None if timeout is None else _seconds(timeout, "timeout", positive=False)
        return self._hold(name, lease_s, timeout_s)

    async def aclose(self) -> None:
        """Close the store (idempotent); held locks are released by their ``async with``."""
        self._closed = True

    async def __aenter__(self) -> FileStorage:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
