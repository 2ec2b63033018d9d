"""The stored account key's life: rollover (RFC 8555 §7.3.5) and deactivation (§7.3.6).

Each step runs under the store's account lock (:meth:`KeyLayout.account_lock
<acmecerts.storage.KeyLayout.account_lock>`), so that of several processes sharing a
store one at a time changes the key, and at every instant one stored key is the
account's:

* :func:`roll_over_account_key`: the new key is stored first (``key-rollover.pem``,
  :func:`pending_key_name`), then the CA switches, then it replaces the stored key;
* :func:`finish_account_rollover`: a rollover that stopped in between is finished (the
  CA has the new key) or undone (it kept the old one); run it before using a stored key
  when :func:`load_pending_key` finds one;
* :func:`deactivate_stored_account`: the account is deactivated at the CA and its key
  moved aside (kept: never lose a key), so the next run creates a new account.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
from collections.abc import AsyncIterator

import anyio.to_thread

from acmecerts.client import AcmeClient
from acmecerts.errors import AccountDoesNotExist, AcmeCertsError, AcmeProblem, InvalidInput
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.protocol.resources import Account
from acmecerts.storage import (
    KeyLayout,
    Storage,
    load_account_url,
    load_stored_key,
    save_account_url,
    storage_label,
)

__all__ = [
    "deactivate_stored_account",
    "finish_account_rollover",
    "load_pending_key",
    "pending_key_name",
    "roll_over_account_key",
]

log = logging.getLogger("acmecerts.account")

#: How long the account lock is leased, and waited for, while the key changes.
_LEASE = 60.0
_WAIT = 120.0


def pending_key_name(layout: KeyLayout) -> str:
    """The store key of the new key of an account rollover in progress."""
    return f"{layout.account_prefix}key-rollover.pem"


async def load_pending_key(storage: Storage, layout: KeyLayout) -> AccountKey | None:
    """The new key of an interrupted rollover, if there is one."""
    loaded = await load_stored_key(storage, pending_key_name(layout))
    return None if loaded is None else loaded[0]


@contextlib.asynccontextmanager
async def _locked_key(
    storage: Storage, layout: KeyLayout, missing: str
) -> AsyncIterator[tuple[AccountKey, str]]:
    """The stored account key and its version, under the account lock."""
    async with storage.lock(layout.account_lock(), lease=_LEASE, timeout=_WAIT):
        loaded = await load_stored_key(storage, layout.account_key())
        if loaded is None:
            raise InvalidInput(missing)
        yield loaded


async def _url(client: AcmeClient) -> str:
    """The account's URL; asked of the CA when it is not known (RFC 8555 §7.3.1)."""
    if client.account_url is None:
        client.account_url = (await client.find_account()).url
    return client.account_url


async def roll_over_account_key(
    storage: Storage,
    layout: KeyLayout,
    client: AcmeClient,
    key_type: KeyType = KeyType.EC256,
    *,
    missing: str = "no account key in the store",
) -> Account:
    """Replace the stored account key of ``layout`` by a new one of ``key_type``.

    The new key is stored first, then the CA switches (``keyChange``), then it replaces
    the stored key; ``client`` uses the new key afterwards. A run interrupted between the
    two stores is finished or undone by :func:`finish_account_rollover`.

    Returns:
        The account as the CA has it after the change.

    Raises:
        InvalidInput: no account key is stored (``missing`` is the message).
        AcmeCertsError: the change failed; when it may have happened at the CA the new
            key is kept, and :func:`finish_account_rollover` settles it.
    """
    async with _locked_key(storage, layout, missing) as (old, version):
        if old != client.account_key:  # rolled over by another process meanwhile
            client.account_key = old
            client.account_url = await load_account_url(storage, layout, account_key=old)
        url = await _url(client)
        new = await anyio.to_thread.run_sync(AccountKey.generate, key_type)
        pending = pending_key_name(layout)
        await storage.store(pending, new.to_pem(), secret=True, expect_version=None)
        try:
            await client.change_key(new)
        except AcmeCertsError as exc:
            if isinstance(exc, AcmeProblem) or not exc.reached_ca:
                await storage.delete(pending)  # the old key still holds
                raise
            raise AcmeCertsError(
                f"the key change may or may not have happened ({exc}); the new key is kept in "
                f"{storage_label(storage, pending)}; any acmecerts command finishes or undoes "
                "the rollover"
            ) from exc
        await storage.store(layout.account_key(), new.to_pem(), secret=True, expect_version=version)
        await save_account_url(storage, layout, url, account_key=new)
        await storage.delete(pending)
        return await client.account()


async def _find(client: AcmeClient, key: AccountKey) -> str | None:
    """The URL of ``key``'s account at the CA (``onlyReturnExisting``), if it has one;
    asked by ``client`` with its key swapped for ``key`` meanwhile."""
    kept = client.account_key, client.account_url
    client.account_key = key
    try:
        return (await client.find_account()).url
    except AccountDoesNotExist:
        return None
    finally:
        client.account_key, client.account_url = kept


async def finish_account_rollover(storage: Storage, layout: KeyLayout, client: AcmeClient) -> None:
    """Finish or undo a rollover that stopped after storing the new key.

    The CA is asked which key the account has (``onlyReturnExisting`` with each): the new
    one replaces the stored key, or the old one stays; the pending key is removed either
    way, and ``client`` is left on the account's key and URL. Nothing happens when no
    rollover is pending.
    """
    async with storage.lock(layout.account_lock(), lease=_LEASE, timeout=_WAIT):
        pending = await load_pending_key(storage, layout)
        loaded = await load_stored_key(storage, layout.account_key())
        if pending is None or loaded is None:
            return
        old, version = loaded
        client.account_key = old
        old_url = client.account_url or await _find(client, old)
        new_url = await _find(client, pending)
        if new_url is not None and old_url in (None, new_url):
            # The CA switched before the last run could record it: the new key is it.
            await storage.store(
                layout.account_key(), pending.to_pem(), secret=True, expect_version=version
            )
            await save_account_url(storage, layout, new_url, account_key=pending)
            client.account_key, client.account_url = pending, new_url
            log.warning("finished an interrupted account key rollover (%s)", new_url)
        else:
            client.account_url = old_url
            log.warning("undid an interrupted account key rollover: the CA kept the old key")
        await storage.delete(pending_key_name(layout))


async def deactivate_stored_account(
    storage: Storage,
    layout: KeyLayout,
    client: AcmeClient,
    *,
    missing: str = "no account key in the store",
) -> tuple[Account, AccountKey, str]:
    """Deactivate ``client``'s account at the CA, then move its stored key aside.

    Returns:
        The account as the CA answered, its key, and the store key the key was moved to
        (``<account>/deactivated/<instant>.pem``). The account's URL is forgotten: the
        next run creates a new account.

    Raises:
        InvalidInput: no account key is stored (``missing`` is the message).
    """
    async with _locked_key(storage, layout, missing) as (key, version):
        await _url(client)
        account = await client.deactivate_account()
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dt%H%M%S%fz")
        archived = f"{layout.account_prefix}deactivated/{stamp}.pem"
        await storage.store(archived, key.to_pem(), secret=True, expect_version=None)
        await storage.delete(layout.account_meta())
        await storage.delete(layout.account_key(), expect_version=version)
    return account, key, archived
