"""Asking a list of servers in turn; CNAME chains and the zone that holds a name.

Nothing here writes: :class:`_Lookup` asks its servers until one answers,
:func:`_follow_cnames` follows the CNAMEs from a name, :func:`_find_zone` walks up from a
name to its zone apex with SOA queries.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

import dns.exception
import dns.message
import dns.name
import dns.nameserver
import dns.rcode
import dns.rdatatype
import dns.rdtypes.ANY.CNAME
import dns.resolver

from acmecerts.solvers.dns01._errors import DnsError, DnsZoneNotFound
from acmecerts.solvers.dns01._query import _ANSWERED, _addresses, _query
from acmecerts.solvers.dns01._records import _endpoint, _text

logger = logging.getLogger("acmecerts.solvers.dns01")

#: The most CNAMEs followed from ``_acme-challenge.<name>`` before giving up.
_MAX_CNAME_DEPTH: Final = 8


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


async def _find_zone(
    lookup: _Lookup, name: dns.name.Name, *, reached_from: str | None = None
) -> dns.name.Name:
    """The zone holding ``name``: SOA queries walking up from ``name`` toward the root.

    ``reached_from``: the name whose CNAME led to ``name``, for the error's message.

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
        f"asked {', '.join(_endpoint(h, p) for h, p in lookup.servers)}"
        + (f" (reached by CNAME from {reached_from})" if reached_from else ""),
        name=_text(name),
        rcode=last_rcode,
    )
