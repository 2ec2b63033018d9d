"""FileStorage's files: the integrity envelope, directory locks, atomic reads and writes.

Everything here runs in a worker thread (:mod:`acmecerts.storage._workers`; on a virtual
loop, on the loop's thread until it would wait for a lock) and blocks;
see :mod:`acmecerts.storage.filesystem` for the on-disk format and its guarantees.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import stat
import threading
import time
from collections.abc import Iterator

from acmecerts._time import Backoff
from acmecerts.errors import StorageError
from acmecerts.storage._base import StoredValue, VersionConflict
from acmecerts.storage._workers import before_waiting, check_cancelled

__all__ = [
    "MAX_VALUE_SIZE",
    "DirLocks",
    "LockedDir",
    "check_version",
    "decode",
    "encode",
    "fsync_directory",
    "os_error",
    "read",
    "write",
]

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
# How long a thread waits for another process's directory flock (held for milliseconds
# by a live writer) before reporting the store as stuck.
_DIR_LOCK_WAIT = 30.0
# Polling another process's directory flock: 0.5 ms doubling up to 20 ms (a blocking
# flock could not see the caller's cancellation).
_FLOCK_BACKOFF = Backoff(floor=0.0005, cap=0.02)


def encode(version: str, data: bytes) -> bytes:
    digest = hashlib.sha256(data).hexdigest()
    header = b"%s %s %d %s\n" % (_MAGIC, version.encode("ascii"), len(data), digest.encode())
    return header + data


def _corrupt(key: str, path: str, reason: str) -> StorageError:
    return StorageError(
        f"stored value {key!r} in {path} is corrupt ({reason}); it was left as it is: "
        "restore it from a backup, or delete it to start over",
        path=path,
    )


def decode(raw: bytes, key: str, path: str) -> StoredValue:
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


def os_error(action: str, path: str, exc: OSError) -> StorageError:
    reason = exc.strerror or str(exc)
    return StorageError(f"cannot {action} {path}: {reason}", path=path)


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


class LockedDir:
    """A directory held by :meth:`DirLocks.locked`: its fd, and whether to fsync it."""

    __slots__ = ("fd", "sync")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        #: Set by a body that renamed or removed a file in the directory.
        self.sync = False


def ensure_dir(dirpath: str, *, durable: bool = True) -> None:
    """Create ``dirpath`` and missing parents with mode 0700.

    ``durable``: the parent of every directory created is fsynced before this returns
    (deepest first), so that the new directory's entry survives a machine crash with
    the file the caller then writes in it (an fsync of the file and of its own
    directory does not cover the entry in the parent). Lease directories need not be.
    """
    missing: list[str] = []
    current = dirpath
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    created: list[str] = []
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
            created.append(path)  # another writer's, maybe not durable yet
            continue
        except OSError as exc:
            raise os_error("create directory", path, exc) from exc
        with contextlib.suppress(OSError):
            os.chmod(path, _DIR_MODE)  # mkdir's mode is filtered by the umask
        created.append(path)
    if durable:
        for path in reversed(created):
            _sync_dir(os.path.dirname(path))


def fsync_directory(dirpath: str | os.PathLike[str]) -> None:
    """fsync the directory ``dirpath`` (a new entry in it becomes durable); OSError as is."""
    fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(dirpath: str) -> None:
    """:func:`fsync_directory`, its failure a :class:`~acmecerts.errors.StorageError`."""
    try:
        fsync_directory(dirpath)
    except OSError as exc:
        raise os_error("sync directory", dirpath, exc) from exc


class DirLocks:
    """This process's mutexes, one per directory in use, in front of each directory's ``flock``."""

    def __init__(self) -> None:
        self._mutexes: dict[str, _DirMutex] = {}
        self._mutexes_lock = threading.Lock()

    @contextlib.contextmanager
    def locked(
        self, dirpath: str, *, create: bool = False, durable: bool = True
    ) -> Iterator[LockedDir]:
        """Hold ``dirpath``'s lock: first against this process's threads, then others.

        ``create``: make ``dirpath`` (and missing parents, 0700) if it does not exist;
        only then, so the usual case costs no ``stat`` before the ``open``; ``durable``:
        a directory created is made durable (see :func:`ensure_dir`).

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
            if not entry.lock.acquire(blocking=False):
                before_waiting()  # a job on the event loop's thread goes to a thread
                while not entry.lock.acquire(timeout=0.05):
                    _give_up_at(deadline, dirpath, "by this process (is a write stuck?)")
            change = 0
            try:
                locked = LockedDir(_open_dir(dirpath, create, durable))
                try:
                    _flock(locked.fd, dirpath, deadline)
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
                raise os_error("sync directory", dirpath, exc) from exc
            finally:
                os.close(locked.fd)
        finally:
            with self._mutexes_lock:
                entry.users -= 1
                if entry.users == 0:
                    del self._mutexes[dirpath]


def _open_dir(dirpath: str, create: bool, durable: bool) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        return os.open(dirpath, flags)
    except FileNotFoundError:
        if not create:
            raise
    ensure_dir(dirpath, durable=durable)
    return os.open(dirpath, flags)


def _give_up_at(deadline: float, dirpath: str, why: str) -> None:
    """While waiting for ``dirpath``: raise once ``deadline`` passed or the caller cancelled.

    Called after each failed attempt, before any wait: a job on the event loop's thread
    stops at the first (:func:`before_waiting`) and is run again in a worker thread.
    """
    before_waiting()
    if time.monotonic() >= deadline:
        raise StorageError(
            f"directory {dirpath} stayed locked for {_DIR_LOCK_WAIT:.0f}s {why}", path=dirpath
        )
    check_cancelled()


def _flock(fd: int, dirpath: str, deadline: float) -> None:
    """Take the exclusive ``flock`` on the directory ``fd`` (other processes hold it)."""
    step = 0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as exc:
            raise os_error("lock directory", dirpath, exc) from exc
        _give_up_at(deadline, dirpath, "(is a process that uses this store stopped?)")
        step += 1
        time.sleep(_FLOCK_BACKOFF.pause(step))


def read(path: str, key: str) -> StoredValue | None:
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
        raise os_error("read", path, exc) from exc
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
        raise os_error("read", path, exc) from exc
    finally:
        os.close(fd)
    return decode(raw, key, path)


def write(locked: LockedDir, path: str, content: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` atomically with ``content``; the caller holds the dir lock.

    ``durable`` (every value): the temp file's data is fsynced before the rename, and
    the rename is made durable by the directory's fsync when the lock is let go
    (``locked.sync``). Without it (lease files) neither: the rename is still atomic, so
    a reader sees the old file or the new one, but a machine crash may lose the write.
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
        raise os_error("write", tmp, exc) from exc
    try:
        try:
            os.fchmod(fd, _FILE_MODE)
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        locked.sync |= durable
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
            raise os_error("write", path, exc) from exc
        raise


def check_version(current: StoredValue | None, expect: str | None, key: str, path: str) -> None:
    """Raise :class:`VersionConflict` unless ``current`` is what a write expects."""
    if expect is None and current is not None:
        raise VersionConflict(f"{key!r} already exists", path=path)
    if isinstance(expect, str) and (current is None or current.version != expect):
        found = "it does not exist" if current is None else f"it is at {current.version}"
        raise VersionConflict(f"{key!r} changed: expected version {expect}, but {found}", path=path)
