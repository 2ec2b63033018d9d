"""A lean HTTP/1.1 keep-alive pool for ``httpx.AsyncClient`` under asyncio.

ACME traffic is many small request/answer pairs to one origin. httpx's own transport
(httpcore over anyio) spends most of a request's CPU on generic machinery: per-read
timeout scopes, a pool that scans every queued request against every connection, and
socket-readability probes. This transport keeps the same contract
(:class:`httpx.AsyncBaseTransport`, httpx's exceptions, httpx's timeout extension) with
far less per-request work:

* one ``asyncio.Protocol`` per connection, bytes fed straight into h11 (which does the
  HTTP/1.1 framing: status line, headers, Content-Length, chunked, close-delimited);
* a LIFO of idle kept-alive connections and a FIFO of requests waiting for one;
* timeouts as one timer per exchange that is re-armed lazily (a read timeout is the
  longest gap between two chunks of the answer, as in httpx).

Through an HTTP proxy (:class:`~acmecerts.transport.ProxyConfig`), an ``https`` origin
is reached by a ``CONNECT host:port`` tunnel with TLS to the origin inside it (its name
verified as for a direct connection), a plain ``http`` one by absolute-form requests to
the proxy. Which proxy (or none) serves an origin is worked out once per origin; without
a proxy configuration nothing is looked up at all. Tunnelled and direct connections are
pooled apart.

It is used only under asyncio; under another event loop (trio) it hands every request
to httpx's default transport (with the same proxies).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Coroutine, Mapping
from typing import Any

import h11
import httpx

from acmecerts.transport._proxy import ProxyConfig, ProxyFailed, ProxyRouter, _hint, _Proxy

__all__ = ["Answer", "Http11Pool", "ResponseTooLarge"]

#: Largest status line + headers accepted (h11 refuses bigger ones).
_MAX_HEAD = 64 * 1024
_DEFAULT_TIMEOUT = 30.0
#: A pool key: scheme, host, port and the proxy in between (``None``: direct).
_Key = tuple[bytes, str, int, _Proxy | None]
#: How many origins' proxy decisions are remembered before the memo starts over.
_MAX_ROUTES = 1024


class Answer:
    """A whole HTTP answer from :meth:`Http11Pool.exchange`."""

    __slots__ = ("content", "headers", "reason", "status_code")

    def __init__(
        self, status_code: int, reason: bytes, headers: httpx.Headers, content: bytes
    ) -> None:
        self.status_code = status_code
        self.reason = reason
        #: The headers, as httpx's case-insensitive multi-dict.
        self.headers = headers
        self.content = content

    @property
    def reason_phrase(self) -> str:
        """The status line's reason phrase."""
        return self.reason.decode("ascii", "replace")


class ResponseTooLarge(httpx.RemoteProtocolError):
    """The answer's body exceeded the pool's ``max_body`` (the connection is dropped)."""


class _Exchange:
    """One request/answer on a connection: what arrived so far, and who waits for it."""

    __slots__ = ("body", "done", "headers", "reason", "size", "status")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done: asyncio.Future[None] = loop.create_future()
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.size = 0


class _Connection(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection, driven by h11."""

    def __init__(self, pool: Http11Pool, origin: _Key) -> None:
        self.pool = pool
        self.origin = origin
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.error: BaseException | None = None
        #: The server closed its side (EOF or the connection is gone).
        self.closed_by_peer = False
        #: When the last byte of the current answer arrived (for the read timeout).
        self.last_activity = 0.0
        #: When the connection went idle (for keep-alive expiry).
        self.idle_since = 0.0
        #: Done once the socket is really closed (``connection_lost``).
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost = False

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        try:
            self.h11.receive_data(data)
        except h11.RemoteProtocolError as exc:  # pragma: no cover - receive_data is lazy
            self._fail(httpx.RemoteProtocolError(str(exc)))
            return
        self._process()

    def eof_received(self) -> bool | None:
        self._receive_closed()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.gone.done():
            self.gone.set_result(None)
        self._receive_closed()
        if self.exchange is not None and not self.exchange.done.done():
            self._fail(httpx.ReadError(f"connection lost: {exc!r}" if exc else "connection lost"))
        self.pool._forget(self)

    # -- answer assembly ---------------------------------------------------------------

    def _receive_closed(self) -> None:
        self.closed_by_peer = True
        if self.h11.their_state not in (h11.CLOSED, h11.ERROR):
            try:
                self.h11.receive_data(b"")
            except h11.RemoteProtocolError:  # pragma: no cover - already closed
                return
            self._process()

    def _process(self) -> None:
        exchange = self.exchange
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._fail(httpx.RemoteProtocolError(self._why(exc)))
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if exchange is None:
                # bytes nobody asked for (or a server closing an idle connection)
                if not isinstance(event, h11.ConnectionClosed):
                    self._fail(httpx.RemoteProtocolError("unsolicited data from the server"))
                return
            kind = type(event)
            if kind is h11.Data:
                chunk: bytes = event.data  # type: ignore[union-attr]
                exchange.size += len(chunk)
                if exchange.size > self.pool.max_body:
                    self._fail(
                        ResponseTooLarge(f"the answer is larger than {self.pool.max_body} bytes")
                    )
                    return
                exchange.body.append(chunk)
            elif kind is h11.Response:
                exchange.status = event.status_code  # type: ignore[union-attr]
                exchange.reason = event.reason  # type: ignore[union-attr]
                exchange.headers = list(event.headers)  # type: ignore[union-attr]
            elif kind is h11.InformationalResponse:
                continue  # 1xx (e.g. 100 Continue): the real answer follows
            elif kind is h11.EndOfMessage:
                if not exchange.done.done():
                    exchange.done.set_result(None)
                return
            elif kind is h11.ConnectionClosed:
                self._fail(httpx.RemoteProtocolError("the server closed the connection early"))
                return

    def _why(self, exc: h11.RemoteProtocolError) -> str:
        """Words for an answer h11 refused: cut off by the server, or malformed."""
        if not self.closed_by_peer:
            return f"malformed answer: {exc}"
        if self.exchange is None or self.exchange.status == 0:
            return "the server closed the connection without answering"
        return f"the server closed the connection mid-answer: {exc}"

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        exchange = self.exchange
        if exchange is not None and not exchange.done.done():
            exchange.done.set_exception(exc)
        self.close()

    # -- used by the pool --------------------------------------------------------------

    @property
    def reusable(self) -> bool:
        return (
            not self.lost
            and self.error is None
            and self.transport is not None
            and not self.transport.is_closing()
            and self.h11.our_state is h11.IDLE
            and self.h11.their_state is h11.IDLE
        )

    def close(self) -> None:
        """Drop the connection now (no TLS goodbye: it is broken, spent or unwanted)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()
        self.lost = True

    def close_politely(self) -> None:
        """Close after a TLS ``close_notify`` (the pool is shutting down)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.lost = True

    async def send(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        read_timeout: float | None,
    ) -> _Exchange:
        """Write one request and wait for its whole answer."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:  # h11 refuses malformed headers when the Request event is built
            events: list[h11.Event] = [h11.Request(method=method, target=target, headers=headers)]
            if body:
                events.append(h11.Data(data=body))
            events.append(h11.EndOfMessage())
            data = b"".join(self.h11.send(event) or b"" for event in events)
        except h11.LocalProtocolError as exc:
            self.close()
            raise httpx.LocalProtocolError(str(exc)) from exc
        # only now is there an answer to wait for (nothing was written before this line)
        exchange = _Exchange(loop)
        self.exchange = exchange
        self.last_activity = time.monotonic()
        self.transport.write(data)
        timer = None if read_timeout is None else _ReadTimer(self, exchange, read_timeout, loop)
        try:
            await exchange.done
        except BaseException:
            self.close()  # cancelled or failed mid-answer: the connection cannot be reused
            raise
        finally:
            if timer is not None:
                timer.cancel()
            self.exchange = None
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
        else:
            self.close()
        return exchange


class _ReadTimer:
    """Fails an exchange when no byte arrived for ``timeout`` seconds (one lazy timer)."""

    __slots__ = ("conn", "exchange", "handle", "loop", "timeout")

    def __init__(
        self,
        conn: _Connection,
        exchange: _Exchange,
        timeout: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.conn = conn
        self.exchange = exchange
        self.timeout = timeout
        self.loop = loop
        self.handle = loop.call_later(timeout, self.fire)

    def fire(self) -> None:
        if self.exchange.done.done():
            return
        idle = time.monotonic() - self.conn.last_activity
        if idle < self.timeout:
            self.handle = self.loop.call_later(self.timeout - idle, self.fire)
            return
        self.conn._fail(httpx.ReadTimeout(f"no answer within {self.timeout:g} s"))

    def cancel(self) -> None:
        self.handle.cancel()


class _TunnelOpener(asyncio.Protocol):
    """Asks a proxy for a tunnel (``CONNECT``) and reads its answer's status line and head.

    Once the answer is in, the connection is handed over to TLS (``loop.start_tls``);
    bytes after the answer's head, before TLS started, are a protocol error.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
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
        self._routes: dict[tuple[bytes, str, int], _Key] = {}
        self._idle: dict[_Key, list[_Connection]] = {}
        self._open: dict[_Key, int] = {}
        self._waiters: dict[_Key, collections.deque[asyncio.Future[None]]] = {}
        self._all: set[_Connection] = set()
        self._fallback: httpx.AsyncBaseTransport | None = None
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Connections opened so far (a measure of keep-alive working).
        self.connections_opened = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` on a pooled connection (httpx's transport interface)."""
        if not self.serves_here():
            return await self._fallback_transport().handle_async_request(request)
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
        """Whether :meth:`exchange` may be used now (an asyncio loop is running)."""
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        loop = _running_loop()
        if loop is None:
            return False
        if loop is not self._loop:
            self._adopt(loop)
        return True

    async def exchange(
        self,
        method: str,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        timeouts: Mapping[str, float | None],
    ) -> Answer:
        """Send one request on a pooled connection and return the whole answer.

        The lean path under httpx's seam (for callers that already checked
        :meth:`serves_here`): ``headers`` are sent as given (``Host`` and, with a body,
        ``Content-Length`` included) and httpx's exceptions are raised as from
        :meth:`handle_async_request`.
        """
        scheme = url.raw_scheme
        if scheme not in (b"https", b"http"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        # the ASCII (IDNA A-label) form, as DNS and TLS's server name want it
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if scheme == b"https" else 80)
        target = url.raw_path
        if self.proxy is None:
            key: _Key = (scheme, host, port, None)
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

    def _route(self, scheme: bytes, host: str, port: int) -> _Key:
        """The pool key of an origin: with the proxy that serves it (remembered)."""
        assert self.proxy is not None
        if len(self._routes) >= _MAX_ROUTES:
            self._routes.clear()
        key = (scheme, host, port, self.proxy._decide(scheme.decode("ascii"), host, port))
        self._routes[(scheme, host, port)] = key
        return key

    # -- the pool ----------------------------------------------------------------------

    async def _acquire(self, origin: _Key, timeouts: Mapping[str, float | None]) -> _Connection:
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

    async def _connect(self, origin: _Key, timeouts: Mapping[str, float | None]) -> _Connection:
        scheme, host, port, proxy = origin
        self._open[origin] = self._open.get(origin, 0) + 1
        loop = asyncio.get_running_loop()
        conn = _Connection(self, origin)
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
                await self._tunnel(conn, host, port, proxy, timeouts.get("connect"))
            else:
                await _to_proxy(
                    proxy,
                    loop.create_connection(lambda: conn, proxy.host, proxy.port),
                    timeouts.get("connect"),
                )
        except BaseException as exc:
            self._open[origin] -= 1
            self._wake(origin)
            if isinstance(exc, TimeoutError):
                raise httpx.ConnectTimeout(f"connecting to {host}:{port}{via} timed out") from exc
            if isinstance(exc, (OSError, ssl.SSLError)):
                raise httpx.ConnectError(f"cannot connect to {host}:{port}{via}: {exc}") from exc
            raise
        self.connections_opened += 1
        self._all.add(conn)
        return conn

    async def _tunnel(
        self, conn: _Connection, host: str, port: int, proxy: _Proxy, seconds: float | None
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
        raw, _ = await _to_proxy(
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
                loop.start_tls(raw, conn, self.ssl_context, server_hostname=host), left()
            )
        except BaseException:
            raw.abort()
            raise
        if tls is None:  # pragma: no cover - start_tls returns None only if cancelled
            raise httpx.ConnectError(f"TLS to {host}:{port} through proxy {proxy.shown} failed")
        conn.connection_made(tls)

    def _release(self, conn: _Connection) -> None:
        if conn.reusable and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            self._drop(conn)
            return
        self._wake(conn.origin)

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        if conn in self._all:
            self._all.discard(conn)
            self._open[conn.origin] -= 1
            self._wake(conn.origin)

    def _forget(self, conn: _Connection) -> None:
        """A connection closed (by either side): it no longer counts."""
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)
        if conn in self._all:
            self._all.discard(conn)
            self._open[conn.origin] -= 1
            self._wake(conn.origin)

    def _wake(self, origin: _Key) -> None:
        queue = self._waiters.get(origin)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

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

    def _fallback_transport(self) -> httpx.AsyncBaseTransport:
        if self._fallback is None:

            def make(proxy: httpx.Proxy | None) -> httpx.AsyncHTTPTransport:
                return httpx.AsyncHTTPTransport(
                    verify=self.ssl_context,
                    http2=False,
                    limits=httpx.Limits(
                        max_connections=self.max_connections,
                        max_keepalive_connections=self.max_connections,
                        keepalive_expiry=self.keepalive_expiry,
                    ),
                    proxy=proxy,
                )

            self._fallback = make(None) if self.proxy is None else ProxyRouter(self.proxy, make)
        return self._fallback

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
        if self._fallback is not None:
            await self._fallback.aclose()

    @property
    def open_connections(self) -> int:
        """Connections open now (in use or idle)."""
        return len(self._all)


async def _to_proxy(
    proxy: _Proxy,
    connecting: Coroutine[Any, Any, tuple[asyncio.Transport, asyncio.BaseProtocol]],
    seconds: float | None,
) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
    """Await ``connecting`` (a connection to ``proxy``); failures name the proxy."""
    try:
        return await asyncio.wait_for(connecting, seconds)
    except TimeoutError as exc:
        raise ProxyFailed(
            f"connecting to proxy {proxy.shown} timed out", proxy=proxy.shown
        ) from exc
    except OSError as exc:
        raise ProxyFailed(
            f"cannot connect to proxy {proxy.shown}: {exc.strerror or exc}", proxy=proxy.shown
        ) from exc


def _headers_for(request: httpx.Request, body: bytes) -> list[tuple[bytes, bytes]]:
    headers = list(request.headers.raw)
    if not any(name.lower() == b"host" for name, _ in headers):
        headers.insert(0, (b"Host", request.url.netloc))
    if body and not any(name.lower() == b"content-length" for name, _ in headers):
        headers.append((b"Content-Length", str(len(body)).encode("ascii")))
    return headers


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or ``None`` under another event loop (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
