"""ACME identifiers: DNS names (RFC 8555 §7.1.4) and IP addresses (RFC 8738).

:func:`parse_identifier` turns what a user typed into a validated :class:`Identifier`;
anything malformed raises :class:`~acmecerts.errors.InvalidIdentifier` before a request
is sent.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable

from acmecerts.errors import InvalidIdentifier

__all__ = ["Identifier", "parse_identifier", "parse_identifiers"]

# Used with fullmatch: "^...$" with match() let "abc\n" through ("$" matches before a
# final newline), so "abc\n.example.com" was a valid identifier.
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_MAX_NAME = 253


@dataclasses.dataclass(frozen=True, order=True, slots=True)
class Identifier:
    """One ACME identifier: ``type`` is ``"dns"`` or ``"ip"``; ``value`` is normalised.

    DNS values are lower-case A-labels (IDNA) without a trailing dot; IP values are the
    compressed text form of the address.
    """

    type: str
    value: str

    @property
    def is_wildcard(self) -> bool:
        """Whether this is a wildcard DNS name (``*.example.com``)."""
        return self.type == "dns" and self.value.startswith("*.")

    @property
    def base_name(self) -> str:
        """The name validated for this identifier (the wildcard label removed)."""
        return self.value[2:] if self.is_wildcard else self.value

    def to_json(self) -> dict[str, str]:
        """The RFC 8555 §9.7.7 JSON form."""
        return {"type": self.type, "value": self.value}

    def __str__(self) -> str:
        return self.value


def _idna_encode(label: str, original: str) -> str:
    if label.isascii():
        return label.lower()
    try:
        return label.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise InvalidIdentifier(original, f"label {label!r} is not valid IDNA") from exc


def parse_identifier(text: str) -> Identifier:
    """Validate and normalise one domain name or IP address.

    Rules: IPv4/IPv6 literals become ``ip`` identifiers (RFC 8738); everything else must be
    a DNS name of at most 253 octets with labels of 1-63 letters, digits and inner hyphens
    (internationalised names are converted to A-labels), at least two labels, and ``*`` only
    as the whole leftmost label.
    """
    if not isinstance(text, str):
        raise InvalidIdentifier(repr(text), "not a string")
    raw = text.strip()
    if not raw:
        raise InvalidIdentifier(text, "empty")
    candidate = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        pass
    else:
        return Identifier("ip", address.compressed)
    name = raw.removesuffix(".")
    if not name:
        raise InvalidIdentifier(text, "empty")
    labels = name.split(".")
    wildcard = labels[0] == "*"
    if wildcard:
        labels = labels[1:]
    if len(labels) < 2:
        raise InvalidIdentifier(text, "needs at least two labels (a bare TLD is not allowed)")
    encoded: list[str] = []
    for label in labels:
        if label == "":
            raise InvalidIdentifier(text, "empty label")
        if "*" in label:
            raise InvalidIdentifier(text, "'*' is only allowed as the whole leftmost label")
        ascii_label = _idna_encode(label, text)
        if not _LABEL.fullmatch(ascii_label):
            raise InvalidIdentifier(
                text, f"label {label!r} must be 1-63 letters, digits or inner hyphens"
            )
        encoded.append(ascii_label)
    if encoded[-1].isdigit():
        raise InvalidIdentifier(text, "the last label must not be all digits")
    value = ".".join(encoded)
    if wildcard:
        value = "*." + value
    if len(value) > _MAX_NAME:
        raise InvalidIdentifier(text, f"longer than {_MAX_NAME} characters")
    return Identifier("dns", value)


def parse_identifiers(names: Iterable[str]) -> tuple[Identifier, ...]:
    """Parse several names; duplicates are removed, first occurrence order kept.

    Raises :class:`InvalidIdentifier` for the first bad name, or when none is given.
    """
    seen: dict[Identifier, None] = {}
    for name in names:
        seen.setdefault(parse_identifier(name), None)
    if not seen:
        raise InvalidIdentifier("", "at least one identifier is required")
    return tuple(seen)
