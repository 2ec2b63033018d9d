"""A real Pebble ACME server for tests: :class:`PebbleServer`.

`Pebble <https://github.com/letsencrypt/pebble>`_ is Let's Encrypt's small ACME test server.
:class:`PebbleServer` runs the ``pebble`` binary (Debian package ``pebble``) together with
``pebble-challtestsrv`` as the DNS server Pebble's validation authority (VA) resolves through,
everything bound to ``127.0.0.1`` on free ports::

    with PebbleServer(tmp_path) as pebble:
        client = httpx.Client(verify=ssl.create_default_context(cafile=pebble.ca_bundle))
        client.get(pebble.directory_url)

What the harness sets up, and why:

* Pebble's own HTTPS API needs a certificate the package does not ship. :meth:`PebbleServer.start`
  generates a throwaway P-256 CA (:attr:`PebbleServer.ca_bundle`, which clients trust) and a
  leaf for ``localhost``, ``127.0.0.1`` and ``::1``. This CA is *not* the CA that issues ACME
  certificates; those roots change on every start and are fetched with
  :meth:`PebbleServer.root_pem` / :meth:`PebbleServer.intermediate_pem`.
* ``pebble-challtestsrv`` answers every ``A`` query with ``127.0.0.1`` (and no ``AAAA``), so
  Pebble validates http-01 against whatever listens on ``127.0.0.1:``:attr:`~PebbleServer.http_port`
  and tls-alpn-01 against ``127.0.0.1:``:attr:`~PebbleServer.tls_port`: your solver. TXT records
  for dns-01 are set with :meth:`PebbleServer.set_txt`.
* The environment is explicit: every inherited ``PEBBLE_*`` variable is dropped, then
  ``PEBBLE_VA_NOSLEEP``, ``PEBBLE_WFE_NONCEREJECT`` (always, since Pebble's default is 5 %) and
  ``PEBBLE_AUTHZREUSE`` are set from the constructor, then ``extra_env`` is applied.

Only the standard library is used for the readiness and management calls, without any proxy
from the environment.
"""

from __future__ import annotations

import atexit
import datetime
import http.client
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import TracebackType

__all__ = ["PebbleServer"]

_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 5.0
_POLL_INTERVAL = 0.02
_PROBE_TIMEOUT = 1.0
_START_ATTEMPTS = 3
_LOG_TAIL_LINES = 40

# Servers not yet stopped (strong references), stopped at interpreter exit so that a forgotten
# stop() does not leave processes behind.
_LIVE: set[PebbleServer] = set()

# Pebble logs each request as "Pebble 2024/01/01 00:00:00 GET /dir -> calling handler()".
_REQUEST_LINE = re.compile(r"\s([A-Z]+) (\S+) -> calling handler\(\)")
_PORT_IN_USE = "address already in use"


class PebbleServer:
    """Run ``pebble`` and ``pebble-challtestsrv`` on free ``127.0.0.1`` ports.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. All files (config,
    TLS material, logs) are written under *workdir*, which is created if needed.

    Args:
        workdir: Directory for the config, TLS material and logs.
        va_nosleep: Set ``PEBBLE_VA_NOSLEEP=1`` so the VA validates at once instead of
            sleeping 0-15 s first.
        nonce_reject_percent: ``PEBBLE_WFE_NONCEREJECT``, the percentage of valid nonces Pebble
            rejects with ``badNonce`` (0-100).
        authz_reuse_percent: ``PEBBLE_AUTHZREUSE``, the percentage of valid authorizations
            Pebble reuses for new orders (0-100); ``None`` keeps Pebble's default (50).
        eab_required: Require external account binding for new accounts.
        eab_mac_keys: EAB key IDs mapped to their base64url-encoded HMAC keys.
        dns_server: ``"HOST:PORT"`` of an external DNS server Pebble resolves through; when
            given, ``pebble-challtestsrv`` is not started (and :meth:`set_txt` is unavailable).
        extra_env: Extra environment variables for ``pebble``, applied last.
        pebble_binary: The ``pebble`` executable (name on ``PATH`` or path).
        challtestsrv_binary: The ``pebble-challtestsrv`` executable.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        va_nosleep: bool = True,
        nonce_reject_percent: int = 0,
        authz_reuse_percent: int | None = None,
        eab_required: bool = False,
        eab_mac_keys: Mapping[str, str] | None = None,
        dns_server: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        pebble_binary: str = "pebble",
        challtestsrv_binary: str = "pebble-challtestsrv",
    ) -> None:
        _check_percent("nonce_reject_percent", nonce_reject_percent)
        if authz_reuse_percent is not None:
            _check_percent("authz_reuse_percent", authz_reuse_percent)
        self.workdir = Path(workdir)
        self.va_nosleep = va_nosleep
        self.nonce_reject_percent = nonce_reject_percent
        self.authz_reuse_percent = authz_reuse_percent
        self.eab_required = eab_required
        self.eab_mac_keys: dict[str, str] = dict(eab_mac_keys or {})
        self.dns_server = dns_server
        self.extra_env: dict[str, str] = dict(extra_env or {})
        self.pebble_binary = pebble_binary
        self.challtestsrv_binary = challtestsrv_binary

        #: PEM of the throwaway CA that signed Pebble's HTTPS certificate; clients trust this.
        self.ca_bundle: Path = self.workdir / "pebble-https-ca.pem"
        #: Pebble's HTTPS leaf certificate (SANs ``localhost``, ``127.0.0.1``, ``::1``).
        self.tls_cert_path: Path = self.workdir / "pebble-https-cert.pem"
        #: The private key of :attr:`tls_cert_path`.
        self.tls_key_path: Path = self.workdir / "pebble-https-key.pem"
        #: Pebble's combined stdout and stderr (rewritten by each :meth:`start`).
        self.log_path: Path = self.workdir / "pebble.log"
        #: ``pebble-challtestsrv``'s combined stdout and stderr (rewritten by each start).
        self.challtestsrv_log_path: Path = self.workdir / "pebble-challtestsrv.log"
        #: The Pebble configuration file.
        self.config_path: Path = self.workdir / "pebble-config.json"

        self._acme_port: int | None = None
        self._mgmt_port: int | None = None
        self._http_port: int | None = None
        self._tls_port: int | None = None
        self._dns_port: int | None = None
        self._challtestsrv_port: int | None = None
        self._pebble: subprocess.Popen[bytes] | None = None
        self._challtestsrv: subprocess.Popen[bytes] | None = None
        self._logs: list[IO[bytes]] = []
        self._ssl_context: ssl.SSLContext | None = None

    # -- addresses ---------------------------------------------------------------------------

    @property
    def directory_url(self) -> str:
        """The ACME directory URL, ``https://127.0.0.1:{port}/dir``."""
        return f"https://127.0.0.1:{_started(self._acme_port)}/dir"

    @property
    def management_url(self) -> str:
        """Pebble's management API, ``https://127.0.0.1:{port}`` (same TLS certificate)."""
        return f"https://127.0.0.1:{_started(self._mgmt_port)}"

    @property
    def http_port(self) -> int:
        """The port on ``127.0.0.1`` where Pebble's VA validates http-01 challenges."""
        return _started(self._http_port)

    @property
    def tls_port(self) -> int:
        """The port on ``127.0.0.1`` where Pebble's VA validates tls-alpn-01 challenges."""
        return _started(self._tls_port)

    @property
    def dns_port(self) -> int | None:
        """The UDP/TCP DNS port of ``pebble-challtestsrv``; ``None`` with an external DNS."""
        _started(self._acme_port)
        return self._dns_port

    @property
    def challtestsrv_url(self) -> str | None:
        """``http://127.0.0.1:{port}``, the challtestsrv management API; ``None`` if not run."""
        _started(self._acme_port)
        if self._challtestsrv_port is None:
            return None
        return f"http://127.0.0.1:{self._challtestsrv_port}"

    @property
    def pids(self) -> list[int]:
        """PIDs of the processes this server started (pebble first); empty when stopped."""
        return [p.pid for p in (self._pebble, self._challtestsrv) if p is not None]

    @property
    def running(self) -> bool:
        """Whether every process this server started is still alive."""
        procs = [p for p in (self._pebble, self._challtestsrv) if p is not None]
        return bool(procs) and all(p.poll() is None for p in procs)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Write the config and TLS material, start the processes and wait until ready.

        Ready means ``GET /dir`` answers 200 over TLS verified with :attr:`ca_bundle` and the
        management APIs accept connections. Gives up after 30 s.

        Raises:
            RuntimeError: a binary is missing, a process exits early or readiness times out;
                the message carries the tail of the logs. Nothing is left running.
        """
        if self._pebble is not None:
            raise RuntimeError("PebbleServer is already started")
        for binary in (self.pebble_binary, self.challtestsrv_binary):
            if binary == self.challtestsrv_binary and self.dns_server is not None:
                continue
            if shutil.which(binary) is None:
                raise RuntimeError(
                    f"{binary!r} not found; install the Debian package: apt-get install -y pebble"
                )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_tls_material()
        self._ssl_context = ssl.create_default_context(cafile=str(self.ca_bundle))

        # Free ports are picked by binding port 0 and released before the servers bind them,
        # so another process can grab one in between: retry with fresh ports in that case.
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_once()
                return
            except _PortRaceError:
                self.stop()
                if attempt == _START_ATTEMPTS:
                    raise RuntimeError(
                        "Pebble could not bind its ports after "
                        f"{_START_ATTEMPTS} attempts\n{self._log_tails()}"
                    ) from None
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        """Terminate both processes (SIGTERM, then SIGKILL after 5 s) and wait for them.

        Idempotent; safe to call if :meth:`start` failed half-way.
        """
        procs = [p for p in (self._pebble, self._challtestsrv) if p is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_TIMEOUT
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._pebble = None
        self._challtestsrv = None
        _LIVE.discard(self)
        for log in self._logs:
            log.close()
        self._logs = []

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

    def __repr__(self) -> str:
        state = f"directory_url={self.directory_url!r}" if self._pebble else "stopped"
        return f"<PebbleServer {state} workdir={str(self.workdir)!r}>"

    # -- Pebble management API ---------------------------------------------------------------

    def root_pem(self) -> str:
        """The current issuing root certificate (PEM) from ``GET {management_url}/roots/0``.

        Pebble generates new roots on every start.
        """
        return self._management_get("/roots/0")

    def intermediate_pem(self) -> str:
        """The current intermediate certificate (PEM), ``GET {management_url}/intermediates/0``."""
        return self._management_get("/intermediates/0")

    def requests_seen(self) -> list[tuple[str, str]]:
        """``(METHOD, path)`` of every request Pebble logged so far, oldest first.

        Parsed from the ``... <METHOD> <path> -> calling handler()`` lines of :attr:`log_path`.
        Pebble logs the *route* that handled the request, not the full URL path: resources
        with an ID appear by their prefix, e.g. ``("POST", "/authZ/")``, ``("POST",
        "/chalZ/")``, ``("POST", "/finalize-order/")``, ``("POST", "/my-order/")``,
        ``("POST", "/certZ/")``; others as themselves (``("GET", "/dir")``, ``("HEAD",
        "/nonce-plz")``, ``("POST", "/sign-me-up")``, ``("POST", "/order-plz")``). Requests
        rejected before a handler runs (unknown path: 404, wrong method: 405) are not logged.
        """
        for log in self._logs:
            log.flush()
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        return [(m[1], m[2]) for m in map(_REQUEST_LINE.search, text.splitlines()) if m]

    # -- pebble-challtestsrv management API --------------------------------------------------

    def set_txt(self, host: str, value: str) -> None:
        """Serve a TXT record *value* for *host* (e.g. ``_acme-challenge.example.com.``)."""
        self._challtestsrv_post("/set-txt", {"host": _fqdn(host), "value": value})

    def clear_txt(self, host: str) -> None:
        """Remove the TXT records set for *host*."""
        self._challtestsrv_post("/clear-txt", {"host": _fqdn(host)})

    # -- internals ---------------------------------------------------------------------------

    def _start_once(self) -> None:
        need_dns = self.dns_server is None
        ports = _free_ports(4 + (2 if need_dns else 0), udp_for_last=need_dns)
        self._acme_port, self._mgmt_port, self._http_port, self._tls_port = ports[:4]
        if need_dns:
            self._challtestsrv_port, self._dns_port = ports[4:]
            dns = f"127.0.0.1:{self._dns_port}"
        else:
            assert self.dns_server is not None
            self._challtestsrv_port = self._dns_port = None
            dns = self.dns_server
        self._write_config()

        _LIVE.add(self)
        if need_dns:
            self._challtestsrv = self._spawn(
                [
                    self.challtestsrv_binary,
                    "-management",
                    f"127.0.0.1:{self._challtestsrv_port}",
                    "-dns01",
                    dns,
                    "-http01",
                    "",
                    "-https01",
                    "",
                    "-tlsalpn01",
                    "",
                    "-defaultIPv4",
                    "127.0.0.1",
                    "-defaultIPv6",
                    "",
                ],
                self.challtestsrv_log_path,
                _clean_env(),
            )
        self._pebble = self._spawn(
            [self.pebble_binary, "-config", str(self.config_path), "-dnsserver", dns],
            self.log_path,
            self._pebble_env(),
        )
        self._wait_ready()

    def _spawn(
        self, argv: list[str], log_path: Path, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        log = log_path.open("wb")  # each start attempt begins a fresh log
        self._logs.append(log)
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.workdir,
            # Keep Ctrl-C in the test's terminal from killing the servers before teardown.
            start_new_session=True,
        )

    def _pebble_env(self) -> dict[str, str]:
        env = _clean_env()
        if self.va_nosleep:
            env["PEBBLE_VA_NOSLEEP"] = "1"
        env["PEBBLE_WFE_NONCEREJECT"] = str(self.nonce_reject_percent)
        if self.authz_reuse_percent is not None:
            env["PEBBLE_AUTHZREUSE"] = str(self.authz_reuse_percent)
        env.update(self.extra_env)
        return env

    def _write_config(self) -> None:
        config: dict[str, Any] = {
            "pebble": {
                "listenAddress": f"127.0.0.1:{self._acme_port}",
                "managementListenAddress": f"127.0.0.1:{self._mgmt_port}",
                "certificate": str(self.tls_cert_path),
                "privateKey": str(self.tls_key_path),
                "httpPort": self._http_port,
                "tlsPort": self._tls_port,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": self.eab_required,
                "externalAccountMACKeys": self.eab_mac_keys,
            }
        }
        self.config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    def _write_tls_material(self) -> None:
        ca_pem, cert_pem, key_pem = _make_tls_material()
        self.ca_bundle.write_bytes(ca_pem)
        self.tls_cert_path.write_bytes(cert_pem)
        fd = os.open(self.tls_key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # also when the file already existed
            f.write(key_pem)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        pending = ["dir", "management"] + (["challtestsrv"] if self._challtestsrv else [])
        while pending:
            for name, proc in (
                ("pebble", self._pebble),
                ("pebble-challtestsrv", self._challtestsrv),
            ):
                if proc is not None and proc.poll() is not None:
                    if _PORT_IN_USE in self._log_tails():
                        raise _PortRaceError
                    raise RuntimeError(
                        f"{name} exited with status {proc.returncode} during start\n"
                        f"{self._log_tails()}"
                    )
            if pending[0] == "dir":
                ready = self._probe(_started(self._acme_port), "/dir")
            elif pending[0] == "management":
                ready = self._probe(_started(self._mgmt_port), "/roots/0")
            else:
                ready = _port_open(_started(self._challtestsrv_port))
            if ready:
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Pebble was not ready after {_START_TIMEOUT:.0f} s (waiting for "
                    f"{pending[0]})\n{self._log_tails()}"
                )
            time.sleep(_POLL_INTERVAL)

    def _probe(self, port: int, path: str) -> bool:
        try:
            # A short timeout: a port squatter that never answers must not stall the loop.
            status, _ = self._https_get(port, path, timeout=_PROBE_TIMEOUT)
        except (OSError, http.client.HTTPException):
            return False
        return status == 200

    def _https_get(self, port: int, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        assert self._ssl_context is not None
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, context=self._ssl_context, timeout=timeout
        )
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def _management_get(self, path: str) -> str:
        status, body = self._https_get(_started(self._mgmt_port), path)
        if status != 200:
            raise RuntimeError(f"GET {self.management_url}{path} answered {status}: {body!r}")
        return body.decode("ascii")

    def _challtestsrv_post(self, path: str, payload: Mapping[str, str]) -> None:
        if self._challtestsrv_port is None:
            raise RuntimeError("pebble-challtestsrv is not running (dns_server was given)")
        conn = http.client.HTTPConnection("127.0.0.1", self._challtestsrv_port, timeout=10)
        try:
            conn.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise RuntimeError(f"challtestsrv POST {path} answered {resp.status}: {body!r}")

    def _log_tails(self) -> str:
        for log in self._logs:
            log.flush()
        parts = []
        for path in (self.log_path, self.challtestsrv_log_path):
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except FileNotFoundError:
                continue
            tail = "\n".join(lines[-_LOG_TAIL_LINES:])
            parts.append(f"--- last lines of {path} ---\n{tail}")
        return "\n".join(parts)


@atexit.register
def _stop_forgotten_servers() -> None:
    for server in list(_LIVE):
        server.stop()


class _PortRaceError(Exception):
    """A server could not bind a port picked as free (someone else took it meanwhile)."""


def _started(port: int | None) -> int:
    if port is None:
        raise RuntimeError("PebbleServer is not started")
    return port


def _check_percent(name: str, value: int) -> None:
    if not 0 <= value <= 100:
        raise ValueError(f"{name} must be between 0 and 100, got {value}")


def _fqdn(host: str) -> str:
    return host if host.endswith(".") else host + "."


def _clean_env() -> dict[str, str]:
    """The inherited environment without ``PEBBLE_*`` knobs that would change behaviour."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PEBBLE_")}


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


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


def _make_tls_material() -> tuple[bytes, bytes, bytes]:
    """A throwaway P-256 CA and a leaf for localhost/127.0.0.1/::1: (ca PEM, leaf PEM, key PEM)."""
    now = datetime.datetime.now(datetime.UTC)
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=2)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "acmecerts PebbleServer test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca_cert.public_bytes(pem), cert.public_bytes(pem), key_pem
