"""dns-account-01 and dns-persist-01 end to end: Pebble 2.10 validating through BIND.

One ``named`` and one Pebble 2.10 (``-dnsserver`` at it, no authorization reuse, so every
order is validated anew) serve the module.
"""

from __future__ import annotations

import datetime as _dt
import logging
import shutil
from typing import TYPE_CHECKING

import anyio
import dns.asyncquery
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TXT
import dns.tsig
import dns.update
import pytest

from acmecerts import AcmeClient
from acmecerts.protocol.challenges import (
    dns_account01_label,
    dns_persist01_txt_value,
)
from acmecerts.solvers import (
    ChallengeTask,
    DnsHookSolver,
    DnsPersistRecordMissing,
    DnsPersistSolver,
    PropagationCheck,
    Rfc2136Solver,
)
from acmecerts.testing import PebbleServer
from tests.servers.bind import BindServer

from .conftest import assert_valid_chain

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

ISSUER = "pebble.letsencrypt.org"  # Pebble's default caaIdentities: its issuer domain name


@pytest.fixture(scope="module")
def bind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BindServer]:
    if shutil.which("named") is None:
        pytest.fail("named not found: apt-get install -y bind9 bind9-utils", pytrace=False)
    with BindServer(tmp_path_factory.mktemp("bind")) as server:
        yield server


@pytest.fixture(scope="module")
def ca(bind: BindServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PebbleServer]:
    """Pebble 2.10 resolving through ``bind``; authorizations are never reused."""
    with PebbleServer(
        tmp_path_factory.mktemp("pebble-dns-new"),
        dns_server=bind.address,
        nonce_reject_percent=0,
        authz_reuse_percent=0,
        release="2.10",
    ) as server:
        yield server


@pytest.fixture
async def client(ca: PebbleServer) -> AsyncIterator[AcmeClient]:
    async with AcmeClient(ca.directory_url, ca_bundle=ca.ca_bundle) as acme:
        yield acme


def rfc2136(bind: BindServer, **kwargs: object) -> Rfc2136Solver:
    options: dict[str, object] = {
        "port": bind.port,
        "tsig_key_name": bind.tsig_key_name,
        "tsig_secret": bind.tsig_secret,
        "tsig_algorithm": bind.tsig_algorithm,
        "timeout": 5,
    }
    options.update(kwargs)
    return Rfc2136Solver("127.0.0.1", **options)  # type: ignore[arg-type]


def check(bind: BindServer) -> PropagationCheck:
    """The authoritative check: zone, NS, its address, all through BIND."""
    return PropagationCheck(resolver=bind.address, port=bind.port, timeout=10)


def serial(bind: BindServer, zone: str = "example.test") -> int:
    """The zone's SOA serial: BIND raises it with every dynamic update it applies."""
    (rrset,) = bind.query(zone, "SOA").answer
    return int(rrset[0].serial)


def challenge_posts(pebble: PebbleServer) -> int:
    return sum(1 for request in pebble.requests_seen() if request == ("POST", "/chalZ/"))


async def add_txt(bind: BindServer, name: str, value: str) -> None:
    """Publish a TXT record by hand (as a zone's administrator would)."""
    key = dns.tsig.Key(bind.tsig_key_name, bind.tsig_secret, bind.tsig_algorithm)
    message = dns.update.UpdateMessage("example.test", keyring=key)
    rdata = dns.rdtypes.ANY.TXT.TXT(dns.rdataclass.IN, dns.rdatatype.TXT, [value.encode()])
    message.add(name + ".", 60, rdata)
    response = await dns.asyncquery.tcp(message, "127.0.0.1", port=bind.port, timeout=5)
    assert response.rcode() == dns.rcode.NOERROR


# -- dns-account-01 ---------------------------------------------------------------------


class GatedSolver:
    """An Rfc2136Solver for dns-account-01 whose present waits for the other account's
    (so both records are up at once) and whose cleanup waits for ``release``."""

    challenge_type = "dns-account-01"

    def __init__(self, inner: Rfc2136Solver, both_presented: anyio.Event) -> None:
        self.inner = inner
        self.both_presented = both_presented
        self.presented = anyio.Event()
        self.release = anyio.Event()
        self.cleaned = anyio.Event()
        self.tasks: list[ChallengeTask] = []

    def supports(self, identifier: object) -> bool:
        return self.inner.supports(identifier)  # type: ignore[arg-type]

    async def present(self, task: ChallengeTask) -> None:
        await self.inner.present(task)
        self.tasks.append(task)
        self.presented.set()
        await self.both_presented.wait()

    async def cleanup(self, task: ChallengeTask) -> None:
        await self.release.wait()
        await self.inner.cleanup(task)
        self.cleaned.set()


async def test_two_accounts_validate_one_name_at_once_with_dns_account_01(
    bind: BindServer, ca: PebbleServer
) -> None:
    name = "shared.example.test"
    both = anyio.Event()
    solvers = [GatedSolver(rfc2136(bind, challenge_type="dns-account-01"), both) for _ in range(2)]
    issued: list[object] = [None, None]
    async with (
        AcmeClient(ca.directory_url, ca_bundle=ca.ca_bundle) as first,
        AcmeClient(ca.directory_url, ca_bundle=ca.ca_bundle) as second,
    ):
        clients = [first, second]

        async def issue(i: int) -> None:
            issued[i] = await clients[i].issue([name], solver=solvers[i])

        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(issue, i)
            with anyio.fail_after(30):
                for solver in solvers:
                    await solver.presented.wait()
            # Both accounts' records are up, each at a name of its own account.
            records = []
            for client, solver in zip(clients, solvers, strict=True):
                assert client.account_url is not None
                (task,) = solver.tasks
                record = f"{dns_account01_label(client.account_url)}._acme-challenge.{name}"
                assert task.dns_record_name == record
                assert bind.txt_values(record) == {task.dns_txt_value}
                records.append((record, task.dns_txt_value))
            assert records[0][0] != records[1][0]
            assert bind.txt_values(f"_acme-challenge.{name}") == set()  # dns-01's name unused
            both.set()
            # The first account cleans up; the second's record stays until its own cleanup.
            solvers[0].release.set()
            with anyio.fail_after(30):
                await solvers[0].cleaned.wait()
            assert bind.txt_values(records[0][0]) == set()
            assert bind.txt_values(records[1][0]) == {records[1][1]}
            solvers[1].release.set()
    assert bind.txt_values(records[1][0]) == set()
    for certificate in issued:
        assert_valid_chain(certificate, ca, [name])  # type: ignore[arg-type]


async def test_hook_solver_writes_the_account_label_name(
    bind: BindServer, ca: PebbleServer, client: AcmeClient
) -> None:
    key = dns.tsig.Key(bind.tsig_key_name, bind.tsig_secret, bind.tsig_algorithm)
    calls: list[tuple[str, str]] = []

    async def update(name: str, value: str, *, add: bool) -> None:
        message = dns.update.UpdateMessage("example.test", keyring=key)
        rdata = dns.rdtypes.ANY.TXT.TXT(dns.rdataclass.IN, dns.rdatatype.TXT, [value.encode()])
        if add:
            message.add(name + ".", 60, rdata)
        else:
            message.delete(name + ".", rdata)
        response = await dns.asyncquery.tcp(message, "127.0.0.1", port=bind.port, timeout=5)
        assert response.rcode() == dns.rcode.NOERROR

    async def set_record(name: str, value: str) -> None:
        calls.append(("set", name))
        await update(name, value, add=True)

    async def clear_record(name: str, value: str) -> None:
        calls.append(("clear", name))
        await update(name, value, add=False)

    solver = DnsHookSolver(
        set_record, clear_record, propagation=check(bind), challenge_type="dns-account-01"
    )
    names = ["*.hooked.example.test", "hooked.example.test"]
    issued = await client.issue(names, solver=solver)
    assert_valid_chain(issued, ca, names)
    assert client.account_url is not None
    record = f"{dns_account01_label(client.account_url)}._acme-challenge.hooked.example.test"
    assert sorted(calls) == [("clear", record)] * 2 + [("set", record)] * 2
    assert bind.txt_values(record) == set()


# -- dns-persist-01 ---------------------------------------------------------------------


async def test_persist_record_published_once_then_renewal_writes_nothing(
    bind: BindServer, ca: PebbleServer, client: AcmeClient
) -> None:
    name = "persist.example.test"
    record = f"_validation-persist.{name}"
    solver = DnsPersistSolver(publisher=rfc2136(bind))
    issued = await client.issue([name], solver=solver)
    assert_valid_chain(issued, ca, [name])
    assert client.account_url is not None
    expected = dns_persist01_txt_value(ISSUER, client.account_url)
    assert solver.published == [(record, expected)]
    assert bind.txt_values(record) == {expected}  # left there: it is persistent

    # The renewal: validated again by the CA (no authorization reuse), nothing written.
    serial_before, posts_before = serial(bind), challenge_posts(ca)
    for renewer in (solver, DnsPersistSolver(propagation=check(bind))):
        renewed = await client.issue([name], solver=renewer)
        assert_valid_chain(renewed, ca, [name])
    assert challenge_posts(ca) == posts_before + 2  # dns-persist-01 answered each time
    assert serial(bind) == serial_before  # no dynamic update reached the zone
    assert solver.published == [(record, expected)]
    assert bind.txt_values(record) == {expected}


async def test_persist_wildcard_needs_policy_wildcard(
    bind: BindServer, ca: PebbleServer, client: AcmeClient
) -> None:
    solver = DnsPersistSolver(publisher=rfc2136(bind), wildcard=True)
    names = ["*.pwild.example.test", "pwild.example.test"]
    issued = await client.issue(names, solver=solver)
    assert_valid_chain(issued, ca, names)
    assert client.account_url is not None
    expected = dns_persist01_txt_value(ISSUER, client.account_url, wildcard=True)
    # one record, policy=wildcard, serves the wildcard and the base name
    assert solver.published == [("_validation-persist.pwild.example.test", expected)]


async def test_persist_missing_record_names_what_to_publish(
    bind: BindServer, ca: PebbleServer, client: AcmeClient
) -> None:
    name = "unpublished.example.test"
    posts_before, serial_before = challenge_posts(ca), serial(bind)
    solver = DnsPersistSolver(propagation=check(bind))
    with pytest.raises(DnsPersistRecordMissing) as info:
        await client.issue([name], solver=solver)
    assert client.account_url is not None
    expected = dns_persist01_txt_value(ISSUER, client.account_url)
    assert info.value.value == expected
    assert info.value.name == f"_validation-persist.{name}"
    assert f'_validation-persist.{name}. IN TXT "{expected}"' in str(info.value)
    assert challenge_posts(ca) == posts_before  # the CA was never asked to validate
    assert serial(bind) == serial_before

    # Published by hand, the same solver (no publisher) now succeeds.
    await add_txt(bind, info.value.name, info.value.value)
    issued = await client.issue([name], solver=solver)
    assert_valid_chain(issued, ca, [name])


async def test_persist_another_accounts_record_does_not_count(
    bind: BindServer, ca: PebbleServer, client: AcmeClient
) -> None:
    name = "other.example.test"
    await add_txt(
        bind,
        f"_validation-persist.{name}",
        dns_persist01_txt_value(ISSUER, "https://localhost/my-account/999999"),
    )
    with pytest.raises(DnsPersistRecordMissing, match="another account"):
        await client.issue([name], solver=DnsPersistSolver(propagation=check(bind)))


async def test_persist_until_near_warns_and_past_fails(
    bind: BindServer, ca: PebbleServer, client: AcmeClient, caplog: pytest.LogCaptureFixture
) -> None:
    await client.account()  # the account URL, for the records below
    assert client.account_url is not None
    now = _dt.datetime.now(_dt.UTC)
    soon, past = "soon.example.test", "past.example.test"
    await add_txt(
        bind,
        f"_validation-persist.{soon}",
        dns_persist01_txt_value(
            ISSUER, client.account_url, persist_until=now + _dt.timedelta(days=10)
        ),
    )
    await add_txt(
        bind,
        f"_validation-persist.{past}",
        dns_persist01_txt_value(
            ISSUER, client.account_url, persist_until=now - _dt.timedelta(hours=1)
        ),
    )
    solver = DnsPersistSolver(propagation=check(bind))
    with caplog.at_level(logging.WARNING, logger="acmecerts.solvers.dns01"):
        issued = await client.issue([soon], solver=solver)
    assert_valid_chain(issued, ca, [soon])
    (warning,) = [r for r in caplog.records if "persistUntil" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert f"_validation-persist.{soon}" in warning.getMessage()
    assert "10 days" in warning.getMessage()

    with pytest.raises(DnsPersistRecordMissing, match="ended at its persistUntil"):
        await client.issue([past], solver=solver)
