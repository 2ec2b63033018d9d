"""A :class:`~acmecerts.storage.Storage` that counts what is asked of the store it wraps.

With :class:`~acmecerts.storage.kubernetes.KubernetesStorage` each operation is an API
server request; the fleet's measures count them per issued certificate and per
certificate-day at rest.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as _dt
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

from acmecerts.storage import ANY_VERSION, Lease, Storage, StoredValue

__all__ = ["CountingStorage"]


class CountingStorage:
    """Wraps ``inner``; :attr:`ops` counts every call by kind (``load``, ``store``,
    ``delete``, ``list``, ``lock``, ``unlock``), whether it succeeded or raised."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        #: Calls by kind.
        self.ops: collections.Counter[str] = collections.Counter()

    @property
    def total(self) -> int:
        """Every call so far."""
        return sum(self.ops.values())

    async def load(self, key: str) -> StoredValue | None:
        """Count, then :meth:`Storage.load`."""
        self.ops["load"] += 1
        return await self.inner.load(key)

    async def store(
        self,
        key: str,
        data: bytes,
        *,
        secret: bool = False,
        expect_version: object = ANY_VERSION,
    ) -> str:
        """Count, then :meth:`Storage.store`."""
        self.ops["store"] += 1
        return await self.inner.store(
            key,
            data,
            secret=secret,
            expect_version=expect_version,  # type: ignore[arg-type]
        )

    async def delete(self, key: str, *, expect_version: object = ANY_VERSION) -> bool:
        """Count, then :meth:`Storage.delete`."""
        self.ops["delete"] += 1
        return await self.inner.delete(key, expect_version=expect_version)  # type: ignore[arg-type]

    async def list(self, prefix: str) -> list[str]:
        """Count, then :meth:`Storage.list`."""
        self.ops["list"] += 1
        return await self.inner.list(prefix)

    def lock(
        self,
        name: str,
        *,
        lease: float | _dt.timedelta = 60.0,
        timeout: float | _dt.timedelta | None = None,
    ) -> AbstractAsyncContextManager[Lease]:
        """Count, then :meth:`Storage.lock`: two operations (take, release); the
        lease's renewals while held are not counted."""
        return self._lock(name, lease, timeout)

    @contextlib.asynccontextmanager
    async def _lock(
        self, name: str, lease: float | _dt.timedelta, wait: float | _dt.timedelta | None
    ) -> AsyncIterator[Lease]:
        self.ops["lock"] += 1
        try:
            async with self.inner.lock(name, lease=lease, timeout=wait) as held:
                yield held
        finally:
            self.ops["unlock"] += 1

    async def aclose(self) -> None:
        """Close the wrapped store."""
        await self.inner.aclose()
