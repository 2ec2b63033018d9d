"""The certificate's stored form: one record, and stores written in the previous layout.

A certificate is one record, ``certificate.json`` (chain, key and metadata). Stores
written by earlier versions keep three files (``cert.pem``, ``privkey.pem`` and
``meta.json`` written last); they load as they are and are converted the next time the
certificate is saved: the record first, then the old files, ``meta.json`` first. Against
a real Pebble and a real FileStorage.
"""

from __future__ import annotations

import datetime as dt
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from acmecerts import AcmeClient, Http01Server, IssuedCertificate
from acmecerts._time import FakeClock
from acmecerts.errors import StorageError
from acmecerts.manager import CertificateLoaded, CertificateManager, CertificateSpec, IssuedResult
from acmecerts.manager._persist import CertificateStore
from acmecerts.storage import FileStorage, KeyLayout, StoredValue
from acmecerts.testing import PebbleServer

from .test_manager_retention import Orders, client_for, files_of, retired_records
from .test_manager_store_ops import CountingStorage

pytestmark = pytest.mark.anyio

START = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


async def write_previous_layout(
    storage: FileStorage, layout: KeyLayout, name: str, issued: IssuedCertificate
) -> None:
    """Store ``issued`` as the previous version did: key, chain, then ``meta.json``."""
    keys = layout.certificate(name)
    await storage.store(keys.privkey, issued.private_key_pem.encode("ascii"), secret=True)
    await storage.store(keys.cert, issued.fullchain_pem.encode("ascii"))
    meta = {
        "format": 1,
        "name": name,
        "identifiers": [i.value for i in issued.identifiers],
        "order_url": issued.order_url,
        "certificate_url": issued.certificate_url,
        "serial": issued.serial,
        "not_after": issued.not_after.isoformat(),
    }
    await storage.store(keys.meta, json.dumps(meta).encode())


class CrashOnDelete(CountingStorage):
    """Dies (an exception nothing catches) at the first delete of a key ending in ``suffix``."""

    def __init__(self, inner: FileStorage, suffix: str) -> None:
        super().__init__(inner)
        self.suffix = suffix

    async def delete(self, key: str, **kwargs: Any) -> bool:
        if key.endswith(self.suffix):
            raise KeyboardInterrupt(f"killed before deleting {key}")
        return await super().delete(key, **kwargs)


def names_in(root: Path, name: str) -> list[str]:
    return sorted(Path(f).name for f in files_of(root, name))


@pytest.mark.timeout(120)
async def test_a_store_in_the_previous_layout_loads_without_an_order_and_is_converted(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    name = "old.layout.example.test"
    clock = FakeClock(START)
    orders = Orders()
    layout = KeyLayout(pebble.directory_url)
    async with FileStorage(tmp_path) as storage, client_for(pebble, clock, orders) as client:
        issued = await client.issue([name], solver=http01)
        await write_previous_layout(storage, layout, name, issued)
        assert names_in(tmp_path, name) == ["cert.pem", "meta.json", "privkey.pem"]

        # a manager of this version uses it: no order, the same certificate
        counting = CountingStorage(storage)
        manager = CertificateManager(client, solvers=[http01], storage=counting, clock=clock)
        events: list[Any] = []
        manager.subscribe(events.append)
        [result] = await manager.issue_many([name])
        assert isinstance(result, IssuedResult)
        assert result.certificate.serial == issued.serial
        assert result.certificate.private_key_pem == issued.private_key_pem
        assert len(orders) == 1  # only the client's own
        assert [e.name for e in events if isinstance(e, CertificateLoaded)] == [name]
        assert names_in(tmp_path, name) == ["cert.pem", "meta.json", "privkey.pem"]  # as is

        # the next save (a renewal) writes the record, then removes the three files
        counting.calls.clear()
        [renewed] = await manager.issue_many([name], force=True)
        assert isinstance(renewed, IssuedResult)
        assert renewed.certificate.serial != issued.serial
        # the order record stays beside it, finished (it names the record's order)
        order = layout.order(name).rpartition("/")[2]
        assert names_in(tmp_path, name) == sorted(["certificate.json", order])
        keys = layout.certificate(name)
        writes = [(op, k) for op, k in counting.calls if op in ("store", "delete")]
        saved = writes.index(("store", keys.record))
        assert writes[saved + 1 : saved + 4] == [("delete", k) for k in keys.legacy]
        # the order record is read once under the lock (finished order? then resume?)
        assert counting.calls.count(("load", layout.order(name))) == 1
        record = tmp_path / keys.record
        assert stat.S_IMODE(record.stat().st_mode) == 0o600

        # a restart loads the record with one read
        counting.calls.clear()
        store = CertificateStore(counting, layout)
        loaded = await store.load_certificate(name)
        assert loaded is not None
        assert loaded.serial == renewed.certificate.serial
        assert loaded.fullchain_pem == renewed.certificate.fullchain_pem
        assert counting.calls == [("load", keys.record)]


@pytest.mark.timeout(120)
async def test_a_crash_between_the_record_and_the_old_files_leaves_the_new_certificate(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    name = "crash.layout.example.test"
    layout = KeyLayout(pebble.directory_url)
    keys = layout.certificate(name)
    async with (
        FileStorage(tmp_path) as storage,
        AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client,
    ):
        old = await client.issue([name], solver=http01)
        new = await client.issue([name], solver=http01)
        await write_previous_layout(storage, layout, name, old)

        # the process dies after the record is stored, before meta.json is deleted
        dying = CertificateStore(CrashOnDelete(storage, "/meta.json"), layout)
        assert (await dying.load_certificate(name) or old).serial == old.serial
        with pytest.raises(KeyboardInterrupt):
            await dying.save_certificate(name, new)
        assert names_in(tmp_path, name) == [
            "cert.pem",
            "certificate.json",
            "meta.json",
            "privkey.pem",
        ]

        # the next process loads the new certificate, whole, from the record
        restarted = CertificateStore(storage, layout)
        loaded = await restarted.load_certificate(name)
        assert loaded is not None
        assert loaded.serial == new.serial
        assert loaded.private_key_pem == new.private_key_pem
        # and its next save removes the files left behind
        await restarted.save_certificate(name, loaded)
        assert names_in(tmp_path, name) == ["certificate.json"]
        assert (await storage.load(keys.record)) is not None


@pytest.mark.timeout(120)
async def test_a_retired_certificate_in_the_previous_layout_is_purged(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    name = "retired.layout.example.test"
    clock = FakeClock(START)
    orders = Orders()
    layout = KeyLayout(pebble.directory_url)
    async with FileStorage(tmp_path) as storage, client_for(pebble, clock, orders) as client:
        issued = await client.issue([name], solver=http01)
        await write_previous_layout(storage, layout, name, issued)
        manager = CertificateManager(
            client, solvers=[http01], storage=storage, clock=clock, retention=60
        )
        [result] = await manager.issue_many([CertificateSpec.of(name, [name])])
        assert isinstance(result, IssuedResult)
        assert len(orders) == 1
        await manager.unmanage(name)
        assert len(retired_records(tmp_path)) == 1
        [key] = await storage.list(layout.retired_prefix())
        value = await storage.load(key)
        assert value is not None
        entry = json.loads(value.data)["entries"][0]
        assert entry["serial"] == issued.serial
        assert entry["meta_version"] is not None
        assert entry["record_version"] is None
        clock.advance(61)
        assert manager._retired is not None
        assert await manager._retired.purge_due(clock.now()) == 1
        assert files_of(tmp_path, name) == []
        assert retired_records(tmp_path) == []


async def test_a_record_that_is_not_one_is_a_storage_error(tmp_path: Path) -> None:
    layout = KeyLayout("https://ca.example/dir")
    name = "broken.example.test"
    async with FileStorage(tmp_path) as storage:
        store = CertificateStore(storage, layout)
        for data in (b"not json", b"[]", b'{"format": 1}', b'{"format": 2, "name": "x"}'):
            await storage.store(layout.certificate(name).record, data, secret=True)
            with pytest.raises(StorageError, match=r"certificate\.json"):
                await store.load_certificate(name)
        value = await storage.load(layout.certificate(name).record)
        assert isinstance(value, StoredValue)  # never deleted or replaced silently
