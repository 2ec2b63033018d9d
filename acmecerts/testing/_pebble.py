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
* Which Pebble: 2.10 (Debian sid's package, unpacked by ``scripts/test.sh``) unless *release*
  says ``"2.4"`` (Debian bookworm's ``/usr/bin/pebble``); see :func:`find_pebble`. 2.10 is
  started with Let's Encrypt's three profiles (:data:`LETS_ENCRYPT_PROFILES`: ``classic``
  90 days, ``tlsserver`` 45 days, ``shortlived`` 160 hours) and, when asked, ``retryAfter``
  on its polls. Like Pebble upstream, an order that names no profile gets one **at random**.
* The environment is explicit: every inherited ``PEBBLE_*`` variable is dropped, then
  ``PEBBLE_VA_NOSLEEP``, ``PEBBLE_WFE_NONCEREJECT`` (always, since Pebble's default is 5 %) and
  ``PEBBLE_AUTHZREUSE`` are set from the constructor, then ``extra_env`` is applied.

Only the standard library is used for the readiness and management calls, without any proxy
from the environment.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from acmecerts.testing._binaries import (
    PebbleBinaries,
    PebbleNotFound,
    Release,
    _release_of,
    find_pebble,
)
from acmecerts.testing._process import (
    ManagedServer,
    _free_ports,
    _https_get,
    _https_ok,
    _port_open,
)
from acmecerts.testing._tls import _write_tls_material

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["LETS_ENCRYPT_PROFILES", "PebbleServer", "Profile"]

_PROBE_TIMEOUT = 1.0

_HOUR = 3600
_DAY = 24 * _HOUR


@dataclass(frozen=True)
class Profile:
    """A Pebble 2.10 certificate profile: its description and validity period (seconds)."""

    description: str
    validity_seconds: int


#: Let's Encrypt's profiles as of 2026 (https://letsencrypt.org/docs/profiles/), by name.
LETS_ENCRYPT_PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        "classic": Profile("Let's Encrypt's default: 90-day certificates", 90 * _DAY),
        "tlsserver": Profile("TLS server authentication only, 45-day certificates", 45 * _DAY),
        "shortlived": Profile("160-hour certificates; IP addresses allowed", 160 * _HOUR),
    }
)

# Pebble logs each request as "Pebble 2024/01/01 00:00:00 GET /dir -> calling handler()".
_REQUEST_LINE = re.compile(r"\s([A-Z]+) (\S+) -> calling handler\(\)")


class PebbleServer(ManagedServer):
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
        release: ``"2.10"`` or ``"2.4"``; ``None`` takes the first Pebble
            :func:`find_pebble` finds (2.10 when ``scripts/test.sh`` installed it).
        profiles: The certificate profiles of a 2.10 Pebble, by name; ``None`` gives
            :data:`LETS_ENCRYPT_PROFILES`. Ignored by 2.4, which has none.
        retry_after_authz: Seconds of ``Retry-After`` a 2.10 Pebble sends on an
            authorization whose challenge is being validated (0: none).
        retry_after_order: Seconds of ``Retry-After`` a 2.10 Pebble sends with a
            ``processing`` order, finalize's answer included (0: none). Pebble sends it as
            a number or as an HTTP-date, at random.
        pebble_binary: The ``pebble`` executable (name on ``PATH`` or path); overrides
            *release*.
        challtestsrv_binary: The ``pebble-challtestsrv`` executable.
        default_ipv6: The address ``pebble-challtestsrv`` answers every ``AAAA`` query
            with; ``""`` (the default) answers none. With ``"::1"`` Pebble validates DNS
            names over IPv6 (its VA dials the first ``AAAA`` address), so the solver must
            listen on ``::1`` at :attr:`http_port` / :attr:`tls_port`.
    """

    name = "Pebble"
    port_in_use = ("address already in use",)

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
        release: Release | None = None,
        profiles: Mapping[str, Profile] | None = None,
        retry_after_authz: int = 0,
        retry_after_order: int = 0,
        pebble_binary: str | None = None,
        challtestsrv_binary: str | None = None,
        default_ipv6: str = "",
    ) -> None:
        _check_percent("nonce_reject_percent", nonce_reject_percent)
        if retry_after_authz < 0 or retry_after_order < 0:
            raise ValueError("retry_after_authz and retry_after_order must be >= 0")
        if authz_reuse_percent is not None:
            _check_percent("authz_reuse_percent", authz_reuse_percent)
        if default_ipv6 and ":" not in default_ipv6:
            raise ValueError(f"default_ipv6 must be an IPv6 address or '', not {default_ipv6!r}")
        super().__init__(workdir)
        self.va_nosleep = va_nosleep
        self.nonce_reject_percent = nonce_reject_percent
        self.authz_reuse_percent = authz_reuse_percent
        self.eab_required = eab_required
        self.eab_mac_keys: dict[str, str] = dict(eab_mac_keys or {})
        self.dns_server = dns_server
        self.extra_env: dict[str, str] = dict(extra_env or {})
        self.retry_after_authz = retry_after_authz
        self.retry_after_order = retry_after_order
        #: What ``pebble-challtestsrv`` answers ``AAAA`` queries with (``""``: nothing).
        self.default_ipv6 = default_ipv6
        self._not_found: str | None = None
        binaries = _binaries(release, pebble_binary, challtestsrv_binary)
        if isinstance(binaries, str):
            self._not_found = binaries
            binaries = PebbleBinaries(
                pebble_binary or "pebble", challtestsrv_binary or "pebble-challtestsrv", "2.4"
            )
        #: The binaries this server runs, and their release.
        self.binaries: PebbleBinaries = binaries
        self.pebble_binary = binaries.pebble
        self.challtestsrv_binary = binaries.challtestsrv
        #: The profiles the CA offers, by name (empty for 2.4, which has none).
        self.profiles: dict[str, Profile] = (
            dict(LETS_ENCRYPT_PROFILES if profiles is None else profiles) if binaries.modern else {}
        )

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
        self._ssl_context: ssl.SSLContext | None = None

    # -- addresses ---------------------------------------------------------------------------

    @property
    def release(self) -> Release:
        """``"2.10"`` or ``"2.4"``: which Pebble this is."""
        return self.binaries.release

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
        procs = self._procs
        return [procs[name].pid for name in ("pebble", "pebble-challtestsrv") if name in procs]

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Write the config and TLS material, start the processes and wait until ready.

        Ready means ``GET /dir`` answers 200 over TLS verified with :attr:`ca_bundle` and the
        management APIs accept connections. Gives up after 30 s.

        Raises:
            RuntimeError: a binary is missing, a process exits early or readiness times out;
                the message carries the tail of the logs. Nothing is left running.
        """
        super().start()

    def stop(self) -> None:
        """Terminate both processes (SIGTERM, then SIGKILL after 5 s) and wait for them.

        Idempotent; safe to call if :meth:`start` failed half-way.
        """
        super().stop()

    def __repr__(self) -> str:
        state = f"directory_url={self.directory_url!r}" if self._procs else "stopped"
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
        self._flush_logs()
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

    def _missing(self) -> str | None:
        if self._not_found is not None:
            return self._not_found
        for binary in (self.pebble_binary, self.challtestsrv_binary):
            if binary == self.challtestsrv_binary and self.dns_server is not None:
                continue
            if shutil.which(binary) is None:
                return (
                    f"{binary!r} not found; run `bash scripts/pebble-2.10.sh` for Pebble 2.10, "
                    "or apt-get install -y pebble for Debian's 2.4"
                )
        return None

    def _prepare(self) -> None:
        _write_tls_material(self.ca_bundle, self.tls_cert_path, self.tls_key_path)
        self._ssl_context = ssl.create_default_context(cafile=str(self.ca_bundle))

    def _launch(self) -> None:
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
        if need_dns:
            self._spawn(
                "pebble-challtestsrv",
                [
                    self.challtestsrv_binary,
                    "-management",
                    f"127.0.0.1:{self._challtestsrv_port}",
                    "-dnsserver" if self.binaries.modern else "-dns01",
                    dns,
                    *(("-doh", "") if self.binaries.modern else ()),
                    "-http01",
                    "",
                    "-https01",
                    "",
                    "-tlsalpn01",
                    "",
                    "-defaultIPv4",
                    "127.0.0.1",
                    "-defaultIPv6",
                    self.default_ipv6,
                ],
                self.challtestsrv_log_path,
                _clean_env(),
            )
        self._spawn(
            "pebble",
            [self.pebble_binary, "-config", str(self.config_path), "-dnsserver", dns],
            self.log_path,
            self._pebble_env(),
        )

    def _ready_checks(self) -> Sequence[tuple[str, Callable[[], bool]]]:
        checks: list[tuple[str, Callable[[], bool]]] = [
            ("dir", lambda: self._probe(_started(self._acme_port), "/dir")),
            ("management", lambda: self._probe(_started(self._mgmt_port), "/roots/0")),
        ]
        if self._challtestsrv_port is not None:
            checks.append(("challtestsrv", lambda: _port_open(_started(self._challtestsrv_port))))
        return checks

    def _log_paths(self) -> Sequence[Path]:
        return [self.log_path, self.challtestsrv_log_path]

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
        if self.binaries.modern:
            config["pebble"]["profiles"] = {
                name: {"description": p.description, "validityPeriod": p.validity_seconds}
                for name, p in self.profiles.items()
            }
            config["pebble"]["retryAfter"] = {
                "authz": self.retry_after_authz,
                "order": self.retry_after_order,
            }
        self.config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    def _probe(self, port: int, path: str) -> bool:
        assert self._ssl_context is not None
        return _https_ok(port, path, self._ssl_context, timeout=_PROBE_TIMEOUT)

    def _management_get(self, path: str) -> str:
        assert self._ssl_context is not None
        status, body = _https_get(_started(self._mgmt_port), path, self._ssl_context)
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


def _binaries(
    release: Release | None, pebble: str | None, challtestsrv: str | None
) -> PebbleBinaries | str:
    """The binaries to run, or why there are none (reported when the server starts)."""
    if pebble is not None or challtestsrv is not None:
        found = find_pebble(release) if release else None
        pebble = pebble or (found.pebble if found else "pebble")
        challtestsrv = challtestsrv or (found.challtestsrv if found else "pebble-challtestsrv")
        path = shutil.which(challtestsrv)
        if release is None:
            release = _release_of(path) if path else "2.4"
        return PebbleBinaries(pebble, challtestsrv, release)
    try:
        return find_pebble(release)
    except PebbleNotFound as exc:
        return str(exc)


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
