"""The account wired from a store without a manager, against a real Pebble:
``account_client``, ``register_account`` (what ``open_manager`` and the CLI share), and the
stored key's life (``roll_over_account_key``, ``finish_account_rollover``,
``deactivate_stored_account``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from acmecerts import AccountKey, AcmeClient, InvalidInput
from acmecerts.errors import AccountDoesNotExist
from acmecerts.manager import (
    account_client,
    deactivate_stored_account,
    finish_account_rollover,
    load_pending_key,
    pending_key_name,
    register_account,
    roll_over_account_key,
    store_ledger,
)
from acmecerts.ratelimit import LETS_ENCRYPT, RateLimitLedger
from acmecerts.storage import (
    FileStorage,
    KeyLayout,
    load_account_url,
    load_or_create_account_key,
    load_stored_key,
)
from acmecerts.testing import PebbleServer
from tests.faults.proxy import FaultProxy, Match, Stall

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

NEW_ACCOUNT = "/sign-me-up"


def new_accounts_sent(proxy: FaultProxy) -> int:
    """``newAccount`` requests (one for an existing key answers 200, not 201: count all)."""
    return len(proxy.requests_to(NEW_ACCOUNT, "POST"))


@contextlib.asynccontextmanager
async def stored_client(
    storage: FileStorage, layout: KeyLayout, pebble: PebbleServer
) -> AsyncIterator[AcmeClient]:
    """A client on the store's account key (created once), its URL as the store has it."""
    key = await load_or_create_account_key(storage, layout)
    url = await load_account_url(storage, layout, account_key=key)
    async with account_client(
        storage, layout, account_key=key, account_url=url, ca_bundle=pebble.ca_bundle
    ) as client:
        yield client


async def test_two_processes_registering_at_once_send_one_new_account(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    # the CA takes a while to answer newAccount: the second caller arrives meanwhile
    proxy.add_rule(Match(NEW_ACCOUNT, "POST"), Stall(1.0), times=None)
    layout = KeyLayout(proxy.directory_url)
    urls: list[str] = []
    async with FileStorage(tmp_path) as storage:
        await load_or_create_account_key(storage, layout)  # the key exists; no account yet

    async def register() -> None:
        async with (
            FileStorage(tmp_path) as storage,
            stored_client(storage, layout, pebble) as client,
        ):
            assert client.account_url is None
            urls.append(await register_account(storage, layout, client))
            assert client.account_url == urls[-1]

    async with anyio.create_task_group() as callers:
        callers.start_soon(register)
        callers.start_soon(register)

    assert new_accounts_sent(proxy) == 1
    assert len(urls) == 2
    assert urls[0] == urls[1]
    async with FileStorage(tmp_path) as storage:
        key = await load_or_create_account_key(storage, layout)
        assert await load_account_url(storage, layout, account_key=key) == urls[0]
        # a stored URL: nothing is sent
        async with stored_client(storage, layout, pebble) as client:
            assert await register_account(storage, layout, client) == urls[0]
    assert new_accounts_sent(proxy) == 1


async def test_the_client_records_in_the_ledger_kept_in_the_store(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    layout = KeyLayout(pebble.directory_url)
    async with FileStorage(tmp_path) as storage:
        client = account_client(
            storage, layout, rate_limits=LETS_ENCRYPT, ca_bundle=pebble.ca_bundle
        )
        assert isinstance(client.ledger, RateLimitLedger)
        async with client:
            await register_account(storage, layout, client)
        # the registration was recorded where every replica reads it
        assert await storage.load(layout.ledger()) is not None
        assert account_client(storage, layout, rate_limits=None).ledger is None
        assert store_ledger(storage, layout, None) is None
        with pytest.raises(InvalidInput, match="rate_limits must be"):
            account_client(storage, layout, rate_limits="letsencrypt")  # type: ignore[arg-type]


async def test_a_rollover_replaces_the_stored_key_and_keeps_the_account(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    layout = KeyLayout(pebble.directory_url)
    async with (
        FileStorage(tmp_path) as storage,
        stored_client(storage, layout, pebble) as client,
    ):
        url = await register_account(storage, layout, client)
        old = client.account_key
        account = await roll_over_account_key(storage, layout, client)
        assert account.url == url
        assert client.account_key != old
        loaded = await load_stored_key(storage, layout.account_key())
        assert loaded is not None
        assert loaded[0] == client.account_key
        new = client.account_key
        assert await load_account_url(storage, layout, account_key=new) == url
        assert await load_pending_key(storage, layout) is None
        # the old key has no account any more
        client.account_key = old
        with pytest.raises(AccountDoesNotExist):
            await client.find_account()
        client.account_key = new

        found, key, archived = await deactivate_stored_account(storage, layout, client)
        assert found.status == "deactivated"
        assert key == new
        assert await storage.load(layout.account_key()) is None
        assert await storage.load(layout.account_meta()) is None
        kept = await load_stored_key(storage, archived)
        assert kept is not None
        assert kept[0] == new
        with pytest.raises(InvalidInput, match="no key here"):
            await deactivate_stored_account(storage, layout, client, missing="no key here")


async def test_an_interrupted_rollover_is_finished_when_the_ca_switched(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    layout = KeyLayout(pebble.directory_url)
    async with FileStorage(tmp_path) as storage:
        async with stored_client(storage, layout, pebble) as client:
            url = await register_account(storage, layout, client)
            new = AccountKey.generate()
            # a run stored the new key and the CA switched; then the run stopped
            await storage.store(pending_key_name(layout), new.to_pem(), secret=True)
            await client.change_key(new)
        async with stored_client(storage, layout, pebble) as client:
            assert await load_pending_key(storage, layout) == new
            await finish_account_rollover(storage, layout, client)
            assert (client.account_key, client.account_url) == (new, url)
            loaded = await load_stored_key(storage, layout.account_key())
            assert loaded is not None
            assert loaded[0] == new
            assert await load_account_url(storage, layout, account_key=new) == url
            assert await load_pending_key(storage, layout) is None
            assert (await client.account()).url == url


async def test_an_interrupted_rollover_is_undone_when_the_ca_kept_the_old_key(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    layout = KeyLayout(pebble.directory_url)
    async with (
        FileStorage(tmp_path) as storage,
        stored_client(storage, layout, pebble) as client,
    ):
        url = await register_account(storage, layout, client)
        old = client.account_key
        # the new key was stored, and the run stopped before the CA heard of it
        await storage.store(pending_key_name(layout), AccountKey.generate().to_pem(), secret=True)
        client.account_url = None  # as if the URL were not known
        await finish_account_rollover(storage, layout, client)
        assert (client.account_key, client.account_url) == (old, url)
        loaded = await load_stored_key(storage, layout.account_key())
        assert loaded is not None
        assert loaded[0] == old
        assert await load_pending_key(storage, layout) is None
        # nothing pending: nothing is done
        await finish_account_rollover(storage, layout, client)
        assert client.account_key == old
