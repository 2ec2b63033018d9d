"""A loopback TCP forwarder a test can cut and restore: a server that becomes unreachable.

:class:`TcpForwarder` listens on ``127.0.0.1`` and relays every connection, byte for byte,
to a target port (TLS passes through untouched, so clients verify the target's own
certificate, which must be valid for ``127.0.0.1``). Point a client at
:attr:`TcpForwarder.port` instead of the server::

    with TcpForwarder(kube.port) as forwarder:
        ...  # a kubeconfig whose server is https://127.0.0.1:{forwarder.port}
        forwarder.cut()       # every open connection is reset, new ones are refused
        forwarder.restore()   # the same port listens again

While cut, the listening socket is closed, so a connect fails at once with
``ECONNREFUSED``, as with a server that is down; open connections are reset (RST). The
forwarder runs its own event loop in a background thread, like
:class:`~tests.faults.proxy.FaultProxy`; :attr:`TcpForwarder.accepted` counts the
connections relayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading

from tests.faults.loop_thread import LoopThreadServer

__all__ = ["TcpForwarder"]

_READ_SIZE = 65536


class TcpForwarder(LoopThreadServer):
    """Relay TCP connections from ``127.0.0.1:port`` to ``target_host:target_port``."""

    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__()
        self._target = (target_host, target_port)
        self._requested_port = port
        self._port: int | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = threading.Lock()
        self._accepted = 0
        self._cut = False

    # -- public API --------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port clients connect to (kept across :meth:`cut` and :meth:`restore`)."""
        if self._port is None:
            raise RuntimeError("TcpForwarder is not running")
        return self._port

    @property
    def accepted(self) -> int:
        """How many connections were accepted and relayed so far."""
        with self._lock:
            return self._accepted

    @property
    def is_cut(self) -> bool:
        """Whether the forwarder is cut (refusing connections)."""
        return self._cut

    def cut(self) -> None:
        """Become unreachable: close the listener and reset every open connection."""
        self._await_in_loop(self._do_cut)

    def restore(self) -> None:
        """Listen on the same port again."""
        self._await_in_loop(self._do_restore)

    # -- the loop ----------------------------------------------------------------------

    async def _serve(self, stop: asyncio.Event) -> None:
        await self._listen(self._requested_port)
        assert self._server is not None
        self._port = int(self._server.sockets[0].getsockname()[1])
        self._ready.set()
        try:
            await stop.wait()
        finally:
            await self._do_cut()

    async def _listen(self, port: int) -> None:
        self._server = await asyncio.start_server(
            self._on_connection, "127.0.0.1", port, reuse_address=True
        )

    async def _do_cut(self) -> None:
        self._cut = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        for writer in list(self._writers):
            _reset(writer)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _do_restore(self) -> None:
        if self._server is None:
            await self._listen(self.port)
        self._cut = False

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._cut:
            _reset(writer)
            return
        with self._lock:
            self._accepted += 1
        self._tasks.add(task)
        self._writers.add(writer)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
            self._writers.add(upstream_writer)
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            for w in (writer, upstream_writer):
                if w is not None:
                    self._writers.discard(w)
                    if not w.transport.is_closing():
                        w.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until end of file, then half-close ``writer``."""
    while True:
        data = await reader.read(_READ_SIZE)
        if not data:
            break
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        with contextlib.suppress(OSError):
            writer.write_eof()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close abruptly: TCP RST (``SO_LINGER`` 0), as when a server's host goes away."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
