"""Waiting until a TXT value is visible where the CA will look: :class:`PropagationCheck`."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from collections.abc import Callable, Collection, Sequence

import anyio
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rdtypes.ANY.NS
import dns.rdtypes.IN.A
import dns.rdtypes.IN.AAAA

from acmecerts._time import (
    Again,
    Backoff,
    Clock,
    SystemClock,
    duration_seconds,
    growth_factor,
    poll_until,
)
from acmecerts.errors import InvalidInput
from acmecerts.solvers.dns01._errors import DnsError, DnsPropagationTimeout
from acmecerts.solvers.dns01._lookup import _find_zone, _follow_cnames, _Lookup, _system_lookup
from acmecerts.solvers.dns01._query import _ANSWERED, _addresses, _query, _txt_values
from acmecerts.solvers.dns01._records import (
    _check_port,
    _dns_name,
    _endpoint,
    _parse_server,
    _text,
)

logger = logging.getLogger("acmecerts.solvers.dns01")


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
        self.timeout = duration_seconds(timeout, "timeout")
        self.interval = duration_seconds(interval, "interval", positive=True)
        self.max_interval = duration_seconds(max_interval, "max_interval", positive=True)
        if self.max_interval < self.interval:
            raise InvalidInput("max_interval must not be smaller than interval")
        self.backoff = growth_factor(backoff, "backoff")
        #: ``interval``, growing by ``backoff`` up to ``max_interval``, no jitter
        self._pauses = Backoff(floor=self.interval, cap=self.max_interval, multiplier=self.backoff)
        self.query_timeout = duration_seconds(query_timeout, "query_timeout", positive=True)
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
        accept: Callable[[Collection[str]], bool] | None = None,
    ) -> None:
        """:meth:`wait`, with what a solver already knows (its lookup, zone, CNAMEs).

        ``accept`` says whether a server's TXT values will do (default: ``value`` is
        among them); ``value`` then only describes what is awaited.
        """
        clock = self.clock
        if accept is None:

            def accept(values: Collection[str]) -> bool:
                return value in values

        deadline = clock.now() + _dt.timedelta(seconds=self.timeout)
        qname, targets = await self._targets(name, lookup=lookup, zone=zone, followed=followed)
        checks = 0
        missing: list[str] = []

        async def visible() -> int | Again[int]:
            nonlocal checks, missing
            checks += 1
            missing = await self._missing(targets, qname, accept)
            return Again() if missing else checks

        def timed_out() -> DnsPropagationTimeout:
            return DnsPropagationTimeout(
                f"TXT {value!r} at {_text(qname)} was not visible at "
                f"{', '.join(missing)} within {self.timeout:g} s ({checks} checks)",
                name=_text(qname),
                value=value,
                missing=missing,
                timeout=self.timeout,
            )

        await poll_until(
            visible,
            clock=clock,
            backoff=self._pauses,
            deadline=deadline,
            on_deadline=timed_out,
        )
        logger.debug(
            "dns-01: %s TXT %s visible at %d server(s) after %d check(s)",
            _text(qname),
            value,
            len(targets),
            checks,
        )

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
        self,
        targets: Sequence[_Target],
        name: dns.name.Name,
        accept: Callable[[Collection[str]], bool],
    ) -> list[str]:
        """The labels of the targets whose TXT values at ``name`` ``accept`` refuses now."""
        seen = await self._values(targets, name)
        return [
            target.label
            for target in targets
            if (values := seen.get(target.label)) is None or not accept(values)
        ]

    async def _values(
        self, targets: Sequence[_Target], name: dns.name.Name
    ) -> dict[str, set[str] | None]:
        """Each target's TXT values at ``name`` now (``None``: it did not answer)."""
        seen: dict[str, set[str] | None] = {}

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
                    seen[target.label] = _txt_values(response)
                    return
            seen[target.label] = None

        async with anyio.create_task_group() as tg:
            for target in targets:
                tg.start_soon(check, target)
        return seen
