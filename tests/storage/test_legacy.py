"""LegacyCertificate: the previous layout's three files, read from a real FileStorage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acmecerts.errors import StorageError
from acmecerts.storage import FileStorage, KeyLayout, LegacyCertificate
from acmecerts.storage.keys import CertificateKeys

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]

LAYOUT = KeyLayout("https://ca.example/directory")
CHAIN = b"-----BEGIN CERTIFICATE-----\nleaf\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n"
FIELDS = {
    "name": "a.example",
    "identifiers": ["dns:a.example"],
    "order_url": "https://ca.example/order/1",
    "certificate_url": "https://ca.example/cert/1",
}
META = json.dumps(FIELDS).encode()


async def write(storage: FileStorage, keys: CertificateKeys, *, meta: bytes = META) -> None:
    """The files as earlier versions wrote them: key, chain, then ``meta.json``."""
    await storage.store(keys.privkey, KEY, secret=True)
    await storage.store(keys.cert, CHAIN)
    await storage.store(keys.meta, meta)


def overwrite(path: str, data: bytes) -> None:
    """Replace a stored file behind the store's back (no envelope: corrupt)."""
    Path(path).write_bytes(data)


async def test_reads_the_three_files_as_stored(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    keys = LAYOUT.certificate("a.example")
    await write(storage, keys)

    legacy = await LegacyCertificate.load(storage, keys)

    assert legacy is not None
    assert legacy.fullchain_pem == CHAIN
    assert legacy.private_key_pem == KEY
    assert legacy.meta == FIELDS
    assert "BEGIN" not in repr(legacy)  # the key is never shown
    assert await LegacyCertificate.load(storage, LAYOUT.certificate("b.example")) is None


@pytest.mark.parametrize("missing", ["meta", "cert", "privkey"])
async def test_a_missing_file_means_no_certificate(tmp_path: Path, missing: str) -> None:
    storage = FileStorage(tmp_path)
    keys = LAYOUT.certificate("a.example")
    await write(storage, keys)
    assert await storage.delete(getattr(keys, missing))

    assert await LegacyCertificate.load(storage, keys) is None


@pytest.mark.parametrize(
    ("meta", "says"), [(b"{not json", "is not valid JSON"), (b"[1, 2]", "is not a JSON object")]
)
async def test_a_corrupt_meta_is_a_storage_error_naming_it(
    tmp_path: Path, meta: bytes, says: str
) -> None:
    storage = FileStorage(tmp_path)
    keys = LAYOUT.certificate("a.example")
    await write(storage, keys, meta=meta)

    with pytest.raises(StorageError, match=says) as caught:
        await LegacyCertificate.load(storage, keys)
    assert caught.value.path == keys.meta

    where = storage.path_for(keys.meta)
    with pytest.raises(StorageError, match=says) as caught:
        await LegacyCertificate.load(storage, keys, label=where)
    assert caught.value.path == where
    assert str(caught.value).startswith(where)


async def test_an_unreadable_file_is_a_storage_error(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    keys = LAYOUT.certificate("a.example")
    await write(storage, keys)
    overwrite(storage.path_for(keys.cert), b"not an envelope")

    with pytest.raises(StorageError):
        await LegacyCertificate.load(storage, keys)
