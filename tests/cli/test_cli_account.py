"""``acmecerts account show|create|rollover|deactivate``, and external account binding."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    NEW_ACCOUNT,
    ca_args,
    clean_environment,
    cli_env,
    http01_args,
    one_json,
    run_cli,
    run_many,
    stored_account,
)

from acmecerts import AccountDoesNotExist, AccountKey, AcmeClient
from acmecerts.cli import main
from acmecerts.errors import Unauthorized
from acmecerts.storage import FileStorage, KeyLayout

if TYPE_CHECKING:
    from conftest import PebbleFactory

    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)


def account_of(pebble: PebbleServer, key: AccountKey) -> str | None:
    """The URL of ``key``'s account at Pebble (``onlyReturnExisting``), if it has one.

    ``"deactivated"`` when Pebble refuses the key because its account was deactivated.
    """

    async def find() -> str | None:
        async with AcmeClient(
            pebble.directory_url, account_key=key, ca_bundle=pebble.ca_bundle
        ) as c:
            try:
                return (await c.find_account()).url
            except AccountDoesNotExist:
                return None
            except Unauthorized as exc:
                return "deactivated" if "deactivated" in exc.detail else str(exc)

    return anyio.run(find)


def test_create_show_rollover_issue_deactivate(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    ca = ca_args(pebble, state)
    env = cli_env(tmp_path)

    created = run_cli("account", "create", "--email", "admin@example.test", "--json", *ca, env=env)
    assert created.returncode == 0, created.stderr
    document = one_json(created)
    assert document["status"] == "registered"
    assert document["contact"] == ["mailto:admin@example.test"]
    key, url = stored_account(state, pebble.directory_url)
    assert key is not None
    assert url == document["url"]
    assert document["thumbprint"] == key.thumbprint

    # show asks the CA; create again is idempotent (no new account)
    seen = len(pebble.requests_seen())
    shown, again = run_many(
        [["account", "show", "--json", *ca], ["account", "create", "--json", *ca]],
        envs=[env, env],
    )
    assert shown.returncode == 0, shown.stderr
    assert one_json(shown)["url"] == url
    assert one_json(shown)["status"] == "show"
    assert one_json(shown)["account_status"] == "valid"
    assert again.returncode == 0, again.stderr
    assert one_json(again)["status"] == "exists"
    assert one_json(again)["url"] == url
    assert stored_account(state, pebble.directory_url) == (key, url)

    # rollover: the state directory holds the new key, the CA refuses the old one
    rolled = run_cli("account", "rollover", "--key-type", "ec384", "--json", *ca, env=env)
    assert rolled.returncode == 0, rolled.stderr
    document = one_json(rolled)
    assert document["status"] == "rolled-over"
    assert document["previous_thumbprint"] == key.thumbprint
    assert document["algorithm"] == "ES384"
    new_key, new_url = stored_account(state, pebble.directory_url)
    assert new_key is not None
    assert new_key != key
    assert new_key.thumbprint == document["thumbprint"]
    assert new_url == url
    assert account_of(pebble, key) is None
    assert account_of(pebble, new_key) == url
    layout = KeyLayout(pebble.directory_url)
    leftovers = anyio.run(FileStorage(state).list, layout.account_prefix)
    assert leftovers == [layout.account_meta(), layout.account_key()]  # no key-rollover.pem

    # issuing still works, with the same account
    seen = len(pebble.requests_seen())
    issued = run_cli("issue", "cli-rolled.example.test", *ca, *http01_args(pebble), env=env)
    assert issued.returncode == 0, issued.stderr
    assert NEW_ACCOUNT not in pebble.requests_seen()[seen:]

    # deactivate: needs --yes without a terminal; then the CA refuses the key for good
    assert main(["account", "deactivate", *ca]) == 2  # in-process: stdin is not a terminal
    assert "confirm with --yes" in capsys.readouterr().err
    gone = run_cli("account", "deactivate", "--yes", "--json", *ca, env=env)
    assert gone.returncode == 0, gone.stderr
    document = one_json(gone)
    assert document["status"] == "deactivated"
    archived = Path(document["archived_key"])
    assert archived.is_file()
    assert archived.stat().st_mode & 0o777 == 0o600
    assert stored_account(state, pebble.directory_url) == (None, None)
    assert account_of(pebble, new_key) == "deactivated"


def test_show_without_an_account_is_bad_input(pebble: PebbleServer, tmp_path: Path) -> None:
    seen = len(pebble.requests_seen())
    result = run_cli("account", "show", *ca_args(pebble, tmp_path / "state"))
    assert result.returncode == 2
    assert result.stderr.startswith("acmecerts: error: no account for ")
    assert "acmecerts account create" in result.stderr
    assert len(pebble.requests_seen()) == seen


def test_external_account_binding(pebble_factory: PebbleFactory, tmp_path: Path) -> None:
    hmac_key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    eab_pebble = pebble_factory(eab_required=True, eab_mac_keys={"kid-1": hmac_key})
    without, with_eab = run_many(
        [
            ["account", "create", *ca_args(eab_pebble, tmp_path / "a")],
            [
                "account",
                "create",
                "--eab-kid",
                "kid-1",
                "--eab-hmac-key",
                hmac_key,
                "--json",
                *ca_args(eab_pebble, tmp_path / "b"),
            ],
        ],
        envs=[cli_env(tmp_path), cli_env(tmp_path)],
    )

    assert without.returncode == 2, without.stderr
    assert "--eab-kid" in without.stderr
    assert len(without.stderr.splitlines()) == 1
    assert with_eab.returncode == 0, with_eab.stderr
    assert one_json(with_eab)["status"] == "registered"


def test_an_interrupted_rollover_is_finished_or_undone(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rollover stops after storing the new key: the next command settles it."""
    clean_environment(tmp_path, monkeypatch)
    state = tmp_path / "state"
    ca = ca_args(pebble, state)
    layout = KeyLayout(pebble.directory_url)
    pending = f"{layout.account_prefix}key-rollover.pem"
    assert main(["account", "create", *ca]) == 0  # in-process, to keep the suite fast
    old, url = stored_account(state, pebble.directory_url)
    assert old is not None
    capsys.readouterr()

    async def interrupted(*, switched: bool) -> AccountKey:
        """Store a new key as `account rollover` does; maybe let the CA switch to it."""
        new = AccountKey.generate()
        await FileStorage(state).store(pending, new.to_pem(), secret=True)
        if switched:
            async with AcmeClient(
                pebble.directory_url, account_key=old, account_url=url, ca_bundle=pebble.ca_bundle
            ) as client:
                await client.change_key(new)
        return new

    # The CA never switched: the old key stays, the new one is dropped.
    anyio.run(lambda: interrupted(switched=False))
    assert main(["account", "show", "--json", *ca]) == 0
    captured = capsys.readouterr()
    assert "undid an interrupted account key rollover" in captured.err
    assert json.loads(captured.out)["thumbprint"] == old.thumbprint
    assert anyio.run(FileStorage(state).load, pending) is None

    # The CA switched but the run stopped before replacing key.pem: the new key is kept.
    new = anyio.run(lambda: interrupted(switched=True))
    assert main(["account", "show", "--json", *ca]) == 0
    captured = capsys.readouterr()
    assert "finished an interrupted account key rollover" in captured.err
    assert json.loads(captured.out)["thumbprint"] == new.thumbprint
    assert json.loads(captured.out)["url"] == url
    assert stored_account(state, pebble.directory_url) == (new, url)
    assert anyio.run(FileStorage(state).load, pending) is None
