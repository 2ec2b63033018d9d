"""What the dns-01 pieces share: record names, who holds each value, names and addresses."""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import TYPE_CHECKING, Final

import dns.exception
import dns.name

from acmecerts.errors import InvalidInput
from acmecerts.solvers._checks import _refuse_unsupported

if TYPE_CHECKING:
    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask

_CHALLENGE_TYPE: Final = "dns-01"
#: The challenge types the record-writing solvers answer: dns-01 at ``_acme-challenge``,
#: dns-account-01 at ``_<account label>._acme-challenge`` (the same value).
_WRITABLE_TYPES: Final = ("dns-01", "dns-account-01")
#: RFC 8555 §8.4: the label prepended to the validated name.
_LABEL: Final = "_acme-challenge"


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


def _challenge_type(challenge_type: object) -> str:
    """Check a record-writing solver's ``challenge_type`` argument."""
    if challenge_type not in _WRITABLE_TYPES:
        raise InvalidInput(
            f"challenge_type must be one of {', '.join(_WRITABLE_TYPES)}, not {challenge_type!r}"
        )
    assert isinstance(challenge_type, str)
    return challenge_type


def _record_name(task: ChallengeTask, solver: object) -> str:
    """Refuse a task the solver cannot present; return the record name the CA reads.

    dns-01: ``_acme-challenge.<base>``; dns-account-01:
    ``_<account label>._acme-challenge.<base>``.
    """
    _refuse_unsupported(solver, task, getattr(solver, "challenge_type", _CHALLENGE_TYPE), _supports)
    return task.dns_record_name


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


# Names and addresses as users write them


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


def _dns_name(text: str) -> dns.name.Name:
    try:
        return dns.name.from_text(text)
    except dns.exception.DNSException as exc:
        raise InvalidInput(f"{text!r} is not a valid DNS name: {exc}") from exc
