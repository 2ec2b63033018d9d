"""The listener lifecycle shared by the built-in challenge servers.

:class:`~acmecerts.solvers.Http01Server` and :class:`~acmecerts.solvers.TlsAlpn01Server`
both listen on a TCP address, serve every connection in a task of its own, and run
either inside the task group of an ``async with`` block or, started by ``start()`` (or
lazily by ``present()``), in a background task outside the caller's task tree.
:class:`_ListeningServer` is that lifecycle; a server adds only what one connection
is served with (:meth:`_ListeningServer._serve_connection`).
"""

from __future__ import annotations

import abc
import asyncio
import functools
import importlib
from typing import TYPE_CHECKING, ClassVar, Final

import anyio
import anyio.abc

from acmecerts.errors import InvalidInput

if TYPE_CHECKING:
    import logging
    from types import TracebackType
    from typing import Self

    from anyio.streams.stapled import MultiListener

__all__ = ["ListenError"]

#: Pause before accepting again after ``accept()`` failed (e.g. out of file descriptors).
_ACCEPT_BACKOFF_SECONDS: Final = 0.1


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

    __slots__ = ("listener", "port", "scope", "stopped", "task")

    def __init__(self, listener: MultiListener[anyio.abc.SocketStream], port: int) -> None:
        self.listener = listener
        self.port = port
        #: Cancelled to stop serving; entered by the serving task.
        self.scope = anyio.CancelScope()
        #: Set once the serving task has closed the listener and every connection.
        self.stopped = anyio.Event()
        #: The asyncio task when the server runs detached (kept so it is not collected).
        self.task: asyncio.Task[None] | None = None


class _ListeningServer(abc.ABC):
    """A TCP server with a start/close lifecycle, usable as an async context manager.

    Inside ``async with`` the server runs in a task group owned by the block; nothing is
    left running after it. Started by :meth:`start`, it runs in a background task of the
    event loop until :meth:`aclose`. It may be started again after it was closed. At most
    ``max_connections`` connections are served at once (more are closed at once).

    A subclass sets :attr:`_protocol` (the challenge type, for log messages) and
    :attr:`_logger` (its module's logger), and implements :meth:`_serve_connection`.
    """

    #: Short protocol name that starts every log message (``"http-01"``...).
    _protocol: ClassVar[str]
    #: The logger the server's messages go to (the subclass's module logger).
    _logger: ClassVar[logging.Logger]

    def __init__(self, *, host: str, port: int, max_connections: int) -> None:
        self._host = host
        self._port = port
        self._max_connections = max_connections
        self._lock = anyio.Lock()
        self._running: _Running | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._connections = 0

    # -- introspection --------------------------------------------------------

    @property
    def host(self) -> str:
        """The address the server listens (or will listen) on."""
        return self._host

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
            listener = await anyio.create_tcp_listener(local_host=self._host, local_port=self._port)
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise ListenError(self._host, self._port, reason, os_errno=exc.errno) from exc
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self._logger.info("%s server listening on %s:%d", self._protocol, self._host, port)
        return _Running(listener, port)

    def _spawn_detached(self, running: _Running) -> None:
        """Run the server in a task of its own, outside the caller's task tree."""
        serve = functools.partial(self._serve_detached, running)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            running.task = loop.create_task(serve(), name=repr(self))
        else:  # trio: a system task lives until aclose() or the end of trio.run()
            trio = importlib.import_module("trio")
            trio.lowlevel.spawn_system_task(serve, name=repr(self))

    async def _serve_detached(self, running: _Running) -> None:
        try:
            await self._serve(running)
        except Exception:  # pragma: no cover - _serve does not raise
            self._logger.exception(
                "%s server on %s:%d failed", self._protocol, self._host, running.port
            )

    async def _serve(self, running: _Running) -> None:
        try:
            with running.scope:
                async with anyio.create_task_group() as tg:
                    for listener in running.listener.listeners:
                        if isinstance(listener, anyio.abc.SocketListener):
                            tg.start_soon(self._accept_loop, listener, tg)
        finally:
            with anyio.CancelScope(shield=True):
                await running.listener.aclose()
            running.stopped.set()
            self._logger.info(
                "%s server on %s:%d stopped", self._protocol, self._host, running.port
            )

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
                self._logger.warning("%s server: accept() failed: %s", self._protocol, exc)
                await anyio.sleep(_ACCEPT_BACKOFF_SECONDS)
                continue
            if self._connections >= self._max_connections:
                self._logger.warning(
                    "%s server: too many connections, closing a new one", self._protocol
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
            self._logger.debug("%s connection ended: %r", self._protocol, exc)
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
