"""A real Kubernetes API server for the Kubernetes store's tests: etcd + kube-apiserver.

``KubeApiServer(workdir).start()`` runs Debian's ``etcd`` and a ``kube-apiserver`` built
from Debian's ``kubernetes`` source package (``bash scripts/kube-apiserver.sh`` builds and
caches it) on free loopback ports, waits for ``/readyz``, and writes a kubeconfig with an
admin token. ``stop()`` ends both by PID. With ``audit=True`` the API server writes an
audit log (one JSON line per request, at ``ResponseComplete``, with the user, verb and
resource): :meth:`KubeApiServer.audit_events` reads it, so a test can count requests by
client. There is no controller-manager: namespaces never
finish deleting, so tests use fresh namespaces and object names instead of cleaning up.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

__all__ = ["KubeApiServer", "KubeSetupError", "find_kube_apiserver"]

VERSION = "1.20.2"
BUILD_SCRIPT = "scripts/kube-apiserver.sh"


class KubeSetupError(RuntimeError):
    """The API server could not be found or started (the message says why)."""


def find_kube_apiserver() -> str:
    """``$ACMECERTS_KUBE_APISERVER``, else the binary cached by scripts/kube-apiserver.sh."""
    explicit = os.environ.get("ACMECERTS_KUBE_APISERVER")
    cache = os.environ.get("ACMECERTS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "acmecerts"
    )
    cached = os.path.join(cache, f"kube-apiserver-{VERSION}", "kube-apiserver")
    for candidate in (explicit, cached):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    where = f"$ACMECERTS_KUBE_APISERVER={explicit!r} nor " if explicit else ""
    raise KubeSetupError(
        f"no kube-apiserver binary: neither {where}{cached} exists. Build it once with "
        f"`bash {BUILD_SCRIPT}` (once, 10-20 minutes; `bash scripts/test.sh` does it) and/or "
        "set ACMECERTS_KUBE_APISERVER to its path."
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class KubeApiServer:
    """etcd + kube-apiserver on 127.0.0.1, for one test session."""

    def __init__(self, workdir: Path, *, binary: str | None = None, audit: bool = False) -> None:
        self.workdir = workdir
        #: Where the audit log goes (``None``: no audit log).
        self.audit_log: Path | None = workdir / "audit.log" if audit else None
        self.binary = binary or find_kube_apiserver()
        self.token = secrets.token_hex(16)
        #: A user that authenticates but has no RBAC permissions (for 403 tests).
        self.unprivileged_token = secrets.token_hex(16)
        self.port = 0
        self.etcd_port = 0
        self.kubeconfig = workdir / "kubeconfig"
        self.ca_file = workdir / "certs" / "apiserver.crt"
        self.startup_seconds = 0.0
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._etcd_dir: str | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- lifecycle ---------------------------------------------------------------

    def start(self, *, ready_timeout: float = 90.0) -> None:
        etcd = shutil.which("etcd")
        if etcd is None:
            raise KubeSetupError(
                f"etcd not found on PATH: `apt-get install -y etcd-server` "
                f"(`bash {BUILD_SCRIPT}` installs it)"
            )
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_etcd(etcd)
            self._start_apiserver(ready_timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        self.write_kubeconfig(self.kubeconfig, self.token)

    def _start_etcd(self, etcd: str) -> None:
        # tmpfs when there is one: etcd fsyncs every write.
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self._etcd_dir = tempfile.mkdtemp(prefix="acmecerts-etcd-", dir=shm)
        self.etcd_port, peer = _free_port(), _free_port()
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        log = (self.workdir / "etcd.log").open("wb")
        self._etcd = subprocess.Popen(
            [
                etcd,
                "--name=acmecerts-test",
                f"--data-dir={self._etcd_dir}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=acmecerts-test={peer_url}",
                "--log-level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 30
        while True:
            if self._etcd.poll() is not None:
                raise KubeSetupError(
                    f"etcd exited with status {self._etcd.returncode}:\n"
                    f"{_tail(self.workdir / 'etcd.log')}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{client_url}/health", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise KubeSetupError(
                    f"etcd not healthy within 30 s:\n{_tail(self.workdir / 'etcd.log')}"
                )
            time.sleep(0.1)

    def _start_apiserver(self, ready_timeout: float) -> None:
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(
            f"{self.token},admin,admin-uid,system:masters\n"
            f"{self.unprivileged_token},nobody,nobody-uid\n"
        )
        sa_key, sa_pub = self.workdir / "sa.key", self.workdir / "sa.pub"
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        sa_key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        sa_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        self.port = _free_port()
        log_path = self.workdir / "kube-apiserver.log"
        log = log_path.open("wb")
        self._apiserver = subprocess.Popen(
            [
                self.binary,
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={certs}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=0",
                *self._audit_args(),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + ready_timeout
        last = "no answer yet"
        while True:
            if self._apiserver.poll() is not None:
                raise KubeSetupError(
                    f"kube-apiserver exited with status {self._apiserver.returncode}:\n"
                    f"{_tail(log_path)}"
                )
            if self.ca_file.exists():
                try:
                    answer = httpx.get(
                        f"{self.server}/readyz",
                        headers={"Authorization": f"Bearer {self.token}"},
                        verify=self._ssl_context(),
                        timeout=5,
                    )
                    if answer.status_code == 200:
                        return
                    last = f"{answer.status_code}: {answer.text[-500:]}"
                except httpx.HTTPError as exc:
                    last = repr(exc)
            if time.monotonic() > deadline:
                raise KubeSetupError(
                    f"kube-apiserver not ready within {ready_timeout:.0f} s ({last}):\n"
                    f"{_tail(log_path)}"
                )
            time.sleep(0.25)

    def _audit_args(self) -> list[str]:
        if self.audit_log is None:
            return []
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(
            "apiVersion: audit.k8s.io/v1\n"
            "kind: Policy\n"
            "omitStages: [RequestReceived, ResponseStarted]\n"
            "rules:\n"
            "- level: Metadata\n"
        )
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
        ]

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audit event logged so far (one per completed request), oldest first."""
        if self.audit_log is None:
            raise KubeSetupError("this API server was started without audit=True")
        try:
            lines = self.audit_log.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return []
        events = []
        for line in lines:
            with contextlib.suppress(ValueError):  # a line being written
                events.append(json.loads(line))
        return events

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def stop(self) -> None:
        for proc in (self._apiserver, self._etcd):
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        self._apiserver = self._etcd = None
        if self._etcd_dir is not None:
            shutil.rmtree(self._etcd_dir, ignore_errors=True)
            self._etcd_dir = None

    # -- helpers for tests -------------------------------------------------------

    def write_kubeconfig(self, path: Path, token: str, *, namespace: str = "default") -> Path:
        """A kubeconfig for this server with ``token`` (one context, ``test``)."""
        path.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: test\n"
            "  cluster:\n"
            f"    server: {self.server}\n"
            f"    certificate-authority: {self.ca_file}\n"
            "users:\n"
            "- name: admin\n"
            "  user:\n"
            f"    token: {token}\n"
            "contexts:\n"
            "- name: test\n"
            "  context:\n"
            "    cluster: test\n"
            "    user: admin\n"
            f"    namespace: {namespace}\n"
            "current-context: test\n"
        )
        return path

    def request(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        """One admin request to the API server (for test setup and inspection)."""
        return httpx.request(
            method,
            f"{self.server}{path}",
            headers={"Authorization": f"Bearer {self.token}"},
            verify=self._ssl_context(),
            timeout=10,
            **kwargs,  # type: ignore[arg-type]
        )

    def create_namespace(self, prefix: str = "t") -> str:
        """A new namespace with a unique name."""
        name = f"{prefix}-{secrets.token_hex(4)}"
        answer = self.request(
            "POST",
            "/api/v1/namespaces",
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        if answer.status_code != 201:
            raise KubeSetupError(f"creating namespace {name}: {answer.status_code} {answer.text}")
        return name
