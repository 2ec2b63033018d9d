"""The ACME directory URL (RFC 8555 §7.1.1) as a value: :class:`DirectoryUrl`.

A directory URL is parsed and checked once, where it enters acmecerts (the client, the
transport, :func:`~acmecerts.ratelimit.model_for_directory`, the manager, the command
line's ``--directory``), and the parsed value is passed on: everything that takes a
``str`` takes a :class:`DirectoryUrl` too, without parsing it again.

One rule for its scheme: ``https://`` only, for every CA, loopback test CAs included
(Pebble and acmecerts' simulated CA serve https; RFC 8555 §6.1 requires it). A directory
URL that is not absolute ``https`` with a host, or that carries credentials, is
:class:`~acmecerts.errors.InvalidInput` at once, before anything is sent.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import Any

from acmecerts.errors import InvalidInput

__all__ = ["DirectoryUrl"]

#: A host name's characters once IDNA-encoded (``_`` too: some private CAs use it).
_HOST = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")
#: Spaces and control characters: never in a URL (RFC 3986 §2).
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")


class DirectoryUrl(str):
    """A CA's directory URL, parsed and checked once.

    A ``str`` (its text is the URL exactly as given, so it compares, hashes and prints as
    that string and can be passed wherever a URL string goes), with its parts parsed:
    :attr:`host` (lower case, IDNA A-labels, no trailing dot), :attr:`port` (443 unless
    given), :attr:`origin` (scheme, host, port: RFC 6454), :attr:`parts` (as
    :func:`urllib.parse.urlsplit` reads it). Immutable.

    ``DirectoryUrl(url)`` of a :class:`DirectoryUrl` is that same value (nothing is
    parsed again).

    Args:
        url: An absolute ``https://`` URL with a host, such as
            ``"https://acme-v02.api.letsencrypt.org/directory"``.

    Raises:
        InvalidInput: ``url`` is not a string, not a URL, not ``https``, has no host or a
            malformed one or port, or carries credentials (``user:password@``).
    """

    host: str
    port: int
    parts: urllib.parse.SplitResult

    def __new__(cls, url: str) -> DirectoryUrl:
        if type(url) is cls:
            return url
        if not isinstance(url, str):
            raise InvalidInput(f"the directory URL must be a string, got {type(url).__name__}")
        text = str(url)
        try:
            parts = urllib.parse.urlsplit(text)
            port = parts.port
        except ValueError as exc:
            raise InvalidInput(f"invalid directory URL {text!r}: {exc}") from None
        if _UNSAFE.search(text):
            raise InvalidInput(f"invalid directory URL {text!r}: spaces or control characters")
        if parts.scheme.lower() != "https" or not parts.hostname:
            raise InvalidInput(f"the directory URL must be https://host/..., got {text!r}")
        if parts.username is not None or parts.password is not None:
            raise InvalidInput(f"invalid directory URL {text!r}: it carries credentials")
        if port == 0:
            raise InvalidInput(f"invalid directory URL {text!r}: port 0")
        self = super().__new__(cls, text)
        object.__setattr__(self, "host", _host(parts.hostname, text))
        object.__setattr__(self, "port", 443 if port is None else port)
        object.__setattr__(self, "parts", parts)
        return self

    @property
    def origin(self) -> tuple[str, str, int]:
        """``("https", host, port)``: the origin requests to the CA may go to by default."""
        return ("https", self.host, self.port)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a DirectoryUrl is immutable (cannot set {name})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a DirectoryUrl is immutable (cannot delete {name})")

    def __reduce__(self) -> tuple[type[DirectoryUrl], tuple[str]]:
        return (DirectoryUrl, (str(self),))


def _host(hostname: str, text: str) -> str:
    """``hostname`` (lower case already, from urlsplit) as the transport compares hosts."""
    if ":" in hostname:  # an IPv6 literal ([::1]; urlsplit checked the brackets)
        try:
            ipaddress.IPv6Address(hostname.split("%", 1)[0])
        except ValueError:
            raise InvalidInput(f"invalid directory URL {text!r}: bad IPv6 address") from None
        return hostname
    try:
        host = hostname.encode("idna").decode("ascii") if not hostname.isascii() else hostname
    except UnicodeError:
        raise InvalidInput(f"invalid directory URL {text!r}: bad host name") from None
    if not _HOST.fullmatch(host):
        raise InvalidInput(f"invalid directory URL {text!r}: bad host name {hostname!r}")
    return host.rstrip(".")
