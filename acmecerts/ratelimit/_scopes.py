"""Scope keys: what one bucket of a limit counts for a request.

The registered domain of a DNS name comes from the Public Suffix List bundled with
``publicsuffixlist`` (offline; ICANN and private sections, like Let's Encrypt):
``a.b.example.co.uk`` counts as ``example.co.uk``, ``foo.github.io`` as itself. A name
that is itself a public suffix (``co.uk``) counts as itself. A wildcard counts as its
base name. IPv4 addresses count per address, IPv6 addresses per /64 (RFC 8738
identifiers, as Let's Encrypt counts them).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import threading
from collections.abc import Iterable

from publicsuffixlist import PublicSuffixList

from acmecerts.protocol.identifiers import Identifier, parse_identifier

__all__ = ["as_identifiers", "identifier_set_key", "registered_domain", "source_range"]

_psl: PublicSuffixList | None = None
_psl_lock = threading.Lock()
# An exact-set key longer than this is stored as a hash (an order may name 100 names).
_MAX_SET_KEY = 200


def _list() -> PublicSuffixList:
    global _psl
    if _psl is None:
        with _psl_lock:
            if _psl is None:
                _psl = PublicSuffixList()  # the bundled copy: no network
    return _psl


@functools.lru_cache(maxsize=65_536)
def _registered_dns(name: str) -> str:
    private = _list().privatesuffix(name)
    return private if isinstance(private, str) else name


@functools.lru_cache(maxsize=131_072)
def _registered(ident: Identifier) -> str:
    if ident.type == "ip":
        address = ipaddress.ip_address(ident.value)
        if address.version == 6:
            return str(ipaddress.IPv6Network((address, 64), strict=False))
        return address.compressed
    return _registered_dns(ident.base_name)


def registered_domain(identifier: Identifier | str) -> str:
    """The key under which a CA counts certificates for ``identifier``.

    >>> registered_domain("a.b.example.co.uk")
    'example.co.uk'
    >>> registered_domain("*.example.com")
    'example.com'
    >>> registered_domain("2001:db8:1:2::5")
    '2001:db8:1:2::/64'
    """
    ident = identifier if isinstance(identifier, Identifier) else _parse(identifier)
    return _registered(ident)


def source_range(source: str) -> str | None:
    """The IPv6 /48 a source address belongs to; ``None`` for IPv4 or an unknown source.

    >>> source_range("2001:db8:1:2::5")
    '2001:db8:1::/48'
    >>> source_range("192.0.2.7") is None
    True
    """
    try:
        address = ipaddress.ip_address(source)
    except ValueError:
        return None  # "local" (the address is not known) or a name
    if address.version != 6:
        return None
    return str(ipaddress.IPv6Network((address, 48), strict=False))


def identifier_set_key(identifiers: Iterable[Identifier]) -> str:
    """The key of an exact identifier set: sorted unique values, comma-separated.

    Sets longer than 200 characters are keyed by a SHA-256 of that text instead.
    """
    text = ",".join(sorted({ident.value for ident in identifiers}))
    if len(text) > _MAX_SET_KEY:
        return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()
    return text


@functools.lru_cache(maxsize=131_072)
def _parse(text: str) -> Identifier:
    return parse_identifier(text)


def as_identifiers(values: Iterable[Identifier | str]) -> tuple[Identifier, ...]:
    """Validate and deduplicate identifiers (strings are parsed), first occurrence first."""
    if isinstance(values, (str, Identifier)):
        values = [values]
    result: dict[Identifier, None] = {}
    for value in values:
        ident = value if isinstance(value, Identifier) else _parse(value)
        result.setdefault(ident, None)
    return tuple(result)
