"""http-01 solvers (RFC 8555 §8.3): a built-in HTTP server and a webroot writer.

The CA fetches ``http://<identifier>:80/.well-known/acme-challenge/<token>`` and expects
the key authorization as the body. Two ways to answer:

* :class:`Http01Server` listens itself: a small asyncio/trio HTTP/1.1 server (``h11`` for
  the protocol) that serves the tokens of every order in flight. Under asyncio each
  connection is an :class:`asyncio.Protocol` answered straight from the event loop's
  callbacks (no task per connection); under trio, a task per connection over anyio streams.
* :class:`Http01Webroot` writes the file into the document root of a web server that is
  already running, and removes it afterwards.

Neither can answer for a wildcard name: RFC 8555 §8.3 validates a host name over HTTP,
and a wildcard is not one (use dns-01).

Errors specific to this module::

    InvalidInput
    ├── ListenError      Http01Server could not bind its address (in use, no permission)
    └── WebrootError     Http01Webroot could not write into its document root
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final, cast

import anyio
import anyio.abc
import h11

from acmecerts._time import as_seconds
from acmecerts.errors import AcmeCertsError, InvalidInput, UnsupportedChallenge
from acmecerts.protocol.challenges import validate_token
from acmecerts.solvers._listener import ListenError, _CallbackConnection, _ListeningServer

if TYPE_CHECKING:
    import datetime as _dt
    from collections.abc import Callable

    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask
    from acmecerts.solvers._listener import _Running

__all__ = ["Http01Server", "Http01Webroot", "ListenError", "WebrootError"]

logger = logging.getLogger(__name__)

_CHALLENGE_TYPE: Final = "http-01"
#: RFC 8555 §8.3: the path the CA requests, followed by the token.
_WELL_KNOWN: Final = (".well-known", "acme-challenge")
_PATH_PREFIX: Final = b"/.well-known/acme-challenge/"

#: How long a closing connection waits for the client to hang up (lingering close).
_LINGER_SECONDS: Final = 1.0
#: Requests served on one kept-alive connection before the server closes it.
_MAX_REQUESTS_PER_CONNECTION: Final = 100
_RECEIVE_SIZE: Final = 16384


class WebrootError(InvalidInput):
    """:class:`Http01Webroot` could not write the challenge file into its document root."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        #: The file or directory that could not be used.
        self.path = path


def _supports(identifier: Identifier) -> bool:
    # RFC 8555 §8.3 validates a host name or (RFC 8738 §3) an IP address; never a wildcard.
    return identifier.type in ("dns", "ip") and not identifier.is_wildcard


def _check_task(solver: object, task: ChallengeTask) -> str:
    """Refuse a task this solver cannot present; return its (validated) token."""
    name = type(solver).__name__
    if task.type != _CHALLENGE_TYPE:
        raise UnsupportedChallenge(f"{name} answers http-01 challenges, not {task.type!r}")
    if not _supports(task.identifier):
        raise UnsupportedChallenge(
            f"http-01 cannot validate {task.identifier.value!r}"
            + (" (wildcard names need dns-01)" if task.identifier.is_wildcard else "")
        )
    return validate_token(task.token)


def _is_valid_token(token: object) -> bool:
    try:
        validate_token(token)
    except AcmeCertsError:
        return False
    return True


class _Holders:
    """Which tasks currently want each token answered.

    Several orders may share one authorization (the CA reuses pending ones), so the same
    token can be presented more than once; it stays answered until the last holder is
    cleaned up. Tasks are counted by equality: equal tasks carry the same answer.
    """

    def __init__(self) -> None:
        self._by_token: dict[str, list[ChallengeTask]] = {}

    def add(self, task: ChallengeTask) -> None:
        self._by_token.setdefault(task.token, []).append(task)

    def discard(self, task: ChallengeTask) -> bool:
        """Forget one ``add(task)`` if there was one; return whether the token is now free."""
        holders = self._by_token.get(task.token)
        if holders is None:
            return True
        with contextlib.suppress(ValueError):
            holders.remove(task)
        if holders:
            return False
        del self._by_token[task.token]
        return True

    def answer(self, token: str) -> str | None:
        """The key authorization to serve for ``token`` (the latest holder's), if any."""
        holders = self._by_token.get(token)
        return holders[-1].key_authorization if holders else None

    def __len__(self) -> int:
        return len(self._by_token)


# ---------------------------------------------------------------------------
# Http01Server
# ---------------------------------------------------------------------------


class _RequestTooLarge(Exception):
    """The request body is larger than the server accepts."""


class _Conversation:
    """One client connection: the h11 state machine, the stream, the current method."""

    __slots__ = ("h11", "method", "stream")

    def __init__(self, conn: h11.Connection, stream: anyio.abc.SocketStream) -> None:
        self.h11 = conn
        self.stream = stream
        #: Method of the request being answered (``None`` before it is parsed).
        self.method: bytes | None = None

    async def send(
        self,
        status: int,
        *,
        headers: list[tuple[bytes, bytes]] | None = None,
        body: bytes = b"",
        close: bool = False,
    ) -> None:
        """Send one complete response (a short text body for errors without one)."""
        await self.stream.send(
            _render(self.h11, self.method, status, headers=headers, body=body, close=close)
        )


def _render(
    conn: h11.Connection,
    method: bytes | None,
    status: int,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    body: bytes = b"",
    close: bool = False,
) -> bytes:
    """One complete response, through ``conn`` (a short text body for errors without one).

    ``method`` is the request's (``None`` before one was parsed): a ``HEAD`` gets ``GET``'s
    headers and no body (RFC 9110 §9.3.2).
    """
    if status >= 400 and not body:
        body = _reason(status).lower() + b"\n"
        headers = [*(headers or []), (b"content-type", b"text/plain; charset=utf-8")]
    all_headers = [*(headers or []), (b"content-length", str(len(body)).encode("ascii"))]
    if close:
        all_headers.append((b"connection", b"close"))
    out = [conn.send(_response(status, tuple(all_headers)))]
    if method != b"HEAD":
        out.append(conn.send(h11.Data(data=body)))
    out.append(conn.send(h11.EndOfMessage()))
    return b"".join(chunk for chunk in out if chunk)


class Http01Server(_ListeningServer):
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

    :param host: address to listen on; the default ``"0.0.0.0"`` is every IPv4 interface
        (``"::"`` for IPv6, ``"localhost"`` for both loopbacks).
    :param port: port to listen on; the CA always connects to 80, so another port only
        makes sense behind a port forward or a proxy. ``0`` picks a free port.
    :param timeout: per-request deadline in seconds (or a ``timedelta``).
    :param max_request_size: the largest request head, and the largest body, accepted.
    :param max_connections: the most connections served at once.
    """

    #: The challenge type this solver answers.
    challenge_type: str = _CHALLENGE_TYPE
    _protocol: ClassVar[str] = _CHALLENGE_TYPE
    _logger: ClassVar[logging.Logger] = logger

    def __init__(
        self,
        *,
        host: str = "0.0.0.0",
        port: int = 80,
        timeout: float | _dt.timedelta = 10.0,
        max_request_size: int = 8192,
        max_connections: int = 1024,
    ) -> None:
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise InvalidInput(f"port must be an integer in 0..65535, not {port!r}")
        seconds = as_seconds(timeout)
        if not seconds > 0:
            raise InvalidInput(f"timeout must be positive, not {timeout!r}")
        if max_request_size < 1024:
            raise InvalidInput(f"max_request_size must be at least 1024, not {max_request_size}")
        if max_connections < 1:
            raise InvalidInput(f"max_connections must be at least 1, not {max_connections}")
        super().__init__(host=host, port=port, max_connections=max_connections)
        self._timeout = seconds
        self._max_request_size = max_request_size
        self._holders = _Holders()
        #: Serve with a task per connection over anyio streams even under asyncio (tests).
        self._streams_only = False

    # -- introspection --------------------------------------------------------

    def __repr__(self) -> str:
        state = "serving" if self.serving else "stopped"
        return (
            f"Http01Server(host={self._host!r}, port={self.port}, {state}, "
            f"tokens={len(self._holders)})"
        )

    # -- Solver ---------------------------------------------------------------

    def supports(self, identifier: Identifier) -> bool:
        """DNS names and IP addresses, but not wildcard names (RFC 8555 §8.3)."""
        return _supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        """Serve ``task.key_authorization`` for ``task.token``, starting the server if needed.

        Raises :class:`~acmecerts.errors.UnsupportedChallenge` for a wildcard or a non
        http-01 task, :class:`~acmecerts.errors.BadServerResponse` for a malformed token,
        and :class:`ListenError` if a lazy start cannot bind.
        """
        _check_task(self, task)
        # Registered before the (cancellable) lazy start, so a cleanup() in a finally
        # block always finds what this call added.
        self._holders.add(task)
        if self._running is None:
            await self.start()

    async def cleanup(self, task: ChallengeTask) -> None:
        """Stop serving ``task.token`` (once no other presented task holds it).

        Idempotent; never raises; does not wait, so it works in a cancelled scope too.
        """
        if _is_valid_token(task.token):
            self._holders.discard(task)

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
                        await conn.send(408, close=True)
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
                await conn.send(exc.error_status_hint, close=True)
            return False
        except _RequestTooLarge:
            await conn.send(413, close=True)
            return False
        if request is None:
            return False
        status, headers, body = self._route(request)
        await conn.send(status, headers=headers, body=body, close=last)
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


class _Http01Connection(_CallbackConnection):
    """One connection to :class:`Http01Server`, served by asyncio callbacks (no task).

    Bytes go into ``h11`` as they arrive; every complete request is answered at once, from
    ``data_received``, so pipelined requests are answered in order within one callback.
    The behaviour is :meth:`Http01Server._converse`'s, with one timer instead of a task:

    * serving: the timer is the request's deadline (``timeout``, from the end of the
      previous answer); when it fires, a started request gets ``408`` and an idle
      connection is closed;
    * closing (after an answer with ``Connection: close``, a protocol error, the client's
      EOF): the server half-closes and drains the client's input until it hangs up, at
      most ``min(1 s, timeout)`` and ``4 * max_request_size`` bytes (a lingering close,
      RFC 9112 §9.6), then closes.
    """

    __slots__ = (
        "_body_size",
        "_closing",
        "_deadline",
        "_drained",
        "_h11",
        "_http",
        "_loop",
        "_method",
        "_peer_eof",
        "_request",
        "_served",
        "_timer",
    )

    def __init__(
        self, server: Http01Server, running: _Running, loop: asyncio.AbstractEventLoop
    ) -> None:
        super().__init__(server, running)
        self._http = server
        self._loop = loop
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=server._max_request_size)
        #: The request being received (``None`` between requests).
        self._request: h11.Request | None = None
        self._method: bytes | None = None
        self._body_size = 0
        self._served = 0
        #: Loop time by which the current request must be answered.
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._drained = 0
        self._peer_eof = False

    # -- asyncio callbacks ----------------------------------------------------

    def _opened(self) -> None:
        timeout = self._http._timeout
        self._deadline = self._loop.time() + timeout
        self._timer = self._loop.call_at(self._deadline, self._on_timer)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            self._drained += len(data)
            if self._drained > 4 * self._http._max_request_size and self.transport is not None:
                self.transport.close()
            return
        try:
            conn = self._h11
            while True:
                room = self._http._max_request_size - len(conn.trailing_data[0])
                if len(data) <= room:
                    conn.receive_data(data)
                    self._process()
                    return
                # h11 limits only what is still incomplete: fed a long head at once, it
                # would parse it. Fed no more than the room left, it refuses (431) any
                # head longer than max_request_size.
                cut = max(room, 1)
                conn.receive_data(data[:cut])
                data = data[cut:]
                self._process()
                if self._closing:
                    return
        except Exception as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        self._peer_eof = True
        if self._closing:
            return False  # the client has read the answer and hung up: close
        try:
            self._h11.receive_data(b"")
            self._process()  # ends in ConnectionClosed or a protocol error
        except Exception as exc:
            self._fail(exc)
            return True
        self._shutdown()
        return True

    def pause_writing(self) -> None:
        # A client that sends but does not read: stop reading its requests too.
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    def _lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if exc is not None:
            logger.debug("%s connection ended: %r", _CHALLENGE_TYPE, exc)

    # -- the conversation -----------------------------------------------------

    def _process(self) -> None:
        """Handle every complete event received so far: answer each complete request."""
        conn = self._h11
        while not self._closing:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    self._respond(exc.error_status_hint, close=True)
                self._shutdown()
                return
            if event is h11.NEED_DATA:
                if self._request is not None and conn.they_are_waiting_for_100_continue:
                    # Answer without the body; the connection is closed after the answer.
                    self._answer(self._request)
                return
            event_type = type(event)
            if event_type is h11.Request:
                self._request = cast("h11.Request", event)
                self._method = self._request.method
                self._body_size = 0
            elif event_type is h11.Data:
                self._body_size += len(cast("h11.Data", event).data)
                if self._body_size > self._http._max_request_size:
                    self._respond(413, close=True)
                    self._shutdown()
                    return
            elif event_type is h11.EndOfMessage and self._request is not None:
                self._answer(self._request)
            else:  # ConnectionClosed (PAUSED cannot happen: each cycle ends answered)
                self._shutdown()
                return

    def _answer(self, request: h11.Request) -> None:
        """Answer a request, then prepare for the next one or close."""
        self._served += 1
        status, headers, body = self._http._route(request)
        self._respond(
            status,
            headers=headers,
            body=body,
            close=self._served >= _MAX_REQUESTS_PER_CONNECTION,
        )
        conn = self._h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            self._request = None
            self._method = None
            # The next request's deadline; the timer catches up when it fires.
            self._deadline = self._loop.time() + self._http._timeout
        else:
            self._shutdown()

    def _respond(
        self,
        status: int,
        *,
        headers: list[tuple[bytes, bytes]] | None = None,
        body: bytes = b"",
        close: bool = False,
    ) -> None:
        data = _render(self._h11, self._method, status, headers=headers, body=body, close=close)
        if self.transport is not None:
            self.transport.write(data)

    def _on_timer(self) -> None:
        self._timer = None
        transport = self.transport
        if transport is None:
            return
        if self._closing:  # the lingering close is over
            if transport.get_write_buffer_size():
                transport.abort()  # the client does not even read its answer
            else:
                transport.close()
            return
        if self._loop.time() < self._deadline:  # answered since: wait for the next request
            self._timer = self._loop.call_at(self._deadline, self._on_timer)
            return
        conn = self._h11
        pending, _closed = conn.trailing_data
        try:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE) and (
                conn.their_state is not h11.IDLE or pending
            ):
                # A request was started but not finished in time (RFC 9110 §15.5.9).
                self._respond(408, close=True)
                self._shutdown()
                return
        except Exception as exc:
            self._fail(exc)
            return
        # An idle keep-alive connection is simply closed (RFC 9112 §9.8).
        if transport.get_write_buffer_size():
            transport.abort()
        else:
            transport.close()

    def _shutdown(self) -> None:
        """Close after the last answer: half-close, drain the client's input, then close."""
        if self._closing:
            return
        self._closing = True
        transport = self.transport
        if transport is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(
            min(_LINGER_SECONDS, self._http._timeout), self._on_timer
        )
        if self._peer_eof:
            transport.close()  # after sending what is buffered
        else:
            transport.write_eof()  # likewise; reading goes on (data_received drains)

    def _fail(self, exc: Exception) -> None:
        """A bug triggered by a hostile client, or a broken connection: it ends this one."""
        logger.debug("%s connection ended: %r", _CHALLENGE_TYPE, exc)
        self._closing = True
        if self.transport is not None:
            self.transport.abort()

    def _stop(self) -> None:
        self._closing = True
        super()._stop()


@functools.lru_cache(maxsize=256)
def _response(status: int, headers: tuple[tuple[bytes, bytes], ...]) -> h11.Response:
    """The (immutable) response event: the same few are sent again and again."""
    return h11.Response(status_code=status, headers=list(headers), reason=_reason(status))


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _request_path(target: bytes) -> bytes | None:
    """The path of a request target: origin form, or absolute form (RFC 9112 §3.2)."""
    if target.startswith(b"/"):
        return target.split(b"?", 1)[0].split(b"#", 1)[0]
    for scheme in (b"http://", b"https://"):
        if target[: len(scheme)].lower() == scheme:
            rest = target[len(scheme) :]
            slash = rest.find(b"/")
            return b"/" if slash < 0 else _request_path(rest[slash:])
    return None


# ---------------------------------------------------------------------------
# Http01Webroot
# ---------------------------------------------------------------------------


class Http01Webroot:
    """An http-01 solver for a web server you already run: it writes into its webroot.

    :meth:`present` writes ``<root>/.well-known/acme-challenge/<token>`` containing the key
    authorization (directories created as needed with mode ``0755``, the file ``0644``,
    written atomically: temporary file in the same directory, then rename). :meth:`cleanup`
    removes it. The web server must serve ``root`` for every name being validated, on
    port 80, and should serve these files as ``application/octet-stream`` or
    ``text/plain``.

    Tokens come from the CA and are validated before they touch the file system, so a
    hostile token cannot name a file outside the challenge directory.

    :param root: the document root; it must exist.
    """

    #: The challenge type this solver answers.
    challenge_type: str = _CHALLENGE_TYPE

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root)
        self._holders = _Holders()
        self._lock = anyio.Lock()

    @property
    def root(self) -> Path:
        """The document root."""
        return self._root

    @property
    def challenge_dir(self) -> Path:
        """``<root>/.well-known/acme-challenge``."""
        return self._root.joinpath(*_WELL_KNOWN)

    def path_for(self, token: str) -> Path:
        """The file that answers ``token`` (raises ``BadServerResponse`` for a bad token)."""
        return self.challenge_dir / validate_token(token)

    def __repr__(self) -> str:
        return f"Http01Webroot({str(self._root)!r})"

    def supports(self, identifier: Identifier) -> bool:
        """DNS names and IP addresses, but not wildcard names (RFC 8555 §8.3)."""
        return _supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        """Write the challenge file for ``task``.

        Raises :class:`~acmecerts.errors.UnsupportedChallenge` for a wildcard or a non
        http-01 task, :class:`~acmecerts.errors.BadServerResponse` for a malformed token,
        and :class:`WebrootError` when the file cannot be written.
        """
        token = _check_task(self, task)
        async with self._lock:
            # Registered first: the cleanup() that follows every present() undoes it,
            # whatever happened below.
            self._holders.add(task)
            await anyio.to_thread.run_sync(self._write, token, task.key_authorization)

    async def cleanup(self, task: ChallengeTask) -> None:
        """Remove the challenge file (once no other presented task holds the token).

        Idempotent; a missing file is fine; a malformed token is ignored. Shielded from
        cancellation so that it completes in a ``finally`` of a cancelled task. A file
        that cannot be removed is logged, not raised: a stale challenge file is harmless.
        """
        if not _is_valid_token(task.token):
            return
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if self._holders.discard(task):
                    await anyio.to_thread.run_sync(self._remove, task.token)

    # -- blocking helpers (run in a worker thread) -----------------------------

    def _write(self, token: str, key_authorization: str) -> None:
        if not self._root.is_dir():
            raise WebrootError(
                f"webroot {str(self._root)!r} does not exist or is not a directory",
                path=str(self._root),
            )
        directory = self._root
        for part in _WELL_KNOWN:
            directory = directory / part
            try:
                directory.mkdir(mode=0o755)
            except FileExistsError:
                continue
            except OSError as exc:
                raise WebrootError(
                    f"cannot create {str(directory)!r}: {exc.strerror or exc}", path=str(directory)
                ) from exc
            # mkdir's mode is reduced by the umask; the web server must be able to read.
            directory.chmod(0o755)
        target = directory / token
        try:
            fd, temp_name = tempfile.mkstemp(prefix=f".{token}.", suffix=".tmp", dir=directory)
        except OSError as exc:
            raise WebrootError(
                f"cannot write into {str(directory)!r}: {exc.strerror or exc}", path=str(directory)
            ) from exc
        try:
            with os.fdopen(fd, "wb") as file:
                os.fchmod(file.fileno(), stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
                file.write(key_authorization.encode("ascii"))
            # The file is short-lived and worthless after a crash: no fsync needed.
            os.replace(temp_name, target)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp_name)
            if isinstance(exc, OSError):
                raise WebrootError(
                    f"cannot write {str(target)!r}: {exc.strerror or exc}", path=str(target)
                ) from exc
            raise

    def _remove(self, token: str) -> None:
        path = self.challenge_dir / token
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("http-01 webroot: cannot remove %s: %s", path, exc)
