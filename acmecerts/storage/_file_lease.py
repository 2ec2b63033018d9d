"""FileStorage's lease compare-and-swap: one lease file per lock, under ``.locks/``.

The file holds the integrity envelope with JSON inside (``holder``, ``host``, ``pid``,
``acquired_at``, ``expires_at``; the format of every acmecerts version so far). Its
version is the envelope's, drawn at each write. A swap reads the file and writes or
removes it under the directory's ``flock``, in one worker-thread hop, only if the
version is the one expected. A released lease is no file at all, so a free lock costs
one hop to take and one to give back. The lease logic is in :mod:`acmecerts.storage._lease`.

A lease file is never fsynced, nor is its directory after a write or a removal (every
value of the store is; issue #27). The rename stays atomic, so a lease file is always
whole. After a machine crash every lease is void anyway: it has expired by the time the
machine is back, or its holder's pid names a process that no longer exists (taken over
at once); a lease write lost, or a released one that reappears, changes nothing.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from acmecerts._time import Backoff
from acmecerts.errors import StorageError
from acmecerts.storage import _files
from acmecerts.storage._lease import LeaseRecord, ObservedLease

__all__ = ["LOCKS_DIR", "FileLeases"]

#: The directory of lease files under a store's root (never a key: it starts with ``.``).
LOCKS_DIR = ".locks"
# Holder ids: host, pid, then a random prefix drawn once per process and a serial number
# (unique per acquisition like a random id, without a getrandom() call on the event loop).
_HOLDER_PREFIX = secrets.token_hex(8)
_holder_serial = itertools.count(1)


def _to_json(record: LeaseRecord) -> bytes:
    expires_at = record.expires_at
    assert expires_at is not None  # only claims and renewals are written
    acquired_at = record.acquired_at or expires_at
    return json.dumps(
        {
            "holder": record.holder,
            "host": record.host,
            "pid": record.pid,
            "acquired_at": acquired_at.isoformat(),
            "expires_at": expires_at.isoformat(),
        },
        sort_keys=True,
    ).encode()


def _from_json(data: bytes, name: str, path: str) -> LeaseRecord:
    try:
        obj = json.loads(data)
        expires_at = _dt.datetime.fromisoformat(obj["expires_at"])
        acquired_at = _dt.datetime.fromisoformat(obj["acquired_at"])
        holder = obj["holder"]
        if not isinstance(holder, str) or expires_at.tzinfo is None:
            raise TypeError("bad holder or naive expiry")
        pid = obj.get("pid", 0)
        return LeaseRecord(
            holder=holder,
            expires_at=expires_at,
            acquired_at=acquired_at,
            host=str(obj.get("host", "")),
            pid=pid if isinstance(pid, int) else 0,
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise StorageError(
            f"lease file of lock {name!r} in {path} is corrupt ({exc}); it was left as "
            "it is: delete it once no process uses the lock",
            path=path,
        ) from None


class FileLeases:
    """The :class:`~acmecerts.storage._lease.LeaseBackend` of one FileStorage."""

    #: Waiters poll another process's lock from 5 ms up to 250 ms, jittered.
    backoff = Backoff(initial=0.005, floor=0.0025, cap=0.25, jitter=0.5)

    def __init__(
        self,
        root: str,
        dirs: _files.DirLocks,
        run: Callable[..., Awaitable[Any]],
    ) -> None:
        """Leases under ``root``/.locks; ``run(func, *args, check_open=...)`` runs I/O."""
        self._root = root
        self._dirs = dirs
        self._run = run
        self._host = socket.gethostname()

    def path(self, name: str) -> str:
        """The lease file of lock ``name`` (a name checked by :meth:`LeaseLocks.hold`)."""
        return os.path.join(self._root, LOCKS_DIR, *name.split("/"))

    def lease_seconds(self, requested: float) -> float:
        """Any lease is recorded as it is."""
        return requested

    def new_holder(self) -> str:
        """``host:pid:<per-process random><serial>``."""
        return f"{self._host}:{os.getpid()}:{_HOLDER_PREFIX}{next(_holder_serial)}"

    def where(self, name: str) -> str | None:
        """The lease file's path."""
        return self.path(name)

    def abandoned(self, record: LeaseRecord) -> bool:
        """Whether the holder was a process on this machine that no longer exists.

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

    async def peek(self, name: str) -> ObservedLease | None:
        """Guess "no lease file" without I/O: a released lock has none."""
        return None

    async def read(self, name: str) -> ObservedLease | None:
        """The lease file as it is now (no lock needed: it is replaced by ``rename``)."""
        result: ObservedLease | None = await self._run(self._read_sync, name)
        return result

    def _read_sync(self, name: str, path: str | None = None) -> ObservedLease | None:
        path = path or self.path(name)
        value = _files.read(path, f"lock {name}")
        return (
            None
            if value is None
            else ObservedLease(_from_json(value.data, name, path), value.version)
        )

    async def swap(
        self, name: str, expect: str | None, record: LeaseRecord
    ) -> tuple[bool, ObservedLease | None]:
        """One hop: compare the file's version and write (or remove) it under the flock.

        A closed store still releases (leaving an ``async with`` after ``aclose``).
        """
        releasing = record.holder is None
        result: tuple[bool, ObservedLease | None] = await self._run(
            self._swap_sync, name, expect, record, check_open=not releasing
        )
        return result

    def _swap_sync(
        self, name: str, expect: str | None, record: LeaseRecord
    ) -> tuple[bool, ObservedLease | None]:
        path = self.path(name)
        releasing = record.holder is None
        try:
            with self._dirs.locked(
                os.path.dirname(path), create=not releasing, durable=False
            ) as locked:
                try:
                    current = self._read_sync(name, path)
                except StorageError:
                    if releasing:
                        return False, None  # not ours to judge; leave it for an operator
                    raise
                if (current.version if current is not None else None) != expect:
                    return False, current
                # No fsync, of the file or of its directory (see the module docstring).
                if releasing:
                    if current is not None:
                        os.unlink(path)
                    return True, None
                version = secrets.token_hex(16)
                _files.write(locked, path, _files.encode(version, _to_json(record)), durable=False)
                return True, ObservedLease(record, version)
        except FileNotFoundError:  # no directory (released already): nothing to remove
            return expect is None, None
        except OSError as exc:
            raise _files.os_error("take lock", path, exc) from exc
