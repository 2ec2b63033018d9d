"""How much the manager asks of its store for one new certificate, counted.

A :class:`CountingStorage` wraps a real :class:`FileStorage` and records every call; one
issuance against Pebble must not make more store operations than the figures below (the
layout of acmecerts/manager/_persist.py: one certificate record, the order journal, no
deletes of what the manager saw absent under the same lock, nor of a finished order
record). A change that adds one fails here and has to say why.
"""

from __future__ import annotations

import collections
import datetime as _dt
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from acmecerts import AcmeClient, Http01Server
from acmecerts.errors import StorageError
from acmecerts.manager import CertificateManager, IssuedResult
from acmecerts.storage import (
    ANY_VERSION,
    FileStorage,
    Lease,
    LeaseRecord,
    ObservedLease,
    StoredValue,
)
from acmecerts.storage._base import _AnyVersion
from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.anyio


class CountingStorage:
    """A Storage that forwards to another and records ``(operation, key)`` per call."""

    def __init__(self, inner: FileStorage) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []
        #: Calls made to the inner store (a ``load_many`` is one, however many keys): each
        #: one hop to FileStorage's worker thread.
        self.hops: collections.Counter[str] = collections.Counter()

    async def load(self, key: str) -> StoredValue | None:
        self.calls.append(("load", key))
        self.hops["load"] += 1
        return await self.inner.load(key)

    async def load_each(self, keys: Sequence[str]) -> list[StoredValue | StorageError | None]:
        self.calls += [("load", key) for key in keys]
        self.hops["load"] += 1
        return await self.inner.load_each(keys)

    async def store(
        self,
        key: str,
        data: bytes,
        *,
        secret: bool = False,
        expect_version: str | _AnyVersion | None = ANY_VERSION,
    ) -> str:
        self.hops["store"] += 1
        self.calls.append(("store", key))
        return await self.inner.store(key, data, secret=secret, expect_version=expect_version)

    async def delete(
        self, key: str, *, expect_version: str | _AnyVersion | None = ANY_VERSION
    ) -> bool:
        self.hops["delete"] += 1
        self.calls.append(("delete", key))
        return await self.inner.delete(key, expect_version=expect_version)

    async def list(self, prefix: str) -> list[str]:
        self.hops["list"] += 1
        self.calls.append(("list", prefix))
        return await self.inner.list(prefix)

    def lock(
        self,
        name: str,
        *,
        lease: float | _dt.timedelta = 60.0,
        timeout: float | _dt.timedelta | None = None,
    ) -> AbstractAsyncContextManager[Lease]:
        @asynccontextmanager
        async def held() -> AsyncIterator[Lease]:
            self.calls.append(("lock", name))
            async with self.inner.lock(name, lease=lease, timeout=timeout) as lease_:
                yield lease_

        return held()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def count(self, prefix: str = "") -> collections.Counter[str]:
        """Operations per kind on keys that contain ``prefix``."""
        return collections.Counter(op for op, key in self.calls if prefix in key)


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}


@pytest.mark.timeout(120)
async def test_one_new_certificate_costs_few_store_operations(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs = swaps = 0
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        nonlocal fsyncs
        fsyncs += 1
        real_fsync(fd)

    async with FileStorage(tmp_path) as inner:
        storage = CountingStorage(inner)
        async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
            # the account exists first: its key and registration are not per certificate
            await client.register()
            warm = CertificateManager(client, solvers=[http01], storage=storage)
            (warmed,) = await warm.issue_many(["warm.ops.test"])
            assert isinstance(warmed, IssuedResult)
            before = _files(tmp_path)
            storage.calls.clear()
            storage.hops.clear()
            monkeypatch.setattr(os, "fsync", counting_fsync)
            leases = inner._leases
            real_swap = leases.swap

            async def counting_swap(
                name: str, expect: str | None, record: LeaseRecord
            ) -> tuple[bool, ObservedLease | None]:
                nonlocal swaps
                swaps += 1
                return await real_swap(name, expect, record)

            monkeypatch.setattr(leases, "swap", counting_swap)
            (result,) = await warm.issue_many(["one.ops.test"])
            monkeypatch.undo()
    assert isinstance(result, IssuedResult)
    calls = storage.calls
    # every operation is about this certificate (no listing, nothing of the account)
    assert all("one.ops.test" in key or "/retired/" in key for _, key in calls), calls
    created = _files(tmp_path) - before
    counts = storage.count()
    assert dict(counts) == EXPECTED, calls
    assert dict(storage.hops) == HOPS, calls
    assert fsyncs <= MAX_FSYNCS
    assert swaps == LEASE_SWAPS  # the lock taken and given back; no renewal in between
    assert len(created) == EXPECTED_FILES, sorted(str(p.relative_to(tmp_path)) for p in created)


#: Per new certificate, once the manager runs (the previous layout cost 7 loads, 1 lock,
#: 5 stores and 3 deletes, and created 3 files: cert.pem, privkey.pem, meta.json).
#: Loads: retired record, certificate, attempt state before the lock; under it the
#: certificate and attempt state again (another process may have issued it), the
#: retired record (adoption) and the order record. Stores: the order intent (durable
#: before newOrder is sent: a process that dies before recording the answer looks for
#: the order instead of ordering again), the order, the certificate's record. No delete:
#: the order record stays, finished by rule (it names the stored certificate's order);
#: it was deleted after the save until the journal fold (1 delete, 8 hops to the
#: worker thread of which this one and its directory fsync are gone).
EXPECTED = {"load": 7, "lock": 1, "store": 3}
#: Calls to the store, each one hop to FileStorage's worker thread (plus the 2 lease
#: swaps): the 7 reads are 2 batches (``load_each``), the 3 reads before the lock and
#: the 4 under it: 7 hops in all with the swaps. Before the batches 7 loads, 12 hops
#: with the 3 stores and the 2 swaps (13 before the journal fold: the order's delete).
HOPS = {"load": 2, "store": 3}
EXPECTED_FILES = 2  # certificate.json and the finished order record
#: fsyncs made by FileStorage meanwhile (the previous layout: 14; 10 while lease files
#: were fsynced: the claim and the release; 7 while the finished order record was
#: deleted); a bound, since the store's own group commit may merge some. Each of the
#: 3 stores fsyncs its file and its directory; the certificate's new directory
#: (certificates/<name>/) also has its parent fsynced, or a machine crash could lose
#: the directory with the record (6 until that was found).
MAX_FSYNCS = 7
#: Lease compare-and-swaps (each one hop to a worker thread, none fsynced): the claim and
#: the release. An attempt shorter than a third of the lease renews nothing.
LEASE_SWAPS = 2
