"""LexiconSolver end to end: Pebble 2.10 validating through a real PowerDNS that lexicon writes.

One PowerDNS authoritative server (:class:`PowerDnsServer`, SQLite backend, HTTP API on
loopback) serves the module; each test starts a Pebble 2.10 whose ``-dnsserver`` is that
PowerDNS, and :class:`LexiconSolver` writes the TXT records through dns-lexicon's
``powerdns`` provider, i.e. through PowerDNS's HTTP API.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from acmecerts import AcmeClient, FakeClock
from acmecerts.errors import ErrorKind, InvalidInput
from acmecerts.protocol.identifiers import parse_identifier
from acmecerts.solvers import (
    ChallengeTask,
    DnsPropagationTimeout,
    DnsProviderError,
    LexiconSolver,
    PropagationCheck,
)
from tests.servers.powerdns import PowerDnsServer

from .conftest import assert_valid_chain

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

    from acmecerts.testing import PebbleServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def pdns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PowerDnsServer]:
    """PowerDNS for the module: example.test and delegated.test, HTTP API with a key."""
    with PowerDnsServer(tmp_path_factory.mktemp("pdns")) as server:
        yield server


@pytest.fixture
def dns_pebble(pdns: PowerDnsServer, pebble_factory: Callable[..., PebbleServer]) -> PebbleServer:
    """Pebble 2.10 resolving through ``pdns``."""
    return pebble_factory(dns_server=pdns.address, nonce_reject_percent=0, release="2.10")


@pytest.fixture
async def client(dns_pebble: PebbleServer) -> AsyncIterator[AcmeClient]:
    async with AcmeClient(dns_pebble.directory_url, ca_bundle=dns_pebble.ca_bundle) as acme:
        yield acme


def lexicon(pdns: PowerDnsServer, **kwargs: Any) -> LexiconSolver:
    """A solver writing to ``pdns``; lookups and the propagation check through it too."""
    options: dict[str, Any] = {
        "credentials": {"auth_token": pdns.api_key, "pdns_server": pdns.api_url},
        "environment": False,
        "resolvers": [pdns.address],
        "propagation": PropagationCheck(port=pdns.port, timeout=10),
        "timeout": 10,
    }
    options.update(kwargs)
    return LexiconSolver("powerdns", **options)


def txt_rrsets(pdns: PowerDnsServer, zone: str) -> dict[str, list[str]]:
    """The zone's TXT record sets as the API holds them (name -> contents)."""
    data = pdns.api_get(f"/api/v1/servers/localhost/zones/{zone}.")
    assert isinstance(data, dict)
    return {
        rrset["name"]: [record["content"] for record in rrset["records"]]
        for rrset in data["rrsets"]
        if rrset["type"] == "TXT"
    }


def challenge_posts(pebble: PebbleServer) -> int:
    return sum(1 for request in pebble.requests_seen() if request == ("POST", "/chalZ/"))


class Recording(LexiconSolver):
    """Records what PowerDNS serves once each present returns and around each cleanup."""

    def __init__(self, pdns: PowerDnsServer, **kwargs: Any) -> None:
        base = lexicon(pdns, **kwargs)
        self.__dict__.update(base.__dict__)
        self.pdns = pdns
        self.presented: list[ChallengeTask] = []
        self.after_present: list[set[str]] = []
        self.cleanups: list[tuple[str, set[str], set[str]]] = []

    async def present(self, task: ChallengeTask) -> None:
        await super().present(task)
        self.presented.append(task)
        self.after_present.append(self.pdns.txt_values(task.dns_record_name))

    async def cleanup(self, task: ChallengeTask) -> None:
        before = self.pdns.txt_values(task.dns_record_name)
        await super().cleanup(task)
        after = self.pdns.txt_values(task.dns_record_name)
        self.cleanups.append((task.dns_txt_value, before, after))


async def test_wildcard_and_apex_through_the_powerdns_api(
    pdns: PowerDnsServer, dns_pebble: PebbleServer, client: AcmeClient
) -> None:
    """Two values at one name, written concurrently, both validated, both removed."""
    solver = Recording(pdns)
    names = ["*.both.example.test", "both.example.test"]
    issued = await client.issue(names, solver=solver)
    assert_valid_chain(issued, dns_pebble, names)

    values = {task.dns_txt_value for task in solver.presented}
    assert len(values) == 2
    # Each present returned with its value served (the propagation check waited for it).
    for task, served in zip(solver.presented, solver.after_present, strict=True):
        assert task.dns_txt_value in served
    first, second = solver.cleanups
    # Both coexisted (the per-zone lock kept one write from replacing the other)...
    assert first[1] == values
    assert first[2] == values - {first[0]}
    # ...and the second cleanup removed the last one: nothing is left, in DNS or in the API.
    assert second[2] == set()
    assert pdns.txt_values("_acme-challenge.both.example.test") == set()
    assert "_acme-challenge.both.example.test." not in txt_rrsets(pdns, "example.test")


async def test_zone_found_by_soa_queries_for_a_second_zone(
    pdns: PowerDnsServer, dns_pebble: PebbleServer, client: AcmeClient
) -> None:
    """No zone given: delegated.test is found by SOA queries (lexicon's guess is not used)."""
    solver = lexicon(pdns)
    names = ["a.b.delegated.test"]
    issued = await client.issue(names, solver=solver)
    assert_valid_chain(issued, dns_pebble, names)
    assert pdns.txt_values("_acme-challenge.a.b.delegated.test") == set()
    assert txt_rrsets(pdns, "delegated.test") == {}


async def test_credentials_from_lexicon_environment_variables(
    pdns: PowerDnsServer,
    dns_pebble: PebbleServer,
    client: AcmeClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEXICON_POWERDNS_AUTH_TOKEN", pdns.api_key)
    monkeypatch.setenv("LEXICON_POWERDNS_PDNS_SERVER", pdns.api_url)
    solver = lexicon(pdns, credentials=None, environment=True)
    issued = await client.issue(["env.example.test"], solver=solver)
    assert_valid_chain(issued, dns_pebble, ["env.example.test"])
    assert pdns.txt_values("_acme-challenge.env.example.test") == set()
    # Without the environment the provider has no credentials at all.
    bare = lexicon(pdns, credentials=None, environment=False)
    with pytest.raises(DnsProviderError, match="pdns_server"):
        await client.issue(["noenv.example.test"], solver=bare)


async def test_wrong_api_key_fails_before_the_ca_is_asked_and_is_not_shown(
    pdns: PowerDnsServer, dns_pebble: PebbleServer, client: AcmeClient
) -> None:
    wrong = "not-the-key-" + pdns.api_key[:8]
    solver = lexicon(pdns, credentials={"auth_token": wrong, "pdns_server": pdns.api_url})
    assert wrong not in repr(solver)
    posts_before = challenge_posts(dns_pebble)
    with pytest.raises(DnsProviderError) as info:
        await client.issue(["badkey.example.test"], solver=solver)
    error = info.value
    assert error.status == 401
    assert error.kind is ErrorKind.PERMANENT
    assert error.provider == "powerdns"
    assert not error.reached_ca
    assert wrong not in str(error)
    assert challenge_posts(dns_pebble) == posts_before
    assert pdns.txt_values("_acme-challenge.badkey.example.test") == set()


async def test_propagation_timeout_then_the_record_is_cleaned_up(
    pdns: PowerDnsServer, dns_pebble: PebbleServer, client: AcmeClient
) -> None:
    """Written, but never visible where the check looks: give up after 30 fake s, delete it."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a DNS server that never answers
    silent.bind(("127.0.0.1", 0))
    try:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        clock = FakeClock()
        check = PropagationCheck([address], timeout=30, query_timeout=0.2, clock=clock)
        solver = Recording(pdns, propagation=check)
        posts_before = challenge_posts(dns_pebble)
        with pytest.raises(DnsPropagationTimeout) as info:
            await client.issue(["slow.example.test"], solver=solver)
    finally:
        silent.close()
    assert info.value.missing == (address,)
    assert sum(clock.sleeps) == pytest.approx(30)
    assert challenge_posts(dns_pebble) == posts_before
    # The value was published in PowerDNS, and the clean-up after the failure removed it.
    ((value, before, after),) = solver.cleanups
    assert before == {value}
    assert after == set()


async def test_a_hanging_api_blocks_neither_the_event_loop_nor_forever(
    pdns: PowerDnsServer,
) -> None:
    """lexicon runs in a worker thread: the loop keeps ticking, and ``timeout`` ends the wait."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections (kernel backlog) and never answers
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        solver = lexicon(
            pdns, credentials={"auth_token": "x" * 16, "pdns_server": url}, timeout=1.0
        )
        task = ChallengeTask(
            type="dns-01",
            identifier=parse_identifier("hang.example.test"),
            token="hang-token_0123456789abcdefghijklmnopq",
            key_authorization="hang-token_0123456789abcdefghijklmnopq.thumbprint",
            url="https://ca.test/chall/1",
        )
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await anyio.sleep(0.05)
                ticks += 1

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            with pytest.raises(DnsProviderError, match="no answer within 1 s") as info:
                await solver.present(task)
            tg.cancel_scope.cancel()
        elapsed = time.monotonic() - started
    finally:
        listener.close()
    assert info.value.kind is ErrorKind.TRANSIENT
    assert 1.0 <= elapsed < 5
    assert ticks >= 10  # the loop ran all along
    # The abandoned call may have written, so cleanup tries the delete: the API is gone now
    # (connection refused), a failure worth retrying.
    with pytest.raises(DnsProviderError, match="Connection refused") as refused:
        await solver.cleanup(task)
    assert refused.value.kind is ErrorKind.TRANSIENT
    assert refused.value.status is None


def test_unknown_provider_and_bad_options_are_refused() -> None:
    with pytest.raises(InvalidInput, match="did you mean powerdns"):
        LexiconSolver("powerdnss")
    with pytest.raises(InvalidInput, match="provider name"):
        LexiconSolver("Power DNS")
    with pytest.raises(InvalidInput, match="must be a string"):
        LexiconSolver("powerdns", credentials={"auth_token": 123})  # type: ignore[dict-item]
    with pytest.raises(InvalidInput, match="ttl"):
        LexiconSolver("powerdns", ttl=0)
    solver = LexiconSolver("powerdns", credentials={"auth_token": "s3cret-token"})
    assert "s3cret-token" not in repr(solver)
    assert "auth_token" in repr(solver)
