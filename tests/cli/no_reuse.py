"""Make Pebble validate every renewal for real, whatever its authorization reuse draws.

Pebble 2.4 makes a new authorization only when ``rand.Intn(100) > PEBBLE_AUTHZREUSE``, so
even at ``PEBBLE_AUTHZREUSE=0`` it reuses a valid authorization of the same account for
about 1 % of the identifiers of a new order. A test that counts the challenges of a
renewal would fail that often. Deactivating the account's valid authorizations before
the renewal (RFC 8555 §7.5.2) leaves nothing to reuse.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import anyio

from acmecerts import AcmeClient
from acmecerts.cli._state import State

if TYPE_CHECKING:
    from pathlib import Path

    from acmecerts.testing import PebbleServer

_VALID = re.compile(r"authz (\S+) set VALID")


def deactivate_valid_authorizations(ca: PebbleServer, state: Path) -> int:
    """Deactivate every authorization Pebble has set valid so far (with the CLI's account
    in ``state``); returns how many were still valid and are now deactivated."""
    found = dict.fromkeys(_VALID.findall(ca.log_path.read_text()))
    base = ca.directory_url.rsplit("/", 1)[0]

    async def deactivate() -> int:
        stored = State(state, ca.directory_url)
        key = await stored.load_account_key()
        assert key is not None, "the CLI has no account in this state directory"
        account_url = await stored.load_account_url(key)
        done = 0
        async with AcmeClient(
            ca.directory_url, account_key=key, account_url=account_url, ca_bundle=ca.ca_bundle
        ) as client:
            for authz_id in found:
                url = f"{base}/authZ/{authz_id}"
                if (await client.get_authorization(url)).status == "valid":
                    assert (await client.deactivate_authorization(url)).status == "deactivated"
                    done += 1
        return done

    return anyio.run(deactivate)
