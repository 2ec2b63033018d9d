"""A real acme2certifier ACME server for tests: :class:`Acme2CertifierServer`.

`acme2certifier <https://github.com/grindsa/acme2certifier>`_ is an ACME server written in
Python, independent of Pebble. Unlike Debian's Pebble 2.4.0 it implements ARI (RFC 9773): its
directory advertises ``renewalInfo``, and ``GET {renewalInfo}/{certID}`` answers a
``suggestedWindow`` with a ``Retry-After`` header. That makes it the second server of the
interoperability check and the one the ARI client is tested against::

    with Acme2CertifierServer(tmp_path) as a2c:
        client = AcmeClient(a2c.directory_url, ca_bundle=a2c.ca_bundle)

What the harness sets up, and why:

* acme2certifier pins its own ``acme``, ``josepy`` and ``cryptography``, so it lives in its
  **own virtualenv**, made once with ``python3 -m venv V && V/bin/pip install
  acme2certifier==0.46.3`` (about 5-20 s) at ``$ACMECERTS_CACHE/a2c-venv`` (default
  ``~/.cache/acmecerts/a2c-venv``) and reused afterwards (:func:`ensure_a2c_venv`).
* Certificates are issued by acme2certifier's ``openssl_ca_handler`` from a self-signed P-256
  CA generated on each start (:attr:`~Acme2CertifierServer.issuing_ca_pem`).
* The WSGI app runs in a subprocess with the venv's python (``a2c_runner.py``): ``wsgiref``
  with one thread per request, on ``127.0.0.1`` only, over HTTPS with a leaf for
  ``127.0.0.1``/``localhost`` signed by a throwaway TLS CA (:attr:`~Acme2CertifierServer.ca_bundle`,
  which clients trust). acme2certifier's own ``__main__`` would bind ``0.0.0.0:80``.
* Challenge validation is disabled by default (``[Challenge] challenge_validation_disable``
  plus ``ACME2CERTIFIER_I_KNOW_THE_RISK=1``): any solver, even one that serves nothing, gets
  its authorizations validated. With ``validation_disabled=False`` acme2certifier validates
  http-01 on port 80 of the identifier, resolving names with its own DNS code.

Quirks of acme2certifier 0.46.3 a client meets (see ``TESTBED.md``): validation runs
synchronously inside the challenge POST; a failed validation leaves the *order* ``pending``
with the *authorization* ``invalid``; it ignores ``replaces`` in ``newOrder``; it refuses PS256
account keys; it sends no ``Link: rel="alternate"`` and offers no profiles. The directory is
served at ``/directory`` (and ``/acme/directory``), resources under ``/acme/``.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import re
import shutil
import ssl
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import serialization

from acmecerts.testing._process import ManagedServer, _https_ok
from acmecerts.testing._tls import _make_ca, _pem_key, _write_private, _write_tls_material

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["A2C_VERSION", "Acme2CertifierServer", "default_a2c_venv", "ensure_a2c_venv"]

#: The acme2certifier release the harness installs and is tested with.
A2C_VERSION = "0.46.3"

_PROBE_TIMEOUT = 2.0
_INSTALL_TIMEOUT = 900.0
_RUNNER = Path(__file__).with_name("a2c_runner.py")
_MARKER = ".acmecerts-a2c-version"

# wsgiref logs each request as '127.0.0.1 - - [date] "POST /acme/neworders HTTP/1.1" 201 7'.
_REQUEST_LINE = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" ([0-9]{3}) ')


def default_a2c_venv() -> Path:
    """``${ACMECERTS_CACHE:-~/.cache/acmecerts}/a2c-venv``."""
    cache = os.environ.get("ACMECERTS_CACHE") or os.path.join("~", ".cache", "acmecerts")
    return Path(cache).expanduser() / "a2c-venv"


def ensure_a2c_venv(
    venv: Path | None = None, *, version: str = A2C_VERSION, python: str | None = None
) -> Path:
    """Create the virtualenv with ``acme2certifier==version`` unless it is already there.

    Returns the venv's python. The venv is complete once it holds a marker file naming the
    version; anything else at that path (an interrupted install, another version) is removed
    and rebuilt. A lock file next to it keeps concurrent test sessions from building it twice.

    Raises:
        RuntimeError: ``venv`` creation or ``pip install`` failed (with pip's output).
    """
    venv = Path(venv) if venv is not None else default_a2c_venv()
    venv_python = venv / "bin" / "python"
    marker = venv / _MARKER
    if _read(marker) == version and venv_python.exists():
        return venv_python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if _read(marker) == version and venv_python.exists():
            return venv_python  # built by someone else while we waited
        if venv.exists():
            shutil.rmtree(venv)
        base = python or sys.executable or shutil.which("python3") or "python3"
        steps = [
            [base, "-m", "venv", str(venv)],
            [
                str(venv_python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"acme2certifier=={version}",
            ],
        ]
        for argv in steps:
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=_INSTALL_TIMEOUT,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                shutil.rmtree(venv, ignore_errors=True)
                raise RuntimeError(f"{' '.join(argv)} failed: {exc}") from exc
            if done.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                hint = (
                    " (Debian: apt-get install -y python3-venv)"
                    if argv[1:3] == ["-m", "venv"]
                    else ""
                )
                raise RuntimeError(
                    f"{' '.join(argv)} exited with {done.returncode}{hint}\n"
                    f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
                )
        marker.write_text(version + "\n", encoding="ascii")
    return venv_python


class Acme2CertifierServer(ManagedServer):
    """Run acme2certifier on a free ``127.0.0.1`` port over HTTPS.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. The config, the CA,
    the database, issued certificates and the log are written under *workdir*.

    Args:
        workdir: Directory for everything the server writes (created if needed).
        venv: The virtualenv with acme2certifier (default :func:`default_a2c_venv`); created
            on first :meth:`start` if missing.
        validation_disabled: Skip challenge validation (``[Challenge]
            challenge_validation_disable`` with ``ACME2CERTIFIER_I_KNOW_THE_RISK=1``).
        renewal_threshold_pct: ``[Renewalinfo] renewalthreshold_pctg``: the suggested
            renewal window starts after this percentage of the lifetime and ends at expiry.
        retry_after: ``[Renewalinfo] retry_after_timeout``, the ``Retry-After`` seconds sent
            with every ``renewalInfo`` answer.
        renewal_force: ``[Renewalinfo] renewal_force``: the window is already open for every
            certificate (it started a year ago and ends in a day).
        cert_validity_days: Lifetime of issued certificates.
        extra_config: More config, ``{section: {option: value}}``, applied last.
        extra_env: Extra environment variables for the server process.
    """

    name = "acme2certifier"
    start_timeout = 60.0

    def __init__(
        self,
        workdir: Path,
        *,
        venv: Path | None = None,
        validation_disabled: bool = True,
        renewal_threshold_pct: float = 85.0,
        retry_after: int = 86400,
        renewal_force: bool = False,
        cert_validity_days: int = 90,
        extra_config: Mapping[str, Mapping[str, str]] | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        if not 0 <= renewal_threshold_pct <= 100:
            raise ValueError(f"renewal_threshold_pct must be 0-100, got {renewal_threshold_pct}")
        if retry_after < 0:
            raise ValueError(f"retry_after must be >= 0, got {retry_after}")
        if cert_validity_days < 1:
            raise ValueError(f"cert_validity_days must be >= 1, got {cert_validity_days}")
        super().__init__(workdir)
        self.venv = Path(venv) if venv is not None else default_a2c_venv()
        self.validation_disabled = validation_disabled
        self.renewal_threshold_pct = renewal_threshold_pct
        self.retry_after = retry_after
        self.renewal_force = renewal_force
        self.cert_validity_days = cert_validity_days
        self.extra_config = {s: dict(o) for s, o in (extra_config or {}).items()}
        self.extra_env = dict(extra_env or {})

        #: PEM of the throwaway CA that signed the server's HTTPS certificate; trust this.
        self.ca_bundle: Path = self.workdir / "a2c-https-ca.pem"
        #: The server's HTTPS leaf (SANs ``localhost``, ``127.0.0.1``, ``::1``).
        self.tls_cert_path: Path = self.workdir / "a2c-https-cert.pem"
        #: The private key of :attr:`tls_cert_path`.
        self.tls_key_path: Path = self.workdir / "a2c-https-key.pem"
        #: The issuing CA certificate (PEM file); see :attr:`issuing_ca_pem`.
        self.issuing_ca_path: Path = self.workdir / "issuing-ca.pem"
        #: The issuing CA's private key.
        self.issuing_ca_key_path: Path = self.workdir / "issuing-ca-key.pem"
        #: acme2certifier's configuration file.
        self.config_path: Path = self.workdir / "acme_srv.cfg"
        #: acme2certifier's SQLite database.
        self.db_path: Path = self.workdir / "acme_srv.db"
        #: Where acme2certifier stores the certificates it issues.
        self.cert_dir: Path = self.workdir / "certs"
        #: The server's combined stdout and stderr (rewritten by each :meth:`start`).
        self.log_path: Path = self.workdir / "a2c.log"
        self._port_file: Path = self.workdir / "a2c.port"
        self._port: int | None = None
        self._venv_python: Path | None = None
        self._ssl_context: ssl.SSLContext | None = None
        self._issuing_ca_pem: str | None = None

    # -- addresses ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The HTTPS port on ``127.0.0.1``."""
        if self._port is None:
            raise RuntimeError("Acme2CertifierServer is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``https://127.0.0.1:{port}``."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def directory_url(self) -> str:
        """The ACME directory URL, ``https://127.0.0.1:{port}/directory``."""
        return f"{self.base_url}/directory"

    @property
    def issuing_ca_pem(self) -> str:
        """The CA certificate (PEM) that signs issued certificates; new on every start."""
        if self._issuing_ca_pem is None:
            raise RuntimeError("Acme2CertifierServer is not started")
        return self._issuing_ca_pem

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Make the venv if needed, write CA, TLS material and config, start, wait for ready.

        Ready means ``GET /directory`` answers 200 over TLS verified with :attr:`ca_bundle`.

        Raises:
            RuntimeError: the venv cannot be made, the server exits early, or it is not ready
                within 60 s; the message carries the tail of the log. Nothing is left running.
        """
        super().start()

    def __repr__(self) -> str:
        state = f"directory_url={self.directory_url!r}" if self._port else "stopped"
        return f"<Acme2CertifierServer {state} workdir={str(self.workdir)!r}>"

    def requests_seen(self) -> list[tuple[str, str, int]]:
        """``(METHOD, path, status)`` of every request the server logged so far, oldest first."""
        self._flush_logs()
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        found = (_REQUEST_LINE.search(line) for line in text.splitlines())
        return [(m[1], m[2], int(m[3])) for m in found if m]

    # -- internals ---------------------------------------------------------------------------

    def _prepare(self) -> None:
        self._venv_python = ensure_a2c_venv(self.venv)
        self.cert_dir.mkdir(exist_ok=True)
        _write_tls_material(self.ca_bundle, self.tls_cert_path, self.tls_key_path)
        self._write_issuing_ca()
        self._write_config()
        self._ssl_context = ssl.create_default_context(cafile=str(self.ca_bundle))

    def _launch(self) -> None:
        # The runner binds port 0 itself and writes the port it got: no race to retry.
        self._port_file.unlink(missing_ok=True)
        self._spawn(
            "acme2certifier",
            [
                str(self._venv_python),
                "-I",  # no PYTHON* variables, no user site, no script dir on sys.path
                str(_RUNNER),
                "--config",
                str(self.config_path),
                "--cert",
                str(self.tls_cert_path),
                "--key",
                str(self.tls_key_path),
                "--port-file",
                str(self._port_file),
            ],
            self.log_path,
            self._env(),
        )

    def _ready_checks(self) -> Sequence[tuple[str, Callable[[], bool]]]:
        return [("its port", self._read_port), ("/directory", self._probe_directory)]

    def _stopped(self) -> None:
        self._port = None

    def _read_port(self) -> bool:
        text = _read(self._port_file)
        if text and text.isdigit():
            self._port = int(text)
        return self._port is not None

    def _probe_directory(self) -> bool:
        assert self._ssl_context is not None
        return _https_ok(self.port, "/directory", self._ssl_context, timeout=_PROBE_TIMEOUT)

    def _env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ACME_SRV", "ACME2CERTIFIER", "PYTHON"))
        }
        if self.validation_disabled:
            env["ACME2CERTIFIER_I_KNOW_THE_RISK"] = "1"
        env.update(self.extra_env)
        return env

    def _config_sections(self) -> dict[str, dict[str, str]]:
        sections: dict[str, dict[str, str]] = {
            "DEFAULT": {"debug": "False"},
            "Nonce": {"nonce_check_disable": "False"},
            "DBhandler": {"handler": "wsgi", "dbfile": str(self.db_path)},
            "CAhandler": {
                "handler_module": "acme2certifier.cahandlers.openssl_ca_handler",
                "issuing_ca_key": str(self.issuing_ca_key_path),
                "issuing_ca_cert": str(self.issuing_ca_path),
                "issuing_ca_crl": str(self.workdir / "issuing-ca.crl"),
                "cert_save_path": str(self.cert_dir),
                "cert_validity_days": str(self.cert_validity_days),
            },
            "Account": {"contact_check_disable": "True"},
            "Challenge": {"challenge_validation_disable": str(self.validation_disabled)},
            "Renewalinfo": {
                "renewalthreshold_pctg": f"{self.renewal_threshold_pct:g}",
                "retry_after_timeout": str(self.retry_after),
                "renewal_force": str(self.renewal_force),
            },
            "Order": {"tnauthlist_support": "False"},
        }
        for section, options in self.extra_config.items():
            sections.setdefault(section, {}).update(options)
        return sections

    def _write_config(self) -> None:
        lines: list[str] = []
        for section, options in self._config_sections().items():
            lines.append(f"[{section}]")
            lines.extend(f"{key}: {value}" for key, value in options.items())
            lines.append("")
        self.config_path.write_text("\n".join(lines), encoding="utf-8")

    def _write_issuing_ca(self) -> None:
        cert_pem, key_pem = _make_issuing_ca()
        self.issuing_ca_path.write_bytes(cert_pem)
        _write_private(self.issuing_ca_key_path, key_pem)
        self._issuing_ca_pem = cert_pem.decode("ascii")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _make_issuing_ca() -> tuple[bytes, bytes]:
    """A self-signed P-256 CA for acme2certifier's openssl_ca_handler: (cert PEM, key PEM)."""
    now = datetime.datetime.now(datetime.UTC)
    cert, key = _make_ca(
        "acmecerts a2c issuing CA",
        now - datetime.timedelta(hours=1),
        now + datetime.timedelta(days=3650),
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)
