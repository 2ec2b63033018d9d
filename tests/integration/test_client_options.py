"""Client options about the account and renewals, against the session's real Pebble.

* ``terms_of_service_agreed``: Pebble publishes ``meta.termsOfService``. Without agreement
  no account is created (:class:`TermsOfServiceNotAgreed`, only the directory fetched),
  also by the registration a first signed request makes; a key that has an account is
  found without agreement; with agreement ``termsOfServiceAgreed: true`` creates it.
* ``account_url_or_register()``: the account URL, registering once for concurrent callers.
* ``send_replaces``: Pebble refuses a second ``replaces`` of one certificate
  (``alreadyReplaced``); a client with ``send_replaces=False`` orders without it.
"""

from __future__ import annotations

import anyio
import pytest
from pebble_quirks import pebble_refuses_replaces_of
from requests_seen import on_requests

from acmecerts import AcmeClient, Http01Server, InvalidInput, TermsOfServiceNotAgreed
from acmecerts.client import OrderRequested
from acmecerts.errors import AlreadyReplaced
from acmecerts.protocol.ari import cert_id
from acmecerts.protocol.keys import AccountKey
from acmecerts.testing import PebbleServer

from .conftest import assert_valid_chain

pytestmark = pytest.mark.anyio


def posts(server: PebbleServer, path: str, since: int = 0) -> int:
    return server.requests_seen()[since:].count(("POST", path))


# -- terms_of_service_agreed -----------------------------------------------------------------


async def test_without_agreement_no_account_is_created(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    seen = len(pebble.requests_seen())
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, terms_of_service_agreed=False
    ) as acme:
        terms = (await acme.directory()).terms_of_service
        assert terms is not None  # Pebble publishes terms
        with pytest.raises(TermsOfServiceNotAgreed) as info:
            await acme.register()
        # the registration a first order makes is refused alike, before newAccount
        with pytest.raises(TermsOfServiceNotAgreed):
            await acme.issue(["tos-refused.example.test"], solver=http01)
        # an explicit argument does not agree on the holder's behalf either
        with pytest.raises(TermsOfServiceNotAgreed):
            await acme.register(terms_of_service_agreed=False)
    error = info.value
    assert isinstance(error, InvalidInput)
    assert error.terms_of_service == terms
    assert error.directory_url == pebble.directory_url
    assert terms in str(error)
    assert error.reached_ca is False
    assert acme.account_url is None
    assert posts(pebble, "/sign-me-up", seen) == 0
    assert posts(pebble, "/order-plz", seen) == 0


async def test_agreeing_later_creates_the_account_with_terms_agreed(
    pebble: PebbleServer,
) -> None:
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, terms_of_service_agreed=False
    ) as acme:
        with pytest.raises(TermsOfServiceNotAgreed):
            await acme.register()
        acme.terms_of_service_agreed = True  # the holder agreed (a prompt, a flag)
        seen = len(pebble.requests_seen())
        account = await acme.register()
    assert account.status == "valid"
    assert account.terms_of_service_agreed in (True, None)  # Pebble may not echo it
    assert acme.account_url == account.url
    assert posts(pebble, "/sign-me-up", seen) == 1


async def test_a_key_with_an_account_is_found_without_agreement(pebble: PebbleServer) -> None:
    key = AccountKey.generate()
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, account_key=key) as a:
        created = await a.register()
    async with AcmeClient(
        pebble.directory_url,
        ca_bundle=pebble.ca_bundle,
        account_key=key,
        terms_of_service_agreed=False,
    ) as acme:
        found = await acme.find_account()  # onlyReturnExisting: creates nothing
        assert found.url == created.url
        assert await acme.account_url_or_register() == created.url


def test_terms_of_service_agreed_must_be_a_bool(pebble: PebbleServer) -> None:
    with pytest.raises(InvalidInput, match="terms_of_service_agreed"):
        AcmeClient(pebble.directory_url, terms_of_service_agreed="no")  # type: ignore[arg-type]


# -- account_url_or_register() ---------------------------------------------------------------


async def test_account_url_or_register_registers_once_for_concurrent_callers(
    pebble: PebbleServer,
) -> None:
    new_accounts: list[str] = []

    def seen(method: str, url: str) -> None:
        if url.endswith("/sign-me-up"):
            new_accounts.append(method)

    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as acme:
        acme.subscribe(on_requests(seen))
        urls: list[str] = []

        async def ask() -> None:
            urls.append(await acme.account_url_or_register())

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(ask)
        assert len(new_accounts) == 1
        assert set(urls) == {acme.account_url}
        assert acme.account_url is not None
        # known now: no request at all
        assert await acme.account_url_or_register() == acme.account_url
        assert len(new_accounts) == 1


# -- send_replaces ---------------------------------------------------------------------------


async def test_send_replaces_false_orders_without_replaces(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    name = "send-replaces.example.test"
    key = AccountKey.generate()
    sent: list[str | None] = []  # each newOrder's replaces, as the client sent it
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, account_key=key) as a:
        first = await a.issue([name], solver=http01)
        # 1 certificate in 256 Pebble can never find for a replaces (tests/pebble_quirks.py)
        while pebble_refuses_replaces_of(first.serial):
            first = await a.issue([name], solver=http01)
        old = cert_id(first.chain.leaf)
        await a.issue([name], solver=http01, replaces=old)  # Pebble records the replacement
        with pytest.raises(AlreadyReplaced):  # and refuses a second one
            await a.issue([name], solver=http01, replaces=old)
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, account_key=key, send_replaces=False
    ) as acme:
        assert acme.send_replaces is False

        def record(event: object) -> None:
            if isinstance(event, OrderRequested):
                sent.append(event.replaces)

        acme.subscribe(record, requests=False)
        issued = await acme.issue([name], solver=http01, replaces=old)
        acme.send_replaces = True
        with pytest.raises(AlreadyReplaced):  # what the CA says when it is sent anyway
            await acme.issue([name], solver=http01, replaces=old)
    assert_valid_chain(issued, pebble, [name])
    assert sent == [None, old]
