"""The built-in http-01 server: :class:`Http01Server` (its stream path and its routing)."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, ClassVar

import anyio
import anyio.abc
import h11

from acmecerts.errors import InvalidInput
from acmecerts.solvers._bind import _peer
from acmecerts.solvers._listener import _CallbackConnection, _ListeningServer
from acmecerts.solvers.http01._callbacks import _Http01Connection
from acmecerts.solvers.http01._messages import (
    _LINGER_SECONDS,
    _MAX_REQUESTS_PER_CONNECTION,
    _RECEIVE_SIZE,
    _request_path,
    _RequestTooLarge,
    _Responder,
)
from acmecerts.solvers.http01._tokens import (
    _PATH_PREFIX,
    _Holders,
    _Http01Solver,
)

if TYPE_CHECKING:
    import datetime as _dt
    from collections.abc import Callable, Sequence

    from acmecerts.solvers._base import ChallengeTask
    from acmecerts.solvers._listener import _Running

logger = logging.getLogger("acmecerts.solvers.http01")


class _Conversation(_Responder):
    """One client connection: the h11 state machine, the current method, the stream."""

    __slots__ = ("stream",)

    def __init__(self, conn: h11.Connection, stream: anyio.abc.SocketStream) -> None:
        super().__init__(conn)
        self.stream = stream

    async def send(self, data: bytes) -> None:
        """Write one rendered response (:meth:`render`)."""
        await self.stream.send(data)


class Http01Server(_Http01Solver, _ListeningServer):
    """A standalone http-01 solver: an in-process HTTP/1.1 server for challenge tokens.

    One server answers for any number of concurrent orders: :meth:`present` adds a token,
    :meth:`cleanup` removes it. ``GET`` (and ``HEAD``) of
    ``/.well-known/acme-challenge/<token>`` answers ``200`` with the key authorization as
    ``application/octet-stream``; other paths and unknown tokens get ``404``, other methods
    on the challenge path ``405``. The ``Host`` header is not checked: the CA connects to
    the identifier's address, and a token names exactly one challenge.

    Lifecycle, in order of preference::

        async with Http01Server(port=80) as solver:      # serves inside a task group
            await client.issue(names, solvers=[solver])  # stops when the block exits

        solver = Http01Server()
        await solver.start()                             # or let present() start it
        ...
        await solver.aclose()

    Inside ``async with`` the server runs in a task group owned by the block; nothing is
    left running after it. Started by :meth:`start` (or lazily by the first
    :meth:`present`), it runs in a background task of the event loop until
    :meth:`aclose`. It may be started again after it was closed.

    Robustness: each request must arrive (and its answer leave) within ``timeout``
    seconds, idle keep-alive time included; request heads and bodies are limited to
    ``max_request_size`` bytes; at most ``max_connections`` connections are open at once
    (more are closed at once); one connection serves at most 100 requests (the last
    answer says ``Connection: close``). A misbehaving client affects only its own
    connection.

    :param host: address to listen on, or several (one port for all). The default ``"::"``
        is every IPv4 **and** IPv6 address: one dual-stack socket (two sockets where the
        system refuses dual-stack ones, IPv4 alone on a host without IPv6), so the CA
        reaches it over either family. ``"0.0.0.0"`` is every IPv4 address only; any
        other address is that address alone, ``["127.0.0.1", "::1"]`` both loopbacks, a
        host name every address it resolves to.
    :param port: port to listen on; the CA always connects to 80, so another port only
        makes sense behind a port forward or a proxy. ``0`` picks a free port.
    :param timeout: per-request deadline in seconds (or a ``timedelta``).
    :param max_request_size: the largest request head, and the largest body, accepted.
    :param max_connections: the most connections served at once.
    """

    _logger: ClassVar[logging.Logger] = logger

    def __init__(
        self,
        *,
        host: str | Sequence[str] = "::",
        port: int = 80,
        timeout: float | _dt.timedelta = 10.0,
        max_request_size: int = 8192,
        max_connections: int = 1024,
    ) -> None:
        super().__init__(host=host, port=port, timeout=timeout, max_connections=max_connections)
        if max_request_size < 1024:
            raise InvalidInput(f"max_request_size must be at least 1024, not {max_request_size}")
        self._max_request_size = max_request_size
        self._holders = _Holders()
        #: Serve with a task per connection over anyio streams even under asyncio (tests).
        self._streams_only = False

    # -- introspection --------------------------------------------------------

    def _repr_detail(self) -> str:
        return f"tokens={len(self._holders)}"

    # -- Solver ---------------------------------------------------------------

    async def _answer(self, task: ChallengeTask, token: str) -> None:
        """Serve the token, starting the server if needed (:class:`ListenError`: cannot bind)."""
        # Registered before the (cancellable) lazy start, so a cleanup() in a finally
        # block always finds what this call added.
        self._holders.add(task)
        if self._running is None:
            await self.start()

    async def cleanup(self, task: ChallengeTask) -> None:
        """Stop serving ``task.token`` (once no other presented task holds it).

        Idempotent; never raises; does not wait, so it works in a cancelled scope too.
        """
        self._release(task)

    # -- serving --------------------------------------------------------------

    def _callback_factory(
        self, running: _Running, loop: asyncio.AbstractEventLoop
    ) -> Callable[[], _CallbackConnection] | None:
        if self._streams_only:
            return None
        return functools.partial(_Http01Connection, self, running, loop)

    async def _serve_connection(self, stream: anyio.abc.SocketStream) -> None:
        """Answer the requests of one connection (closed by the caller afterwards)."""
        await self._converse(stream)

    async def _converse(self, stream: anyio.abc.SocketStream) -> None:
        conn = _Conversation(
            h11.Connection(h11.SERVER, max_incomplete_event_size=self._max_request_size), stream
        )
        for served in range(1, _MAX_REQUESTS_PER_CONNECTION + 1):
            keep_alive = False
            with anyio.move_on_after(self._timeout) as deadline:
                keep_alive = await self._exchange(conn, last=served == _MAX_REQUESTS_PER_CONNECTION)
            if deadline.cancelled_caught:
                pending, _closed = conn.h11.trailing_data
                if conn.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE) and (
                    conn.h11.their_state is not h11.IDLE or pending
                ):
                    # A request was started but not finished in time (RFC 9110 §15.5.9).
                    with anyio.move_on_after(_LINGER_SECONDS):
                        await conn.send(conn.render(408, close=True))
                # An idle keep-alive connection is simply closed (RFC 9112 §9.8).
                return
            if not keep_alive:
                await self._linger(stream)
                return

    async def _exchange(self, conn: _Conversation, *, last: bool = False) -> bool:
        """Read one request and answer it; return whether the connection stays open.

        ``last``: the connection's last request, whose answer says it is closed.
        """
        try:
            request = await self._read_request(conn)
        except h11.RemoteProtocolError as exc:
            if conn.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await conn.send(conn.render(exc.error_status_hint, close=True))
            return False
        except _RequestTooLarge:
            await conn.send(conn.render(413, close=True))
            return False
        if request is None:
            return False
        status, headers, body = self._route(request)
        await conn.send(conn.render(status, headers=headers, body=body, close=last))
        if status == 200:
            extra = conn.stream.extra
            self._answered(
                extra(anyio.abc.SocketAttribute.remote_address),
                extra(anyio.abc.SocketAttribute.local_address),
            )
        if conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE:
            conn.h11.start_next_cycle()
            conn.method = None
            return True
        return False

    async def _read_request(self, conn: _Conversation) -> h11.Request | None:
        """The next complete request (body read and dropped), or ``None`` at a clean EOF."""
        request: h11.Request | None = None
        body_size = 0
        while True:
            event = conn.h11.next_event()
            if event is h11.NEED_DATA:
                if request is not None and conn.h11.they_are_waiting_for_100_continue:
                    # Answer without the body; the connection is closed after the answer.
                    return request
                # No more than the room left: h11 limits only what is still incomplete,
                # and would parse a long head received at once.
                room = self._max_request_size - len(conn.h11.trailing_data[0])
                try:
                    data = await conn.stream.receive(max(room, 1))
                except anyio.EndOfStream:
                    data = b""
                conn.h11.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
                conn.method = event.method
            elif isinstance(event, h11.Data):
                body_size += len(event.data)
                if body_size > self._max_request_size:
                    raise _RequestTooLarge
            elif isinstance(event, h11.EndOfMessage):
                return request
            else:  # ConnectionClosed (PAUSED cannot happen before EndOfMessage)
                return None

    def _answered(self, peer: object, local: object) -> None:
        """Log (info) that a challenge was answered: to whom, on which address.

        Says which address family the CA validated over, and which listening address
        answered it.
        """
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "http-01 server: answered a challenge request from %s on %s",
                _peer(peer),
                _peer(local),
            )

    def _route(self, request: h11.Request) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        path = _request_path(request.target)
        if path is None or not path.startswith(_PATH_PREFIX):
            return 404, [], b""
        if request.method not in (b"GET", b"HEAD"):
            return 405, [(b"allow", b"GET, HEAD")], b""
        # Tokens are validated base64url, so any other byte simply finds nothing.
        answer = self._holders.answer(path[len(_PATH_PREFIX) :].decode("latin-1"))
        if answer is None:
            return 404, [], b""
        # RFC 8555 §8.3: the body is the key authorization, nothing else.
        headers = [(b"content-type", b"application/octet-stream"), (b"cache-control", b"no-store")]
        return 200, headers, answer.encode("ascii")

    async def _linger(self, stream: anyio.abc.SocketStream) -> None:
        """Half-close and let the client read the answer before the socket goes away.

        Closing with unread input makes the kernel send a reset that can destroy the
        answer in flight (RFC 9112 §9.6); so drain for a moment, boundedly.
        """
        with anyio.move_on_after(min(_LINGER_SECONDS, self._timeout)):
            await stream.send_eof()
            drained = 0
            while drained < 4 * self._max_request_size:
                try:
                    drained += len(await stream.receive(_RECEIVE_SIZE))
                except anyio.EndOfStream:
                    return
