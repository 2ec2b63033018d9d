"""``account rollover|deactivate|create|dns-persist-records`` find their CA in the state
directory, as ``account show``, ``delete`` and ``revoke`` do.

Against the session Pebble 2.10: the account is created with ``--directory`` and
``--ca-bundle``; the commands then run with neither (and no ``SSL_CERT_FILE``): the CA
and its bundle come from the state directory. A second CA is the fault proxy's URL in
front of the same Pebble (another directory URL: another CA directory in the state).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    assert_one_line_error,
    ca_args,
    clean_environment,
    one_json,
    run_main,
    stored_account,
)

from acmecerts import AccountDoesNotExist, AccountKey, AcmeClient
from acmecerts.errors import Unauthorized
from tests.faults.proxy import FaultProxy

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)


def account_of(pebble: PebbleServer, key: AccountKey) -> str | None:
    """What Pebble says of ``key``: its account's URL, ``None`` (no account), or
    ``"deactivated"``."""

    async def ask() -> str | None:
        async with AcmeClient(
            pebble.directory_url, account_key=key, ca_bundle=pebble.ca_bundle
        ) as client:
            try:
                return (await client.find_account()).url
            except AccountDoesNotExist:
                return None
            except Unauthorized as exc:
                return "deactivated" if "deactivated" in exc.detail else str(exc)

    return anyio.run(ask)


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # Pebble is trusted by --ca-bundle only


def test_rollover_and_deactivate_without_directory_or_ca_bundle(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    created = run_main(capsys, "account", "create", "--json", *ca_args(pebble, state))
    assert created.returncode == 0, created.stderr
    url = one_json(created)["url"]
    only_state = ("--state-dir", str(state), "--json")

    # create again, with neither: the account of the state directory's CA, not a new one
    again = run_main(capsys, "account", "create", "--email", "ops@example.test", *only_state)
    assert again.returncode == 0, again.stderr
    document = one_json(again)
    assert (document["status"], document["url"]) == ("exists", url)
    assert document["contact"] == ["mailto:ops@example.test"]

    old, _ = stored_account(state, pebble.directory_url)
    assert old is not None
    rolled = run_main(capsys, "account", "rollover", *only_state)
    assert rolled.returncode == 0, rolled.stderr
    document = one_json(rolled)
    assert document["previous_thumbprint"] == old.thumbprint
    new, stored_url = stored_account(state, pebble.directory_url)
    assert new is not None
    assert document["thumbprint"] == new.thumbprint != old.thumbprint
    assert stored_url == url
    assert account_of(pebble, new) == url  # the CA switched to the new key
    assert account_of(pebble, old) is None

    records = run_main(
        capsys, "account", "dns-persist-records", "persist.acctfind.example.test", *only_state
    )
    assert records.returncode == 0, records.stderr
    assert one_json(records)["account"] == url

    deactivated = run_main(capsys, "account", "deactivate", "--yes", *only_state)
    assert deactivated.returncode == 0, deactivated.stderr
    assert one_json(deactivated)["account_status"] == "deactivated"
    assert account_of(pebble, new) == "deactivated"

    # the CA is still in the state directory (its settings): create registers there again
    fresh = run_main(capsys, "account", "create", *only_state)
    assert fresh.returncode == 0, fresh.stderr
    document = one_json(fresh)
    assert document["status"] == "registered"
    assert document["url"] not in (url, None)
    assert document["url"].startswith(pebble.directory_url.rsplit("/", 1)[0])


def test_accounts_at_two_cas_need_directory(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    for directory in (pebble.directory_url, proxy.directory_url):
        created = run_main(
            capsys, "account", "create", "--json", *ca_args(pebble, state, directory=directory)
        )
        assert created.returncode == 0, created.stderr
    only_state = ("--state-dir", str(state))
    keys = {d: stored_account(state, d)[0] for d in (pebble.directory_url, proxy.directory_url)}
    sent = len(pebble.requests_seen())

    for command in (
        ("account", "rollover"),
        ("account", "deactivate", "--yes"),
        ("account", "create"),
        ("account", "dns-persist-records", "two.acctfind.example.test"),
    ):
        refused = run_main(capsys, *command, *only_state)
        line = assert_one_line_error(refused, 2)
        assert "several CAs" in line
        assert pebble.directory_url in line
        assert proxy.directory_url in line
        assert "--directory" in line
    assert len(pebble.requests_seen()) == sent  # nothing was sent
    assert {d: stored_account(state, d)[0] for d in keys} == keys  # nothing changed

    # --directory chooses (its stored --ca-bundle is used: none is given)
    rolled = run_main(
        capsys, "account", "rollover", "--json", "--directory", proxy.directory_url, *only_state
    )
    assert rolled.returncode == 0, rolled.stderr
    assert len(proxy.requests_to("/rollover-account-key", "POST")) == 1
    assert stored_account(state, proxy.directory_url)[0] != keys[proxy.directory_url]
    assert stored_account(state, pebble.directory_url)[0] == keys[pebble.directory_url]
