"""``open_manager``: a manager wired from a shared store, against a real Pebble.

Requests are counted at a :class:`~tests.faults.proxy.FaultProxy` in front of the session
Pebble (a fresh proxy per test, so a fresh CA in the store's layout).
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import anyio
import pytest
from requests_seen import on_requests

from acmecerts import AcmeClient, Http01Server, InvalidInput, RateLimited
from acmecerts.errors import RateLimitDeferred
from acmecerts.manager import (
    CertificateManager,
    ClientOptions,
    IssuedResult,
    ManagerOptions,
    open_manager,
)
from acmecerts.ratelimit import LETS_ENCRYPT, NO_LIMITS, RateLimitLedger
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer
from acmecerts.transport import AcmeTransport
from tests.faults.proxy import RATE_LIMITED, FaultProxy, Match, Respond, Stall

from .conftest import assert_valid_chain

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

NEW_ACCOUNT = "/sign-me-up"


def created_accounts(proxy: FaultProxy) -> int:
    return sum(1 for r in proxy.requests_to(NEW_ACCOUNT, "POST") if r.status == 201)


class CountingTransport(AcmeTransport):
    """A transport that counts how often it was closed."""

    closed = 0

    async def aclose(self) -> None:
        self.closed += 1
        await super().aclose()


async def test_two_replicas_opening_together_share_one_account_and_one_ledger(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server, tmp_path: Path
) -> None:
    # the CA takes a while to answer newAccount: the second replica arrives meanwhile
    proxy.add_rule(Match(NEW_ACCOUNT, "POST"), Stall(1.0), times=None)
    name = "fleet.open-manager.example.test"
    urls: list[str | None] = []
    serials: list[str] = []

    async def replica() -> None:
        async with (
            FileStorage(tmp_path) as storage,  # each replica its own store object
            open_manager(
                storage,
                proxy.directory_url,
                solvers=[http01],
                contact=["mailto:ops@example.test"],
                rate_limits=LETS_ENCRYPT,
                ca_bundle=pebble.ca_bundle,
            ) as manager,
        ):
            urls.append(manager.client.account_url)
            [result] = await manager.issue_many([name])
            assert isinstance(result, IssuedResult), result
            assert_valid_chain(result.certificate, pebble, [name])
            serials.append(result.certificate.serial)

    async with anyio.create_task_group() as replicas:
        replicas.start_soon(replica)
        replicas.start_soon(replica)

    # one newAccount in all (the second replica found the URL the first stored)
    assert len(proxy.requests_to(NEW_ACCOUNT, "POST")) == 1
    assert created_accounts(proxy) == 1
    assert len(urls) == 2
    assert urls[0] is not None
    assert urls[0] == urls[1]
    assert len(proxy.requests_to("/order-plz", "POST")) == 1
    assert len(serials) == 2
    assert serials[0] == serials[1]

    layout = KeyLayout(proxy.directory_url)
    async with FileStorage(tmp_path) as storage:
        accounts = await storage.list(f"{layout.ca}/accounts/")
        assert [k for k in accounts if k.endswith("/key.pem")] == [layout.account_key()]
        # the ledger is in the same store and counted the account and the certificate
        assert await storage.load(layout.ledger()) is not None
        ledger = RateLimitLedger(LETS_ENCRYPT, storage=storage, key=layout.ledger())
        spent = {line.limit: line.remaining for line in await ledger.budget()}
    assert spent["certificates_per_registered_domain"] == 49
    assert spent["certificates_per_exact_identifier_set"] == 4
    assert spent["new_accounts_per_ip"] == 9


async def test_a_second_open_reuses_the_stored_account_and_certificates(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server, tmp_path: Path
) -> None:
    name = "again.open-manager.example.test"
    transports: list[CountingTransport] = []

    def transport() -> CountingTransport:
        made = CountingTransport(proxy.directory_url, ca_bundle=pebble.ca_bundle)
        transports.append(made)
        return made

    async with FileStorage(tmp_path) as storage:
        async with open_manager(
            storage, proxy.directory_url, solvers=[http01], transport=transport()
        ) as manager:
            first_url = manager.client.account_url
            assert manager.client.ledger is not None
            assert manager.client.ledger.model is NO_LIMITS  # "auto" for a CA not known
            [first] = await manager.issue_many([name])
        assert transports[0].closed == 1
        assert created_accounts(proxy) == 1
        orders = len(proxy.requests_to("/order-plz", "POST"))

        async with open_manager(
            storage, proxy.directory_url, solvers=[http01], transport=transport()
        ) as manager:
            assert manager.client.account_url == first_url
            [again] = await manager.issue_many([name])
        assert transports[1].closed == 1

    assert len(proxy.requests_to(NEW_ACCOUNT, "POST")) == 1  # none on the second open
    assert len(proxy.requests_to("/order-plz", "POST")) == orders  # the stored certificate
    assert isinstance(first, IssuedResult)
    assert isinstance(again, IssuedResult)
    assert again.certificate.serial == first.certificate.serial


async def test_without_a_ledger(proxy: FaultProxy, pebble: PebbleServer, tmp_path: Path) -> None:
    async with (
        FileStorage(tmp_path) as storage,
        Http01Server(host="127.0.0.1", port=0) as solver,
        open_manager(
            storage,
            proxy.directory_url,
            solvers=[solver],
            rate_limits=None,
            ca_bundle=pebble.ca_bundle,
            concurrency=3,
            renewal_fraction=0.5,
        ) as manager,
    ):
        assert manager.client.ledger is None
        assert manager.renewal_fraction == 0.5
        assert manager.client.account_url is not None
    assert await FileStorage(tmp_path).load(KeyLayout(proxy.directory_url).ledger()) is None


async def test_a_refused_registration_closes_everything_and_the_ledger_remembers_it(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.add_rule(
        Match(NEW_ACCOUNT, "POST"),
        Respond(429, RATE_LIMITED, "too many new accounts", retry_after="3600"),
    )
    layout = KeyLayout(proxy.directory_url)
    made: list[CountingTransport] = []
    async with FileStorage(tmp_path) as storage, Http01Server(port=0) as solver:
        for attempt in range(3):
            made.append(CountingTransport(proxy.directory_url, ca_bundle=pebble.ca_bundle))
            opening = open_manager(
                storage,
                proxy.directory_url,
                solvers=[solver],
                transport=made[-1],
                # the third open has no ledger: only the CA decides then
                rate_limits="auto" if attempt < 2 else None,
            )
            if attempt == 0:
                with pytest.raises(RateLimited) as refused:
                    async with opening:
                        pytest.fail("opened without an account")
                assert refused.value.retry_after is not None
                # the key stays (the next try registers it), no URL was stored
                assert await storage.load(layout.account_key()) is not None
                assert await storage.load(layout.account_meta()) is None
            elif attempt == 1:
                # the stored ledger learned the CA's answer: nothing that creates an
                # account is sent before its instant (only a look-up of the key)
                with pytest.raises(RateLimitDeferred) as deferred:
                    async with opening:
                        pytest.fail("opened without an account")
                assert deferred.value.retry_after is not None
                assert deferred.value.retry_after >= refused.value.retry_after
            else:
                async with opening as manager:
                    assert manager.client.account_url is not None
            assert made[-1].closed == 1
    assert created_accounts(proxy) == 1
    creating = [
        r
        for r in proxy.requests_to(NEW_ACCOUNT, "POST")
        if r.payload and not r.payload.get("onlyReturnExisting")
    ]
    assert len(creating) == 2  # the refused one and the one that created the account


async def test_an_open_cancelled_while_registering_closes_the_client_and_frees_the_lock(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.add_rule(Match(NEW_ACCOUNT, "POST"), Stall(60.0))  # the first newAccount hangs
    registering = anyio.Event()

    def on_request(method: str, url: str) -> None:
        if method == "POST" and url.endswith(NEW_ACCOUNT):
            registering.set()

    transport = CountingTransport(proxy.directory_url, ca_bundle=pebble.ca_bundle)
    transport.subscribe(on_requests(on_request))
    async with FileStorage(tmp_path) as storage, Http01Server(port=0) as solver:
        with anyio.CancelScope() as scope:

            async def cancel_when_registering() -> None:
                await registering.wait()
                scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_when_registering)
                async with open_manager(
                    storage, proxy.directory_url, solvers=[solver], transport=transport
                ):
                    pytest.fail("opened although cancelled while registering")
        assert scope.cancelled_caught
        assert transport.closed == 1
        # the account lock was released: the next open takes it at once and registers
        async with open_manager(
            storage,
            proxy.directory_url,
            solvers=[solver],
            lock_timeout=0,
            ca_bundle=pebble.ca_bundle,
        ) as manager:
            assert manager.client.account_url is not None
    assert created_accounts(proxy) == 1


async def test_a_failing_block_stops_the_manager_and_closes_the_client(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    transport = CountingTransport(proxy.directory_url, ca_bundle=pebble.ca_bundle)
    async with FileStorage(tmp_path) as storage, Http01Server(port=0) as solver:
        with pytest.raises(LookupError, match="the operator's own error"):
            async with open_manager(
                storage, proxy.directory_url, solvers=[solver], transport=transport
            ):
                raise LookupError("the operator's own error")
    assert transport.closed == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"solvers": []}, "at least one solver"),
        ({"concurency": 4}, "unknown option 'concurency'"),
        ({"ledger": None}, "rate_limits="),
        ({"account_key": None}, "account_key_type="),
        ({"rate_limits": "letsencrypt"}, "rate_limits must be"),
        ({"account": "Not A Segment"}, "account name"),
        ({"account_key_type": "dsa"}, "dsa"),
        ({"concurrency": 0}, "concurrency"),
        ({"attempt_timeout": -1}, "attempt_timeout"),
        ({"lock_timeout": -1.0}, "lock_timeout"),
        # the one duration parser, before anything is read or written (it once got as far
        # as the account lock, which refused its "timeout")
        ({"lock_timeout": math.nan}, r"^lock_timeout must be a finite number of seconds"),
        ({"lock_timeout": math.inf}, r"^lock_timeout must be a finite number of seconds"),
        ({"lock_timeout": True}, r"^lock_timeout must be a finite number of seconds"),
        ({"directory_url": "ftp://ca.example/dir"}, "directory URL"),
        ({"storage": "/var/lib/acmecerts"}, "Storage"),
    ],
)
# ``on_request`` (deprecated, still a ClientOptions key) watches for any request; the client
# is made, and warns, only for the arguments checked after it (concurrency=0...)
@pytest.mark.filterwarnings("ignore:on_request is deprecated:DeprecationWarning")
async def test_bad_arguments_are_invalid_input_and_touch_nothing(
    tmp_path: Path, arguments: dict[str, Any], message: str
) -> None:
    sent: list[str] = []
    async with FileStorage(tmp_path / "store") as storage:
        call: dict[str, Any] = {
            "storage": storage,
            "directory_url": "https://ca.invalid/directory",
            "solvers": [object()],
            "on_request": lambda method, url: sent.append(url),
            **arguments,
        }
        with pytest.raises(InvalidInput, match=message):
            async with open_manager(**call):
                pytest.fail("opened")
        assert await storage.list("") == []
    assert sent == []


def test_the_options_are_exactly_what_the_client_and_the_manager_take() -> None:
    """A new client or manager argument must be added to the options (or wired)."""
    # terms_of_service_agreed: open_manager's own argument, passed on to the client
    wired_client = {
        "directory_url",
        "account_key",
        "account_url",
        "ledger",
        "terms_of_service_agreed",
    }
    wired_manager = {"client", "solvers", "storage", "layout", "clock"}  # clock: the client's

    def parameters(cls: type) -> set[str]:
        found = inspect.signature(cls.__init__).parameters
        return {n for n, p in found.items() if n != "self" and p.kind is p.KEYWORD_ONLY} | {
            n for n, p in found.items() if n != "self" and p.kind is p.POSITIONAL_OR_KEYWORD
        }

    assert set(ClientOptions.__optional_keys__) == parameters(AcmeClient) - wired_client
    assert set(ManagerOptions.__optional_keys__) == parameters(CertificateManager) - wired_manager
