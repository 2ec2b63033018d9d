"""The :class:`Storage` plug-in contract: keyed blobs, compare-and-swap, and leased locks.

Everything acmecerts persists (account keys, certificates, orders in flight, the
rate-limit ledger, backoff state) goes through one ``Storage``. Keys are built by
:mod:`acmecerts.storage.keys`; values are bytes. A store that several processes or
replicas share makes acmecerts safe to run more than once at a time.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, cast, runtime_checkable

from acmecerts.errors import StorageError

__all__ = ["ANY_VERSION", "Lease", "LockTimeout", "Storage", "StoredValue", "VersionConflict"]


class _AnyVersion:
    """Sentinel: store/delete without a compare-and-swap condition."""

    _instance: _AnyVersion | None = None

    def __new__(cls) -> _AnyVersion:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ANY_VERSION"


#: Pass as ``expect_version`` to write unconditionally (the default).
ANY_VERSION = _AnyVersion()


class VersionConflict(StorageError):
    """A compare-and-swap failed: the value changed since it was read. Re-read and retry."""


class LockTimeout(StorageError):
    """A lock was not acquired within the timeout (another holder keeps it)."""


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class StoredValue:
    """A value read from storage and the version token to compare-and-swap against."""

    data: bytes
    #: Opaque version (a file's content hash, a Kubernetes ``resourceVersion``...).
    version: str

    def __repr__(self) -> str:
        return f"StoredValue({len(self.data)} bytes, version={self.version!r})"


@runtime_checkable
class Lease(Protocol):
    """A held lock. Returned by entering :meth:`Storage.lock`.

    While the ``async with`` block runs, the store renews the lease in the background
    (heartbeat) so a live holder never loses it; if renewal fails (the store is
    unreachable for longer than the lease), ``lost`` becomes true and the holder SHOULD
    stop what it is doing.
    """

    @property
    def name(self) -> str:
        """The lock's name."""
        ...

    @property
    def lost(self) -> bool:
        """Whether the lease was taken over, or ran out unrenewed (someone may hold it now)."""
        ...

    @property
    def expires_at(self) -> _dt.datetime:
        """When the lease runs out unless renewed (aware UTC)."""
        ...


@runtime_checkable
class Storage(Protocol):
    """Where acmecerts keeps its state.

    Contract:

    * Keys and lock names MUST be checked with
      :func:`acmecerts.storage.keys.validate_key` (``/``-separated segments of
      ``[a-z0-9._-]``); anything else raises :class:`~acmecerts.errors.InvalidInput`
      before any I/O. Keys come from :class:`~acmecerts.storage.KeyLayout`, which never
      makes one key a ``/``-prefix of another (``a`` and ``a/b``); a store MAY refuse such
      a pair with :class:`~acmecerts.errors.StorageError`. The same holds for lock names.
    * ``store`` MUST be atomic: a reader sees the old value or the new one, never a mix,
      and a crash at any instant leaves one of them intact. Values written with
      ``secret=True`` (private keys) MUST NOT be readable by other users.
    * ``expect_version`` makes ``store``/``delete`` a compare-and-swap: with a version
      string the write happens only if the stored version is still that one; with
      ``None`` only if the key does not exist; otherwise :class:`VersionConflict`.
      Versions MUST NOT repeat for a key: a value changed and changed back has a new
      version (no ABA), though a write of identical bytes MAY keep the version.
    * A value that cannot be read back (corrupt, truncated) MUST raise
      :class:`~acmecerts.errors.StorageError` naming the key; it MUST NOT be replaced or
      deleted silently, and other keys MUST stay readable.
    * ``lock(name, lease=..., timeout=...)`` is mutual exclusion across every process
      sharing the store. A holder that dies stops renewing; its lease expires after
      ``lease`` seconds and the lock can be taken over. Waiting for a lock MUST honour
      cancellation; ``timeout=None`` waits forever, else :class:`LockTimeout`
      (``timeout=0`` tries once). Locks are not re-entrant. Leaving the ``async with``
      block releases the lock, also when the block is cancelled or raises; the block's
      own exception MUST propagate unchanged (not wrapped in an ``ExceptionGroup``). A
      ``lock()`` cancelled while acquiring MUST NOT leave the lock held.
    * ``list`` matches plain string prefixes (``"a/ce"`` finds ``a/cert/x``).
    * ``aclose`` releases the store's resources; it MUST be idempotent.
    * A store MAY also have ``load_each(keys)`` and ``load_many(keys)`` (several keys
      read at once, see :func:`load_each`); the functions of those names use them, else
      one ``load`` per key.
    * Every method MUST honour cancellation and SHOULD return within seconds.
    """

    async def load(self, key: str) -> StoredValue | None:
        """Read ``key``; ``None`` if it does not exist."""
        ...

    async def store(
        self,
        key: str,
        data: bytes,
        *,
        secret: bool = False,
        expect_version: str | _AnyVersion | None = ANY_VERSION,
    ) -> str:
        """Write ``key`` atomically and return the new version."""
        ...

    async def delete(
        self, key: str, *, expect_version: str | _AnyVersion | None = ANY_VERSION
    ) -> bool:
        """Remove ``key``; ``False`` if it did not exist."""
        ...

    async def list(self, prefix: str) -> list[str]:
        """Every key that starts with ``prefix``, sorted."""
        ...

    def lock(
        self,
        name: str,
        *,
        lease: float | _dt.timedelta = 60.0,
        timeout: float | _dt.timedelta | None = None,
    ) -> AbstractAsyncContextManager[Lease]:
        """Hold the lock ``name`` for the duration of an ``async with`` block."""
        ...

    async def aclose(self) -> None:
        """Release the store's resources (connections...); idempotent."""
        ...


async def load_each_of(
    load: Callable[[str], Awaitable[StoredValue | None]], keys: Sequence[str]
) -> list[StoredValue | StorageError | None]:
    """``load`` each key of ``keys`` in turn, a key's StorageError in its place."""
    found: list[StoredValue | StorageError | None] = []
    for key in keys:
        try:
            found.append(await load(key))
        except StorageError as exc:
            found.append(exc)
    return found


def values_of(found: Sequence[StoredValue | StorageError | None]) -> list[StoredValue | None]:
    """The values of a :func:`load_each`; raises the first error among them."""
    for value in found:
        if isinstance(value, StorageError):
            raise value
    return cast("list[StoredValue | None]", list(found))


async def load_each(
    storage: Storage, keys: Sequence[str]
) -> list[StoredValue | StorageError | None]:
    """Read every key of ``keys``: in order, each value (``None``: absent) or the
    :class:`~acmecerts.errors.StorageError` its ``load`` raised, so that one key that
    cannot be read does not hide the others.

    A store that has a ``load_each(keys)`` method of its own (acmecerts' stores: one hop
    to FileStorage's worker thread for them all) is asked once; any other
    :class:`Storage` is read key by key with ``load``, so a third-party store needs
    nothing new.
    """
    own = getattr(storage, "load_each", None)
    if own is not None:
        return list(await own(keys))
    return await load_each_of(storage.load, keys)


async def load_many(storage: Storage, keys: Sequence[str]) -> list[StoredValue | None]:
    """Read every key of ``keys``: their values in order (``None``: absent).

    As :func:`load_each` (one hop for acmecerts' stores, one ``load`` per key for any
    other), but raises as ``load`` does, for the first key that cannot be read.
    """
    own = getattr(storage, "load_many", None)
    if own is not None:
        return list(await own(keys))
    return values_of(await load_each(storage, keys))
