"""An http-01 router for tests with several solvers: a stand-in for an ingress.

Pebble validates http-01 at ``127.0.0.1:<httpPort>``. With several operator replicas, each
running its own :class:`~acmecerts.Http01Server` on its own port, something must route
``/.well-known/acme-challenge/`` to them, as an ingress routes it to the operator's pods.
:class:`ChallengeRouter` listens on the validation port and asks every backend in turn,
answering with the first ``200`` (else ``404``)::

    with ChallengeRouter(pebble.http_port, backends=[8081, 8082]) as router:
        router.hold(["slow.example.test"])   # answers for this name wait ...
        ...
        router.release(["slow.example.test"])  # ... until released

A held request is answered from the backends *when it arrives* and only the delivery of
that answer waits, like a response on its way through a slow network: a backend that dies
meanwhile does not change it. Every request is recorded (:attr:`ChallengeRouter.requests`)
with the name it asked for (its ``Host``), the token, which backend answered and whether it
was held. The router runs its own event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterable, Sequence

import h11

from tests.faults.loop_thread import LoopThreadServer

__all__ = ["ChallengeRouter", "RoutedRequest"]

_PREFIX = "/.well-known/acme-challenge/"
_BACKEND_TIMEOUT = 5.0
_HOLD_LIMIT = 60.0
_MAX_HEAD = 16384


@dataclasses.dataclass
class RoutedRequest:
    """One validation request: the name (``Host`` without port), token, outcome."""

    host: str
    token: str
    arrival: float
    held: bool
    #: The status sent (``None`` until answered).
    status: int | None = None
    #: The backend port whose answer was sent (``None``: no backend had the token).
    backend: int | None = None
    answered: float | None = None


class ChallengeRouter(LoopThreadServer):
    """Route http-01 validation requests on ``127.0.0.1:port`` to ``backends`` (ports)."""

    def __init__(self, port: int, *, backends: Sequence[int]) -> None:
        super().__init__()
        self._port = port
        self.backends = list(backends)
        self._lock = threading.Lock()
        self._requests: list[RoutedRequest] = []
        self._held_hosts: set[str] = set()
        self._gates: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- public API --------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the router listens on."""
        return self._port

    @property
    def requests(self) -> list[RoutedRequest]:
        """Every request so far, in arrival order (copies)."""
        with self._lock:
            return [dataclasses.replace(r) for r in self._requests]

    def waiting(self) -> dict[str, int]:
        """For each held name, how many answers are waiting for :meth:`release`."""
        counts: dict[str, int] = {}
        for r in self.requests:
            if r.held and r.status is None:
                counts[r.host] = counts.get(r.host, 0) + 1
        return counts

    def hold(self, hosts: Iterable[str]) -> None:
        """From now on, answers for these names wait until :meth:`release`."""
        names = {h.lower() for h in hosts}
        with self._lock:
            self._held_hosts |= names

        def close_gates() -> None:
            for host in names:
                self._gate(host).clear()

        self._run_in_loop(close_gates)

    def release(self, hosts: Iterable[str] | None = None) -> None:
        """Deliver the held answers for ``hosts`` (all when ``None``) and stop holding them."""
        with self._lock:
            names = set(self._held_hosts) if hosts is None else {h.lower() for h in hosts}
            self._held_hosts -= names

        def open_gates() -> None:
            for host in names:
                self._gate(host).set()

        self._run_in_loop(open_gates)

    # -- the loop ----------------------------------------------------------------------

    def _gate(self, host: str) -> asyncio.Event:
        gate = self._gates.get(host)
        if gate is None:
            gate = self._gates[host] = asyncio.Event()
            gate.set()
        return gate

    async def _serve(self, stop: asyncio.Event) -> None:
        server = await asyncio.start_server(
            self._on_connection, "127.0.0.1", self._port, reuse_address=True
        )
        self._ready.set()
        try:
            await stop.wait()
        finally:
            server.close()
            for gate in self._gates.values():
                gate.set()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve_one(reader, writer)
        except (OSError, asyncio.CancelledError, h11.ProtocolError):
            pass
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        request: h11.Request | None = None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed) or event is h11.PAUSED:
                break
        if request is None:
            return
        path = request.target.decode("ascii", "replace").split("?", 1)[0]
        host = ""
        for name, value in request.headers:
            if name == b"host":
                host = value.decode("ascii", "replace").rsplit(":", 1)[0].lower()
        status, body = 404, b"not found"
        record: RoutedRequest | None = None
        if path.startswith(_PREFIX):
            with self._lock:
                held = host in self._held_hosts
                record = RoutedRequest(host, path[len(_PREFIX) :], time.monotonic(), held)
                self._requests.append(record)
            status, body, backend = await self._ask_backends(request, path)
            with self._lock:
                record.backend = backend
            if held:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._gate(host).wait(), _HOLD_LIMIT)
        head = h11.Response(
            status_code=status,
            headers=[
                (b"Content-Type", b"application/octet-stream"),
                (b"Content-Length", str(len(body)).encode()),
                (b"Connection", b"close"),
            ],
        )
        data = (conn.send(head) or b"") + (conn.send(h11.Data(data=body)) or b"")
        data += conn.send(h11.EndOfMessage()) or b""
        if record is not None:
            with self._lock:
                record.status = status
                record.answered = time.monotonic()
        writer.write(data)
        await writer.drain()

    async def _ask_backends(self, request: h11.Request, path: str) -> tuple[int, bytes, int | None]:
        """The first ``200`` among the backends, in order: ``(status, body, backend)``."""
        for port in list(self.backends):
            try:
                status, body = await asyncio.wait_for(
                    _get(port, path, list(request.headers)), _BACKEND_TIMEOUT
                )
            except (OSError, TimeoutError, ValueError):
                continue  # a backend that is down or broken: ask the next
            if status == 200:
                return status, body, port
        return 404, b"no backend has this token", None


async def _get(port: int, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """``GET path`` from ``127.0.0.1:port`` (HTTP/1.0, the client's ``Host`` kept)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        host = next((v for k, v in headers if k == b"host"), b"localhost")
        writer.write(b"GET " + path.encode() + b" HTTP/1.0\r\nHost: " + host + b"\r\n\r\n")
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.transport.abort()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ValueError(f"not an HTTP answer from port {port}: {head[:80]!r}")
    return int(status_line[1]), body
