"""The public half of acmecerts' own stores, written once: check the arguments, then delegate.

:class:`~acmecerts.storage.FileStorage` and
:class:`~acmecerts.storage.kubernetes.KubernetesStorage` implement the
:class:`~acmecerts.storage.Storage` contract on top of :class:`StoreBase`: its public
methods check keys, prefixes and values (:class:`~acmecerts.errors.InvalidInput` before
any I/O) and call the store's private hooks (``_load``, ``_store``, ``_delete``,
``_list``) with arguments already checked; locks are the store's :class:`LeaseLocks`.
Third-party stores need not use it: the contract is the protocol.
"""

from __future__ import annotations

import abc
import builtins
import datetime as _dt
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import ClassVar, Self

from acmecerts.errors import InvalidInput, StorageError
from acmecerts.storage._base import (
    ANY_VERSION,
    Lease,
    StoredValue,
    _AnyVersion,
    load_each_of,
    values_of,
)
from acmecerts.storage._lease import LeaseLocks
from acmecerts.storage.keys import validate_key, validate_prefix

__all__ = ["StoreBase"]


class StoreBase(abc.ABC):
    """Implements :class:`~acmecerts.storage.Storage` over a store's private hooks."""

    #: The largest value the store accepts, in bytes (``None``: the store's own limit).
    _max_value_size: ClassVar[int | None] = None
    #: The store's leases (set by its ``__init__``).
    _locks: LeaseLocks

    # -- the hooks: arguments already checked -----------------------------------------

    @abc.abstractmethod
    async def _load(self, key: str) -> StoredValue | None:
        """Read ``key``; ``None`` if it does not exist."""

    async def _load_each(
        self, keys: Sequence[str]
    ) -> builtins.list[StoredValue | StorageError | None]:
        """Read every key of ``keys``, in order, a key's error in its place (by default
        one ``_load`` each)."""
        return await load_each_of(self._load, keys)

    @abc.abstractmethod
    async def _store(
        self, key: str, data: bytes, secret: bool, expect_version: str | _AnyVersion | None
    ) -> str:
        """Write ``key`` atomically and return the new version."""

    @abc.abstractmethod
    async def _delete(self, key: str, expect_version: str | _AnyVersion | None) -> bool:
        """Remove ``key``; ``False`` if it did not exist."""

    @abc.abstractmethod
    async def _list(self, prefix: str) -> builtins.list[str]:
        """Every key that starts with ``prefix``, sorted."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the store's resources; idempotent."""

    # -- Storage ------------------------------------------------------------------------

    async def load(self, key: str) -> StoredValue | None:
        """Read ``key``; ``None`` if it does not exist, StorageError if it cannot be read back."""
        return await self._load(validate_key(key))

    async def load_each(
        self, keys: Sequence[str]
    ) -> builtins.list[StoredValue | StorageError | None]:
        """Read every key of ``keys``: in order, each value (``None``: absent) or the
        :class:`~acmecerts.errors.StorageError` its ``load`` would raise.

        Every key is checked before any I/O. A subclass that overrides :meth:`load`
        (reads its own way) is read with it, key by key.
        """
        checked = [validate_key(key) for key in keys]
        if type(self).load is not StoreBase.load:
            return await load_each_of(self.load, checked)
        return await self._load_each(checked)

    async def load_many(self, keys: Sequence[str]) -> builtins.list[StoredValue | None]:
        """Read every key of ``keys``: their values in order (``None``: absent).

        Raises as :meth:`load` does, for the first key that cannot be read (see
        :func:`acmecerts.storage.load_many`).
        """
        return values_of(await self.load_each(keys))

    async def store(
        self,
        key: str,
        data: bytes,
        *,
        secret: bool = False,
        expect_version: str | _AnyVersion | None = ANY_VERSION,
    ) -> str:
        """Write ``key`` atomically and return its new version (see :meth:`Storage.store`).

        ``data`` may be any bytes-like object (``bytes``, ``bytearray``, ``memoryview``);
        its bytes are stored. ``secret=True`` keeps the value from other users.
        """
        validate_key(key)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidInput(f"a stored value must be bytes, got {type(data).__name__}")
        limit = self._max_value_size
        if limit is not None and len(data) > limit:
            raise InvalidInput(f"a stored value must be at most {limit} bytes")
        return await self._store(key, bytes(data), secret, expect_version)

    async def delete(
        self, key: str, *, expect_version: str | _AnyVersion | None = ANY_VERSION
    ) -> bool:
        """Remove ``key``; ``False`` if it did not exist (see :meth:`Storage.delete`)."""
        return await self._delete(validate_key(key), expect_version)

    async def list(self, prefix: str) -> builtins.list[str]:
        """Every key that starts with ``prefix`` (a plain string prefix), sorted."""
        return await self._list(validate_prefix(prefix))

    def lock(
        self,
        name: str,
        *,
        lease: float | _dt.timedelta = 60.0,
        timeout: float | _dt.timedelta | None = None,
    ) -> AbstractAsyncContextManager[Lease]:
        """Hold the lock ``name`` for an ``async with`` block; see :meth:`Storage.lock`.

        Not re-entrant: a task that already holds ``name`` waits for itself.
        """
        return self._locks.hold(name, lease, timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
