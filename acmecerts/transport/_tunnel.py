"""``CONNECT`` tunnels through an HTTP proxy (RFC 9110 §9.3.6), TLS to the origin inside.

:class:`~acmecerts.transport.Http11Pool` reaches an ``https`` origin through a proxy by
asking the proxy for a tunnel to ``host:port`` and then speaking TLS to the origin
inside it, its name verified as for a direct connection. Failures name the proxy
(:class:`~acmecerts.transport.ProxyFailed`), never its credentials.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Coroutine
from typing import Any

import h11
import httpx

from acmecerts.transport._h1 import MAX_HEAD, Connection
from acmecerts.transport._proxy import ProxyFailed, _hint, _Proxy
from acmecerts.transport._reasons import connection_failure

__all__ = ["open_tunnel", "to_proxy"]


class _TunnelOpener(asyncio.Protocol):
    """Asks a proxy for a tunnel (``CONNECT``) and reads its answer's status line and head.

    Once the answer is in, the connection is handed over to TLS (``loop.start_tls``);
    bytes after the answer's head, before TLS started, are a protocol error.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        #: ``(status, reason)`` of the proxy's answer.
        self.answer: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        self.early_data = False

    def request(self, host: str, port: int, proxy: _Proxy) -> bytes:
        """The ``CONNECT`` request (RFC 9110 §9.3.6): authority-form, with credentials."""
        authority = (f"[{host}]:{port}" if ":" in host else f"{host}:{port}").encode("ascii")
        headers = [(b"Host", authority)]
        if proxy.authorization is not None:
            headers.append((b"Proxy-Authorization", proxy.authorization))
        request = h11.Request(method=b"CONNECT", target=authority, headers=headers)
        return (self.h11.send(request) or b"") + (self.h11.send(h11.EndOfMessage()) or b"")

    def data_received(self, data: bytes) -> None:
        if self.answer.done():
            self.early_data = True
            return
        self.h11.receive_data(data)
        self._process()

    def eof_received(self) -> bool | None:
        self._fail("the proxy closed the connection without answering CONNECT")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"the connection to the proxy was lost: {exc!r}" if exc else "")

    def _process(self) -> None:
        while not self.answer.done():
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._fail(f"the proxy's answer to CONNECT is malformed: {exc}")
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Response):
                self.answer.set_result((event.status_code, event.reason))
                # a 2xx switches protocols: what follows the head is the tunnel's
                data, _ = self.h11.trailing_data
                self.early_data = bool(data)
                return
            if isinstance(event, h11.ConnectionClosed):
                self._fail("the proxy closed the connection without answering CONNECT")
                return
            # 1xx answers (InformationalResponse): the real one follows

    def _fail(self, reason: str) -> None:
        if not self.answer.done():
            self.answer.set_exception(
                httpx.RemoteProtocolError(reason or "the proxy closed the connection")
            )


async def open_tunnel(
    conn: Connection,
    host: str,
    port: int,
    proxy: _Proxy,
    ssl_context: ssl.SSLContext,
    seconds: float | None,
) -> None:
    """Connect ``conn`` to ``host:port`` through a ``CONNECT`` tunnel, TLS inside.

    ``seconds`` (the connect timeout) covers it all: the connection to the proxy, its
    answer and the TLS handshake with the origin.
    """
    loop = asyncio.get_running_loop()
    deadline = None if seconds is None else loop.time() + seconds

    def left() -> float | None:
        return None if deadline is None else max(0.0, deadline - loop.time())

    opener = _TunnelOpener(loop)
    raw, _ = await to_proxy(
        proxy, loop.create_connection(lambda: opener, proxy.host, proxy.port), seconds
    )
    try:
        raw.write(opener.request(host, port, proxy))
        try:
            status, reason = await asyncio.wait_for(opener.answer, left())
        except TimeoutError as exc:
            raise ProxyFailed(
                f"proxy {proxy.shown} did not answer CONNECT {host}:{port} in time",
                proxy=proxy.shown,
            ) from exc
        except httpx.RemoteProtocolError as exc:
            raise ProxyFailed(
                f"proxy {proxy.shown}, CONNECT {host}:{port}: {exc}", proxy=proxy.shown
            ) from exc
        if not 200 <= status < 300:
            words = reason.decode("ascii", "replace")
            raise ProxyFailed(
                f"proxy {proxy.shown} refused CONNECT {host}:{port}: {status} {words}"
                + _hint(status, proxy),
                proxy=proxy.shown,
                status_code=status,
            )
        if opener.early_data:
            raise ProxyFailed(
                f"proxy {proxy.shown} sent data into the tunnel to {host}:{port} before "
                "the TLS handshake",
                proxy=proxy.shown,
                status_code=status,
            )
        # TLS with the origin inside the tunnel: its name is verified as if direct
        tls = await asyncio.wait_for(
            loop.start_tls(raw, conn, ssl_context, server_hostname=host), left()
        )
    except BaseException:
        raw.abort()
        raise
    if tls is None:  # pragma: no cover - start_tls returns None only if cancelled
        raise httpx.ConnectError(f"TLS to {host}:{port} through proxy {proxy.shown} failed")
    conn.connection_made(tls)


async def to_proxy(
    proxy: _Proxy,
    connecting: Coroutine[Any, Any, tuple[asyncio.Transport, asyncio.BaseProtocol]],
    seconds: float | None,
) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
    """Await ``connecting`` (a connection to ``proxy``); failures name the proxy."""
    try:
        return await asyncio.wait_for(connecting, seconds)
    except TimeoutError as exc:
        raise ProxyFailed(
            f"connecting to the proxy {proxy.shown} timed out", proxy=proxy.shown
        ) from exc
    except OSError as exc:
        reason = connection_failure(exc, proxy.host)
        raise ProxyFailed(
            f"cannot connect to the proxy {proxy.shown}: {reason}", proxy=proxy.shown
        ) from exc
