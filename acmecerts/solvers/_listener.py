"""The listener lifecycle shared by the built-in challenge servers.

:class:`~acmecerts.solvers.Http01Server` and :class:`~acmecerts.solvers.TlsAlpn01Server`
both listen on a TCP address and run either inside the task group of an ``async with``
block or, started by ``start()`` (or lazily by ``present()``), in a background task outside
the caller's task tree. :class:`_ListeningServer` is that lifecycle; a server adds only what
one connection is served with, in one of two ways:

* :meth:`_ListeningServer._serve_connection`: a coroutine run in a task of its own for each
  connection, over anyio streams. Works under every backend anyio supports.
* :meth:`_ListeningServer._callback_factory`: under asyncio only, and optional, an
  :class:`_CallbackConnection` (an :class:`asyncio.Protocol`) per connection, fed by the
  event loop's callbacks: no task, no stream, no cancel scope per connection, which
  halves the CPU a short exchange costs. The listening sockets are still bound
  by anyio (same addresses, same options); ``loop.create_server`` only accepts on them.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import importlib
from typing import TYPE_CHECKING, ClassVar, Final, cast

import anyio
import anyio.abc

from acmecerts._time import _running_loop, duration_seconds
from acmecerts.errors import InvalidInput
from acmecerts.solvers._bind import _bind, _BindFailure, _describe, _hosts

if TYPE_CHECKING:
    import datetime as _dt
    import logging
    from collections.abc import Callable, Sequence
    from types import TracebackType
    from typing import Self

    from anyio.streams.stapled import MultiListener

__all__ = ["ListenError"]

#: Pause before accepting again after ``accept()`` failed (e.g. out of file descriptors).
_ACCEPT_BACKOFF_SECONDS: Final = 0.1
#: The listen() backlog (anyio's default, which it has already applied when binding).
_BACKLOG: Final = 65536
#: When the server stops, how long connections closed gracefully get to flush what they
#: still have to send before they are aborted.
_STOP_GRACE_SECONDS: Final = 0.25


class ListenError(InvalidInput):
    """:class:`~acmecerts.solvers.Http01Server` or
    :class:`~acmecerts.solvers.TlsAlpn01Server` could not listen on its address (in use,
    no permission...).
    """

    def __init__(self, host: str, port: int, reason: str, *, os_errno: int | None = None) -> None:
        where = f"[{host}]" if ":" in host else host
        super().__init__(f"cannot listen on {where}:{port}: {reason}")
        #: The address that could not be bound.
        self.host = host
        #: The port that could not be bound.
        self.port = port
        #: The ``errno`` of the underlying :class:`OSError`, when there was one.
        self.errno = os_errno


class _Running:
    """One listening period of a server (from start to close)."""

    __slots__ = (
        "accepting",
        "all_closed",
        "connections",
        "listener",
        "port",
        "scope",
        "stopped",
        "task",
        "where",
    )

    def __init__(self, listener: MultiListener[anyio.abc.SocketStream], port: int) -> None:
        self.listener = listener
        self.port = port
        #: What the sockets listen on, for log lines: ``"[::]:80 (IPv4 and IPv6)"``.
        self.where = ", ".join(
            _describe(one)
            for one in listener.listeners
            if isinstance(one, anyio.abc.SocketListener)
        )
        #: Cancelled to stop serving; entered by the serving task.
        self.scope = anyio.CancelScope()
        #: Set once the serving task has closed the listener and every connection.
        self.stopped = anyio.Event()
        #: The asyncio task when the server runs detached (kept so it is not collected).
        self.task: asyncio.Task[None] | None = None
        #: Callback-served connections that are open (asyncio only).
        self.connections: set[_CallbackConnection] = set()
        #: False once the server stops: a connection still being set up is refused.
        self.accepting = True
        #: Created when the server stops with connections open; set once none is left.
        self.all_closed: anyio.Event | None = None


class _CallbackConnection(asyncio.Protocol):
    """One connection served by event-loop callbacks, without a task (asyncio only).

    This base admits the connection (or refuses it, beyond ``max_connections`` or once the
    server stops), and keeps the count and the set of open connections that the server
    closes when it stops. A subclass serves it: :meth:`_opened`, ``data_received``,
    ``eof_received``, :meth:`_lost`, and :meth:`_stop` if closing needs more than
    ``transport.close()``. An exception a subclass lets out of a callback ends that
    connection only (the event loop closes the transport and logs it), but a subclass
    should catch its own.
    """

    __slots__ = ("_running", "_server", "transport")

    def __init__(self, server: _ListeningServer, running: _Running) -> None:
        self._server = server
        self._running = running
        #: The connection's transport, ``None`` when refused and once lost.
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        server, running = self._server, self._running
        if not running.accepting:
            transport.close()
            return
        if server._connections >= server._max_connections:
            server._logger.warning(
                "%s server: too many connections, closing a new one", server.challenge_type
            )
            transport.close()
            return
        server._connections += 1
        running.connections.add(self)
        self.transport = cast("asyncio.Transport", transport)
        self._opened()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is None:  # refused
            return
        self.transport = None
        server, running = self._server, self._running
        server._connections -= 1
        running.connections.discard(self)
        if running.all_closed is not None and not running.connections:
            running.all_closed.set()
        self._lost(exc)

    def _opened(self) -> None:
        """The connection was admitted; :attr:`transport` is set."""

    def _lost(self, exc: Exception | None) -> None:
        """The connection is closed (``exc``: why, if not by either side's choice)."""

    def _stop(self) -> None:
        """The server stops: close the connection (it may flush what it has to send)."""
        if self.transport is not None:
            self.transport.close()


class _ListeningServer(abc.ABC):
    """A TCP server with a start/close lifecycle, usable as an async context manager.

    Inside ``async with`` the server runs in a task group owned by the block; nothing is
    left running after it. Started by :meth:`start`, it runs in a background task of the
    event loop until :meth:`aclose`. It may be started again after it was closed. At most
    ``max_connections`` connections are served at once (more are closed at once).

    A subclass sets :attr:`challenge_type` (also the start of its log messages) and
    :attr:`_logger` (its module's logger), and implements :meth:`_serve_connection`; it may
    also serve connections by asyncio callbacks (:meth:`_callback_factory`). Either way,
    :meth:`aclose` returns once every connection is closed.
    """

    #: The challenge type this solver answers (``"http-01"``...); it starts every log message.
    challenge_type: str
    #: The logger the server's messages go to (the subclass's module logger).
    _logger: ClassVar[logging.Logger]

    def __init__(
        self,
        *,
        host: str | Sequence[str],
        port: int,
        timeout: float | _dt.timedelta,
        max_connections: int,
    ) -> None:
        hosts = _hosts(host)
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise InvalidInput(f"port must be an integer in 0..65535, not {port!r}")
        seconds = duration_seconds(timeout, "timeout", positive=True)
        if max_connections < 1:
            raise InvalidInput(f"max_connections must be at least 1, not {max_connections}")
        self._hosts = hosts
        #: The per-request (or per-handshake) deadline, in seconds.
        self._timeout = seconds
        self._port = port
        self._max_connections = max_connections
        self._lock = anyio.Lock()
        self._running: _Running | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        #: Connections open now (both ways of serving count them).
        self._connections = 0

    # -- introspection --------------------------------------------------------

    def __repr__(self) -> str:
        state = "serving" if self.serving else "stopped"
        host = self._hosts[0] if len(self._hosts) == 1 else list(self._hosts)
        return (
            f"{type(self).__name__}(host={host!r}, port={self.port}, {state}, "
            f"{self._repr_detail()})"
        )

    @abc.abstractmethod
    def _repr_detail(self) -> str:
        """What the repr says after the address and state (``"tokens=2"``)."""

    @property
    def host(self) -> str:
        """The address the server listens (or will listen) on; the first of :attr:`hosts`."""
        return self._hosts[0]

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every address the server listens (or will listen) on, all on :attr:`port`."""
        return self._hosts

    @property
    def port(self) -> int:
        """The port actually bound while serving (useful with ``port=0``), else the one asked."""
        running = self._running
        return running.port if running is not None else self._port

    @property
    def serving(self) -> bool:
        """Whether the server is currently listening."""
        return self._running is not None

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        """Bind and start serving in the background (no-op when already serving).

        Prefer ``async with``. Raises :class:`~acmecerts.solvers.ListenError` when the
        address cannot be bound.
        """
        async with self._lock:
            if self._running is not None:
                return
            running = await self._bind()
            self._running = running
            if self._task_group is not None:
                self._task_group.start_soon(self._serve, running, name=repr(self))
            else:
                self._spawn_detached(running)

    async def aclose(self) -> None:
        """Stop listening, close every connection, and wait until that is done.

        Idempotent. What was presented is kept (served again after a restart).
        """
        with anyio.CancelScope(shield=True):
            async with self._lock:
                running, self._running = self._running, None
                if running is None:
                    return
                running.scope.cancel()
                await running.stopped.wait()

    async def __aenter__(self) -> Self:
        if self._task_group is not None:
            raise RuntimeError(f"this {type(self).__name__} is already in an `async with` block")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            await self.start()
        except BaseException:
            self._task_group = None
            # Nothing was spawned: leave the task group cleanly so the error is not
            # wrapped in an ExceptionGroup.
            await task_group.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        task_group, self._task_group = self._task_group, None
        swallow: bool | None = None
        try:
            await self.aclose()
        finally:
            if task_group is not None:
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    # The group's own scope may have to absorb a cancellation.
                    swallow = await task_group.__aexit__(exc_type, exc, tb)
                else:
                    # Every child has finished (aclose waited), so the group is left
                    # cleanly: an error of the block propagates as it is, not inside an
                    # ExceptionGroup.
                    await task_group.__aexit__(None, None, None)
        return swallow

    # -- serving --------------------------------------------------------------

    async def _bind(self) -> _Running:
        try:
            listener = await _bind(self._hosts, self._port)
        except _BindFailure as failure:
            exc = failure.error
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise ListenError(failure.host, failure.port, reason, os_errno=exc.errno) from exc
        running = _Running(listener, listener.extra(anyio.abc.SocketAttribute.local_port))
        self._logger.info("%s server listening on %s", self.challenge_type, running.where)
        return running

    def _spawn_detached(self, running: _Running) -> None:
        """Run the server in a task of its own, outside the caller's task tree."""
        serve = functools.partial(self._serve_detached, running)
        loop = _running_loop()
        if loop is not None:
            running.task = loop.create_task(serve(), name=repr(self))
        else:  # trio: a system task lives until aclose() or the end of trio.run()
            trio = importlib.import_module("trio")
            trio.lowlevel.spawn_system_task(serve, name=repr(self))

    async def _serve_detached(self, running: _Running) -> None:
        try:
            await self._serve(running)
        except Exception:  # pragma: no cover - _serve does not raise
            self._logger.exception("%s server on %s failed", self.challenge_type, running.where)

    async def _serve(self, running: _Running) -> None:
        try:
            with running.scope:
                loop = _running_loop()
                factory = self._callback_factory(running, loop) if loop is not None else None
                if loop is not None and factory is not None:
                    await self._serve_callbacks(running, loop, factory)
                else:
                    async with anyio.create_task_group() as tg:
                        for listener in running.listener.listeners:
                            if isinstance(listener, anyio.abc.SocketListener):
                                tg.start_soon(self._accept_loop, listener, tg)
        finally:
            with anyio.CancelScope(shield=True):
                await running.listener.aclose()
            running.stopped.set()
            self._logger.info("%s server on %s stopped", self.challenge_type, running.where)

    async def _serve_callbacks(
        self,
        running: _Running,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], _CallbackConnection],
    ) -> None:
        """Accept on the bound sockets with the asyncio event loop, until cancelled."""
        servers: list[asyncio.Server] = []
        try:
            for listener in running.listener.listeners:
                sock = listener.extra(anyio.abc.SocketAttribute.raw_socket)
                servers.append(await loop.create_server(factory, sock=sock, backlog=_BACKLOG))
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                running.accepting = False
                for server in servers:
                    server.close()  # closes the listening socket too
                await self._close_callback_connections(running)
                for server in servers:
                    await server.wait_closed()

    async def _close_callback_connections(self, running: _Running) -> None:
        """Close every open callback-served connection, and wait until they are gone."""
        if not running.connections:
            return
        running.all_closed = anyio.Event()
        for connection in list(running.connections):
            connection._stop()
        with anyio.move_on_after(_STOP_GRACE_SECONDS):
            await running.all_closed.wait()
        for connection in list(running.connections):
            if connection.transport is not None:
                connection.transport.abort()
        if running.connections:
            await running.all_closed.wait()  # abort() reports the loss on the next tick

    async def _accept_loop(
        self, listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup
    ) -> None:
        while True:
            try:
                stream = await listener.accept()
            except anyio.ClosedResourceError:
                return
            except (OSError, anyio.BrokenResourceError) as exc:
                # EMFILE and friends: do not spin, do not die.
                self._logger.warning("%s server: accept() failed: %s", self.challenge_type, exc)
                await anyio.sleep(_ACCEPT_BACKOFF_SECONDS)
                continue
            if self._connections >= self._max_connections:
                self._logger.warning(
                    "%s server: too many connections, closing a new one", self.challenge_type
                )
                await self._close_connection(stream)
                continue
            self._connections += 1
            tg.start_soon(self._handle_connection, stream)

    async def _handle_connection(self, stream: anyio.abc.SocketStream) -> None:
        """Serve one accepted connection, then close it; its failures end it only."""
        try:
            await self._serve_connection(stream)
        except Exception as exc:
            # A reset, a broken pipe, a protocol error, a bug triggered by a hostile
            # client: it ends this connection only.
            self._logger.debug("%s connection ended: %r", self.challenge_type, exc)
        finally:
            self._connections -= 1
            await self._close_connection(stream)

    async def _close_connection(self, stream: anyio.abc.SocketStream) -> None:
        """Close a connection that is done with (or refused)."""
        await stream.aclose()

    @abc.abstractmethod
    async def _serve_connection(self, stream: anyio.abc.SocketStream) -> None:
        """Hold the conversation of one connection (closed by the caller afterwards).

        Its exceptions end this connection only: they are logged at debug level.
        """

    def _callback_factory(
        self, running: _Running, loop: asyncio.AbstractEventLoop
    ) -> Callable[[], _CallbackConnection] | None:
        """Under asyncio (``loop``), what serves each connection by callbacks, not a task.

        ``None`` (the default) serves every connection with :meth:`_serve_connection`.
        """
        return None
