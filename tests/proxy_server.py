"""A real HTTP proxy for the tests: Debian's ``tinyproxy``, on loopback, run in the foreground.

:class:`TinyProxy` writes its own configuration in a work directory (``Listen`` and
``Allow`` 127.0.0.1, a free port, a log file at level ``Info``, optionally ``ConnectPort``
and ``BasicAuth`` lines), starts ``tinyproxy -d -c FILE``, waits until the port accepts
connections, and stops it by its PID. Its log shows every request it was asked
(``Request (file descriptor N): CONNECT 127.0.0.1:14000 HTTP/1.1``): :meth:`connects`
lists the ``CONNECT`` targets, the proof that a client went through the proxy.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import TracebackType
    from typing import Self

_START_TIMEOUT = 20.0
_STOP_TIMEOUT = 5.0
_START_ATTEMPTS = 3
_REQUEST = re.compile(r"Request \(file descriptor \d+\): (\S+) (\S+) HTTP/")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class TinyProxy:
    """One ``tinyproxy`` on 127.0.0.1 (see the module's description).

    Args:
        workdir: Where its configuration and log go.
        connect_ports: Allow ``CONNECT`` to these ports only (``None``: any port).
        basic_auth: ``(user, password)`` the proxy requires (``Proxy-Authorization``).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        connect_ports: Sequence[int] | None = None,
        basic_auth: tuple[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.connect_ports = connect_ports
        self.basic_auth = basic_auth
        self.config_path = workdir / "tinyproxy.conf"
        self.log_path = workdir / "tinyproxy.log"
        self.output_path = workdir / "tinyproxy.out"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (without the credentials)."""
        return f"http://127.0.0.1:{self.port}"

    def url_with(self, user: str, password: str) -> str:
        """The proxy URL with ``user:password@`` in it."""
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The PID of ``tinyproxy`` while it runs."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start it and wait until it accepts connections (RuntimeError with its log if not)."""
        binary = shutil.which("tinyproxy")
        if binary is None:
            raise RuntimeError(
                "tinyproxy not found: run `bash scripts/test.sh` (installs it) or "
                "`apt-get install -y tinyproxy`"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, _START_ATTEMPTS + 1):
            self.port = _free_port()
            self._write_config()
            self.log_path.unlink(missing_ok=True)
            with self.output_path.open("wb") as output:
                self._proc = subprocess.Popen(
                    [binary, "-d", "-c", str(self.config_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    start_new_session=True,
                )
            if self._wait_ready():
                return
            self.stop()  # the port was taken meanwhile, or it failed: try another port
            if attempt == _START_ATTEMPTS:
                raise RuntimeError(f"tinyproxy did not start\n{self._tail()}")

    def stop(self) -> None:
        """Stop it (SIGTERM, SIGKILL after 5 s) and wait for it. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def requests(self) -> list[tuple[str, str]]:
        """``(method, target)`` of every request the proxy was asked, in order."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        return [(m.group(1), m.group(2)) for m in _REQUEST.finditer(text)]

    def connects(self) -> list[str]:
        """The ``host:port`` of every ``CONNECT`` the proxy was asked, in order."""
        return [target for method, target in self.requests() if method == "CONNECT"]

    def log_text(self) -> str:
        """The whole log (for assertion messages)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def _write_config(self) -> None:
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Allow 127.0.0.1",
            "Timeout 60",
            "MaxClients 64",
            f'LogFile "{self.log_path}"',
            "LogLevel Info",
            "DisableViaHeader Yes",
        ]
        lines += [f"ConnectPort {port}" for port in self.connect_ports or ()]
        if self.basic_auth is not None:
            user, password = self.basic_auth
            lines.append(f"BasicAuth {user} {password}")
        self.config_path.write_text("\n".join(lines) + "\n", encoding="ascii")

    def _wait_ready(self) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            if "Accepting connections" in self.log_text():  # it bound its port
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return True
                except OSError:
                    pass
            time.sleep(0.05)
        return False

    def _tail(self) -> str:
        parts = []
        for path in (self.output_path, self.log_path):
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except FileNotFoundError:
                continue
            parts.append(f"--- {path} ---\n" + "\n".join(lines[-30:]))
        return "\n".join(parts)

    def __repr__(self) -> str:
        return f"<TinyProxy {self.url if self._proc is not None else 'stopped'}>"
