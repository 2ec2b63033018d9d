"""How each certificate was asked for, kept beside what a manager stored, against a real
Pebble: ``save_certificate_record``, ``load_certificate_record``,
``list_certificate_records``, ``known_certificates`` and ``find_ca_dirs`` (what the CLI's
``renew``, ``status`` and ``delete`` read).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acmecerts import Http01Server, KeyType
from acmecerts.client import AcmeClient
from acmecerts.errors import StorageError
from acmecerts.manager import (
    CertificateRecord,
    IssuedResult,
    Removal,
    StoredChallenge,
    certificate_for,
    certificate_identifiers,
    certificate_record_key,
    delete_recorded_certificate,
    find_ca_dirs,
    import_certificate,
    known_certificates,
    known_identifiers,
    list_certificate_records,
    load_certificate_record,
    mark_revoked,
    open_manager,
    save_ca_settings,
    save_certificate_record,
)
from acmecerts.protocol.identifiers import parse_identifiers
from acmecerts.storage import FileStorage, KeyLayout, VersionConflict
from acmecerts.storage.export import CERTIFICATE_FILES, write_certificate_files
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
        # which certificate a set of identifiers is: order and case aside
        by_name = await known_identifiers(storage, layout)
        assert by_name == {pending: (pending,), issued: (issued,)}
        assert certificate_for(by_name, parse_identifiers([issued.upper()]), preferred="x") == (
            issued
        )
        assert certificate_for(by_name, parse_identifiers([issued, pending]), preferred="x") is None
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


async def test_a_recorded_certificate_is_deleted_whole(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    mine, theirs = "mine.delete.example.test", "theirs.delete.example.test"
    layout = KeyLayout(pebble.directory_url)
    default_out = tmp_path / "certificates"
    custom = tmp_path / "custom"
    async with FileStorage(tmp_path / "store") as storage:
        async with open_manager(
            storage, pebble.directory_url, solvers=[http01], ca_bundle=pebble.ca_bundle
        ) as manager:
            results = await manager.issue_many([mine, theirs])
        assert all(isinstance(r, IssuedResult) for r in results), results
        issued = {
            r.certificate.names[0]: r.certificate for r in results if isinstance(r, IssuedResult)
        }
        write_certificate_files(default_out / mine, issued[mine])
        write_certificate_files(custom, issued[theirs])
        await save_certificate_record(
            storage, layout, CertificateRecord(name=mine, identifiers=(mine,))
        )
        await save_certificate_record(
            storage, layout, CertificateRecord(name=theirs, identifiers=(theirs,), out=str(custom))
        )

        async with storage.lock(layout.certificate_lock(mine), timeout=10):
            removal = await delete_recorded_certificate(
                storage, layout, mine, default_out=default_out / mine
            )
        assert sorted(p.name for p in removal.removed_files) == sorted(
            f[1] for f in CERTIFICATE_FILES
        )
        assert removal.kept_out is None
        assert not any((default_out / mine).glob("*.pem"))

        async with storage.lock(layout.certificate_lock(theirs), timeout=10):
            removal = await delete_recorded_certificate(
                storage, layout, theirs, default_out=default_out / theirs
            )
        # the user's own directory is left alone
        assert removal == Removal(kept_out=custom)
        assert sorted(p.name for p in custom.glob("*.pem")) == sorted(
            f[1] for f in CERTIFICATE_FILES
        )

        assert await known_certificates(storage, layout) == []
        assert await list_certificate_records(storage, layout) == []
        assert await storage.list(layout.certificate(mine).prefix) == []


async def test_a_certificate_from_another_client_is_imported_and_revoked(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server, tmp_path: Path
) -> None:
    name = "imported.records.example.test"
    issued = await client.issue([name], solver=http01, key_type=KeyType.EC256)
    assert issued.private_key_pem is not None
    layout = KeyLayout(pebble.directory_url)
    record = CertificateRecord(name=name, identifiers=(name,), key_type="ec256")
    async with FileStorage(tmp_path) as storage:
        await import_certificate(storage, layout, record, issued.chain, issued.private_key_pem)
        ((known_name, stored, known_record),) = await known_certificates(storage, layout)
        assert (known_name, known_record) == (name, record)
        assert stored is not None
        assert stored.info.serial == issued.serial
        assert stored.chain.pem == issued.chain.pem

        # an existing certificate is never replaced; the record written first goes again
        other = CertificateRecord(name=name, identifiers=(name,), key_type="rsa2048")
        with pytest.raises(VersionConflict):
            await import_certificate(storage, layout, other, issued.chain, issued.private_key_pem)
        assert await load_certificate_record(storage, layout, name) is None

        await client.revoke(issued.chain.pem)
        assert await mark_revoked(storage, layout, "00ff") is None
        assert await mark_revoked(storage, layout, issued.serial) == name
        marked = await load_certificate_record(storage, layout, name)
        assert marked == CertificateRecord(name=name, revoked_serial=issued.serial)


def test_the_certificate_for_a_set_of_identifiers() -> None:
    known = {
        "a.example": ("b.example", "a.example"),
        "b.example": ("a.example", "b.example"),
        "c.example": ("c.example",),
        "by-hand": ("not a name!",),
    }
    both = parse_identifiers(["A.example", "b.example"])
    assert certificate_for(known, both, preferred="b.example") == "b.example"
    assert certificate_for(known, both, preferred="z.example") == "a.example"
    assert certificate_for(known, parse_identifiers(["c.example"]), preferred="") == "c.example"
    assert certificate_for(known, parse_identifiers(["d.example"]), preferred="") is None
    assert certificate_identifiers(None, CertificateRecord(name="n", identifiers=("x",))) == ("x",)
    assert certificate_identifiers(None, None) == ()
