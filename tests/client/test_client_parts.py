"""The parts ``AcmeClient`` is made of, each driven by itself against the session's Pebble.

``build_parts()`` wires them as the client does: one :class:`AccountIdentity`, the
:class:`Registration` that sets its URL, the :class:`SignedRequests` every resource
object sends through, the resources, :class:`Polling` and the :class:`Issuer`. The
facade holds them and nothing else; no class of ``acmecerts/client/`` inherits from
another.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import acmecerts.client
from acmecerts import AcmeClient, FakeClock, Http01Server, InvalidInput, PollPolicy
from acmecerts._time import Again, SystemClock
from acmecerts.client._build import ClientParts, build_parts
from acmecerts.client._polling import Polling
from acmecerts.errors import AttemptTimeout
from acmecerts.protocol.ari import cert_id
from acmecerts.protocol.keys import AccountKey
from acmecerts.testing import PebbleServer
from acmecerts.transport import AcmeTransport
from tests.package_classes import classes_defined_in

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def parts(pebble: PebbleServer) -> AsyncIterator[ClientParts]:
    """The parts of a client with a fresh account key on the session Pebble."""
    transport = AcmeTransport(pebble.directory_url, ca_bundle=pebble.ca_bundle)
    async with transport:
        yield build_parts(transport, clock=SystemClock(), poll=PollPolicy(initial=0.1))


def posts(pebble: PebbleServer, path: str, since: int) -> int:
    return pebble.requests_seen()[since:].count(("POST", path))


# -- the shape ---------------------------------------------------------------------------


def test_no_class_of_the_client_inherits_from_another() -> None:
    classes = classes_defined_in(acmecerts.client)
    assert {c.__name__ for c in classes} >= {"AcmeClient", "Issuer", "SignedRequests"}
    inherited = {
        f"{cls.__name__}({base.__name__})"
        for cls in classes
        for base in cls.__mro__[1:]
        if base.__module__.startswith("acmecerts.client")
    }
    assert inherited == set()


async def test_the_client_is_a_facade_with_nothing_private(pebble: PebbleServer) -> None:
    """Nothing private to call from outside: the manager and the CLI use public names."""
    private = [
        name
        for name in vars(AcmeClient)
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
    ]
    assert private == []
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        assert list(vars(client)) == ["parts"]
    reaching_in = re.compile(r"\b(?:client|acme)\)?\._[a-z]")
    for package in ("manager", "cli"):
        for path in (ROOT / "acmecerts" / package).rglob("*.py"):
            assert not reaching_in.search(path.read_text()), path


async def test_settings_are_the_attributes_of_the_parts(pebble: PebbleServer) -> None:
    key = AccountKey.generate()
    async with AcmeClient(
        pebble.directory_url,
        ca_bundle=pebble.ca_bundle,
        account_key=key,
        contact=["mailto:a@b.test"],
    ) as client:
        parts = client.parts
        assert parts.identity.key is key
        assert client.account_key is key
        client.account_url = "https://ca.test/acct/1"
        assert parts.identity.url == "https://ca.test/acct/1"
        policy = PollPolicy(initial=1.0)
        client.poll = policy
        assert parts.polling.policy is policy
        assert parts.issuer.polling.policy is policy
        client.send_replaces = False
        assert parts.orders.send_replaces is False
        client.terms_of_service_agreed = False
        assert parts.registration.terms_of_service_agreed is False
        client.attempt_timeout = _dt.timedelta(minutes=2)
        assert parts.issuer.attempt_timeout == 120.0
        with pytest.raises(InvalidInput):
            client.attempt_timeout = float("nan")
        assert client.attempt_timeout == 120.0
        assert client.contact == ("mailto:a@b.test",)
        with pytest.raises(AttributeError):
            client.contact = ("mailto:c@d.test",)  # type: ignore[misc]
        with pytest.raises(AttributeError):
            client.eab = None  # type: ignore[misc]
    with pytest.raises(InvalidInput):
        AcmeClient(pebble.directory_url, attempt_timeout=float("nan"))


# -- identity, registration, signed requests -------------------------------------------------


async def test_concurrent_signed_requests_register_once(
    parts: ClientParts, pebble: PebbleServer
) -> None:
    seen = len(pebble.requests_seen())
    assert parts.identity.url is None
    kids: list[str] = []

    async def ask() -> None:
        kids.append(await parts.signed.kid())

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(ask)
    assert posts(pebble, "/sign-me-up", seen) == 1
    assert parts.identity.url is not None
    assert set(kids) == {parts.identity.url}
    response = await parts.signed.post_as_get(parts.identity.url)
    assert response.json()["status"] == "valid"


async def test_the_registration_finds_the_key_s_account(
    parts: ClientParts, pebble: PebbleServer
) -> None:
    created = await parts.registration.register()
    parts.identity.url = None
    found = await parts.registration.find_account()
    assert found.url == created.url == parts.identity.url
    stranger = AccountKey.generate()
    assert await parts.registration.owner_of(stranger) is None
    assert await parts.registration.owner_of(parts.identity.key) == created.url


async def test_the_account_object_through_signed_requests(parts: ClientParts) -> None:
    account = await parts.accounts.update_contact(["mailto:ops@parts.example.test"])
    assert account.contact == ("mailto:ops@parts.example.test",)
    assert parts.registration.contact == ("mailto:ops@parts.example.test",)
    old_key, new_key = parts.identity.key, AccountKey.generate()
    await parts.accounts.change_key(new_key)
    assert parts.identity.key is new_key is not old_key
    assert (await parts.accounts.get()).url == parts.identity.url  # signed by the new key
    assert (await parts.accounts.deactivate()).status == "deactivated"


# -- orders, authorizations, polling -----------------------------------------------------------


async def test_an_order_and_its_authorization(parts: ClientParts) -> None:
    orders = parts.orders
    orders.send_replaces = False
    request = orders.request(["order.parts.example.test"], replaces="aaaa.bbbb")
    assert request.replaces is None  # dropped: send_replaces is false
    order = await orders.create(request)
    assert order.status == "pending"
    fetched, _ = await orders.fetch(order.url)
    assert fetched.identifiers == order.identifiers
    [authz_url] = order.authorizations
    authz = await parts.authorizations.get(authz_url)
    assert authz.status == "pending"
    assert (await parts.authorizations.deactivate(authz_url)).status == "deactivated"
    deadline = parts.clock.now() + _dt.timedelta(seconds=30)
    settled = await orders.wait(order, until=frozenset({"ready"}), deadline=deadline)
    assert settled.status == "invalid"  # its only authorization was deactivated


async def test_polling_paces_by_the_policy_and_stops_at_the_deadline() -> None:
    clock = FakeClock(_dt.datetime(2026, 1, 1, tzinfo=_dt.UTC))
    polling = Polling(clock, PollPolicy(initial=1.0, multiplier=2.0, max_interval=3.0))
    answers: list[str | Again[str]] = [Again(None), Again(None), Again(None), "done"]

    async def check() -> str | Again[str]:
        return answers.pop(0)

    deadline = clock.now() + _dt.timedelta(minutes=1)
    assert await polling.until(check, deadline) == "done"
    assert clock.sleeps == [1.0, 2.0, 3.0]

    async def never() -> str | Again[str]:
        return Again(None)

    with pytest.raises(AttemptTimeout):
        await polling.until(never, clock.now() + _dt.timedelta(seconds=10))


# -- the issuer, the certificate, renewal information ------------------------------------------


@pytest.mark.timeout(180)
async def test_the_issuer_over_the_resources(parts: ClientParts, pebble: PebbleServer) -> None:
    async with Http01Server(host="127.0.0.1", port=pebble.http_port) as solver:
        issued = await parts.issuer.issue(["issuer.parts.example.test"], solver=solver)
    assert issued.names == ("issuer.parts.example.test",)
    assert issued.certificate_url is not None
    chain, _ = await parts.certificates.download(issued.certificate_url)
    assert chain.leaf == issued.chain.leaf
    info = await parts.renewal_info.get(issued.certificate_pem)
    assert info.cert_id == cert_id(issued.chain.leaf)
    assert info.info.window_start < info.info.window_end
    await parts.certificates.revoke(issued.certificate_pem, reason=4)
    with pytest.raises(InvalidInput):
        await parts.certificates.revoke(issued.certificate_pem, reason=2)
