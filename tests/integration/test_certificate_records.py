"""How each certificate was asked for, kept beside what a manager stored, against a real
Pebble: ``save_certificate_record``, ``load_certificate_record``,
``list_certificate_records``, ``known_certificates`` and ``find_ca_dirs`` (what the CLI's
``renew``, ``status`` and ``delete`` read).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acmecerts import Http01Server
from acmecerts.errors import StorageError
from acmecerts.manager import (
    CertificateRecord,
    IssuedResult,
    StoredChallenge,
    certificate_record_key,
    find_ca_dirs,
    known_certificates,
    list_certificate_records,
    load_certificate_record,
    open_manager,
    save_ca_settings,
    save_certificate_record,
)
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_records_beside_what_a_manager_issued(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    issued, pending, leaving = (
        "host10.records.example.test",
        "host2.records.example.test",
        "gone.records.example.test",
    )
    layout = KeyLayout(pebble.directory_url)
    async with FileStorage(tmp_path) as storage:
        async with open_manager(
            storage, pebble.directory_url, solvers=[http01], ca_bundle=pebble.ca_bundle
        ) as manager:
            results = await manager.issue_many([issued, leaving])
        assert all(isinstance(r, IssuedResult) for r in results), results
        await save_ca_settings(storage, layout, pebble.ca_bundle)

        challenge = StoredChallenge("http-01", http_01_listen="127.0.0.1:5002")
        records = [
            CertificateRecord(
                name=issued, identifiers=(issued,), key_type="ec256", challenge=challenge
            ),
            # asked for and never issued: still known, so that a later run issues it
            CertificateRecord(name=pending, identifiers=(pending,), out="/srv/certs"),
            # a deletion that was interrupted: known to no one but `delete`
            CertificateRecord(
                name=leaving, identifiers=(leaving,), deleting="2026-01-01T00:00:00+00:00"
            ),
        ]
        for record in records:
            await save_certificate_record(storage, layout, record)

        assert await load_certificate_record(storage, layout, issued) == records[0]
        assert await load_certificate_record(storage, layout, "never.example.test") is None
        # natural order: host2 before host10
        listed = await list_certificate_records(storage, layout)
        assert [r.name for r in listed] == [leaving, pending, issued]
        assert listed[2].challenge == challenge

        known = await known_certificates(storage, layout)
        assert [(name, record) for name, _, record in known] == [
            (pending, records[1]),
            (issued, records[0]),
        ]
        stored = {name: certificate for name, certificate, _ in known}
        assert stored[pending] is None
        assert stored[issued] is not None
        assert stored[issued].identifiers == (issued,)

        # a record replaced keeps one key per certificate
        await save_certificate_record(storage, layout, CertificateRecord(name=pending))
        assert await load_certificate_record(storage, layout, pending) == CertificateRecord(
            name=pending
        )
        # a record with no identifiers (written by `delete` or `revoke` only) lists no
        # certificate that was never issued
        assert [name for name, _, _ in await known_certificates(storage, layout)] == [issued]

        # a damaged record is an error naming its file, never "no record"
        key = certificate_record_key(layout, issued)
        await storage.store(key, b'{"name": 7}')
        with pytest.raises(StorageError) as raised:
            await list_certificate_records(storage, layout)
        assert str(tmp_path) in str(raised.value)
        with pytest.raises(StorageError, match="not a valid CLI record"):
            await load_certificate_record(storage, layout, issued)

    # the CA's directory is found in the store's root; other directories are not CAs
    (tmp_path / "certificates").mkdir()
    (tmp_path / "unrelated").mkdir()
    assert find_ca_dirs(tmp_path) == [layout.ca]


def test_a_record_from_a_later_version_keeps_what_it_knows() -> None:
    document = CertificateRecord(
        name="a.example", identifiers=("a.example",), challenge=StoredChallenge("dns-01")
    ).to_json()
    later = {**document, "written_by_later": True}
    later["challenge"] = {**document["challenge"], "new_setting": 1}
    assert CertificateRecord.from_json(later, "x.json") == CertificateRecord.from_json(
        document, "x.json"
    )
    with pytest.raises(StorageError, match="challenge settings are not valid"):
        CertificateRecord.from_json({**document, "challenge": {"challenge": 1}}, "x.json")
