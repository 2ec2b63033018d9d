"""Binding the listening sockets of the challenge servers: one port, one or more addresses.

What each address given to :class:`~acmecerts.solvers.Http01Server` or
:class:`~acmecerts.solvers.TlsAlpn01Server` binds:

* ``"::"`` (the default): **every IPv4 and IPv6 address**. One dual-stack socket
  (``IPV6_V6ONLY`` = 0: IPv4 clients arrive as ``::ffff:a.b.c.d``) where the system
  allows it; two sockets, ``0.0.0.0`` and ``::``, where it refuses dual-stack sockets;
  ``0.0.0.0`` alone on a host without IPv6. A CA validating over either family reaches it.
  Listed beside an IPv4 address or a host name, ``"::"`` binds IPv6 only, so that the
  IPv4 address can be bound too.
* ``"0.0.0.0"``: every IPv4 address, and no IPv6.
* any other IP address: that address (an IPv6 one is ``IPV6_V6ONLY``);
* a host name (``"localhost"``): every address it resolves to.

All addresses share one port; with port 0 the first socket picks a free one and the
others bind that same port (tried again a few times if another program takes it first).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import TYPE_CHECKING, Final

import anyio
import anyio.abc
from anyio.streams.stapled import MultiListener

from acmecerts.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Attempts at binding several addresses to one free port (port 0).
_EPHEMERAL_ATTEMPTS: Final = 10
#: The address meaning every IPv4 and IPv6 address.
_IPV6_ANY: Final = ipaddress.IPv6Address("::")


class _BindFailure(Exception):
    """Binding ``host`` on ``port`` failed with ``error`` (the caller makes it a ListenError)."""

    def __init__(self, host: str, port: int, error: OSError) -> None:
        super().__init__(host, port, error)
        self.host = host
        self.port = port
        self.error = error


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address, ``None`` for a host name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _hosts(host: str | Sequence[str]) -> tuple[str, ...]:
    """The addresses to listen on, checked: one string or a non-empty sequence of them."""
    hosts = (host,) if isinstance(host, str) else tuple(host)
    if not hosts:
        raise InvalidInput("host: give at least one address to listen on")
    for one in hosts:
        if not isinstance(one, str) or not one.strip():
            raise InvalidInput(f"host: {one!r} is not an address or a host name")
    stripped = tuple(one.strip() for one in hosts)
    if len(set(stripped)) != len(stripped):
        raise InvalidInput(f"host: {', '.join(stripped)} names an address twice")
    return stripped


def _dual_stack_allowed(hosts: Sequence[str]) -> bool:
    """Whether ``"::"`` may take IPv4 too: no IPv4 address nor host name is listed with it."""
    return all(isinstance(_address(one), ipaddress.IPv6Address) for one in hosts)


async def _bind(hosts: Sequence[str], port: int) -> MultiListener[anyio.abc.SocketStream]:
    """Listen on every one of ``hosts`` at ``port`` (see the module docstring).

    Raises :class:`_BindFailure` for the first address that cannot be bound; nothing
    stays bound then.
    """
    dual = _dual_stack_allowed(hosts)
    for attempt in range(_EPHEMERAL_ATTEMPTS):
        bound: list[anyio.abc.SocketListener] = []
        chosen = port
        try:
            for host in hosts:
                # anyio's "every interface" is our "::": one dual-stack socket where the
                # system allows it, else 0.0.0.0 and :: (IPV6_V6ONLY), else 0.0.0.0.
                every = dual and _address(host) == _IPV6_ANY
                try:
                    listener = await anyio.create_tcp_listener(
                        local_host=None if every else host, local_port=chosen
                    )
                except OSError as exc:
                    raise _BindFailure(host, chosen, exc) from exc
                bound.extend(
                    one for one in listener.listeners if isinstance(one, anyio.abc.SocketListener)
                )
                if chosen == 0:
                    chosen = listener.extra(anyio.abc.SocketAttribute.local_port)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                for one in bound:
                    await one.aclose()
            if (
                isinstance(exc, _BindFailure)
                and exc.error.errno == errno.EADDRINUSE
                and port == 0
                and bound
                and attempt + 1 < _EPHEMERAL_ATTEMPTS
            ):
                continue  # the free port of the first address was taken on another one
            raise
        return MultiListener(bound)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _describe(listener: anyio.abc.SocketListener) -> str:
    """``"[::]:80 (IPv4 and IPv6)"``, ``"127.0.0.1:80"``: what one socket listens on."""
    sock = listener.extra(anyio.abc.SocketAttribute.raw_socket)
    host, port = sock.getsockname()[:2]
    if sock.family != socket.AF_INET6:
        return f"{host}:{port}"
    text = f"[{host}]:{port}"
    if _address(host) == _IPV6_ANY and not sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY):
        text += " (IPv4 and IPv6)"
    return text


def _peer(address: object) -> str:
    """A socket address for a log line: ``"192.0.2.1:4711"``, ``"[2001:db8::1]:4711"``.

    An IPv4 client of a dual-stack socket (``::ffff:192.0.2.1``) is shown as IPv4.
    """
    if not isinstance(address, tuple) or len(address) < 2:
        return str(address)
    host, port = str(address[0]), address[1]
    ip = _address(host.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"{ip.ipv4_mapped}:{port}"
        return f"[{host}]:{port}"
    return f"{host}:{port}"
