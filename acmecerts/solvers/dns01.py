"""dns-01 solvers (RFC 8555 §8.4): RFC 2136 dynamic updates, user hooks, propagation check.

For dns-01 the CA looks up the TXT record ``_acme-challenge.<name>`` (for a wildcard
``*.<name>``, the same ``_acme-challenge.<name>``) and expects
``base64url(SHA-256(key authorization))`` among its values. Three pieces:

* :class:`Rfc2136Solver` publishes the record with a TSIG-signed dynamic UPDATE
  (RFC 2136, RFC 8945): the generic provider for BIND, Knot, PowerDNS and most self-hosted
  DNS. It finds the zone by SOA queries and follows a CNAME at ``_acme-challenge.<name>``
  (CNAME delegation), so the update lands in the zone the CA will really read.
* :class:`DnsHookSolver` calls your async callables (or a command) to set and clear the
  record, for every other DNS provider.
* :class:`PropagationCheck` is run by both at the end of ``present``: it polls the zone's
  authoritative servers (or the resolvers you name) until every one of them serves the
  value, so the CA is not asked to validate before the record is visible.

A wildcard and its base name (``*.example.com`` + ``example.com``) need two values at one
name at the same time. Both solvers add and remove single values, never the whole record
set, and count who holds a value: it is removed when the last task that presented it is
cleaned up.

Errors specific to this module (every one is an :class:`~acmecerts.errors.AcmeCertsError`;
foreign dnspython and OS errors never escape)::

    AcmeCertsError
    └── DnsError                  a DNS operation for dns-01 failed (``server``, ``rcode``)
        ├── DnsUpdateRefused      an UPDATE was answered with an error rcode
        │                         (REFUSED, NOTAUTH, NOTZONE, SERVFAIL; BADSIG, BADKEY, BADTIME)
        ├── DnsZoneNotFound       no zone (SOA) could be found for a record name
        ├── DnsPropagationTimeout the value was not visible everywhere before the deadline
        └── DnsHookError          a DnsHookSolver callable or command failed
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
import ipaddress
import logging
import os
import socket
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import anyio
import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.nameserver
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.CNAME
import dns.rdtypes.ANY.NS
import dns.rdtypes.ANY.TXT
import dns.rdtypes.IN.A
import dns.rdtypes.IN.AAAA
import dns.resolver
import dns.tsig
import dns.update

from acmecerts._time import Clock, SystemClock, as_seconds
from acmecerts.errors import AcmeCertsError, ErrorKind, InvalidInput, UnsupportedChallenge

if TYPE_CHECKING:
    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask

__all__ = [
    "DnsError",
    "DnsHookError",
    "DnsHookSolver",
    "DnsPropagationTimeout",
    "DnsRecordLocation",
    "DnsUpdateRefused",
    "DnsZoneNotFound",
    "PropagationCheck",
    "Rfc2136Solver",
]

logger = logging.getLogger(__name__)

_CHALLENGE_TYPE: Final = "dns-01"
#: RFC 8555 §8.4: the label prepended to the validated name.
_LABEL: Final = "_acme-challenge"
#: The most CNAMEs followed from ``_acme-challenge.<name>`` before giving up.
_MAX_CNAME_DEPTH: Final = 8
#: How much of a hook command's stderr an error message carries.
_STDERR_TAIL: Final = 2000

_ANSWERED: Final = frozenset({dns.rcode.NOERROR, dns.rcode.NXDOMAIN})

#: TSIG algorithm names users write (BIND's spelling) -> dnspython's algorithm names.
_TSIG_ALGORITHMS: Final[Mapping[str, dns.name.Name]] = {
    "hmac-md5": dns.tsig.HMAC_MD5,
    "hmac-md5.sig-alg.reg.int": dns.tsig.HMAC_MD5,
    "hmac-sha1": dns.tsig.HMAC_SHA1,
    "hmac-sha224": dns.tsig.HMAC_SHA224,
    "hmac-sha256": dns.tsig.HMAC_SHA256,
    "hmac-sha384": dns.tsig.HMAC_SHA384,
    "hmac-sha512": dns.tsig.HMAC_SHA512,
}


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class DnsError(AcmeCertsError):
    """A DNS operation for dns-01 failed: no answer, an error answer, or bad data.

    Network failures (no answer in time, connection refused) are ``TRANSIENT``; the
    subclasses say otherwise where retrying cannot help. Nothing was sent to the CA for
    the challenge concerned, so ``reached_ca`` is ``False``.
    """

    kind = ErrorKind.TRANSIENT
    reached_ca = False

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        rcode: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(message)
        #: ``"HOST:PORT"`` of the DNS server concerned, when there was one.
        self.server = server
        #: The DNS response code (``"REFUSED"``, ``"NOTAUTH"``, ``"BADSIG"``...), if any.
        self.rcode = rcode
        #: The DNS name concerned (no trailing dot), when there was one.
        self.name = name


class DnsUpdateRefused(DnsError):
    """The server answered a dynamic UPDATE with an error.

    ``rcode`` names it: ``REFUSED`` (the key may not update this zone, or no key),
    ``NOTAUTH`` (the server is not authoritative for the zone), ``NOTZONE``, ``SERVFAIL``
    (transient), or a TSIG error: ``BADKEY`` (unknown key name or algorithm), ``BADSIG``
    (wrong secret), ``BADTIME`` (clocks differ by more than the fudge).
    """

    kind = ErrorKind.PERMANENT

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        rcode: str | None = None,
        name: str | None = None,
        zone: str | None = None,
    ) -> None:
        super().__init__(message, server=server, rcode=rcode, name=name)
        #: The zone the update was for.
        self.zone = zone
        if rcode == "SERVFAIL":
            self.kind = ErrorKind.TRANSIENT


class DnsZoneNotFound(DnsError):
    """No zone could be found for a record name (no SOA on the way up to the root)."""

    kind = ErrorKind.PERMANENT


class DnsPropagationTimeout(DnsError):
    """The TXT value was not visible at every checked server before the deadline."""

    def __init__(
        self, message: str, *, name: str, value: str, missing: Sequence[str], timeout: float
    ) -> None:
        super().__init__(message, name=name)
        #: The TXT value that was waited for.
        self.value = value
        #: The servers (``"HOST:PORT"``, or NS names) that did not serve it in time.
        self.missing = tuple(missing)
        #: The configured timeout, in seconds.
        self.timeout = timeout


class DnsHookError(DnsError):
    """A :class:`DnsHookSolver` callable raised, or its command failed or timed out."""

    kind = ErrorKind.PERMANENT

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        returncode: int | None = None,
        stderr: str | None = None,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message, name=name)
        #: The command's exit status (``None`` for callables, or when it did not exit).
        self.returncode = returncode
        #: The tail of the command's standard error.
        self.stderr = stderr
        #: Whether the command was killed because it ran longer than its timeout.
        self.timed_out = timed_out
        if timed_out:
            self.kind = ErrorKind.TRANSIENT


# ---------------------------------------------------------------------------
# Names, addresses and single queries
# ---------------------------------------------------------------------------


def _text(name: dns.name.Name) -> str:
    """A name as users write it: no trailing dot (``"."`` for the root)."""
    return name.to_text(omit_final_dot=True) or "."


def _endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_port(port: object, what: str = "port") -> int:
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise InvalidInput(f"{what} must be an integer in 1..65535, not {port!r}")
    return port


def _parse_server(text: str, default_port: int) -> tuple[str, int]:
    """``"HOST"``, ``"HOST:PORT"``, ``"[V6]:PORT"`` or a bare IPv6 address -> (host, port)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"a DNS server must be a host name or an address, not {text!r}")
    text = text.strip()
    try:
        return ipaddress.ip_address(text).compressed, default_port
    except ValueError:
        pass
    host, port = text, default_port
    if text.startswith("["):
        inner, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise InvalidInput(f"cannot read DNS server address {text!r}")
        host = inner
        if rest:
            port = _port_text(rest[1:], text)
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = _port_text(port_text, text)
    if not host:
        raise InvalidInput(f"cannot read DNS server address {text!r}")
    return host, port


def _port_text(port_text: str, whole: str) -> int:
    if not port_text.isdigit():
        raise InvalidInput(f"cannot read the port of DNS server address {whole!r}")
    return _check_port(int(port_text), f"the port of {whole!r}")


async def _addresses(host: str, port: int) -> list[str]:
    """The IP addresses of ``host`` (itself if it is one), IPv4 first."""
    try:
        return [ipaddress.ip_address(host).compressed]
    except ValueError:
        pass
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError as exc:
        raise DnsError(
            f"cannot resolve DNS server {host!r}: {exc}", server=_endpoint(host, port)
        ) from exc
    found: dict[str, int] = {}
    for family, _, _, _, sockaddr in infos:
        found.setdefault(str(sockaddr[0]), 0 if family == socket.AF_INET else 1)
    return sorted(found, key=lambda address: found[address])


def _translate(exc: Exception, *, server: str, what: str) -> DnsError:
    """Map a dnspython or OS error met while talking to ``server`` to a :class:`DnsError`."""
    tsig_errors: tuple[tuple[type[Exception], str, str], ...] = (
        (dns.tsig.PeerBadKey, "BADKEY", "does not know the TSIG key (name or algorithm)"),
        (dns.tsig.PeerBadSignature, "BADSIG", "rejected the TSIG signature (wrong secret?)"),
        (dns.tsig.PeerBadTime, "BADTIME", "rejected the TSIG time (are the clocks in sync?)"),
        (dns.tsig.PeerBadTruncation, "BADTRUNC", "rejected the TSIG MAC truncation"),
    )
    for cls, rcode, text in tsig_errors:
        if isinstance(exc, cls):
            return DnsUpdateRefused(
                f"{what}: {server} {text} ({rcode})", server=server, rcode=rcode
            )
    if isinstance(exc, dns.tsig.PeerError):
        return DnsUpdateRefused(f"{what}: {server} reported a TSIG error: {exc}", server=server)
    if isinstance(exc, dns.exception.Timeout):
        return DnsError(f"{what}: no answer from {server} in time", server=server)
    if isinstance(exc, (dns.tsig.BadSignature, dns.message.BadTSIG, dns.message.UnknownTSIGKey)):
        error = DnsError(
            f"{what}: the answer of {server} carries a TSIG signature that does not verify",
            server=server,
        )
        error.kind = ErrorKind.PERMANENT
        return error
    if isinstance(exc, (OSError, EOFError)):
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return DnsError(f"{what}: cannot talk to {server}: {reason}", server=server)
    return DnsError(f"{what}: bad answer from {server}: {exc}", server=server)


async def _query(
    address: str,
    port: int,
    name: dns.name.Name,
    rdtype: dns.rdatatype.RdataType,
    *,
    limit: float,
    recursion_desired: bool,
) -> dns.message.Message:
    """One query over UDP (TCP if truncated), ``limit`` seconds at most; errors: DnsError."""
    request = dns.message.make_query(name, rdtype)
    if not recursion_desired:
        request.flags &= ~dns.flags.RD
    server = _endpoint(address, port)
    try:
        response, _ = await dns.asyncquery.udp_with_fallback(
            request, address, timeout=limit, port=port
        )
    except (dns.exception.DNSException, OSError, EOFError) as exc:
        what = f"{dns.rdatatype.to_text(rdtype)} query for {_text(name)}"
        raise _translate(exc, server=server, what=what) from exc
    return response


class _Lookup:
    """Asks a list of servers in turn; the first answer with NOERROR or NXDOMAIN wins.

    A server that refuses (not authoritative, no recursion for us), fails or does not
    answer is skipped. If none gives a usable answer, the last error answer is returned,
    or the last failure raised.
    """

    def __init__(
        self, servers: Sequence[tuple[str, int]], *, timeout: float, recursion_desired: bool = True
    ) -> None:
        self.servers = tuple(servers)
        self.timeout = timeout
        self.recursion_desired = recursion_desired

    def __repr__(self) -> str:
        return f"_Lookup({', '.join(_endpoint(h, p) for h, p in self.servers)})"

    async def query(
        self, name: dns.name.Name, rdtype: dns.rdatatype.RdataType
    ) -> dns.message.Message:
        last_error: DnsError | None = None
        last_answer: dns.message.Message | None = None
        for host, port in self.servers:
            try:
                addresses = await _addresses(host, port)
            except DnsError as exc:
                last_error = exc
                continue
            for address in addresses:
                try:
                    response = await _query(
                        address,
                        port,
                        name,
                        rdtype,
                        limit=self.timeout,
                        recursion_desired=self.recursion_desired,
                    )
                except DnsError as exc:
                    last_error = exc
                    continue
                if response.rcode() in _ANSWERED:
                    return response
                last_answer = response
        if last_answer is not None:
            return last_answer
        if last_error is not None:
            raise last_error
        raise DnsError("no DNS server to ask")  # pragma: no cover - servers is never empty


def _system_lookup(timeout: float) -> _Lookup:
    """The resolvers of ``/etc/resolv.conf`` (what dnspython's default resolver uses)."""
    try:
        conf = dns.resolver.Resolver(configure=True)
    except dns.exception.DNSException as exc:
        raise DnsError(f"cannot read the system resolver configuration: {exc}") from exc
    servers: list[tuple[str, int]] = []
    for nameserver in conf.nameservers:
        if isinstance(nameserver, str):
            servers.append((nameserver, 53))
        elif isinstance(nameserver, dns.nameserver.Do53Nameserver):
            servers.append((nameserver.address, nameserver.port))
    if not servers:
        raise DnsError("the system resolver configuration names no usable name server")
    return _Lookup(servers, timeout=timeout)


def _txt_values(response: dns.message.Message) -> set[str]:
    """Every TXT string in the answer section (strings of one record joined)."""
    values: set[str] = set()
    for rrset in response.answer:
        if rrset.rdtype != dns.rdatatype.TXT:
            continue
        for rdata in rrset:
            if isinstance(rdata, dns.rdtypes.ANY.TXT.TXT):
                values.add(b"".join(rdata.strings).decode("ascii", "replace"))
    return values


async def _follow_cnames(
    lookup: _Lookup, name: dns.name.Name
) -> tuple[dns.name.Name, tuple[dns.name.Name, ...]]:
    """Follow CNAMEs from ``name``: (the final name, the names passed through before it).

    A name the servers refuse to answer for ends the chain (it is then the final name).
    """
    chain: list[dns.name.Name] = []
    current = name
    for _ in range(_MAX_CNAME_DEPTH + 1):
        response = await lookup.query(current, dns.rdatatype.CNAME)
        target: dns.name.Name | None = None
        if response.rcode() == dns.rcode.NOERROR:
            for rrset in response.answer:
                if rrset.rdtype == dns.rdatatype.CNAME and rrset.name == current:
                    for rdata in rrset:
                        if isinstance(rdata, dns.rdtypes.ANY.CNAME.CNAME):
                            target = rdata.target
        if target is None:
            return current, tuple(chain)
        chain.append(current)
        if target in chain:
            raise DnsError(
                "CNAME loop: " + " -> ".join(_text(n) for n in [*chain, target]), name=_text(name)
            )
        logger.debug("dns-01: %s is a CNAME for %s", _text(current), _text(target))
        current = target
    raise DnsError(
        f"more than {_MAX_CNAME_DEPTH} CNAMEs from {_text(name)}: "
        + " -> ".join(_text(n) for n in chain),
        name=_text(name),
    )


async def _find_zone(lookup: _Lookup, name: dns.name.Name) -> dns.name.Name:
    """The zone holding ``name``: SOA queries walking up from ``name`` toward the root.

    A name that owns an SOA record is a zone apex. A negative answer (NXDOMAIN or no
    data) carries the SOA of the zone it comes from in the authority section, which ends
    the walk early. Servers that refuse a name are asked about its parent next. The root
    is never taken for the zone.
    """
    current = name
    last_rcode: str | None = None
    while current != dns.name.root:
        response = await lookup.query(current, dns.rdatatype.SOA)
        rcode = response.rcode()
        if rcode in _ANSWERED:
            for rrset in response.answer:
                if rrset.rdtype == dns.rdatatype.SOA and rrset.name == current:
                    return current
            for rrset in response.authority:
                # The SOA of a CNAME target's zone may appear here too: only an ancestor
                # of the name asked about is its zone.
                if (
                    rrset.rdtype == dns.rdatatype.SOA
                    and rrset.name != dns.name.root
                    and current.is_subdomain(rrset.name)
                ):
                    return rrset.name
        else:
            last_rcode = dns.rcode.to_text(rcode)
        current = current.parent()
    hint = f" (last answer: {last_rcode})" if last_rcode else ""
    raise DnsZoneNotFound(
        f"no zone found for {_text(name)}: no SOA record on the way up to the root{hint}; "
        f"asked {', '.join(_endpoint(h, p) for h, p in lookup.servers)}",
        name=_text(name),
        rcode=last_rcode,
    )


# ---------------------------------------------------------------------------
# PropagationCheck
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Target:
    """One server that must serve the value: its label and where to ask it."""

    label: str
    endpoints: tuple[tuple[str, int], ...]
    recursion_desired: bool


class PropagationCheck:
    """Wait until a TXT value is visible at every authoritative server (or resolver).

    By default the zone of the record is found (SOA queries), then its ``NS`` records and
    their addresses, and each name server is asked directly (no recursion) on ``port``:
    these are the servers the CA's resolver will ask. With ``nameservers`` those servers
    are asked instead (with recursion desired, so they may be resolvers; a resolver's
    negative cache can delay what it sees by the zone's negative TTL).

    The first check is made at once; then the check is repeated after ``interval``
    seconds, growing by ``backoff`` up to ``max_interval``, until ``timeout`` seconds
    have passed on ``clock``: then :class:`DnsPropagationTimeout` is raised. Each query
    waits at most ``query_timeout`` seconds; a server that does not answer counts as not
    serving the value yet. The wait honours cancellation.

    :param nameservers: ``"HOST"``, ``"HOST:PORT"`` or ``"[IPv6]:PORT"`` of the servers
        to ask; ``None`` asks the zone's authoritative name servers.
    :param port: the port for the servers given without one and for the authoritative
        servers found (:class:`Rfc2136Solver` defaults it to its own ``port``).
    :param resolver: the server (``"HOST[:PORT]"``) that answers the lookups of the zone,
        its NS records and their addresses, and follows CNAMEs; default: the solver's
        server (:class:`Rfc2136Solver`), else the resolvers of ``/etc/resolv.conf``.
    :param timeout: how long to wait for the value to appear (default 120 s).
    :param interval: the first pause between checks (default 1 s).
    :param max_interval: the longest pause between checks (default 10 s).
    :param backoff: the factor by which the pause grows (default 1.5).
    :param query_timeout: how long one query may take (default 5 s).
    :param clock: where time comes from and how to sleep (tests inject a fake one).
    """

    def __init__(
        self,
        nameservers: Sequence[str] | None = None,
        *,
        port: int = 53,
        resolver: str | None = None,
        timeout: float | _dt.timedelta = 120.0,
        interval: float | _dt.timedelta = 1.0,
        max_interval: float | _dt.timedelta = 10.0,
        backoff: float = 1.5,
        query_timeout: float | _dt.timedelta = 5.0,
        clock: Clock | None = None,
    ) -> None:
        self.port = _check_port(port)
        if isinstance(nameservers, str):
            raise InvalidInput("nameservers must be a sequence of addresses, not one string")
        self.nameservers: tuple[tuple[str, int], ...] | None = (
            None
            if nameservers is None
            else tuple(_parse_server(server, self.port) for server in nameservers)
        )
        if self.nameservers == ():
            raise InvalidInput("nameservers must not be empty (use None for the authoritative)")
        self.resolver = None if resolver is None else _parse_server(resolver, 53)
        self.timeout = _positive(timeout, "timeout", allow_zero=True)
        self.interval = _positive(interval, "interval")
        self.max_interval = _positive(max_interval, "max_interval")
        if self.max_interval < self.interval:
            raise InvalidInput("max_interval must not be smaller than interval")
        if not backoff >= 1.0:
            raise InvalidInput(f"backoff must be at least 1, not {backoff!r}")
        self.backoff = float(backoff)
        self.query_timeout = _positive(query_timeout, "query_timeout")
        self.clock: Clock = clock or SystemClock()

    def __repr__(self) -> str:
        where = (
            "authoritative"
            if self.nameservers is None
            else ", ".join(_endpoint(h, p) for h, p in self.nameservers)
        )
        return f"PropagationCheck({where}, port={self.port}, timeout={self.timeout:g})"

    async def wait(self, name: str, value: str) -> None:
        """Return once every server serves TXT ``value`` at ``name``; else raise.

        ``name`` is the record name (``_acme-challenge.example.com``); a CNAME there is
        followed to find the zone whose servers are asked. Raises
        :class:`DnsPropagationTimeout` when the deadline passes, :class:`DnsError` when the
        servers to ask cannot be found, :class:`~acmecerts.errors.InvalidInput` for a
        malformed name.
        """
        await self._wait(_dns_name(name), value, lookup=None, zone=None, followed=False)

    async def _wait(
        self,
        name: dns.name.Name,
        value: str,
        *,
        lookup: _Lookup | None,
        zone: dns.name.Name | None,
        followed: bool,
    ) -> None:
        """:meth:`wait`, with what a solver already knows (its lookup, zone, CNAMEs)."""
        clock = self.clock
        deadline = clock.now() + _dt.timedelta(seconds=self.timeout)
        qname, targets = await self._targets(name, lookup=lookup, zone=zone, followed=followed)
        pause = self.interval
        checks = 0
        while True:
            checks += 1
            missing = await self._missing(targets, qname, value)
            if not missing:
                logger.debug(
                    "dns-01: %s TXT %s visible at %d server(s) after %d check(s)",
                    _text(qname),
                    value,
                    len(targets),
                    checks,
                )
                return
            remaining = (deadline - clock.now()).total_seconds()
            if remaining <= 0:
                raise DnsPropagationTimeout(
                    f"TXT {value!r} at {_text(qname)} was not visible at "
                    f"{', '.join(missing)} within {self.timeout:g} s ({checks} checks)",
                    name=_text(qname),
                    value=value,
                    missing=missing,
                    timeout=self.timeout,
                )
            await clock.sleep(min(pause, remaining))
            pause = min(pause * self.backoff, self.max_interval)

    async def _targets(
        self,
        name: dns.name.Name,
        *,
        lookup: _Lookup | None,
        zone: dns.name.Name | None,
        followed: bool,
    ) -> tuple[dns.name.Name, list[_Target]]:
        """The name to ask for and the servers that must serve it."""
        if self.nameservers is not None:
            return name, [
                _Target(_endpoint(host, port), ((host, port),), recursion_desired=True)
                for host, port in self.nameservers
            ]
        if self.resolver is not None:
            lookup = _Lookup([self.resolver], timeout=self.query_timeout)
        elif lookup is None:
            lookup = _system_lookup(self.query_timeout)
        if not followed:
            name, _ = await _follow_cnames(lookup, name)
            zone = None
        if zone is None:
            zone = await _find_zone(lookup, name)
        return name, await self._authoritative(lookup, zone)

    async def _authoritative(self, lookup: _Lookup, zone: dns.name.Name) -> list[_Target]:
        """The zone's name servers with their addresses (glue, then lookups)."""
        response = await lookup.query(zone, dns.rdatatype.NS)
        ns_names = sorted(
            {
                rdata.target
                for rrset in response.answer
                if rrset.rdtype == dns.rdatatype.NS and rrset.name == zone
                for rdata in rrset
                if isinstance(rdata, dns.rdtypes.ANY.NS.NS)
            }
        )
        if not ns_names:
            raise DnsError(
                f"no NS records found for zone {_text(zone)} "
                f"(rcode {dns.rcode.to_text(response.rcode())}); "
                "pass PropagationCheck(nameservers=[...])",
                name=_text(zone),
            )
        glue: dict[dns.name.Name, list[str]] = {}
        for rrset in response.additional:
            for rdata in rrset:
                if isinstance(rdata, (dns.rdtypes.IN.A.A, dns.rdtypes.IN.AAAA.AAAA)):
                    glue.setdefault(rrset.name, []).append(rdata.address)
        targets: list[_Target] = []
        for ns in ns_names:
            addresses = glue.get(ns) or await self._ns_addresses(lookup, ns)
            if not addresses:
                logger.warning(
                    "dns-01: cannot find an address of %s, a name server of %s; not checking it",
                    _text(ns),
                    _text(zone),
                )
                continue
            targets.append(
                _Target(
                    _text(ns),
                    tuple((address, self.port) for address in addresses),
                    recursion_desired=False,
                )
            )
        if not targets:
            raise DnsError(
                f"cannot find the address of any name server of zone {_text(zone)} "
                f"({', '.join(_text(n) for n in ns_names)}); "
                "pass PropagationCheck(nameservers=[...])",
                name=_text(zone),
            )
        return targets

    async def _ns_addresses(self, lookup: _Lookup, ns: dns.name.Name) -> list[str]:
        addresses: list[str] = []
        for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            try:
                response = await lookup.query(ns, rdtype)
            except DnsError:
                continue
            for rrset in response.answer:
                for rdata in rrset:
                    if isinstance(rdata, (dns.rdtypes.IN.A.A, dns.rdtypes.IN.AAAA.AAAA)):
                        addresses.append(rdata.address)
        if not addresses:
            # The lookup servers may not resolve outside their zones (a hidden primary):
            # try the operating system's resolver.
            try:
                addresses = await _addresses(_text(ns), self.port)
            except DnsError:
                return []
        return addresses

    async def _missing(
        self, targets: Sequence[_Target], name: dns.name.Name, value: str
    ) -> list[str]:
        """The labels of the targets that do not serve ``value`` at ``name`` now."""
        seen: dict[str, bool] = {}

        async def check(target: _Target) -> None:
            for address, port in target.endpoints:
                try:
                    response = await _query(
                        address,
                        port,
                        name,
                        dns.rdatatype.TXT,
                        limit=self.query_timeout,
                        recursion_desired=target.recursion_desired,
                    )
                except DnsError as exc:
                    logger.debug("dns-01: propagation check: %s", exc)
                    continue
                if response.rcode() in _ANSWERED:
                    seen[target.label] = value in _txt_values(response)
                    return
            seen[target.label] = False

        async with anyio.create_task_group() as tg:
            for target in targets:
                tg.start_soon(check, target)
        return [target.label for target in targets if not seen.get(target.label)]


def _positive(value: float | _dt.timedelta, what: str, *, allow_zero: bool = False) -> float:
    seconds = as_seconds(value)
    if not (seconds >= 0 if allow_zero else seconds > 0):
        raise InvalidInput(f"{what} must be positive, not {value!r}")
    return seconds


def _dns_name(text: str) -> dns.name.Name:
    try:
        return dns.name.from_text(text)
    except dns.exception.DNSException as exc:
        raise InvalidInput(f"{text!r} is not a valid DNS name: {exc}") from exc


# ---------------------------------------------------------------------------
# Shared solver plumbing
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class DnsRecordLocation:
    """Where the TXT record for one name is written.

    ``name`` is the record name after following CNAMEs (no trailing dot), ``zone`` the
    zone holding it, and ``cnames`` the names passed through on the way (empty without
    CNAME delegation; the first is ``_acme-challenge.<name>``).
    """

    name: str
    zone: str
    cnames: tuple[str, ...] = ()


def _supports(identifier: Identifier) -> bool:
    # RFC 8555 §8.4 validates DNS names (wildcards too); RFC 8738 rules dns-01 out for IPs.
    return identifier.type == "dns"


def _record_name(task: ChallengeTask, solver: object) -> str:
    """Refuse a task a dns-01 solver cannot present; return ``_acme-challenge.<base>``."""
    kind = type(solver).__name__
    if task.type != _CHALLENGE_TYPE:
        raise UnsupportedChallenge(f"{kind} answers dns-01 challenges, not {task.type!r}")
    if not _supports(task.identifier):
        raise UnsupportedChallenge(f"dns-01 cannot validate the IP address {task.identifier.value}")
    return f"{_LABEL}.{task.identifier.base_name}"


@dataclasses.dataclass(slots=True)
class _Entry:
    """One published ``(record name, value)``: who holds it and where it went."""

    holders: int = 0
    #: Set once the record was (maybe) written: cleanup must then remove it.
    attempted: bool = False
    location: DnsRecordLocation | None = None


class _Registry:
    """Counts the tasks that presented each ``(record name, value)``.

    A value may be presented twice (two orders sharing a pending authorization); it is
    removed when the last holder is cleaned up.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], _Entry] = {}

    def acquire(self, key: tuple[str, str]) -> _Entry:
        entry = self._entries.setdefault(key, _Entry())
        entry.holders += 1
        return entry

    def release(self, key: tuple[str, str]) -> tuple[_Entry | None, bool]:
        """Forget one holder: (the entry if known, whether the record should go now)."""
        entry = self._entries.get(key)
        if entry is None:
            return None, True  # never presented here (another process?): remove it anyway
        entry.holders -= 1
        if entry.holders > 0:
            return entry, False
        del self._entries[key]
        return entry, True

    def __len__(self) -> int:
        return len(self._entries)


class _DefaultPropagation:
    """Marker for "the solver's default propagation check"."""

    def __repr__(self) -> str:
        return "DEFAULT"


_DEFAULT: Final = _DefaultPropagation()


# ---------------------------------------------------------------------------
# Rfc2136Solver
# ---------------------------------------------------------------------------


class Rfc2136Solver:
    """A dns-01 solver that publishes TXT records by RFC 2136 dynamic UPDATE with TSIG.

    Works with any server that accepts TSIG-signed updates: BIND (``allow-update { key
    ...; }`` or ``update-policy``), Knot, PowerDNS, Windows DNS with TSIG, and others::

        solver = Rfc2136Solver(
            "ns1.example.com",
            tsig_key_name="acme-key",
            tsig_secret="base64 secret from tsig-keygen",
        )
        await client.issue(["example.com", "*.example.com"], solver=solver)

    For each task :meth:`present` computes ``_acme-challenge.<name>``, follows a CNAME
    there (CNAME delegation: ``_acme-challenge.example.com CNAME
    _acme-challenge.acme.example.net`` makes the update go to ``acme.example.net``'s
    zone), finds the zone by SOA queries (unless ``zone`` is given), adds the value with
    one UPDATE over TCP, then runs the propagation check. :meth:`cleanup` deletes exactly
    that value, leaving other values of the record (the wildcard's and the base name's
    share one name) alone; it is idempotent.

    :param server: host name or address of the primary server that takes the updates.
    :param port: its port.
    :param tsig_key_name: the TSIG key's name as the server knows it.
    :param tsig_secret: the key's secret, base64 (as in a BIND key file). Never shown
        in reprs or logs.
    :param tsig_algorithm: ``hmac-sha256`` (default), ``hmac-sha512``, ``hmac-sha384``,
        ``hmac-sha224``, ``hmac-sha1`` or ``hmac-md5``.
    :param zone: the zone to update; ``None`` finds it for each name by SOA queries.
    :param ttl: TTL of the TXT records written.
    :param propagation: the check run at the end of :meth:`present`; by default
        ``PropagationCheck(port=port)`` (the zone's authoritative servers, on the same
        port as ``server``); ``None`` skips the check.
    :param resolvers: servers (``"HOST[:PORT]"``) that answer the CNAME and SOA lookups;
        default: ``server`` itself. Name a recursive resolver when the CNAME starts in a
        zone that ``server`` does not serve.
    :param follow_cnames: follow a CNAME at ``_acme-challenge.<name>`` (default).
    :param timeout: how long one update or query may take (default 10 s).
    """

    #: The challenge type this solver answers.
    challenge_type: str = _CHALLENGE_TYPE

    def __init__(
        self,
        server: str,
        *,
        port: int = 53,
        tsig_key_name: str,
        tsig_secret: str,
        tsig_algorithm: str = "hmac-sha256",
        zone: str | None = None,
        ttl: int = 60,
        propagation: PropagationCheck | _DefaultPropagation | None = _DEFAULT,
        resolvers: Sequence[str] | None = None,
        follow_cnames: bool = True,
        timeout: float | _dt.timedelta = 10.0,
    ) -> None:
        self._port = _check_port(port)
        self._host, _ = _parse_server(server, self._port)
        algorithm = _TSIG_ALGORITHMS.get(str(tsig_algorithm).lower().rstrip("."))
        if algorithm is None:
            raise InvalidInput(
                f"unknown TSIG algorithm {tsig_algorithm!r}; use one of "
                + ", ".join(sorted(k for k in _TSIG_ALGORITHMS if "." not in k))
            )
        self._algorithm_name = str(tsig_algorithm).lower().rstrip(".")
        key_name = _dns_name(tsig_key_name)
        self._key = dns.tsig.Key(key_name, _decode_secret(tsig_secret), algorithm)
        self._key_name = _text(key_name)
        self._zone = None if zone is None else _dns_name(zone)
        if not isinstance(ttl, int) or isinstance(ttl, bool) or not 0 <= ttl <= 2**31 - 1:
            raise InvalidInput(f"ttl must be an integer in 0..2147483647, not {ttl!r}")
        self._ttl = ttl
        self._propagation: PropagationCheck | None = (
            PropagationCheck(port=self._port)
            if isinstance(propagation, _DefaultPropagation)
            else propagation
        )
        self._timeout = _positive(timeout, "timeout")
        if isinstance(resolvers, str):
            raise InvalidInput("resolvers must be a sequence of addresses, not one string")
        lookup_servers = (
            [(self._host, self._port)]
            if resolvers is None
            else [_parse_server(r, 53) for r in resolvers]
        )
        if not lookup_servers:
            raise InvalidInput("resolvers must not be empty (use None for the update server)")
        self._lookup = _Lookup(lookup_servers, timeout=self._timeout)
        self._follow_cnames = follow_cnames
        self._registry = _Registry()

    @property
    def server(self) -> str:
        """``"HOST:PORT"`` of the server that takes the updates."""
        return _endpoint(self._host, self._port)

    @property
    def propagation(self) -> PropagationCheck | None:
        """The check run at the end of :meth:`present` (``None``: none)."""
        return self._propagation

    def __repr__(self) -> str:
        return (
            f"Rfc2136Solver(server={self.server!r}, tsig_key_name={self._key_name!r}, "
            f"tsig_algorithm={self._algorithm_name!r}, records={len(self._registry)})"
        )

    # -- Solver ---------------------------------------------------------------

    def supports(self, identifier: Identifier) -> bool:
        """DNS names, wildcards included; not IP addresses."""
        return _supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        """Add ``task.dns_txt_value`` to the TXT record, then wait until it is visible.

        Raises :class:`~acmecerts.errors.UnsupportedChallenge` for a task that is not a
        dns-01 task for a DNS name, :class:`DnsUpdateRefused` when the server refuses the
        update (bad TSIG key, not allowed, not authoritative), :class:`DnsZoneNotFound`,
        :class:`DnsPropagationTimeout`, or :class:`DnsError` for other DNS failures.
        """
        record = _record_name(task, self)
        value = task.dns_txt_value
        # Registered before the first await, so a cleanup() in a finally block always
        # finds what this call did.
        entry = self._registry.acquire((record, value))
        if entry.location is None:
            entry.location = await self._locate(record)
        location = entry.location
        written_before = entry.attempted
        entry.attempted = True
        try:
            await self._update(location, value, add=True)
        except DnsUpdateRefused:
            # Refused: this update wrote nothing, so unless an earlier one did, cleanup
            # has nothing to delete.
            entry.attempted = written_before
            raise
        logger.info(
            "dns-01: added TXT %s at %s (zone %s) via %s",
            value,
            location.name,
            location.zone,
            self.server,
        )
        if self._propagation is not None:
            await self._propagation._wait(
                _dns_name(location.name),
                value,
                lookup=self._lookup,
                zone=_dns_name(location.zone),
                followed=True,
            )

    async def cleanup(self, task: ChallengeTask) -> None:
        """Delete exactly ``task.dns_txt_value`` from the record (when no other task holds it).

        Idempotent: deleting a value that is not there succeeds. Does nothing if
        :meth:`present` never got as far as sending the update. Raises :class:`DnsError`
        when the delete cannot be sent or is refused (the client logs it).
        """
        record = _record_name(task, self)
        value = task.dns_txt_value
        entry, remove = self._registry.release((record, value))
        if not remove:
            return
        if entry is not None and not entry.attempted:
            return
        location = entry.location if entry is not None and entry.location else None
        if location is None:
            location = await self._locate(record)
        await self._update(location, value, add=False)
        logger.info("dns-01: deleted TXT %s at %s via %s", value, location.name, self.server)

    # -- lookups and updates --------------------------------------------------

    async def locate(self, domain: str) -> DnsRecordLocation:
        """Where the TXT record for ``domain`` (``*.`` allowed) is written: name and zone.

        Follows a CNAME at ``_acme-challenge.<domain>`` and finds its zone, as
        :meth:`present` does; sends no update.
        """
        base = domain.removeprefix("*.").rstrip(".")
        return await self._locate(f"{_LABEL}.{base}")

    async def _locate(self, record: str) -> DnsRecordLocation:
        name = _dns_name(record)
        cnames: tuple[dns.name.Name, ...] = ()
        if self._follow_cnames:
            name, cnames = await _follow_cnames(self._lookup, name)
        if self._zone is not None:
            if not name.is_subdomain(self._zone):
                raise DnsZoneNotFound(
                    f"{_text(name)} is not in the configured zone {_text(self._zone)}"
                    + (f" (reached by CNAME from {_text(cnames[0])})" if cnames else ""),
                    name=_text(name),
                )
            zone = self._zone
        else:
            try:
                zone = await _find_zone(self._lookup, name)
            except DnsZoneNotFound as exc:
                if cnames:
                    exc.message += f" (reached by CNAME from {_text(cnames[0])})"
                raise
        return DnsRecordLocation(_text(name), _text(zone), tuple(_text(n) for n in cnames))

    async def _update(self, location: DnsRecordLocation, value: str, *, add: bool) -> None:
        """Send one signed UPDATE adding or deleting exactly one TXT value."""
        zone = _dns_name(location.zone)
        name = _dns_name(location.name)
        rdata = dns.rdtypes.ANY.TXT.TXT(
            dns.rdataclass.IN, dns.rdatatype.TXT, [value.encode("ascii")]
        )
        message = dns.update.UpdateMessage(zone, keyring=self._key)
        if add:
            message.add(name, self._ttl, rdata)
        else:
            message.delete(name, rdata)  # RFC 2136 §2.5.4: delete an RR from an RRset
        action = "add" if add else "delete"
        what = f"UPDATE ({action} TXT at {location.name} in zone {location.zone})"
        last_error: DnsError | None = None
        for address in await _addresses(self._host, self._port):
            server = _endpoint(address, self._port)
            try:
                response = await dns.asyncquery.tcp(
                    message, address, timeout=self._timeout, port=self._port
                )
            except (dns.exception.DNSException, OSError, EOFError) as exc:
                error = _translate(exc, server=server, what=what)
                error.name = location.name
                if isinstance(error, DnsUpdateRefused):
                    error.zone = location.zone
                    raise error from exc
                last_error = error
                continue
            rcode = response.rcode()
            if rcode != dns.rcode.NOERROR:
                text = dns.rcode.to_text(rcode)
                raise DnsUpdateRefused(
                    f"{what}: {server} answered {text}{_RCODE_HINTS.get(text, '')}",
                    server=server,
                    rcode=text,
                    name=location.name,
                    zone=location.zone,
                )
            return
        assert last_error is not None
        raise last_error


_RCODE_HINTS: Final[Mapping[str, str]] = {
    "REFUSED": " (is this TSIG key allowed to update the zone?)",
    "NOTAUTH": " (the server is not authoritative for the zone)",
    "NOTZONE": " (the name is not in the zone)",
    "SERVFAIL": " (the server failed; try again)",
}


def _decode_secret(secret: str) -> bytes:
    if not isinstance(secret, str):
        raise InvalidInput("tsig_secret must be a base64 string")
    try:
        key = base64.b64decode("".join(secret.split()), validate=True)
    except (binascii.Error, ValueError):
        # Never put the secret in the message.
        raise InvalidInput("tsig_secret is not valid base64") from None
    if not key:
        raise InvalidInput("tsig_secret is empty")
    return key


# ---------------------------------------------------------------------------
# DnsHookSolver
# ---------------------------------------------------------------------------

#: ``set_record(name, value)`` / ``clear_record(name, value)``.
RecordHook = Callable[[str, str], Awaitable[None]]


class DnsHookSolver:
    """A dns-01 solver that calls your code to set and clear the TXT record.

    ``set_record(name, value)`` and ``clear_record(name, value)`` are async callables;
    ``name`` is ``_acme-challenge.<name>`` without a trailing dot, ``value`` the TXT
    value. They MUST add and remove that one value, not replace the record set: a
    wildcard and its base name share one record name and are validated at the same time.
    ``set_record`` MAY return before the record is visible: the propagation check waits
    for that. ``clear_record`` MUST tolerate a value that is not there. CNAME delegation
    is up to the hooks (the propagation check follows CNAMEs when it looks for the zone).

    Exceptions from the hooks that are not :class:`~acmecerts.errors.AcmeCertsError`
    become :class:`DnsHookError`. :meth:`from_command` runs a program instead.

    :param set_record: publishes one TXT value.
    :param clear_record: removes one TXT value.
    :param propagation: the check run after ``set_record``; by default
        ``PropagationCheck()`` (the zone's authoritative servers, found through the
        system resolver); ``None`` skips it.
    """

    #: The challenge type this solver answers.
    challenge_type: str = _CHALLENGE_TYPE

    def __init__(
        self,
        set_record: RecordHook,
        clear_record: RecordHook,
        *,
        propagation: PropagationCheck | _DefaultPropagation | None = _DEFAULT,
    ) -> None:
        if not callable(set_record) or not callable(clear_record):
            raise InvalidInput("set_record and clear_record must be async callables")
        self._set = set_record
        self._clear = clear_record
        self._propagation: PropagationCheck | None = (
            PropagationCheck() if isinstance(propagation, _DefaultPropagation) else propagation
        )
        self._registry = _Registry()
        self._label = getattr(set_record, "__qualname__", type(set_record).__name__)

    @classmethod
    def from_command(
        cls,
        cmd: Sequence[str],
        *,
        timeout: float | _dt.timedelta = 60.0,
        env: Mapping[str, str] | None = None,
        propagation: PropagationCheck | _DefaultPropagation | None = _DEFAULT,
    ) -> DnsHookSolver:
        """A hook solver that runs ``cmd present|cleanup <name> <value>``.

        The program also gets ``ACMECERTS_DNS_ACTION`` (``present`` or ``cleanup``),
        ``ACMECERTS_DNS_NAME`` and ``ACMECERTS_DNS_VALUE`` in its environment (the
        current environment plus ``env``), no standard input, and ``timeout`` seconds;
        then it is killed. A non-zero exit status or a timeout raises
        :class:`DnsHookError` with the tail of its standard error.
        """
        if isinstance(cmd, str) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise InvalidInput("cmd must be a non-empty sequence of strings (argv)")
        runner = _CommandHook(tuple(cmd), _positive(timeout, "timeout"), dict(env or {}))
        solver = cls(runner.present, runner.cleanup, propagation=propagation)
        solver._label = f"command {cmd[0]!r}"
        return solver

    @property
    def propagation(self) -> PropagationCheck | None:
        """The check run at the end of :meth:`present` (``None``: none)."""
        return self._propagation

    def __repr__(self) -> str:
        return f"DnsHookSolver({self._label}, records={len(self._registry)})"

    # -- Solver ---------------------------------------------------------------

    def supports(self, identifier: Identifier) -> bool:
        """DNS names, wildcards included; not IP addresses."""
        return _supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        """Call ``set_record``, then wait until the value is visible.

        Raises :class:`~acmecerts.errors.UnsupportedChallenge` for a task that is not a
        dns-01 task for a DNS name, :class:`DnsHookError` when the hook fails,
        :class:`DnsPropagationTimeout` or :class:`DnsError` from the propagation check.
        """
        record = _record_name(task, self)
        value = task.dns_txt_value
        entry = self._registry.acquire((record, value))
        entry.attempted = True
        await self._call(self._set, record, value, "set_record")
        if self._propagation is not None:
            await self._propagation._wait(
                _dns_name(record), value, lookup=None, zone=None, followed=False
            )

    async def cleanup(self, task: ChallengeTask) -> None:
        """Call ``clear_record`` once no other presented task holds the value.

        Raises :class:`DnsHookError` when the hook fails (the client logs it).
        """
        record = _record_name(task, self)
        value = task.dns_txt_value
        entry, remove = self._registry.release((record, value))
        if remove and (entry is None or entry.attempted):
            await self._call(self._clear, record, value, "clear_record")

    async def _call(self, hook: RecordHook, record: str, value: str, what: str) -> None:
        try:
            await hook(record, value)
        except AcmeCertsError:
            raise
        except Exception as exc:
            raise DnsHookError(
                f"{what}({record!r}, {value!r}) failed: {type(exc).__name__}: {exc}",
                name=record,
            ) from exc


class _CommandHook:
    """Runs ``argv present|cleanup NAME VALUE`` for :meth:`DnsHookSolver.from_command`."""

    def __init__(self, argv: tuple[str, ...], timeout: float, env: dict[str, str]) -> None:
        self.argv = argv
        self.timeout = timeout
        self.env = env

    async def present(self, name: str, value: str) -> None:
        await self._run("present", name, value)

    async def cleanup(self, name: str, value: str) -> None:
        await self._run("cleanup", name, value)

    async def _run(self, action: str, name: str, value: str) -> None:
        argv = [*self.argv, action, name, value]
        env = {
            **os.environ,
            **self.env,
            "ACMECERTS_DNS_ACTION": action,
            "ACMECERTS_DNS_NAME": name,
            "ACMECERTS_DNS_VALUE": value,
        }
        shown = " ".join([self.argv[0], action, name])
        try:
            with anyio.fail_after(self.timeout):
                result = await anyio.run_process(
                    argv, stdin=subprocess.DEVNULL, check=False, env=env
                )
        except TimeoutError:
            raise DnsHookError(
                f"{shown} did not finish within {self.timeout:g} s (killed)",
                name=name,
                timed_out=True,
            ) from None
        except OSError as exc:
            raise DnsHookError(f"cannot run {self.argv[0]!r}: {exc}", name=name) from exc
        if result.returncode != 0:
            stderr = (result.stderr or b"").decode("utf-8", "replace")[-_STDERR_TAIL:].strip()
            raise DnsHookError(
                f"{shown} exited with status {result.returncode}"
                + (f": {stderr}" if stderr else ""),
                name=name,
                returncode=result.returncode,
                stderr=stderr,
            )
        logger.debug("dns-01: %s succeeded", shown)
