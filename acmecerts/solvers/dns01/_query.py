"""One DNS query, its errors translated to :class:`~acmecerts.solvers.dns01.DnsError`."""

from __future__ import annotations

import ipaddress
import socket
from typing import Final

import anyio
import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rdtypes.ANY.TXT
import dns.tsig

from acmecerts.errors import ErrorKind
from acmecerts.solvers.dns01._errors import DnsError, DnsUpdateRefused
from acmecerts.solvers.dns01._records import _endpoint, _text

_ANSWERED: Final = frozenset({dns.rcode.NOERROR, dns.rcode.NXDOMAIN})


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


def _translate(
    exc: Exception, *, server: str, what: str, name: str | None = None, zone: str | None = None
) -> DnsError:
    """Map a dnspython or OS error met while talking to ``server`` to a :class:`DnsError`.

    ``name`` is the DNS name concerned; ``zone`` the zone of an UPDATE the server refused.
    """
    tsig_errors: tuple[tuple[type[Exception], str, str], ...] = (
        (dns.tsig.PeerBadKey, "BADKEY", "does not know the TSIG key (name or algorithm)"),
        (dns.tsig.PeerBadSignature, "BADSIG", "rejected the TSIG signature (wrong secret?)"),
        (dns.tsig.PeerBadTime, "BADTIME", "rejected the TSIG time (are the clocks in sync?)"),
        (dns.tsig.PeerBadTruncation, "BADTRUNC", "rejected the TSIG MAC truncation"),
    )
    for cls, rcode, text in tsig_errors:
        if isinstance(exc, cls):
            return DnsUpdateRefused(
                f"{what}: {server} {text} ({rcode})",
                server=server,
                rcode=rcode,
                name=name,
                zone=zone,
            )
    if isinstance(exc, dns.tsig.PeerError):
        return DnsUpdateRefused(
            f"{what}: {server} reported a TSIG error: {exc}", server=server, name=name, zone=zone
        )
    if isinstance(exc, dns.exception.Timeout):
        return DnsError(f"{what}: no answer from {server} in time", server=server, name=name)
    if isinstance(exc, (dns.tsig.BadSignature, dns.message.BadTSIG, dns.message.UnknownTSIGKey)):
        return DnsError(
            f"{what}: the answer of {server} carries a TSIG signature that does not verify",
            server=server,
            name=name,
            kind=ErrorKind.PERMANENT,
        )
    if isinstance(exc, (OSError, EOFError)):
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return DnsError(f"{what}: cannot talk to {server}: {reason}", server=server, name=name)
    return DnsError(f"{what}: bad answer from {server}: {exc}", server=server, name=name)


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
