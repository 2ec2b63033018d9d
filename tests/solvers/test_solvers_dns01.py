"""The dns-01 solvers and the propagation check, against a real BIND 9 (RFC 2136 + TSIG).

Everything here talks to one ``named`` started for the module (:class:`BindServer`): zone
discovery, CNAME delegation, the mapping of every refusal to a typed error, the
add/delete-one-value semantics a wildcard and its base name rely on, the hook solvers and
the propagation check (with a fake clock where it has to time out).
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import re
import secrets
import socket
import sys
from typing import TYPE_CHECKING

import anyio
import dns.asyncquery
import dns.exception
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TXT
import dns.tsig
import dns.update
import pytest

from acmecerts import AcmeCertsError, ErrorKind, FakeClock, InvalidInput, UnsupportedChallenge
from acmecerts.protocol.challenges import key_authorization
from acmecerts.protocol.identifiers import parse_identifier
from acmecerts.solvers import (
    ChallengeTask,
    DnsError,
    DnsHookError,
    DnsHookSolver,
    DnsPropagationTimeout,
    DnsRecordLocation,
    DnsUpdateRefused,
    DnsZoneNotFound,
    PropagationCheck,
    Rfc2136Solver,
    Solver,
)
from acmecerts.solvers.dns01._lookup import _find_zone, _Lookup
from acmecerts.solvers.dns01._query import _translate
from acmecerts.solvers.dns01._records import _parse_server
from tests.servers.bind import BindServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.anyio

THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"

# A chain of 9 CNAMEs (one more than the solver follows) and a loop, for the limits.
_LONG_CHAIN = [
    f"_acme-challenge.long{i} CNAME _acme-challenge.long{i + 1}.example.test." for i in range(9)
]
_LOOP = [
    "_acme-challenge.loop1 CNAME _acme-challenge.loop2.example.test.",
    "_acme-challenge.loop2 CNAME _acme-challenge.loop1.example.test.",
]
# A CNAME out of the server's zones: it ends the chain where the server stops answering.
_AWAY = ["_acme-challenge.away CNAME _acme-challenge.elsewhere.invalid."]


@pytest.fixture(scope="module")
def bind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BindServer]:
    """One recursive+authoritative BIND for the module, with a few extra CNAMEs."""
    with BindServer(
        tmp_path_factory.mktemp("bind"),
        extra_records={"example.test": [*_LONG_CHAIN, *_LOOP, *_AWAY]},
    ) as server:
        yield server


@pytest.fixture(scope="module")
def bind_authoritative(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BindServer]:
    """A purely authoritative BIND (``recursion no``), as a hidden primary usually is."""
    with BindServer(tmp_path_factory.mktemp("bind-auth"), recursion=False) as server:
        yield server


def make_solver(bind: BindServer, **kwargs: object) -> Rfc2136Solver:
    options: dict[str, object] = {
        "port": bind.port,
        "tsig_key_name": bind.tsig_key_name,
        "tsig_secret": bind.tsig_secret,
        "tsig_algorithm": bind.tsig_algorithm,
        "propagation": PropagationCheck(port=bind.port, interval=0.05, timeout=5),
        "timeout": 5,
    }
    options.update(kwargs)
    return Rfc2136Solver("127.0.0.1", **options)  # type: ignore[arg-type]


def make_task(name: str, *, token: str | None = None, type: str = "dns-01") -> ChallengeTask:
    token = token if token is not None else secrets.token_urlsafe(32)
    return ChallengeTask(
        type=type,
        identifier=parse_identifier(name),
        token=token,
        key_authorization=key_authorization(token, THUMBPRINT),
        url=f"https://ca.test/chall/{token[:8]}",
    )


def other_secret() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


# -- construction -----------------------------------------------------------------------------


def test_solvers_satisfy_the_protocol(bind: BindServer) -> None:
    async def hook(name: str, value: str) -> None: ...

    assert isinstance(make_solver(bind), Solver)
    assert isinstance(DnsHookSolver(hook, hook), Solver)
    assert make_solver(bind).challenge_type == "dns-01"


def test_bad_tsig_settings_are_refused_without_echoing_the_secret() -> None:
    with pytest.raises(InvalidInput, match="not valid base64") as info:
        Rfc2136Solver("127.0.0.1", tsig_key_name="k", tsig_secret="not base64 !!sekrit")
    assert "sekrit" not in str(info.value)
    with pytest.raises(InvalidInput, match="unknown TSIG algorithm"):
        Rfc2136Solver(
            "127.0.0.1", tsig_key_name="k", tsig_secret=other_secret(), tsig_algorithm="rot13"
        )
    with pytest.raises(InvalidInput, match="empty"):
        Rfc2136Solver("127.0.0.1", tsig_key_name="k", tsig_secret="")
    with pytest.raises(InvalidInput, match="port"):
        Rfc2136Solver("127.0.0.1", port=0, tsig_key_name="k", tsig_secret=other_secret())
    with pytest.raises(InvalidInput, match="ttl"):
        Rfc2136Solver("127.0.0.1", ttl=-1, tsig_key_name="k", tsig_secret=other_secret())


def test_repr_hides_the_secret(bind: BindServer) -> None:
    solver = make_solver(bind)
    assert bind.tsig_secret not in repr(solver)
    assert bind.tsig_key_name in repr(solver)
    assert solver.server == bind.address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("192.0.2.1", ("192.0.2.1", 53)),
        ("192.0.2.1:5353", ("192.0.2.1", 5353)),
        ("2001:db8::1", ("2001:db8::1", 53)),
        ("[2001:db8::1]:5353", ("2001:db8::1", 5353)),
        ("[2001:db8::1]", ("2001:db8::1", 53)),
        ("ns1.example.com", ("ns1.example.com", 53)),
        ("ns1.example.com:8053", ("ns1.example.com", 8053)),
    ],
)
def test_server_addresses(text: str, expected: tuple[str, int]) -> None:
    assert _parse_server(text, 53) == expected


@pytest.mark.parametrize("text", ["", ":53", "host:port", "[::1", "[::1]x", "host:70000"])
def test_bad_server_addresses(text: str) -> None:
    with pytest.raises(InvalidInput):
        _parse_server(text, 53)


def test_propagation_check_arguments() -> None:
    with pytest.raises(InvalidInput, match="not one string"):
        PropagationCheck("127.0.0.1")
    with pytest.raises(InvalidInput, match="empty"):
        PropagationCheck([])
    with pytest.raises(InvalidInput, match="max_interval"):
        PropagationCheck(interval=5, max_interval=1)
    with pytest.raises(InvalidInput, match="backoff"):
        PropagationCheck(backoff=0.5)
    check = PropagationCheck(["127.0.0.1:5353", "::1"], timeout=dt.timedelta(minutes=1))
    assert check.nameservers == (("127.0.0.1", 5353), ("::1", 53))
    assert check.timeout == 60


def test_supports_dns_names_and_wildcards_but_not_ips(bind: BindServer) -> None:
    solver = make_solver(bind)
    assert solver.supports(parse_identifier("example.test"))
    assert solver.supports(parse_identifier("*.example.test"))
    assert not solver.supports(parse_identifier("127.0.0.1"))


async def test_present_refuses_other_challenge_types_and_ips(bind: BindServer) -> None:
    solver = make_solver(bind)
    with pytest.raises(UnsupportedChallenge, match="http-01"):
        await solver.present(make_task("example.test", type="http-01"))
    with pytest.raises(UnsupportedChallenge, match="IP address"):
        await solver.present(make_task("127.0.0.1"))


# -- zone discovery and CNAME delegation ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "zone"),
    [
        ("example.test", "example.test"),
        ("_acme-challenge.example.test", "example.test"),
        ("_acme-challenge.a.b.c.example.test", "example.test"),
        ("_acme-challenge.target.delegated.test", "delegated.test"),
        # A CNAME into delegated.test: the recursive answer carries delegated.test's SOA,
        # which must not be taken for the zone of the CNAME itself.
        ("_acme-challenge.cname.example.test", "example.test"),
    ],
)
async def test_zone_discovery_walks_up_to_the_soa(bind: BindServer, name: str, zone: str) -> None:
    lookup = _Lookup([("127.0.0.1", bind.port)], timeout=5)
    assert await _find_zone(lookup, dns.name.from_text(name)) == dns.name.from_text(zone)


async def test_zone_discovery_against_an_authoritative_only_server(
    bind_authoritative: BindServer,
) -> None:
    lookup = _Lookup([("127.0.0.1", bind_authoritative.port)], timeout=5)
    found = await _find_zone(lookup, dns.name.from_text("_acme-challenge.x.delegated.test"))
    assert found == dns.name.from_text("delegated.test")
    with pytest.raises(DnsZoneNotFound, match="REFUSED") as info:
        await _find_zone(lookup, dns.name.from_text("_acme-challenge.example.org"))
    assert info.value.rcode == "REFUSED"
    assert info.value.kind is ErrorKind.PERMANENT


async def test_no_zone_for_names_outside_the_servers_zones(bind: BindServer) -> None:
    solver = make_solver(bind)
    with pytest.raises(
        DnsZoneNotFound, match=re.escape("no zone found for _acme-challenge.example.org")
    ):
        await solver.locate("example.org")


async def test_locate_plain_wildcard_and_cname_names(bind: BindServer) -> None:
    solver = make_solver(bind)
    plain = DnsRecordLocation("_acme-challenge.www.example.test", "example.test")
    assert await solver.locate("www.example.test") == plain
    assert await solver.locate("*.www.example.test") == plain
    assert await solver.locate("cname.example.test") == DnsRecordLocation(
        "_acme-challenge.target.delegated.test",
        "delegated.test",
        ("_acme-challenge.cname.example.test",),
    )
    no_follow = make_solver(bind, follow_cnames=False)
    assert await no_follow.locate("cname.example.test") == DnsRecordLocation(
        "_acme-challenge.cname.example.test", "example.test"
    )


async def test_cname_limits(bind: BindServer) -> None:
    solver = make_solver(bind)
    with pytest.raises(DnsError, match="CNAME loop"):
        await solver.locate("loop1.example.test")
    with pytest.raises(DnsError, match="more than 8 CNAMEs"):
        await solver.locate("long0.example.test")
    # Eight are fine.
    found = await solver.locate("long1.example.test")
    assert found.name == "_acme-challenge.long9.example.test"
    assert len(found.cnames) == 8


async def test_cname_to_a_zone_the_server_does_not_serve(bind: BindServer) -> None:
    with pytest.raises(
        DnsZoneNotFound, match=re.escape("reached by CNAME from _acme-challenge.away")
    ):
        await make_solver(bind).locate("away.example.test")


async def test_configured_zone(bind: BindServer) -> None:
    solver = make_solver(bind, zone="example.test")
    assert (await solver.locate("a.example.test")).zone == "example.test"
    with pytest.raises(DnsZoneNotFound, match=re.escape("not in the configured zone example.test")):
        await solver.locate("cname.example.test")  # its CNAME leads to delegated.test


# -- present / cleanup ---------------------------------------------------------------------


async def test_present_adds_and_cleanup_removes_exactly_one_value(bind: BindServer) -> None:
    solver = make_solver(bind)
    record = "_acme-challenge.pair.example.test"
    wildcard, apex = make_task("*.pair.example.test"), make_task("pair.example.test")
    await solver.present(wildcard)
    await solver.present(apex)
    assert bind.txt_values(record) == {wildcard.dns_txt_value, apex.dns_txt_value}
    await solver.cleanup(wildcard)
    assert bind.txt_values(record) == {apex.dns_txt_value}
    await solver.cleanup(wildcard)  # idempotent
    assert bind.txt_values(record) == {apex.dns_txt_value}
    await solver.cleanup(apex)
    assert bind.txt_values(record) == set()


async def test_a_value_presented_twice_stays_until_its_last_cleanup(bind: BindServer) -> None:
    solver = make_solver(bind)
    task = make_task("twice.example.test")
    await solver.present(task)
    await solver.present(task)
    await solver.cleanup(task)
    assert bind.txt_values("_acme-challenge.twice.example.test") == {task.dns_txt_value}
    await solver.cleanup(task)
    assert bind.txt_values("_acme-challenge.twice.example.test") == set()


async def test_cleanup_without_present_deletes_the_value(bind: BindServer) -> None:
    # E.g. a process restarted between present and cleanup: another instance cleans up.
    task = make_task("orphan.example.test")
    await make_solver(bind).present(task)
    await make_solver(bind).cleanup(task)
    assert bind.txt_values("_acme-challenge.orphan.example.test") == set()


async def test_cname_delegated_record_is_written_in_the_target_zone(bind: BindServer) -> None:
    solver = make_solver(bind)
    task = make_task("cname.example.test")
    await solver.present(task)
    try:
        assert bind.txt_values("_acme-challenge.target.delegated.test") == {task.dns_txt_value}
        # The zone of the CNAME holds no TXT; through the CNAME, as the CA's resolver
        # sees it, the value is there.
        assert bind.txt_values("_acme-challenge.cname.example.test") == set()
        assert bind.txt_values("_acme-challenge.cname.example.test", recursion_desired=True) == {
            task.dns_txt_value
        }
    finally:
        await solver.cleanup(task)
    assert bind.txt_values("_acme-challenge.target.delegated.test") == set()


async def test_ttl_is_applied(bind: BindServer) -> None:
    solver = make_solver(bind, ttl=123)
    task = make_task("ttl.example.test")
    await solver.present(task)
    try:
        answer = bind.query("_acme-challenge.ttl.example.test", "TXT").answer
        assert [rrset.ttl for rrset in answer] == [123]
    finally:
        await solver.cleanup(task)


# -- every refusal becomes a typed error ------------------------------------------------------


def test_a_translated_error_is_built_with_its_name_zone_and_kind() -> None:
    """An answer whose TSIG signature does not verify is permanent, and every error of an
    UPDATE names the record (and a refusal its zone) from its constructor on."""
    where = {"server": "192.0.2.1:53", "what": "UPDATE", "name": "_acme-challenge.a.test"}
    forged = _translate(dns.tsig.BadSignature(), **where, zone="a.test")
    assert type(forged) is DnsError
    assert (forged.kind, forged.name) == (ErrorKind.PERMANENT, "_acme-challenge.a.test")
    assert vars(forged)["kind"] is ErrorKind.PERMANENT  # built so, not the class's TRANSIENT
    refused = _translate(dns.tsig.PeerBadSignature(), **where, zone="a.test")
    assert isinstance(refused, DnsUpdateRefused)
    assert (refused.rcode, refused.name, refused.zone) == ("BADSIG", where["name"], "a.test")
    silent = _translate(dns.exception.Timeout(), **where)
    assert (silent.kind, silent.name) == (ErrorKind.TRANSIENT, where["name"])
    assert _translate(EOFError(), server="192.0.2.1:53", what="query").name is None


async def test_wrong_secret_is_badsig(bind: BindServer) -> None:
    solver = make_solver(bind, tsig_secret=other_secret())
    task = make_task("badsig.example.test")
    with pytest.raises(DnsUpdateRefused, match="BADSIG") as info:
        await solver.present(task)
    error = info.value
    assert error.rcode == "BADSIG"
    assert error.server == bind.address
    assert error.zone == "example.test"
    assert error.kind is ErrorKind.PERMANENT
    assert not error.reached_ca
    assert isinstance(error, AcmeCertsError)
    assert isinstance(error.__cause__, dns.tsig.PeerBadSignature)
    # The refused add wrote nothing, so cleanup has nothing to delete (and does not fail).
    await solver.cleanup(task)


async def test_unknown_key_is_badkey(bind: BindServer) -> None:
    solver = make_solver(bind, tsig_key_name="nobody-knows-me")
    with pytest.raises(DnsUpdateRefused) as info:
        await solver.present(make_task("badkey.example.test"))
    assert info.value.rcode == "BADKEY"


async def test_wrong_algorithm_is_badkey(bind: BindServer) -> None:
    solver = make_solver(bind, tsig_algorithm="hmac-sha512")
    with pytest.raises(DnsUpdateRefused) as info:
        await solver.present(make_task("badalg.example.test"))
    assert info.value.rcode == "BADKEY"


async def test_zone_without_update_permission_is_refused(bind: BindServer) -> None:
    with pytest.raises(DnsUpdateRefused, match="REFUSED") as info:
        await make_solver(bind).present(make_task("readonly.test"))
    assert info.value.rcode == "REFUSED"
    assert info.value.zone == "readonly.test"


async def test_zone_the_server_is_not_authoritative_for_is_notauth(bind: BindServer) -> None:
    solver = make_solver(bind, zone="nothere.test", propagation=None)
    with pytest.raises(DnsUpdateRefused, match="NOTAUTH") as info:
        await solver.present(make_task("x.nothere.test"))
    assert info.value.rcode == "NOTAUTH"


async def test_no_server_listening_is_a_transient_dns_error(bind: BindServer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens on it
    solver = make_solver(bind, zone="example.test", follow_cnames=False, propagation=None)
    solver._port = port  # the lookups still go to BIND; the update to the closed port
    with pytest.raises(DnsError, match="cannot talk to") as info:
        await solver.present(make_task("closed.example.test"))
    assert type(info.value) is DnsError
    assert info.value.kind is ErrorKind.TRANSIENT


async def test_a_silent_server_times_out_as_a_dns_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        port = silent.getsockname()[1]
        solver = Rfc2136Solver(
            "127.0.0.1", port=port, tsig_key_name="k", tsig_secret=other_secret(), timeout=0.2
        )
        with pytest.raises(DnsError, match="no answer") as info:
            await solver.locate("example.test")
    assert info.value.kind is ErrorKind.TRANSIENT


# -- propagation check ---------------------------------------------------------------------


async def test_propagation_times_out_on_the_injected_clock(bind: BindServer) -> None:
    clock = FakeClock(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    check = PropagationCheck([bind.address], timeout=120, clock=clock)
    with pytest.raises(DnsPropagationTimeout) as info:
        await check.wait("_acme-challenge.never.example.test", "never-there")
    error = info.value
    assert error.missing == (bind.address,)
    assert error.value == "never-there"
    assert error.name == "_acme-challenge.never.example.test"
    assert error.kind is ErrorKind.TRANSIENT
    # 1 s, growing by 1.5 up to 10 s; the last pause is cut to the deadline.
    assert clock.sleeps[:7] == [1.0, 1.5, 2.25, 3.375, 5.0625, 7.59375, 10.0]
    assert sum(clock.sleeps) == pytest.approx(120)
    assert clock.now() == dt.datetime(2026, 1, 1, 0, 2, tzinfo=dt.UTC)


async def test_propagation_configurable_schedule(bind: BindServer) -> None:
    clock = FakeClock()
    check = PropagationCheck(
        [bind.address], timeout=10, interval=2, backoff=2, max_interval=5, clock=clock
    )
    with pytest.raises(DnsPropagationTimeout):
        await check.wait("_acme-challenge.never.example.test", "x")
    assert clock.sleeps == [2, 4, 4]


async def test_propagation_sees_the_authoritative_servers(bind: BindServer) -> None:
    """With no nameservers: zone -> NS ns.example.test -> 127.0.0.1, asked on ``port``."""
    task = make_task("auth.example.test")
    await make_solver(bind, propagation=None).present(task)
    clock = FakeClock()
    check = PropagationCheck(resolver=bind.address, port=bind.port, clock=clock)
    await check.wait("_acme-challenge.auth.example.test", task.dns_txt_value)
    assert clock.sleeps == []  # visible at the first check


async def test_propagation_follows_a_cname_to_the_target_zone(bind: BindServer) -> None:
    solver = make_solver(bind, propagation=None)
    task = make_task("cname.example.test")
    await solver.present(task)
    try:
        check = PropagationCheck(resolver=bind.address, port=bind.port, timeout=5)
        await check.wait("_acme-challenge.cname.example.test", task.dns_txt_value)
    finally:
        await solver.cleanup(task)


async def test_propagation_waits_for_a_late_record(bind: BindServer) -> None:
    solver = make_solver(bind, propagation=None)
    task = make_task("late.example.test")
    check = PropagationCheck([bind.address], interval=0.05, timeout=10)
    async with anyio.create_task_group() as tg:

        async def publish_later() -> None:
            await anyio.sleep(0.3)
            await solver.present(task)

        tg.start_soon(publish_later)
        with anyio.fail_after(5):
            await check.wait("_acme-challenge.late.example.test", task.dns_txt_value)
    await solver.cleanup(task)


async def test_propagation_honours_cancellation(bind: BindServer) -> None:
    check = PropagationCheck([bind.address], timeout=120)
    with anyio.move_on_after(0.3) as scope:
        await check.wait("_acme-challenge.never.example.test", "x")
    assert scope.cancelled_caught


async def test_propagation_checks_every_server(bind: BindServer) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent_address = f"127.0.0.1:{silent.getsockname()[1]}"
        task = make_task("every.example.test")
        await make_solver(bind, propagation=None).present(task)
        check = PropagationCheck(
            [bind.address, silent_address], timeout=0.5, interval=0.1, query_timeout=0.1
        )
        with pytest.raises(DnsPropagationTimeout) as info:
            await check.wait("_acme-challenge.every.example.test", task.dns_txt_value)
    assert info.value.missing == (silent_address,)


async def test_solver_runs_the_propagation_check(bind: BindServer) -> None:
    clock = FakeClock()
    check = PropagationCheck([bind.address], timeout=30, clock=clock)
    solver = make_solver(bind, propagation=check)
    task = make_task("checked.example.test")
    await solver.present(task)
    await solver.cleanup(task)
    assert clock.sleeps == []
    assert solver.propagation is check


# -- DnsHookSolver ---------------------------------------------------------------------------


async def bind_update(bind: BindServer, zone: str, name: str, value: str, *, add: bool) -> None:
    """What a user's hook does: a TSIG-signed update with dnspython."""
    key = dns.tsig.Key(bind.tsig_key_name, bind.tsig_secret, bind.tsig_algorithm)
    update = dns.update.UpdateMessage(zone, keyring=key)
    rdata = dns.rdtypes.ANY.TXT.TXT(dns.rdataclass.IN, dns.rdatatype.TXT, [value.encode()])
    if add:
        update.add(name + ".", 60, rdata)
    else:
        update.delete(name + ".", rdata)
    response = await dns.asyncquery.tcp(update, "127.0.0.1", port=bind.port, timeout=5)
    assert response.rcode() == dns.rcode.NOERROR


async def test_hook_solver_calls_the_hooks_once_per_value(bind: BindServer) -> None:
    calls: list[tuple[str, str, str]] = []

    async def set_record(name: str, value: str) -> None:
        calls.append(("set", name, value))
        await bind_update(bind, "example.test", name, value, add=True)

    async def clear_record(name: str, value: str) -> None:
        calls.append(("clear", name, value))
        await bind_update(bind, "example.test", name, value, add=False)

    check = PropagationCheck(resolver=bind.address, port=bind.port, timeout=5)
    solver = DnsHookSolver(set_record, clear_record, propagation=check)
    wildcard, apex = make_task("*.hooks.example.test"), make_task("hooks.example.test")
    record = "_acme-challenge.hooks.example.test"
    await solver.present(wildcard)
    await solver.present(apex)
    await solver.present(apex)
    assert bind.txt_values(record) == {wildcard.dns_txt_value, apex.dns_txt_value}
    await solver.cleanup(apex)  # still held once
    await solver.cleanup(wildcard)
    assert bind.txt_values(record) == {apex.dns_txt_value}
    await solver.cleanup(apex)
    assert bind.txt_values(record) == set()
    assert calls == [
        ("set", record, wildcard.dns_txt_value),
        ("set", record, apex.dns_txt_value),
        ("set", record, apex.dns_txt_value),
        ("clear", record, wildcard.dns_txt_value),
        ("clear", record, apex.dns_txt_value),
    ]


async def test_hook_errors_are_typed() -> None:
    async def broken(name: str, value: str) -> None:
        raise RuntimeError("provider said no")

    async def typed(name: str, value: str) -> None:
        raise DnsUpdateRefused("already typed", rcode="REFUSED")

    solver = DnsHookSolver(broken, broken, propagation=None)
    with pytest.raises(DnsHookError, match=r"set_record\(.*RuntimeError: provider said no") as info:
        await solver.present(make_task("broken.example.test"))
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(DnsHookError, match="clear_record"):
        await solver.cleanup(make_task("broken.example.test"))
    with pytest.raises(DnsUpdateRefused, match="already typed"):
        await DnsHookSolver(typed, typed, propagation=None).present(make_task("t.example.test"))


def write_script(tmp_path: Path, body: str) -> str:
    script = tmp_path / "hook.py"
    script.write_text(f"import os, sys, time\n{body}\n")
    return str(script)


async def test_command_hook_gets_arguments_and_environment(tmp_path: Path) -> None:
    out = tmp_path / "calls.txt"
    script = write_script(
        tmp_path,
        "with open(os.environ['OUT'], 'a') as f:\n"
        "    f.write(' '.join(sys.argv[1:]) + '|' + os.environ['ACMECERTS_DNS_ACTION'] + ' '\n"
        "            + os.environ['ACMECERTS_DNS_NAME'] + ' ' + os.environ['ACMECERTS_DNS_VALUE']"
        " + '\\n')",
    )
    solver = DnsHookSolver.from_command(
        [sys.executable, script], env={"OUT": str(out)}, propagation=None
    )
    task = make_task("*.cmd.example.test")
    await solver.present(task)
    await solver.cleanup(task)
    name, value = "_acme-challenge.cmd.example.test", task.dns_txt_value
    assert out.read_text().splitlines() == [
        f"present {name} {value}|present {name} {value}",
        f"cleanup {name} {value}|cleanup {name} {value}",
    ]
    assert "command" in repr(solver)


async def test_command_hook_failure_carries_status_and_stderr(tmp_path: Path) -> None:
    script = write_script(tmp_path, "sys.stderr.write('x' * 5000 + 'zone is locked')\nsys.exit(3)")
    solver = DnsHookSolver.from_command([sys.executable, script], propagation=None)
    with pytest.raises(DnsHookError, match=r"exited with status 3: x+zone is locked") as info:
        await solver.present(make_task("fail.example.test"))
    assert info.value.returncode == 3
    assert info.value.stderr is not None
    assert info.value.stderr.endswith("zone is locked")
    assert len(info.value.stderr) == 2000
    assert info.value.kind is ErrorKind.PERMANENT


async def test_command_hook_timeout_kills_the_command(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = write_script(
        tmp_path, f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(30)"
    )
    solver = DnsHookSolver.from_command([sys.executable, script], timeout=1, propagation=None)
    with anyio.fail_after(10), pytest.raises(DnsHookError, match="did not finish") as info:
        await solver.present(make_task("slow.example.test"))
    assert info.value.timed_out
    assert info.value.kind is ErrorKind.TRANSIENT
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_command_hook_missing_program(tmp_path: Path) -> None:
    solver = DnsHookSolver.from_command([str(tmp_path / "no-such-hook")], propagation=None)
    with pytest.raises(DnsHookError, match="cannot run"):
        await solver.present(make_task("missing.example.test"))


def test_command_hook_needs_an_argv() -> None:
    with pytest.raises(InvalidInput):
        DnsHookSolver.from_command("nsupdate -k key")
    with pytest.raises(InvalidInput):
        DnsHookSolver.from_command([])


# -- the BindServer test helper --------------------------------------------------------------


def test_bind_server_lifecycle(tmp_path: Path) -> None:
    server = BindServer(tmp_path, extra_zones=["extra.test"])
    assert "stopped" in repr(server)
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.port
    with server:
        assert server.address == f"127.0.0.1:{server.port}"
        assert server.running
        assert server.zones == ("example.test", "delegated.test", "readonly.test", "extra.test")
        soa = server.query("extra.test", "SOA")
        assert soa.rcode() == dns.rcode.NOERROR
        assert (
            server.query("anything.example.test", "A").answer[0].to_text().endswith("A 127.0.0.1")
        )
        key_text = server.key_file.read_text()
        assert server.tsig_secret in key_text
        assert oct(server.key_file.stat().st_mode & 0o777) == "0o600"
        assert server.tsig_secret not in repr(server)
        pid = server.pid
        assert pid is not None
    assert not server.running
    server.stop()  # idempotent
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
