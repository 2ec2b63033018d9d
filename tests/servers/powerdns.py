"""A real PowerDNS authoritative server with its HTTP API, for tests: :class:`PowerDnsServer`.

:class:`PowerDnsServer` runs ``pdns_server`` (Debian packages ``pdns-server`` and
``pdns-backend-sqlite3``) in the foreground on free ``127.0.0.1`` ports, with a fresh SQLite
database and its HTTP API enabled under a generated key. dns-lexicon's ``powerdns``
provider writes through that API; point Pebble at the DNS port (``PebbleServer(...,
dns_server=pdns.address)``) and the CA validates dns-01 through the same server::

    with PowerDnsServer(tmp_path) as pdns:
        solver = LexiconSolver(
            "powerdns",
            credentials={"auth_token": pdns.api_key, "pdns_server": pdns.api_url},
        )

The zones (made with ``pdnsutil create-zone``, SOA and NS ``ns1.<zone>``): ``example.test``
with ``A 127.0.0.1`` at the apex, at ``ns1`` and at the wildcard ``*``; and
``delegated.test``, shaped the same. Records written through the API are served at once
(no caches: ``query-cache-ttl``, ``cache-ttl`` and ``negquery-cache-ttl`` are 0).

The Debian package's own service (``pdns.service``) is not used; on a machine where it runs
it holds port 53 only, and this server uses other ports.
"""

from __future__ import annotations

import http.client
import json
import secrets
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rdtypes.ANY.TXT

from acmecerts.testing._process import ManagedServer, _free_ports

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = ["PowerDnsServer"]

#: The zones every :class:`PowerDnsServer` serves.
DEFAULT_ZONES = ("example.test", "delegated.test")
#: Where Debian's pdns-backend-sqlite3 keeps the database schema.
SCHEMA = Path("/usr/share/pdns-backend-sqlite3/schema/schema.sqlite3.sql")


class PowerDnsServer(ManagedServer):
    """Run PowerDNS on free ``127.0.0.1`` ports (DNS and HTTP API) with test zones.

    Args:
        workdir: Directory for the config, the SQLite database, the socket and the log.
        zones: The zones to serve (each with apex, ``ns1`` and wildcard ``A 127.0.0.1``).
        pdns_binary: The ``pdns_server`` executable.
        pdnsutil_binary: The ``pdnsutil`` executable.
    """

    name = "pdns_server"
    start_timeout = 20.0
    port_in_use = ("Address already in use", "Unable to bind")

    def __init__(
        self,
        workdir: Path,
        *,
        zones: Iterable[str] = DEFAULT_ZONES,
        pdns_binary: str = "/usr/sbin/pdns_server",
        pdnsutil_binary: str = "pdnsutil",
    ) -> None:
        super().__init__(workdir)
        #: The served zones, without trailing dots.
        self.zones: tuple[str, ...] = tuple(z.rstrip(".").lower() for z in zones)
        #: The HTTP API key (``X-API-Key``), generated anew by each instance.
        self.api_key = secrets.token_urlsafe(24)
        self.pdns_binary = pdns_binary
        self.pdnsutil_binary = pdnsutil_binary
        self.config_dir: Path = self.workdir / "conf"
        self.database: Path = self.workdir / "pdns.sqlite3"
        self.log_path: Path = self.workdir / "pdns.log"
        self._port: int | None = None
        self._api_port: int | None = None

    # -- addresses ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The DNS port (UDP and TCP, on ``127.0.0.1``)."""
        if self._port is None or not self._procs:
            raise RuntimeError("PowerDnsServer is not started")
        return self._port

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"``, the form Pebble's ``-dnsserver`` takes."""
        return f"127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        """The HTTP API's base URL (what lexicon's ``pdns_server`` option takes)."""
        if self._api_port is None or not self._procs:
            raise RuntimeError("PowerDnsServer is not started")
        return f"http://127.0.0.1:{self._api_port}"

    def __repr__(self) -> str:
        state = f"address={self.address!r} api={self.api_url!r}" if self.running else "stopped"
        return f"<PowerDnsServer {state} workdir={str(self.workdir)!r}>"

    # -- queries -----------------------------------------------------------------------------

    def txt_values(self, name: str) -> set[str]:
        """The TXT strings served at ``name`` now (each record's strings joined)."""
        request = dns.message.make_query(_absolute(name), "TXT")
        request.flags &= ~dns.flags.RD
        response, _ = dns.query.udp_with_fallback(request, "127.0.0.1", timeout=5, port=self.port)
        values: set[str] = set()
        for rrset in response.answer:
            if rrset.rdtype != dns.rdatatype.TXT or rrset.name.to_text() != _absolute(name):
                continue
            for rdata in rrset:
                assert isinstance(rdata, dns.rdtypes.ANY.TXT.TXT)
                values.add(b"".join(rdata.strings).decode("ascii", "replace"))
        return values

    def api_get(self, path: str) -> object:
        """``GET`` an API path (``/api/v1/...``) with the key; the decoded JSON."""
        assert self._api_port is not None
        conn = http.client.HTTPConnection("127.0.0.1", self._api_port, timeout=5)
        try:
            conn.request("GET", path, headers={"X-API-Key": self.api_key})
            response = conn.getresponse()
            return json.loads(response.read())
        finally:
            conn.close()

    # -- internals ---------------------------------------------------------------------------

    def _missing(self) -> str | None:
        if not Path(self.pdns_binary).exists() or shutil.which(self.pdnsutil_binary) is None:
            return (
                "pdns_server or pdnsutil not found; install the Debian packages: "
                "apt-get install -y pdns-server pdns-backend-sqlite3"
            )
        if not SCHEMA.exists():
            return f"{SCHEMA} not found: apt-get install -y pdns-backend-sqlite3"
        return None

    def _prepare(self) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "run").mkdir(exist_ok=True)
        self.database.unlink(missing_ok=True)
        with sqlite3.connect(self.database) as db:
            db.executescript(SCHEMA.read_text(encoding="utf-8"))
        db.close()
        # The zones are made once; the ports only appear in pdns.conf.
        self._write_config(dns_port=1, api_port=1)
        for zone in self.zones:
            self._pdnsutil("create-zone", zone, f"ns1.{zone}")
            for name in ("@", "ns1", "*"):
                self._pdnsutil("add-record", zone, name, "A", "60", "127.0.0.1")

    def _launch(self) -> None:
        self._api_port, self._port = _free_ports(2, udp_for_last=True)
        self._write_config(dns_port=self._port, api_port=self._api_port)
        self._spawn(
            "pdns_server",
            [self.pdns_binary, f"--config-dir={self.config_dir}"],
            self.log_path,
        )

    def _ready_checks(self) -> Sequence[tuple[str, Callable[[], bool]]]:
        return [("SOA answers", self._answers_soa), ("the HTTP API", self._api_answers)]

    def _pdnsutil(self, *args: str) -> None:
        result = subprocess.run(
            [self.pdnsutil_binary, f"--config-dir={self.config_dir}", *args],
            capture_output=True,
            check=False,
            timeout=30,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"pdnsutil {' '.join(args)} failed ({result.returncode}): "
                + result.stderr.decode("utf-8", "replace")
            )

    def _write_config(self, *, dns_port: int, api_port: int) -> None:
        lines = [
            "launch=gsqlite3",
            f"gsqlite3-database={self.database.resolve()}",
            "local-address=127.0.0.1",
            f"local-port={dns_port}",
            "api=yes",
            f"api-key={self.api_key}",
            "webserver=yes",
            "webserver-address=127.0.0.1",
            f"webserver-port={api_port}",
            "webserver-allow-from=127.0.0.0/8",
            # no outgoing security-status query (no network in CI)
            "security-poll-suffix=",
            f"socket-dir={(self.workdir / 'run').resolve()}",
            "guardian=no",
            "daemon=no",
            "disable-syslog=yes",
            "loglevel=4",
            # Answers straight from the database: a record is served as soon as it is written.
            "cache-ttl=0",
            "negquery-cache-ttl=0",
            "query-cache-ttl=0",
            "zone-cache-refresh-interval=0",
        ]
        path = self.config_dir / "pdns.conf"
        path.write_text("\n".join(lines) + "\n", encoding="ascii")
        path.chmod(0o600)

    def _answers_soa(self) -> bool:
        assert self._port is not None
        try:
            for zone in self.zones:
                request = dns.message.make_query(_absolute(zone), "SOA")
                response = dns.query.udp(request, "127.0.0.1", timeout=0.5, port=self._port)
                if response.rcode() != dns.rcode.NOERROR or not response.answer:
                    return False
        except (OSError, dns.exception.DNSException):
            return False
        return True

    def _api_answers(self) -> bool:
        try:
            zones = self.api_get("/api/v1/servers/localhost/zones")
        except (OSError, http.client.HTTPException, ValueError):
            return False
        return isinstance(zones, list) and len(zones) == len(self.zones)


def _absolute(name: str) -> str:
    return name if name.endswith(".") else name + "."
