"""dns-01 end to end: a real Pebble validating through a real BIND that the solvers update.

One ``named`` (:class:`BindServer`) and one Pebble started with ``-dnsserver`` pointing at
it serve the module, so Pebble resolves ``_acme-challenge`` TXT records through exactly the
server :class:`Rfc2136Solver` (or a hook) writes to.
"""

from __future__ import annotations

import shutil
import textwrap
from typing import TYPE_CHECKING

import dns.asyncquery
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TXT
import dns.tsig
import dns.update
import pytest

from acmecerts import AcmeClient, FakeClock
from acmecerts.solvers import (
    ChallengeTask,
    DnsHookSolver,
    DnsPropagationTimeout,
    DnsUpdateRefused,
    PropagationCheck,
    Rfc2136Solver,
)
from acmecerts.testing import PebbleServer
from tests.servers.bind import BindServer

from .conftest import assert_valid_chain

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def bind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BindServer]:
    """BIND for the module: example.test (wildcard A), delegated.test, TSIG updates."""
    if shutil.which("named") is None:
        pytest.fail("named not found: apt-get install -y bind9 bind9-utils", pytrace=False)
    with BindServer(tmp_path_factory.mktemp("bind")) as server:
        yield server


@pytest.fixture(scope="module")
def dns_pebble(
    bind: BindServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PebbleServer]:
    """Pebble resolving through ``bind`` (no challtestsrv)."""
    with PebbleServer(
        tmp_path_factory.mktemp("pebble-dns"), dns_server=bind.address, nonce_reject_percent=0
    ) as server:
        yield server


@pytest.fixture
async def client(dns_pebble: PebbleServer) -> AsyncIterator[AcmeClient]:
    """A client with a fresh account (so no authorization is reused between tests)."""
    async with AcmeClient(dns_pebble.directory_url, ca_bundle=dns_pebble.ca_bundle) as acme:
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


def challenge_posts(pebble: PebbleServer) -> int:
    return sum(1 for request in pebble.requests_seen() if request == ("POST", "/chalZ/"))


class RecordingSolver(Rfc2136Solver):
    """Records what BIND serves around each present and cleanup (Rfc2136Solver defaults)."""

    def __init__(self, bind: BindServer) -> None:
        super().__init__(
            "127.0.0.1",
            port=bind.port,
            tsig_key_name=bind.tsig_key_name,
            tsig_secret=bind.tsig_secret,
        )
        self.bind = bind
        self.presented: list[ChallengeTask] = []
        #: (record name written, TXT values there once present returned)
        self.after_present: list[tuple[str, set[str]]] = []
        #: (task value, TXT values before its cleanup, TXT values after it), as the CA's
        #: resolver sees ``_acme-challenge.<name>`` (through a CNAME, if any)
        self.cleanups: list[tuple[str, set[str], set[str]]] = []

    async def present(self, task: ChallengeTask) -> None:
        await super().present(task)
        self.presented.append(task)
        location = await self.locate(task.identifier.value)
        self.after_present.append((location.name, self.bind.txt_values(location.name)))

    async def cleanup(self, task: ChallengeTask) -> None:
        record = f"_acme-challenge.{task.identifier.base_name}"
        before = self.bind.txt_values(record, recursion_desired=True)
        await super().cleanup(task)
        after = self.bind.txt_values(record, recursion_desired=True)
        self.cleanups.append((task.dns_txt_value, before, after))


async def test_wildcard_and_apex_in_one_certificate(
    bind: BindServer, dns_pebble: PebbleServer, client: AcmeClient
) -> None:
    solver = RecordingSolver(bind)
    names = ["*.example.test", "example.test"]
    issued = await client.issue(names, solver=solver)
    assert_valid_chain(issued, dns_pebble, names)

    # Two challenges, two different values at the one name _acme-challenge.example.test.
    values = {task.dns_txt_value for task in solver.presented}
    assert len(values) == 2
    assert {task.identifier.value for task in solver.presented} == set(names)
    first, second = solver.cleanups
    # Both coexisted until the first cleanup, which removed only its own value...
    assert first[1] == values
    assert first[2] == values - {first[0]}
    # ...and the second removed the other.
    assert second[1] == {second[0]}
    assert second[2] == set()
    assert bind.txt_values("_acme-challenge.example.test") == set()


async def test_ten_names(bind: BindServer, dns_pebble: PebbleServer, client: AcmeClient) -> None:
    names = [f"n{i}.ten.example.test" for i in range(10)]
    solver = rfc2136(bind)
    issued = await client.issue(names, solver=solver)
    assert_valid_chain(issued, dns_pebble, names)
    for name in names:
        assert bind.txt_values(f"_acme-challenge.{name}") == set()


async def test_cname_delegation(
    bind: BindServer, dns_pebble: PebbleServer, client: AcmeClient
) -> None:
    """``_acme-challenge.cname.example.test CNAME _acme-challenge.target.delegated.test``."""
    solver = RecordingSolver(bind)
    issued = await client.issue(["cname.example.test"], solver=solver)
    assert_valid_chain(issued, dns_pebble, ["cname.example.test"])
    (task,) = solver.presented
    # The update landed in delegated.test, and cleanup removed it from there.
    target = "_acme-challenge.target.delegated.test"
    assert solver.after_present == [(target, {task.dns_txt_value})]
    assert solver.cleanups == [(task.dns_txt_value, {task.dns_txt_value}, set())]
    assert bind.txt_values("_acme-challenge.target.delegated.test") == set()
    # The CNAME itself was left alone.
    answer = bind.query("_acme-challenge.cname.example.test", "CNAME").answer
    assert [rr.to_text() for rrset in answer for rr in rrset] == [
        "_acme-challenge.target.delegated.test."
    ]


async def test_hook_solver_with_callables(
    bind: BindServer, dns_pebble: PebbleServer, client: AcmeClient
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
        if response.rcode() != dns.rcode.NOERROR:
            raise RuntimeError(dns.rcode.to_text(response.rcode()))

    async def set_record(name: str, value: str) -> None:
        calls.append(("set", name))
        await update(name, value, add=True)

    async def clear_record(name: str, value: str) -> None:
        calls.append(("clear", name))
        await update(name, value, add=False)

    # The authoritative check: zone, NS ns.example.test, its address, all through BIND.
    check = PropagationCheck(resolver=bind.address, port=bind.port, timeout=10)
    solver = DnsHookSolver(set_record, clear_record, propagation=check)
    names = ["*.hook.example.test", "hook.example.test"]
    issued = await client.issue(names, solver=solver)
    assert_valid_chain(issued, dns_pebble, names)
    assert (
        sorted(calls)
        == [("clear", "_acme-challenge.hook.example.test")] * 2
        + [("set", "_acme-challenge.hook.example.test")] * 2
    )
    assert bind.txt_values("_acme-challenge.hook.example.test") == set()


async def test_command_hook_with_nsupdate(
    bind: BindServer, dns_pebble: PebbleServer, client: AcmeClient, tmp_path: Path
) -> None:
    if shutil.which("nsupdate") is None:
        pytest.fail(
            "nsupdate not found: apt-get install -y bind9-dnsutils (Debian 12 ships it "
            "there, not in bind9-utils)",
            pytrace=False,
        )
    script = tmp_path / "nsupdate-hook.sh"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            # Usage: nsupdate-hook.sh present|cleanup NAME VALUE
            set -eu
            case "$1" in
                present) change="add $2. 60 TXT \\"$3\\"" ;;
                cleanup) change="delete $2. TXT \\"$3\\"" ;;
                *) echo "unknown action $1" >&2; exit 2 ;;
            esac
            nsupdate -k {bind.key_file} <<EOF
            server 127.0.0.1 {bind.port}
            zone example.test
            update $change
            send
            EOF
            """
        )
    )
    script.chmod(0o755)
    check = PropagationCheck([bind.address], timeout=10)
    solver = DnsHookSolver.from_command([str(script)], timeout=20, propagation=check)
    names = ["*.nsupdate.example.test", "nsupdate.example.test", "www.nsupdate.example.test"]
    issued = await client.issue(names, solver=solver)
    assert_valid_chain(issued, dns_pebble, names)
    assert bind.txt_values("_acme-challenge.nsupdate.example.test") == set()
    assert bind.txt_values("_acme-challenge.www.nsupdate.example.test") == set()


async def test_bad_tsig_secret_fails_before_the_ca_is_asked_to_validate(
    bind: BindServer, dns_pebble: PebbleServer, client: AcmeClient
) -> None:
    solver = rfc2136(bind, tsig_secret="c2VjcmV0IHRoYXQgQklORCBkb2VzIG5vdCBrbm93IQ==")
    posts_before = challenge_posts(dns_pebble)
    with pytest.raises(DnsUpdateRefused, match="BADSIG") as info:
        await client.issue(["badsig.example.test"], solver=solver)
    assert info.value.rcode == "BADSIG"
    assert not info.value.reached_ca
    assert challenge_posts(dns_pebble) == posts_before  # no challenge was answered
    assert bind.txt_values("_acme-challenge.badsig.example.test") == set()


async def test_propagation_timeout_on_a_fake_clock(
    bind: BindServer, dns_pebble: PebbleServer, client: AcmeClient
) -> None:
    """A record that never appears: the check gives up after 120 s of (fake) time."""
    published: list[str] = []

    async def set_record(name: str, value: str) -> None:
        published.append(name)  # ...but it never reaches the DNS

    async def clear_record(name: str, value: str) -> None:
        pass

    clock = FakeClock()
    check = PropagationCheck([bind.address], timeout=120, clock=clock)
    solver = DnsHookSolver(set_record, clear_record, propagation=check)
    posts_before = challenge_posts(dns_pebble)
    with pytest.raises(DnsPropagationTimeout) as info:
        await client.issue(["never.example.test"], solver=solver)
    assert info.value.missing == (bind.address,)
    assert published == ["_acme-challenge.never.example.test"]
    assert sum(clock.sleeps) == pytest.approx(120)
    assert challenge_posts(dns_pebble) == posts_before
