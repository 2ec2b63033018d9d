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
from typing import TYPE_CHECKING

from acmecerts.testing._process import ManagedServer, _free_ports, _port_open

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

_REQUEST = re.compile(r"Request \(file descriptor \d+\): (\S+) (\S+) HTTP/")


class TinyProxy(ManagedServer):
    """One ``tinyproxy`` on 127.0.0.1 (see the module's description).

    Args:
        workdir: Where its configuration and log go.
        connect_ports: Allow ``CONNECT`` to these ports only (``None``: any port).
        basic_auth: ``(user, password)`` the proxy requires (``Proxy-Authorization``).
    """

    name = "tinyproxy"
    start_timeout = 20.0
    poll_interval = 0.05
    port_in_use = ("Could not create listening sockets",)

    def __init__(
        self,
        workdir: Path,
        *,
        connect_ports: Sequence[int] | None = None,
        basic_auth: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(workdir)
        self.connect_ports = connect_ports
        self.basic_auth = basic_auth
        self.config_path = self.workdir / "tinyproxy.conf"
        self.log_path = self.workdir / "tinyproxy.log"
        self.output_path = self.workdir / "tinyproxy.out"
        self.port = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (without the credentials)."""
        return f"http://127.0.0.1:{self.port}"

    def url_with(self, user: str, password: str) -> str:
        """The proxy URL with ``user:password@`` in it."""
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

    def requests(self) -> list[tuple[str, str]]:
        """``(method, target)`` of every request the proxy was asked, in order."""
        return [(m.group(1), m.group(2)) for m in _REQUEST.finditer(self.log_text())]

    def connects(self) -> list[str]:
        """The ``host:port`` of every ``CONNECT`` the proxy was asked, in order."""
        return [target for method, target in self.requests() if method == "CONNECT"]

    def log_text(self) -> str:
        """The whole log (for assertion messages)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def __repr__(self) -> str:
        return f"<TinyProxy {self.url if self._procs else 'stopped'}>"

    # -- the managed process ---------------------------------------------------------------

    def _missing(self) -> str | None:
        if shutil.which("tinyproxy") is None:
            return (
                "tinyproxy not found: run `bash scripts/test.sh` (installs it) or "
                "`apt-get install -y tinyproxy`"
            )
        return None

    def _launch(self) -> None:
        (self.port,) = _free_ports(1)
        self._write_config()
        self.log_path.unlink(missing_ok=True)
        self._spawn("tinyproxy", ["tinyproxy", "-d", "-c", str(self.config_path)], self.output_path)

    def _ready_checks(self) -> Sequence[tuple[str, Callable[[], bool]]]:
        return [
            # The log says so once it bound its port.
            ("Accepting connections", lambda: "Accepting connections" in self.log_text()),
            ("its port", lambda: _port_open(self.port, timeout=0.5)),
        ]

    def _log_paths(self) -> Sequence[Path]:
        return [self.output_path, self.log_path]

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
