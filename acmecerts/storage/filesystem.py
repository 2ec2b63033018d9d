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
  instant leaves the old value or the new one. A directory the write had to create is
  made durable in its parent first (the parent is fsynced), so that a machine crash
  cannot lose the directory of a value whose write has returned.
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
  The lease logic is shared with every store (:mod:`acmecerts.storage._lease`); the
  lease file is this store's compare-and-swap (:mod:`acmecerts.storage._file_lease`).
  Lease files are written and removed atomically but never fsynced: after a machine
  crash every lease is void anyway (expired, or held by a process that is gone).
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
  count against anyio's default thread limiter. Reads asked for while a read job still
  waits for a worker join that job (:mod:`acmecerts.storage._read_batches`): a fleet's
  concurrent loads cost one hop, not one each. On a
  :class:`~acmecerts.VirtualClock`'s loop (simulated time), a call runs on the loop's
  own thread when the loop has nothing else to run (it would only wait for the thread),
  unless it would have to wait for a directory lock: then a worker thread takes it.

Lease instants come from the injected :class:`~acmecerts.Clock` (wall-clock UTC with the
default :class:`~acmecerts.SystemClock`), so processes sharing a store must share a clock:
one machine. The store needs a local file system with working ``flock`` (not NFS).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from acmecerts._time import Clock, SystemClock
from acmecerts.errors import InvalidInput, StorageError
from acmecerts.storage import _files
from acmecerts.storage._backend import StoreBase
from acmecerts.storage._base import StoredValue, _AnyVersion, values_of
from acmecerts.storage._file_lease import FileLeases
from acmecerts.storage._files import MAX_VALUE_SIZE, os_error
from acmecerts.storage._lease import LeaseLocks
from acmecerts.storage._read_batches import ReadBatches
from acmecerts.storage._workers import run_sync
from acmecerts.storage.keys import validate_key

__all__ = ["MAX_VALUE_SIZE", "FileStorage"]

log = logging.getLogger("acmecerts.storage")

_T = TypeVar("_T")


class FileStorage(StoreBase):
    """A :class:`~acmecerts.storage.Storage` in a local directory (the default store).

    ``root`` is created (0700) on the first write if it does not exist. Several
    :class:`FileStorage` objects, in one process or many on the same machine, may share a
    root. Every value is written atomically to a file of mode 0600, whatever ``secret``,
    and is at most :data:`MAX_VALUE_SIZE` bytes. See the module documentation for the
    on-disk format and guarantees.
    """

    _max_value_size = MAX_VALUE_SIZE

    def __init__(self, root: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        """Store under ``root``; ``clock`` stamps and times leases (default: system)."""
        self._root = os.path.abspath(os.fspath(root))
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._closed = False
        # This process's writers queue per directory here before taking its flock.
        self._dirs = _files.DirLocks()
        self._leases = FileLeases(self._root, self._dirs, self._run)
        self._locks = LeaseLocks(self._leases, self._clock)
        # concurrent reads share a worker job (see _read_batches.py)
        self._reads = ReadBatches(self._load_each_sync)

    @property
    def root(self) -> str:
        """The absolute path of the store's directory."""
        return self._root

    def path_for(self, key: str) -> str:
        """The file that holds ``key`` (for messages and tooling; do not write it)."""
        return os.path.join(self._root, *validate_key(key).split("/"))

    def __repr__(self) -> str:
        return f"FileStorage({self._root!r})"

    # -- plumbing ---------------------------------------------------------------------

    async def _run(self, func: Callable[..., _T], *args: Any, check_open: bool = True) -> _T:
        if check_open:
            self._check_open()
        return await run_sync(func, *args)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self!r} is closed", path=self._root)

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

    async def _load(self, key: str) -> StoredValue | None:
        [found] = values_of(await self._load_each([key]))
        return found

    async def _load_each(
        self, keys: Sequence[str]
    ) -> builtins.list[StoredValue | StorageError | None]:
        # one hop to the worker thread for them all (each hop costs more than a small
        # read), shared with the reads of other tasks asked for meanwhile
        self._check_open()
        return await self._reads.read(keys)

    def _load_each_sync(
        self, keys: Sequence[str]
    ) -> builtins.list[StoredValue | StorageError | None]:
        found: builtins.list[StoredValue | StorageError | None] = []
        for key in keys:
            try:
                found.append(self._load_sync(key))
            except StorageError as exc:
                found.append(exc)
        return found

    async def _store(
        self, key: str, data: bytes, secret: bool, expect_version: str | _AnyVersion | None
    ) -> str:
        # Every file is 0600, whatever ``secret`` (see the module documentation).
        return await self._run(self._store_sync, key, data, expect_version)

    async def _delete(self, key: str, expect_version: str | _AnyVersion | None) -> bool:
        return await self._run(self._delete_sync, key, expect_version)

    async def _list(self, prefix: str) -> builtins.list[str]:
        return await self._run(self._list_sync, prefix)

    async def aclose(self) -> None:
        """Close the store (idempotent); held locks are released by their ``async with``."""
        self._closed = True
