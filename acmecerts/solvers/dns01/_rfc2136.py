"""The RFC 2136 solver: TXT records written by TSIG-signed dynamic UPDATE (RFC 8945)."""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

import dns.asyncquery
import dns.exception
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TXT
import dns.tsig
import dns.update

from acmecerts._time import duration_seconds
from acmecerts.errors import InvalidInput
from acmecerts.protocol.challenges import DNS_ACCOUNT_01, dns_account01_record_name
from acmecerts.solvers.dns01._errors import DnsError, DnsUpdateRefused, DnsZoneNotFound
from acmecerts.solvers.dns01._lookup import _find_zone, _follow_cnames, _Lookup
from acmecerts.solvers.dns01._propagation import PropagationCheck
from acmecerts.solvers.dns01._query import _addresses, _translate
from acmecerts.solvers.dns01._records import (
    _CHALLENGE_TYPE,
    _DEFAULT,
    _LABEL,
    DnsRecordLocation,
    _challenge_type,
    _check_port,
    _DefaultPropagation,
    _dns_name,
    _endpoint,
    _parse_server,
    _record_name,
    _Registry,
    _supports,
    _text,
)

if TYPE_CHECKING:
    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask

logger = logging.getLogger("acmecerts.solvers.dns01")

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
    :param challenge_type: ``"dns-01"`` (default) or ``"dns-account-01"``
        (draft-ietf-acme-dns-account-label): the same value, written at
        ``_<account label>._acme-challenge.<name>``, a name of the account's own, so that
        replicas or clusters with different accounts validate one name at the same time
        without touching each other's records.
    """

    #: The challenge type this solver answers (``dns-01`` unless given).
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
        challenge_type: str = _CHALLENGE_TYPE,
    ) -> None:
        self.challenge_type = _challenge_type(challenge_type)
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
        self._timeout = duration_seconds(timeout, "timeout", positive=True)
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
            "%s: added TXT %s at %s (zone %s) via %s",
            self.challenge_type,
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
        logger.info(
            "%s: deleted TXT %s at %s via %s",
            self.challenge_type,
            value,
            location.name,
            self.server,
        )

    # -- lookups and updates --------------------------------------------------

    async def locate(self, domain: str, *, account_url: str | None = None) -> DnsRecordLocation:
        """Where the TXT record for ``domain`` (``*.`` allowed) is written: name and zone.

        Follows a CNAME at ``_acme-challenge.<domain>`` (dns-account-01: at
        ``_<label>._acme-challenge.<domain>``, for ``account_url``) and finds its zone, as
        :meth:`present` does; sends no update.
        """
        base = domain.removeprefix("*.").rstrip(".")
        if self.challenge_type == DNS_ACCOUNT_01:
            if account_url is None:
                raise InvalidInput("locate() of a dns-account-01 record needs account_url")
            return await self._locate(dns_account01_record_name(base, account_url))
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
            via = _text(cnames[0]) if cnames else None
            zone = await _find_zone(self._lookup, name, reached_from=via)
        return DnsRecordLocation(_text(name), _text(zone), tuple(_text(n) for n in cnames))

    async def _update(self, location: DnsRecordLocation, value: str, *, add: bool) -> None:
        """Send one signed UPDATE adding or deleting exactly one TXT value."""
        zone = _dns_name(location.zone)
        name = _dns_name(location.name)
        # RFC 1035 §3.3: one character-string holds at most 255 octets; a longer value
        # (a dns-persist-01 record) is split, and read back joined (RFC 7208 §3.3).
        raw = value.encode("ascii")
        rdata = dns.rdtypes.ANY.TXT.TXT(
            dns.rdataclass.IN,
            dns.rdatatype.TXT,
            [raw[i : i + 255] for i in range(0, len(raw), 255)] or [b""],
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
                error = _translate(
                    exc, server=server, what=what, name=location.name, zone=location.zone
                )
                if isinstance(error, DnsUpdateRefused):
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
