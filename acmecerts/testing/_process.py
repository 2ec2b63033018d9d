"""Test servers run as child processes: :class:`ManagedServer`, what every harness shares.

A harness (Pebble here; BIND, acme2certifier and tinyproxy in the project's tests) runs one or
more programs on ``127.0.0.1`` and says only what differs: what must exist before it starts
(:meth:`~ManagedServer._missing`), what it writes once (:meth:`~ManagedServer._prepare`), how
one attempt picks its ports and starts its programs (:meth:`~ManagedServer._launch`, with
:meth:`~ManagedServer._spawn`), and when it is ready (:meth:`~ManagedServer._ready_checks`).
The base does the rest, the same way for all:

* **start**: each program in its own session (Ctrl-C in the test's terminal does not kill it
  before teardown), its output in a log file under the work directory, no standard input;
  then the readiness checks in order, every :attr:`~ManagedServer.poll_interval` seconds,
  until :attr:`~ManagedServer.start_timeout`. A program that exits meanwhile fails the start
  with the tail of every log in the message; nothing is left running.
* **ports**: free ports are picked by binding port 0 (:func:`_free_ports`) and released before
  the program binds them, so another process can take one in between. When a program exits
  with a log line of :attr:`~ManagedServer.port_in_use`, the start is tried again on fresh
  ports, :attr:`~ManagedServer.start_attempts` times in all.
* **stop**: ``SIGTERM`` to every program, ``SIGKILL`` to those still alive after
  :attr:`~ManagedServer.stop_timeout` seconds, then wait for them; idempotent, and run at
  interpreter exit for a server nobody stopped.
"""

from __future__ import annotations

import abc
import atexit
import http.client
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, ClassVar, Self

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable, Mapping, Sequence
    from types import TracebackType

__all__ = ["ManagedServer"]

# Servers not yet stopped (strong references), stopped at interpreter exit so that a forgotten
# stop() does not leave processes behind.
_LIVE: set[ManagedServer] = set()


class _PortRaceError(Exception):
    """A program could not bind a port picked as free (someone else took it meanwhile)."""


class ManagedServer(abc.ABC):
    """Programs run on loopback for tests; a subclass says what differs (see the module).

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. Everything the
    programs read and write goes under *workdir*, which is created if needed.
    """

    #: What the server is called in error messages (``"Pebble"``, ``"named"``).
    name: ClassVar[str]
    #: Seconds the readiness checks may take, per attempt.
    start_timeout: ClassVar[float] = 30.0
    #: Seconds between ``SIGTERM`` and ``SIGKILL``.
    stop_timeout: ClassVar[float] = 5.0
    #: How many times a start is tried when a port was taken meanwhile.
    start_attempts: ClassVar[int] = 3
    #: Seconds between two rounds of readiness checks.
    poll_interval: ClassVar[float] = 0.02
    #: How many lines of each log an error message carries.
    log_tail_lines: ClassVar[int] = 40
    #: Log text of a program that could not bind its port: start again on fresh ports.
    port_in_use: ClassVar[tuple[str, ...]] = ()

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        #: The logs of the programs of the last start attempt (they outlive stop()).
        self._log_files: list[Path] = []

    # -- what a subclass says ----------------------------------------------------------------

    def _missing(self) -> str | None:
        """Why the server cannot start at all (a program not installed), or ``None``."""
        return None

    def _prepare(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Write what does not depend on the ports (TLS material...), once per start."""

    @abc.abstractmethod
    def _launch(self) -> None:
        """One start attempt: pick ports, write the config, :meth:`_spawn` the programs."""

    @abc.abstractmethod
    def _ready_checks(self) -> Sequence[tuple[str, Callable[[], bool]]]:
        """``(what, check)`` pairs run in order until each returns ``True`` once."""

    def _log_paths(self) -> Sequence[Path]:
        """The logs whose tails go into error messages (default: those of :meth:`_spawn`)."""
        return self._log_files

    def _stopped(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Forget what only a running server has (called by :meth:`stop`)."""

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def pids(self) -> list[int]:
        """PIDs of the programs this server started, in start order; empty when stopped."""
        return [proc.pid for proc in self._procs.values()]

    @property
    def pid(self) -> int | None:
        """The PID of the first program started, while the server runs."""
        return next(iter(self.pids), None)

    @property
    def running(self) -> bool:
        """Whether every program this server started is still alive."""
        procs = self._procs.values()
        return bool(procs) and all(proc.poll() is None for proc in procs)

    def start(self) -> None:
        """Start the programs and wait until they are ready.

        Raises:
            RuntimeError: a program is missing, exits early, or is not ready in time (the
                message carries the tail of the logs). Nothing is left running.
        """
        if self._procs:
            raise RuntimeError(f"{type(self).__name__} is already started")
        problem = self._missing()
        if problem is not None:
            raise RuntimeError(problem)
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, self.start_attempts + 1):
            try:
                if attempt == 1:
                    self._prepare()
                self._log_files = []
                self._launch()
                self._wait_ready()
                return
            except _PortRaceError:
                self.stop()
                if attempt == self.start_attempts:
                    raise RuntimeError(
                        f"{self.name} could not bind its ports after {self.start_attempts} "
                        f"attempts\n{self._log_tails()}"
                    ) from None
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        """Terminate the programs (``SIGTERM``, ``SIGKILL`` after a while) and wait for them.

        Idempotent; safe to call if :meth:`start` failed half-way.
        """
        procs = list(self._procs.values())
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        _LIVE.discard(self)
        for log in self._logs:
            log.close()
        self._logs = []
        self._stopped()

    def __enter__(self) -> Self:
        """Start the server (see :meth:`start`)."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server (see :meth:`stop`)."""
        self.stop()

    # -- for subclasses ----------------------------------------------------------------------

    def _spawn(
        self,
        label: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start one program, its output into ``log_path`` (rewritten); ``label`` names it."""
        log = log_path.open("wb")
        self._logs.append(log)
        self._log_files.append(log_path)
        _LIVE.add(self)
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            cwd=self.workdir,
            start_new_session=True,
        )
        self._procs[label] = proc
        return proc

    def _flush_logs(self) -> None:
        for log in self._logs:
            log.flush()

    def _log_tails(self) -> str:
        """The last lines of every log, each under a line naming its file."""
        self._flush_logs()
        parts = []
        for path in self._log_paths():
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except FileNotFoundError:
                continue
            tail = "\n".join(lines[-self.log_tail_lines :])
            parts.append(f"--- last lines of {path} ---\n{tail}")
        return "\n".join(parts)

    # -- internals ---------------------------------------------------------------------------

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        pending = list(self._ready_checks())
        while pending:
            for label, proc in self._procs.items():
                if proc.poll() is not None:
                    tails = self._log_tails()
                    if any(marker in tails for marker in self.port_in_use):
                        raise _PortRaceError
                    raise RuntimeError(
                        f"{label} exited with status {proc.returncode} during start\n{tails}"
                    )
            what, check = pending[0]
            if check():
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name} was not ready after {self.start_timeout:.0f} s "
                    f"(waiting for {what})\n{self._log_tails()}"
                )
            time.sleep(self.poll_interval)


@atexit.register
def _stop_forgotten_servers() -> None:
    for server in list(_LIVE):
        server.stop()


def _free_ports(count: int, *, udp_for_last: bool = False) -> list[int]:
    """Distinct free TCP ports on 127.0.0.1; the last one is also free for UDP if asked."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(tcp)
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            if udp_for_last and len(ports) == count - 1:
                udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                held.append(udp)
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
            ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def _port_open(port: int, *, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``127.0.0.1:port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _https_get(
    port: int, path: str, context: ssl.SSLContext, *, timeout: float = 10.0
) -> tuple[int, bytes]:
    """``GET https://127.0.0.1:{port}{path}`` (no proxy): the status and the body."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
    try:
        # Pebble 2.10 refuses a request without a User-Agent (RFC 8555 section 6.1).
        conn.request("GET", path, headers={"User-Agent": "acmecerts-testing"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _https_ok(port: int, path: str, context: ssl.SSLContext, *, timeout: float) -> bool:
    """Whether ``GET {path}`` answers 200; a short ``timeout`` keeps a port squatter brief."""
    try:
        status, _ = _https_get(port, path, context, timeout=timeout)
    except (OSError, http.client.HTTPException):
        return False
    return status == 200
