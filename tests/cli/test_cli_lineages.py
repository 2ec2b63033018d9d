"""Lineages: the same names in any order are one certificate; ``acmecerts delete`` removes one.

Against the session Pebble: the first run of a scenario is a real process, its variations
run in-process (``run_main``). A deletion that fails half-way is made with a real
``FileStorage`` that refuses one delete (the store is the seam), then finished by the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    NEW_ORDER,
    assert_one_line_error,
    ca_args,
    check_certificate,
    clean_environment,
    http01_args,
    one_json,
    run_cli,
    run_main,
    serial_of,
    stored_serial,
)
from pebble_quirks import pebble_refuses_replaces_of

from acmecerts.cli._state import State
from acmecerts.errors import ProblemType, StorageError
from acmecerts.manager import delete_recorded_certificate
from acmecerts.storage import FileStorage
from acmecerts.storage._base import ANY_VERSION, _AnyVersion
from acmecerts.storage.keys import CertificateBundle
from tests.faults.proxy import FaultProxy, Match, Respond

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)

REVOKE = ("POST", "/revoke-cert")


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)


def issue(pebble: PebbleServer, state: Path, *args: str, directory: str | None = None) -> list[str]:
    return [
        "issue",
        "--json",
        *ca_args(pebble, state, directory=directory),
        *http01_args(pebble),
        *args,
    ]


def store_keys(state: Path, directory_url: str) -> list[str]:
    async def read() -> list[str]:
        return await FileStorage(state).list(State(state, directory_url).layout.account_prefix)

    return anyio.run(read)


# -- the same names in another order ---------------------------------------------------------


def test_the_same_names_in_another_order_are_the_same_certificate(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    first = run_cli(*issue(pebble, state, "a.lineage.test", "b.lineage.test"))
    assert first.returncode == 0, first.stderr
    (issued,) = one_json(first)["certificates"]
    seen = len(pebble.requests_seen())

    again = run_main(capsys, *issue(pebble, state, "B.lineage.test", "a.lineage.test"))

    assert again.returncode == 0, again.stderr
    (kept,) = one_json(again)["certificates"]
    assert (kept["name"], kept["status"], kept["serial"]) == (
        "a.lineage.test",
        "current",
        issued["serial"],
    )
    assert NEW_ORDER not in pebble.requests_seen()[seen:]

    # --force renews it under its own name: still one certificate
    forced = run_main(capsys, *issue(pebble, state, "b.lineage.test", "a.lineage.test"), "--force")
    assert forced.returncode == 0, forced.stderr
    (renewed,) = one_json(forced)["certificates"]
    assert renewed["name"] == "a.lineage.test"
    assert renewed["serial"] != issued["serial"]
    status = run_main(capsys, "status", "--json", *ca_args(pebble, state))
    assert [c["name"] for c in one_json(status)["certificates"]] == ["a.lineage.test"]
    default_out = state / "certificates" / "a.lineage.test"
    check_certificate(default_out, {"a.lineage.test", "b.lineage.test"}, pebble.root_pem())
    assert not (state / "certificates" / "b.lineage.test").exists()


def test_other_names_under_a_taken_name_need_cert_name(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    first = run_cli(*issue(pebble, state, "x.lineage.test"))
    assert first.returncode == 0, first.stderr
    seen = len(pebble.requests_seen())

    # x.lineage.test already holds {x}: {x, y} is not silently made of it
    refused = run_main(capsys, *issue(pebble, state, "x.lineage.test", "y.lineage.test"))

    line = assert_one_line_error(refused, 2)
    assert "certificate x.lineage.test already exists for x.lineage.test" in line
    assert "--cert-name x.lineage.test" in line
    assert one_json(refused)["certificates"] == []
    # the same in a --from-file line: the line, and the one command that changes the names
    listed = tmp_path / "names.txt"
    listed.write_text("x.lineage.test y.lineage.test\n")
    from_file = run_main(capsys, *issue(pebble, state, "--from-file", str(listed)))
    line = assert_one_line_error(from_file, 2)
    assert f"{listed}:1: certificate x.lineage.test already exists" in line
    assert "`acmecerts issue --cert-name x.lineage.test x.lineage.test y.lineage.test`" in line
    assert len(pebble.requests_seen()) == seen  # nothing sent

    # --cert-name x.lineage.test: that certificate takes the new names
    expanded = run_main(
        capsys,
        *issue(pebble, state, "x.lineage.test", "y.lineage.test"),
        "--cert-name",
        "X.lineage.test",
    )
    assert expanded.returncode == 0, expanded.stderr
    (entry,) = one_json(expanded)["certificates"]
    assert entry["name"] == "x.lineage.test"
    assert sorted(entry["names"]) == ["x.lineage.test", "y.lineage.test"]
    # another --cert-name: a second certificate, the first one kept
    other = run_main(
        capsys, *issue(pebble, state, "x.lineage.test", "--cert-name", "x-only"), "--json"
    )
    assert other.returncode == 0, other.stderr
    status = run_main(capsys, "status", "--json", *ca_args(pebble, state))
    names = {c["name"]: sorted(c["names"]) for c in one_json(status)["certificates"]}
    assert names == {
        "x-only": ["x.lineage.test"],
        "x.lineage.test": ["x.lineage.test", "y.lineage.test"],
    }


def test_a_file_naming_one_set_twice_and_cert_name_with_a_file_are_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = tmp_path / "names.txt"
    names.write_text("a.test b.test\nc.test\nb.test A.test\n")
    common = ["--state-dir", str(tmp_path / "state"), "--directory", "https://ca.invalid/dir"]

    twice = run_main(capsys, "issue", "--from-file", str(names), *common)
    assert f"{names}:3: the same names as line 1" in assert_one_line_error(twice, 2)

    names.write_text("a.test\n")
    both = run_main(capsys, "issue", "--from-file", str(names), "--cert-name", "a", *common)
    assert "--cert-name names one certificate" in assert_one_line_error(both, 2)
    bad = run_main(capsys, "issue", "a.test", "--cert-name", "a/b", *common)
    assert "--cert-name 'a/b'" in assert_one_line_error(bad, 2)
    assert not (tmp_path / "state").exists()


# -- delete ----------------------------------------------------------------------------------


def test_delete_removes_a_certificate_and_renew_no_longer_tries_it(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    custom = tmp_path / "srv-certs"
    listed = tmp_path / "names.txt"
    listed.write_text("host10.del.test\nhost2.del.test www.host2.del.test\n")
    first = run_cli(*issue(pebble, state, "--from-file", str(listed)))
    assert first.returncode == 0, first.stderr
    kept = run_main(capsys, *issue(pebble, state, "kept.del.test", "--out", str(custom)))
    assert kept.returncode == 0, kept.stderr
    ca = ca_args(pebble, state)

    # status sorts names naturally: host2 before host10
    status = run_main(capsys, "status", "--json", *ca)
    assert [c["name"] for c in one_json(status)["certificates"]] == [
        "host2.del.test",
        "host10.del.test",
        "kept.del.test",
    ]

    # without a terminal and without --yes: exit 2, nothing deleted
    unconfirmed = run_main(capsys, "delete", "host2.del.test", *ca)
    assert "confirm with --yes" in assert_one_line_error(unconfirmed, 2)
    # an unknown name: exit 2 with the known names
    unknown = run_main(capsys, "delete", "host3.del.test", "--yes", *ca)
    line = assert_one_line_error(unknown, 2)
    assert "no certificate named host3.del.test" in line
    assert "did you mean" in line
    assert "known: host2.del.test, host10.del.test, kept.del.test" in line
    assert len(one_json(run_main(capsys, "status", "--json", *ca))["certificates"]) == 3

    before = store_keys(state, pebble.directory_url)
    assert any("/host2.del.test" in k for k in before)
    deleted = run_main(capsys, "delete", "host2.del.test", "kept.del.test", "--yes", "--json", *ca)

    assert deleted.returncode == 0, deleted.stderr
    document = one_json(deleted)
    assert (document["status"], document["exit_code"]) == ("ok", 0)
    host2, gone = document["certificates"]
    assert (host2["name"], host2["status"], host2["kept_out"]) == (
        "host2.del.test",
        "deleted",
        None,
    )
    default_out = state / "certificates" / "host2.del.test"
    assert sorted(host2["removed_files"]) == sorted(
        str(default_out / f) for f in ("cert.pem", "chain.pem", "fullchain.pem", "privkey.pem")
    )
    assert not default_out.exists()
    # a directory of the user's own is left alone, and the output says so
    assert gone["kept_out"] == str(custom)
    assert (custom / "cert.pem").exists()
    after = store_keys(state, pebble.directory_url)
    assert not [k for k in after if "host2.del.test" in k or "kept.del.test" in k]
    assert [k for k in after if "host10.del.test" in k]  # the other one is untouched

    serial10 = stored_serial(state, pebble.directory_url, "host10.del.test")
    assert serial10 is not None
    seen = len(pebble.requests_seen())
    renewed = run_main(capsys, "renew", "--json", *ca, *http01_args(pebble), "--force")
    assert renewed.returncode == 0, renewed.stderr
    assert [c["name"] for c in one_json(renewed)["certificates"]] == ["host10.del.test"]
    # one order; two when Pebble cannot find the certificate a replaces names (its
    # serial-encoding bug, tests/pebble_quirks.py) and the client falls back
    extra = int(pebble_refuses_replaces_of(serial10))
    assert pebble.requests_seen()[seen:].count(NEW_ORDER) == 1 + extra

    # human output names what was kept
    again = run_main(capsys, *issue(pebble, state, "kept.del.test", "--out", str(custom)))
    assert again.returncode == 0, again.stderr
    text = run_main(capsys, "delete", "kept.del.test", "-y", *ca)
    assert text.returncode == 0, text.stderr
    assert "Deleted kept.del.test" in text.stdout
    assert f"{custom} (your --out directory; not touched)" in text.stdout


def test_delete_asks_on_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from acmecerts.cli._args import CommonArgs
    from acmecerts.cli._delete import DeleteArgs, run_delete
    from acmecerts.manager import CertificateRecord

    state = tmp_path / "state"
    directory = "https://ca.invalid/dir"

    async def remember() -> None:
        await State(state, directory).save_record(
            CertificateRecord(name="ask.test", identifiers=("ask.test",))
        )

    anyio.run(remember)
    questions: list[str] = []

    def no(question: str) -> bool:
        questions.append(question)
        return False

    common = CommonArgs(directory=directory, state_dir=state)
    assert run_delete(DeleteArgs(names=("ask.test",)), common=common, ask=no) == 2
    assert "not confirmed; nothing was deleted" in capsys.readouterr().err
    assert questions == [f"Delete certificate ask.test from {state}? [y/N] "]

    assert run_delete(DeleteArgs(names=("ask.test",)), common=common, ask=lambda q: True) == 0
    assert "Deleted ask.test" in capsys.readouterr().out
    assert anyio.run(State(state, directory).known_certificates) == []


def test_delete_revoke_revokes_first_and_keeps_what_the_ca_refused(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    url = proxy.directory_url
    for name in ("refused.revoke.test", "done.revoke.test"):
        result = run_cli(*issue(pebble, state, name, directory=url))
        assert result.returncode == 0, result.stderr
    ca = ca_args(pebble, state, directory=url)
    serial = serial_of(state / "certificates" / "refused.revoke.test")

    proxy.add_rule(
        Match("/revoke-cert", "POST"),
        Respond(403, ProblemType.UNAUTHORIZED.value, detail="not today"),
        times=1,
    )
    result = run_main(
        capsys,
        "delete",
        "refused.revoke.test",
        "done.revoke.test",
        "--revoke",
        "--yes",
        "--json",
        *ca,
    )

    assert result.returncode == 1, result.stderr
    document = one_json(result)
    assert (document["status"], document["exit_code"]) == ("failed", 1)
    refused, done = document["certificates"]
    assert refused["status"] == "failed"
    assert "not today" in refused["error"]
    assert refused["problem"]["type"] == ProblemType.UNAUTHORIZED.value
    assert (done["status"], done["revocation"]) == ("deleted", "revoked")
    # the refused one is all there still, and not marked revoked
    status = one_json(run_main(capsys, "status", "--json", *ca))
    (left,) = status["certificates"]
    assert (left["name"], left["status"], left["serial"]) == (
        "refused.revoke.test",
        "valid",
        serial,
    )
    assert (state / "certificates" / "refused.revoke.test" / "cert.pem").exists()
    assert len(proxy.requests_to("/revoke-cert")) == 2

    # once the CA agrees: revoked (really: revoking again is alreadyRevoked), then deleted
    retried = run_main(capsys, "delete", "refused.revoke.test", "--revoke", "-y", *ca)
    assert retried.returncode == 0, retried.stderr
    assert f"revoked (serial {serial}, cessationOfOperation)" in retried.stdout
    assert one_json(run_main(capsys, "status", "--json", *ca))["certificates"] == []


class RefusingDeletes(FileStorage):
    """A real FileStorage that refuses to delete keys ending with ``refuse``."""

    refuse = "/privkey.pem"

    async def delete(
        self, key: str, *, expect_version: str | _AnyVersion | None = ANY_VERSION
    ) -> bool:
        if key.endswith(self.refuse):
            raise StorageError(f"cannot delete {key}: refused by the test", path=key)
        return await super().delete(key, expect_version=expect_version)


@pytest.mark.parametrize("refuse", ["/meta.json", "/privkey.pem", "/cli/half.del.test.json"])
def test_a_deletion_that_fails_half_way_is_seen_and_finished(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], refuse: str
) -> None:
    state = tmp_path / "state"
    name = "half.del.test"
    first = run_main(capsys, *issue(pebble, state, name))
    assert first.returncode == 0, first.stderr
    ca = ca_args(pebble, state)

    async def fail_half_way() -> None:
        broken = State(state, pebble.directory_url)
        storage = RefusingDeletes(state)
        storage.refuse = refuse
        broken.storage = storage
        with pytest.raises(StorageError, match="refused by the test"):
            await delete_recorded_certificate(
                broken.storage, broken.layout, name, default_out=broken.default_out(name)
            )

    anyio.run(fail_half_way)

    # status shows it as half-deleted; renew does not order it; issue refuses its name
    status = one_json(run_main(capsys, "status", "--json", *ca))
    (entry,) = status["certificates"]
    assert (entry["name"], entry["status"]) == (name, "deleting")
    seen = len(pebble.requests_seen())
    renewed = run_main(capsys, "renew", "--json", "--force", *ca, *http01_args(pebble))
    assert renewed.returncode == 0, renewed.stderr
    assert one_json(renewed)["certificates"] == []
    again = run_main(capsys, *issue(pebble, state, name))
    assert f"run `acmecerts delete {name} --yes` to finish" in assert_one_line_error(again, 2)
    assert NEW_ORDER not in pebble.requests_seen()[seen:]

    # delete finishes the job
    finished = run_main(capsys, "delete", name, "--yes", "--json", *ca)
    assert finished.returncode == 0, finished.stderr
    assert not [k for k in store_keys(state, pebble.directory_url) if name in k]
    assert not (state / "certificates" / name).exists()
    assert one_json(run_main(capsys, "status", "--json", *ca))["certificates"] == []
    reissued = run_main(capsys, *issue(pebble, state, name))
    assert reissued.returncode == 0, reissued.stderr
    assert one_json(reissued)["certificates"][0]["status"] == "issued"


# -- the previous layout of the store ---------------------------------------------------------


def test_a_certificate_in_the_previous_layout_is_listed_and_loaded(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cert.pem``, ``privkey.pem`` and ``meta.json`` (no record) read as the record did."""
    state = tmp_path / "state"
    name = "old.layout.test"
    first = run_main(capsys, *issue(pebble, state, name))
    assert first.returncode == 0, first.stderr

    async def check() -> None:
        cli = State(state, pebble.directory_url)
        try:
            stored = await cli.load_certificate(name)
            assert stored is not None
            keys = cli.layout.certificate(name)
            record = await cli.storage.load(keys.record)
            assert record is not None
            bundle = CertificateBundle.from_bytes(record.data, keys.record)
            # as an earlier version stored it: key, chain, then meta.json; no record
            await cli.storage.store(keys.privkey, bundle.private_key_pem.encode(), secret=True)
            await cli.storage.store(keys.cert, bundle.fullchain_pem.encode())
            meta = {"name": name, "identifiers": list(bundle.identifiers)}
            await cli.storage.store(keys.meta, json.dumps(meta).encode())
            assert await cli.storage.delete(keys.record)

            old = await cli.load_certificate(name)
            assert old is not None
            assert (old.name, old.identifiers, old.info, old.key_type) == (
                stored.name,
                stored.identifiers,
                stored.info,
                stored.key_type,
            )
            assert [c.name for c in await cli.list_certificates()] == [name]

            assert await cli.storage.delete(keys.privkey)  # not completely stored: none
            assert await cli.load_certificate(name) is None
            await cli.storage.store(keys.privkey, bundle.private_key_pem.encode(), secret=True)

            await cli.storage.store(keys.meta, b"{not json")
            with pytest.raises(StorageError, match="is not valid JSON") as caught:
                await cli.load_certificate(name)
            assert caught.value.path == cli.path_for(keys.meta)  # the file, as before
        finally:
            await cli.aclose()

    anyio.run(check)
