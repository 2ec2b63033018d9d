"""One kept-alive HTTP/1.1 connection of :class:`~acmecerts.transport.Http11Pool`.

One ``asyncio.Protocol`` per connection, bytes fed straight into h11 (which does the
HTTP/1.1 framing: status line, headers, Content-Length, chunked, close-delimited), and a
read timeout as one lazily re-armed timer per exchange (the longest gap between two
chunks of the answer, as in httpx). Failures are httpx's exceptions, as the
:class:`~acmecerts.transport._exchange.HttpExchange` seam wants.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import h11
import httpx

from acmecerts.transport._exchange import ResponseTooLarge
from acmecerts.transport._proxy import _Proxy

if TYPE_CHECKING:
    from acmecerts.transport._pool import Http11Pool

__all__ = ["MAX_HEAD", "Connection", "Key"]

#: Largest status line + headers accepted (h11 refuses bigger ones).
MAX_HEAD = 64 * 1024
#: A pool key: scheme, host, port and the proxy in between (``None``: direct).
Key = tuple[bytes, str, int, _Proxy | None]


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


class Connection(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection, driven by h11."""

    def __init__(self, pool: Http11Pool, origin: Key) -> None:
        self.pool = pool
        self.origin = origin
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
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
        conn: Connection,
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
