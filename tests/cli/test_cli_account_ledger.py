"""``acmecerts account create`` asks the stored rate-limit ledger before ``newAccount``."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    NEW_ACCOUNT,
    ca_args,
    cli_env,
    http01_args,
    one_json,
    run_cli,
    stored_account,
)

from acmecerts import AccountKey
from acmecerts._time import show_instant, whole_second
from acmecerts.ratelimit import LETS_ENCRYPT, RateLimitLedger
from acmecerts.storage import FileStorage, KeyLayout, save_account_url

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)


def stored_ledger(state: Path, directory_url: str) -> RateLimitLedger:
    """The ledger the CLI keeps in ``state`` (Let's Encrypt's limits)."""
    key = KeyLayout(directory_url).ledger()
    return RateLimitLedger(LETS_ENCRYPT, storage=FileStorage(state), key=key)


def exhaust_new_accounts(state: Path, directory_url: str) -> None:
    """Spend every new-account token of the stored ledger (another tool made accounts)."""

    async def spend() -> None:
        ledger = stored_ledger(state, directory_url)
        while (await ledger.check_new_account()).allowed:
            await ledger.account_created()

    anyio.run(spend)


def next_account_at(state: Path, directory_url: str) -> dt.datetime | None:
    async def read() -> dt.datetime | None:
        return (await stored_ledger(state, directory_url).check_new_account()).not_before

    return anyio.run(read)


def new_accounts_seen(pebble: PebbleServer) -> int:
    return pebble.requests_seen().count(NEW_ACCOUNT)


def test_account_create_is_deferred_without_room_but_an_existing_account_is_found(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    env = cli_env(tmp_path)
    limits = ["--rate-limits", "letsencrypt"]

    # an account created while there is room; then the room runs out
    known = tmp_path / "known"
    created = run_cli("account", "create", "--json", *ca_args(pebble, known), *limits, env=env)
    assert created.returncode == 0, created.stderr
    assert one_json(created)["status"] == "registered"
    exhaust_new_accounts(known, pebble.directory_url)

    # the existing account is still found (onlyReturnExisting): not held back
    again = run_cli("account", "create", "--json", *ca_args(pebble, known), *limits, env=env)
    assert again.returncode == 0, again.stderr
    assert one_json(again)["status"] == "exists"
    assert one_json(again)["url"] == one_json(created)["url"]

    # a new key: deferred (exit 3) with the instant, and only a lookup was sent
    fresh = tmp_path / "fresh"
    exhaust_new_accounts(fresh, pebble.directory_url)
    seen = new_accounts_seen(pebble)
    deferred = run_cli("account", "create", "--json", *ca_args(pebble, fresh), *limits, env=env)
    assert deferred.returncode == 3, (deferred.stdout, deferred.stderr)
    document = one_json(deferred)
    assert document["status"] == "deferred"
    until = next_account_at(fresh, pebble.directory_url)
    assert until is not None
    # to the second (rounded up), in JSON and in the error line: never microseconds
    assert document["until"] == whole_second(until).isoformat()
    assert show_instant(until) in deferred.stderr
    assert not re.search(r"[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]", deferred.stderr + deferred.stdout)
    assert "new_accounts_per_ip" in document["error"]
    assert new_accounts_seen(pebble) == seen + 1  # the lookup; no account was created
    key, url = stored_account(fresh, pebble.directory_url)
    assert key is not None
    assert url is None


def test_a_stale_account_without_room_for_a_new_one_ends_deferred(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    # The CA no longer knows the stored account, and the ledger has no room for another:
    # the certificate ends deferred (exit 3) with the instant, and no account is created.
    state = tmp_path / "state"
    key = AccountKey.generate()
    gone = pebble.directory_url.removesuffix("/dir") + "/my-account/does-not-exist"

    async def store() -> None:
        storage, layout = FileStorage(state), KeyLayout(pebble.directory_url)
        await storage.store(layout.account_key(), key.to_pem(), secret=True)
        await save_account_url(storage, layout, gone, account_key=key)

    anyio.run(store)
    exhaust_new_accounts(state, pebble.directory_url)
    seen = new_accounts_seen(pebble)
    result = run_cli(
        "issue",
        "--json",
        "--rate-limits",
        "letsencrypt",
        *ca_args(pebble, state),
        "--out",
        str(tmp_path / "out"),
        *http01_args(pebble),
        "stale-deferred.example.test",
        env=cli_env(tmp_path),
    )
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert "no longer exists" in result.stderr
    top = one_json(result)
    until = next_account_at(state, pebble.directory_url)
    assert until is not None
    assert (top["status"], top["exit_code"]) == ("deferred", 3)
    (document,) = top["certificates"]  # the job's own outcome
    assert document["status"] == "deferred"
    assert document["name"] == "stale-deferred.example.test"
    assert document["until"] == whole_second(until).isoformat()
    sent = new_accounts_seen(pebble) - seen
    assert sent == 2  # two lookups (registering again, then the job): no account created
    assert stored_account(state, pebble.directory_url) == (key, gone)
