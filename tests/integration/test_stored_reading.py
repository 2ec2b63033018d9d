"""Reading what a manager stored without running one, against a real Pebble:
``list_stored_certificates``, ``load_stored_certificate``, ``load_attempt_state`` and
``save_attempt_state`` (what the CLI's ``status``, ``renew`` and ``delete`` read).
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
from pathlib import Path

import pytest

from acmecerts import Http01Server, KeyType
from acmecerts.errors import StorageError
from acmecerts.manager import (
    CaSettings,
    IssuedResult,
    StoredCertificate,
    account_client,
    delete_stored_certificate,
    list_stored_certificates,
    load_attempt_state,
    load_ca_settings,
    load_stored_certificate,
    natural_key,
    open_manager,
    save_attempt_state,
    save_ca_settings,
)
from acmecerts.retry import AttemptState
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_the_certificates_a_manager_stored_are_read_back(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    names = ["host10.reading.example.test", "host2.reading.example.test"]
    async with FileStorage(tmp_path) as storage:
        async with open_manager(
            storage, pebble.directory_url, solvers=[http01], ca_bundle=pebble.ca_bundle
        ) as manager:
            results = await manager.issue_many(names)
        assert all(isinstance(r, IssuedResult) for r in results), results
        serials = {r.certificate.serial for r in results if isinstance(r, IssuedResult)}
        layout = KeyLayout(pebble.directory_url)

        listed = await list_stored_certificates(storage, layout)
        # in natural order: host2 before host10
        assert [c.name for c in listed] == [names[1], names[0]]
        assert {c.info.serial for c in listed} == serials
        for stored in listed:
            assert isinstance(stored, StoredCertificate)
            assert stored.identifiers == (stored.name,)
            assert stored.key_type is KeyType.EC256
            assert stored.chain.leaf is not None
            assert (
                repr(stored) == f"StoredCertificate({stored.name!r}, serial={stored.info.serial!r})"
            )
            assert await load_stored_certificate(storage, layout, stored.name) == stored

        assert await load_stored_certificate(storage, layout, "never.example.test") is None
        # another account in the same store holds none of them
        assert (
            await list_stored_certificates(storage, KeyLayout(pebble.directory_url, "other")) == []
        )

        # a lineage deleted for good: under its lock, every key of it goes
        async with storage.lock(layout.certificate_lock(names[1]), timeout=10):
            deleted = await delete_stored_certificate(storage, layout, names[1])
        assert deleted[0] == layout.certificate(names[1]).record
        assert layout.attempt_state(names[1]) in deleted
        assert await storage.list(layout.certificate(names[1]).prefix) == []
        assert [c.name for c in await list_stored_certificates(storage, layout)] == [names[0]]

        # a damaged record is an error naming its file, never "not stored"
        record = layout.certificate(names[0]).record
        await storage.store(record, b"{}", secret=True)
        with pytest.raises(StorageError) as caught:
            await load_stored_certificate(storage, layout, names[0])
        assert storage.path_for(record) in str(caught.value)


async def test_an_attempt_state_saved_is_what_the_manager_reads(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    name = "deferred.reading.example.test"
    later = _dt.datetime.now(_dt.UTC).replace(microsecond=0) + _dt.timedelta(hours=1)
    state = AttemptState(
        attempts=1,
        next_attempt_at=later,
        last_error="RateLimited: too many",
        last_error_kind="rate-limited",
    )
    layout = KeyLayout(pebble.directory_url)
    async with FileStorage(tmp_path) as storage:
        assert await load_attempt_state(storage, layout, name) is None
        await save_attempt_state(storage, layout, name, state)
        assert await load_attempt_state(storage, layout, name) == state
        # the manager honours it: nothing is ordered before that instant
        async with open_manager(
            storage, pebble.directory_url, solvers=[http01], ca_bundle=pebble.ca_bundle
        ) as manager:
            [result] = await manager.issue_many([name])
        assert not isinstance(result, IssuedResult), result
        assert await list_stored_certificates(storage, layout) == []

        await storage.store(layout.attempt_state(name), b"[1, 2]")
        with pytest.raises(StorageError, match="is not a JSON object") as caught:
            await load_attempt_state(storage, layout, name)
        assert storage.path_for(layout.attempt_state(name)) in str(caught.value)


def test_natural_order_counts_digits_by_value() -> None:
    names = ["host10", "Host2", "host1", "host01", "a"]
    assert sorted(names, key=natural_key) == ["a", "host01", "host1", "Host2", "host10"]


async def test_the_settings_of_each_ca_are_kept_for_a_later_run(
    pebble: PebbleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copyfile(pebble.ca_bundle, tmp_path / "bundle.pem")
    layout = KeyLayout(pebble.directory_url)
    async with FileStorage(tmp_path / "state") as storage:
        assert await load_ca_settings(storage, layout.ca) is None
        await save_ca_settings(storage, layout, "bundle.pem")
        kept = CaSettings(pebble.directory_url, str(tmp_path / "bundle.pem"))
        assert await load_ca_settings(storage, layout.ca) == kept
        # a run without a bundle does not forget the stored one
        await save_ca_settings(storage, layout, None)
        assert await load_ca_settings(storage, layout.ca) == kept
        # the settings reach the CA: a client made from them gets its directory
        async with account_client(
            storage, KeyLayout(kept.directory), ca_bundle=kept.ca_bundle
        ) as client:
            assert (await client.directory()).new_account.endswith("/sign-me-up")

        key = f"{layout.ca}/cli-settings.json"
        await storage.store(key, b"[]")
        with pytest.raises(StorageError, match="is not valid CA settings") as caught:
            await load_ca_settings(storage, layout.ca)
        assert storage.path_for(key) in str(caught.value)

        # state written before the settings existed: the URL from the account's record
        other = KeyLayout("https://ca.example.test/directory")
        await storage.store(
            other.account_meta(),
            json.dumps({"directory": "https://ca.example.test/directory"}).encode(),
        )
        assert await load_ca_settings(storage, other.ca) == CaSettings(
            "https://ca.example.test/directory"
        )
