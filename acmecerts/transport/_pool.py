"""A lean HTTP/1.1 keep-alive pool, under asyncio: :class:`Http11Pool`.

ACME traffic is many small request/answer pairs to one origin. httpx's own transport
(httpcore over anyio) spends most of a request's CPU on generic machinery: per-read
timeout scopes, a pool that scans every queued request against every connection, and
socket-readability probes. This pool keeps httpx's contract (its exceptions and timeout
kinds, and :class:`httpx.AsyncBaseTransport` for ``httpx.AsyncClient(transport=...)``)
with far less per-request work: one ``asyncio.Protocol`` per connection fed into h11
(:mod:`acmecerts.transport._h1`), a LIFO of idle kept-alive connections and a FIFO of
requests waiting for one. :meth:`Http11Pool.exchange` is the transport's
:class:`~acmecerts.transport._exchange.HttpExchange`.

Through an HTTP proxy (:class:`~acmecerts.transport.ProxyConfig`), an ``https`` origin
is reached by a ``CONNECT host:port`` tunnel (:mod:`acmecerts.transport._tunnel`), a
plain ``http`` one by absolute-form requests to the proxy. Which proxy (or none) serves
an origin is worked out once per origin; without a proxy configuration nothing is looked
up at all. Tunnelled and direct connections are pooled apart.

It runs under asyncio only: under another event loop (trio) :meth:`Http11Pool.exchange`
refuses (:meth:`Http11Pool.serves_here` says so first), and
:class:`~acmecerts.transport.AcmeTransport` sends through httpx instead.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Mapping

import httpx

from acmecerts._time import _running_loop
from acmecerts.transport._exchange import Answer, RawHeaders, Timeouts
from acmecerts.transport._h1 import Connection, Key
from acmecerts.transport._proxy import ProxyConfig
from acmecerts.transport._reasons import connection_failure
from acmecerts.transport._tunnel import open_tunnel, to_proxy

__all__ = ["Http11Pool"]

#: How many origins' proxy decisions are remembered before the memo starts over.
_MAX_ROUTES = 1024


class Http11Pool(httpx.AsyncBaseTransport):
    """HTTP/1.1 connection pool for ``httpx.AsyncClient(transport=...)``.

    Args:
        ssl_context: TLS settings for https origins (verification as configured there).
        max_connections: Connections per origin, in use or idle; more requests wait.
        keepalive_expiry: Idle connections older than this (seconds) are closed, not reused.
        max_body: Answers with a larger body fail with :class:`ResponseTooLarge`.
        proxy: Which HTTP proxy each origin is reached through
            (:class:`~acmecerts.transport.ProxyConfig`); ``None``: every origin directly.
            A proxy that cannot be reached or refuses the tunnel raises
            :class:`~acmecerts.transport.ProxyFailed` (an ``httpx.ProxyError``) naming
            the proxy, never its credentials.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        max_connections: int = 100,
        keepalive_expiry: float = 5.0,
        max_body: int = 8 << 20,
        proxy: ProxyConfig | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.ssl_context = ssl_context
        self.max_connections = max_connections
        self.keepalive_expiry = keepalive_expiry
        self.max_body = max_body
        #: The proxy configuration (``None`` or one without proxies: all direct).
        self.proxy = proxy if proxy else None
        #: The pool key of each origin seen, with its proxy (worked out once per origin).
        self._routes: dict[tuple[bytes, str, int], Key] = {}
        self._idle: dict[Key, list[Connection]] = {}
        self._open: dict[Key, int] = {}
        self._waiters: dict[Key, collections.deque[asyncio.Future[None]]] = {}
        self._all: set[Connection] = set()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Connections opened so far (a measure of keep-alive working).
        self.connections_opened = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` on a pooled connection (httpx's transport interface).

        Raises:
            RuntimeError: not under asyncio (see :meth:`serves_here`), or the pool is
                closed.
        """
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        answer = await self.exchange(
            request.method, request.url, _headers_for(request, body), body, timeouts
        )
        return httpx.Response(
            answer.status_code,
            headers=answer.headers,
            content=answer.content,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": answer.reason},
            request=request,
        )

    def serves_here(self) -> bool:
        """Whether :meth:`exchange` may be used now (an asyncio loop is running).

        Raises:
            RuntimeError: the pool is closed.
        """
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        return _running_loop() is not None

    async def exchange(
        self, method: str, url: httpx.URL, headers: RawHeaders, body: bytes, timeouts: Timeouts
    ) -> Answer:
        """Send one request on a pooled connection and return the whole answer.

        The transport's :class:`~acmecerts.transport._exchange.HttpExchange`: ``headers``
        are sent as given (``Host`` and, with a body, ``Content-Length`` included) and
        httpx's exceptions are raised as from :meth:`handle_async_request`.

        Raises:
            RuntimeError: not under asyncio, or the pool is closed.
        """
        loop = self._loop
        if loop is None or loop is not _running_loop() or self._closed:
            self._adopt_running_loop()
        scheme = url.raw_scheme
        if scheme not in (b"https", b"http"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        # the ASCII (IDNA A-label) form, as DNS and TLS's server name want it
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if scheme == b"https" else 80)
        target = url.raw_path
        if self.proxy is None:
            key: Key = (scheme, host, port, None)
        else:
            key = self._routes.get((scheme, host, port)) or self._route(scheme, host, port)
            proxy = key[3]
            if proxy is not None and scheme == b"http":
                # RFC 9112 §3.2.2: to a proxy, the absolute form (and its credentials)
                target = b"http://" + url.netloc + target
                if proxy.authorization is not None:
                    headers = [*headers, (b"Proxy-Authorization", proxy.authorization)]
        conn = await self._acquire(key, timeouts)
        try:
            exchange = await conn.send(
                method.encode("ascii"), target, headers, body, timeouts.get("read")
            )
        finally:
            self._release(conn)
        # No silent resend when a kept-alive connection breaks: the caller's retry policy
        # decides (with its backoff, hooks and counts). A connection the server closed
        # while idle is noticed (EOF) and never picked.
        return Answer(
            exchange.status,
            exchange.reason,
            httpx.Headers(exchange.headers),
            b"".join(exchange.body),
        )

    def _route(self, scheme: bytes, host: str, port: int) -> Key:
        """The pool key of an origin: with the proxy that serves it (remembered)."""
        assert self.proxy is not None
        if len(self._routes) >= _MAX_ROUTES:
            self._routes.clear()
        key = (scheme, host, port, self.proxy._decide(scheme.decode("ascii"), host, port))
        self._routes[(scheme, host, port)] = key
        return key

    # -- the pool ----------------------------------------------------------------------

    async def _acquire(self, origin: Key, timeouts: Mapping[str, float | None]) -> Connection:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.reusable and now - conn.idle_since < self.keepalive_expiry:
                return conn
            self._drop(conn)
        if self._open.get(origin, 0) >= self.max_connections:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(origin, collections.deque()).append(waiter)
            try:
                await asyncio.wait_for(waiter, timeouts.get("pool"))
            except TimeoutError as exc:
                raise httpx.PoolTimeout("no free connection in time") from exc
            finally:
                queue = self._waiters.get(origin)
                if queue is not None and waiter in queue:
                    queue.remove(waiter)
            return await self._acquire(origin, timeouts)
        return await self._connect(origin, timeouts)

    async def _connect(self, origin: Key, timeouts: Mapping[str, float | None]) -> Connection:
        scheme, host, port, proxy = origin
        self._open[origin] = self._open.get(origin, 0) + 1
        loop = asyncio.get_running_loop()
        conn = Connection(self, origin)
        via = "" if proxy is None else f" through proxy {proxy.shown}"
        try:
            if proxy is None:
                tls = self.ssl_context if scheme == b"https" else None
                await asyncio.wait_for(
                    loop.create_connection(
                        lambda: conn,
                        host,
                        port,
                        ssl=tls,
                        server_hostname=host if tls is not None else None,
                    ),
                    timeouts.get("connect"),
                )
            elif scheme == b"https":
                await open_tunnel(
                    conn, host, port, proxy, self.ssl_context, timeouts.get("connect")
                )
            else:
                await to_proxy(
                    proxy,
                    loop.create_connection(lambda: conn, proxy.host, proxy.port),
                    timeouts.get("connect"),
                )
        except BaseException as exc:
            self._open[origin] -= 1
            self._wake(origin)
            if isinstance(exc, TimeoutError):
                raise httpx.ConnectTimeout(f"connecting to {host}:{port}{via} timed out") from exc
            if isinstance(exc, ssl.SSLError):
                raise httpx.ConnectError(f"cannot connect to {host}:{port}{via}: {exc}") from exc
            if isinstance(exc, OSError):
                reason = connection_failure(exc, host)
                raise httpx.ConnectError(f"cannot connect to {host}:{port}{via}: {reason}") from exc
            raise
        self.connections_opened += 1
        self._all.add(conn)
        return conn

    def _release(self, conn: Connection) -> None:
        if conn.reusable and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            self._drop(conn)
            return
        self._wake(conn.origin)

    def _drop(self, conn: Connection) -> None:
        conn.close()
        if conn in self._all:
            self._all.discard(conn)
            self._open[conn.origin] -= 1
            self._wake(conn.origin)

    def _forget(self, conn: Connection) -> None:
        """A connection closed (by either side): it no longer counts."""
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)
        if conn in self._all:
            self._all.discard(conn)
            self._open[conn.origin] -= 1
            self._wake(conn.origin)

    def _wake(self, origin: Key) -> None:
        queue = self._waiters.get(origin)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _adopt_running_loop(self) -> None:
        """Work on the running loop (starting over if it is new); refuse if there is none."""
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        loop = _running_loop()
        if loop is None:
            raise RuntimeError(
                "Http11Pool runs under asyncio only; under another event loop (trio) use "
                "httpx's own transport"
            )
        if loop is not self._loop:
            self._adopt(loop)

    def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start over on a new event loop: connections of an old one cannot be used."""
        for conn in self._all:
            if self._loop is not None and not self._loop.is_closed():
                conn.close()
        self._all.clear()
        self._idle.clear()
        self._open.clear()
        self._waiters.clear()
        self._loop = loop

    async def aclose(self) -> None:
        """Close every connection (politely, then cut after 1 s); refuse requests after."""
        self._closed = True
        closing = list(self._all)
        for conn in closing:
            conn.close_politely()
        if closing and self._loop is asyncio.get_running_loop():
            # TLS says goodbye (close_notify) before the socket closes: give it a moment,
            # then cut what is left, so no socket outlives the pool.
            await asyncio.wait([conn.gone for conn in closing], timeout=1.0)
            for conn in closing:
                if not conn.gone.done() and conn.transport is not None:
                    conn.transport.abort()
        self._all.clear()
        self._idle.clear()
        self._open.clear()
        for queue in self._waiters.values():
            for waiter in queue:
                if not waiter.done():
                    waiter.set_exception(RuntimeError("the connection pool is closed"))
        self._waiters.clear()

    @property
    def open_connections(self) -> int:
        """Connections open now (in use or idle)."""
        return len(self._all)


def _headers_for(request: httpx.Request, body: bytes) -> list[tuple[bytes, bytes]]:
    headers = list(request.headers.raw)
    if not any(name.lower() == b"host" for name, _ in headers):
        headers.insert(0, (b"Host", request.url.netloc))
    if body and not any(name.lower() == b"content-length" for name, _ in headers):
        headers.append((b"Content-Length", str(len(body)).encode("ascii")))
    return headers
