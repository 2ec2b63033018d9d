"""The programs in examples/ run against a real Pebble, as a reader would run them.

Each example is started as a subprocess with its configuration in the environment
(``ACMECERTS_DIRECTORY``, ``ACMECERTS_CA_BUNDLE``, ``ACMECERTS_HTTP_PORT``), the way the
docs tell readers to point them at Pebble. The kopf operator has its own test
(``tests/examples/test_example_operator.py``): it needs a Kubernetes API server.
"""

from __future__ import annotations

import itertools
import os
import pty
import select
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from acmecerts.testing import PebbleServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def env(pebble: PebbleServer) -> dict[str, str]:
    """The environment that points an example at the session's Pebble."""
    return _env_for(pebble)


def _env_for(pebble: PebbleServer) -> dict[str, str]:
    return {
        **os.environ,
        "ACMECERTS_DIRECTORY": pebble.directory_url,
        "ACMECERTS_CA_BUNDLE": str(pebble.ca_bundle),
        "ACMECERTS_HTTP_PORT": str(pebble.http_port),
        "PYTHONUNBUFFERED": "1",
    }


def run_example(
    name: str, *args: str, env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_chains_to_pebble(chain_pem: bytes, pebble: PebbleServer, names: list[str]) -> None:
    certs = x509.load_pem_x509_certificates(chain_pem)
    leaf = certs[0]
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == sorted(names)
    for child, parent in itertools.pairwise(certs):
        child.verify_directly_issued_by(parent)
    root = x509.load_pem_x509_certificate(pebble.root_pem().encode())
    certs[-1].verify_directly_issued_by(root)


def test_one_off_writes_a_certificate_and_a_private_key(
    pebble: PebbleServer, env: dict[str, str], tmp_path: Path
) -> None:
    names = ["one-off.example.test", "www.one-off.example.test"]
    result = run_example("one_off.py", *names, "--out", "certs", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "issued one-off.example.test, www.one-off.example.test" in result.stdout
    out = tmp_path / "certs"
    assert_chains_to_pebble((out / "fullchain.pem").read_bytes(), pebble, names)
    assert stat.S_IMODE((out / "privkey.pem").stat().st_mode) == 0o600
    key = serialization.load_pem_private_key((out / "privkey.pem").read_bytes(), None)
    leaf = x509.load_pem_x509_certificates((out / "fullchain.pem").read_bytes())[0]
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    assert key.public_key().public_bytes(*spki) == leaf.public_key().public_bytes(*spki)


def test_one_off_is_short() -> None:
    """The issuance itself (between the section markers) stays about 15 lines."""
    text = (EXAMPLES / "one_off.py").read_text()
    section = text.split("[start:issue]")[1].split("# --8<-- [end:issue]")[0]
    code = [line for line in section.splitlines()[1:] if line.strip()]
    assert len(code) <= 18, "\n".join(code)


@pytest.mark.timeout(180)
def test_batch_issues_every_certificate_in_parallel(env: dict[str, str], tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_example(
        "batch.py", "--count", "20", "--domain", "batch.example.test", env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "issued 20, failed 0, deferred 0" in result.stdout
    # plain lines when stdout is not a terminal: one per state change of each certificate
    done = [line for line in result.stdout.splitlines() if ": done serial " in line]
    assert len(done) == 20
    assert "[20/20]" in result.stdout
    assert time.monotonic() - started < 120


@pytest.mark.timeout(180)
def test_batch_defers_what_lets_encrypt_would_refuse(env: dict[str, str], tmp_path: Path) -> None:
    """With Let's Encrypt's limits, 55 names of one registered domain: 50 now, 5 later."""
    result = run_example(
        "batch.py",
        "--count",
        "55",
        "--domain",
        "limited.example.test",
        "--limits",
        "letsencrypt",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "issued 50, failed 0, deferred 5" in result.stdout
    assert ": deferred until " in result.stdout


def test_batch_shows_a_progress_display_on_a_terminal(env: dict[str, str], tmp_path: Path) -> None:
    main, child = pty.openpty()
    with subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "batch.py"),
            "--count",
            "3",
            "--domain",
            "tty.example.test",
        ],
        env={**env, "COLUMNS": "120", "TERM": "xterm"},
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=subprocess.PIPE,
    ) as process:
        os.close(child)
        output = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        assert process.wait(timeout=30) == 0, process.stderr.read() if process.stderr else ""
    os.close(main)
    text = output.decode(errors="replace")
    assert "certificates" in text  # the progress bar's label
    assert "3/3" in text
    assert "issued 3, failed 0, deferred 0" in text
    assert "[1/3]" not in text  # not the plain lines


# -- the web service -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """The web service running as a subprocess, its output read line by line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []

    def wait_for(self, text: str, timeout: float = 60) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.2)
            if ready:
                line = self.process.stdout.readline()
                if not line:
                    break
                self.lines.append(line.rstrip("\n"))
                if text in line:
                    return line
            elif self.process.poll() is not None:
                break
        stderr = self.process.stderr.read() if self.process.poll() is not None else ""
        pytest.fail(f"no {text!r} from the web service; it said:\n{self.output}\n{stderr}")

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def start_service(env: dict[str, str], tmp_path: Path) -> Iterator[object]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, ca: PebbleServer | None = None) -> Service:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "web_service.py"), *args],
            env=env if ca is None else _env_for(ca),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return Service(process)

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def fetch(port: int, name: str, trust: ssl.SSLContext) -> tuple[str, int]:
    """GET / over HTTPS, verified; the body and the serial of the certificate presented."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        trust.wrap_socket(raw, server_hostname=name) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\n\r\n".encode())
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    assert der is not None
    head, _, body = answer.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200 OK"), head
    return body, x509.load_der_x509_certificate(der).serial_number


@pytest.mark.timeout(180)
def test_web_service_serves_its_own_certificate_and_swaps_in_renewals(
    pebble_2_4: PebbleServer, start_service: object, tmp_path: Path
) -> None:
    pebble = pebble_2_4  # no ARI there, so the lifetime fraction decides the renewal
    trust = ssl.create_default_context(cadata=pebble.root_pem() + pebble.intermediate_pem())
    name, port = "web.example.test", _free_port()
    args = ["--name", name, "--listen", f"127.0.0.1:{port}", "--state-dir", "state"]
    # Pebble 2.4's certificates last five years: renew when all but ~2 s of that remains,
    # so the manager's renewal (the lifetime fraction, without ARI) comes at once.
    service = start_service(*args, "--renewal-fraction", "0.99999999", ca=pebble)  # type: ignore[operator]
    first = service.wait_for("(new certificate)")
    service.wait_for(f"serving https://{name}:{port}/")
    body, serial = fetch(port, name, trust)
    assert f"hello from {name}: certificate serial {serial:x}," in body
    assert f"{serial:x}" in first

    renewal = service.wait_for("(renewal)")
    renewed_serial = int(renewal.split("installed certificate ")[1].split()[0], 16)
    assert renewed_serial != serial
    deadline = time.monotonic() + 30
    while True:  # a later renewal may already have replaced it: any newer one will do
        body, now_serving = fetch(port, name, trust)
        if now_serving != serial:
            break
        assert time.monotonic() < deadline, "the renewed certificate is never served"
        time.sleep(0.2)
    assert f"certificate serial {now_serving:x}," in body

    service.process.send_signal(signal.SIGINT)
    assert service.process.wait(timeout=30) == 0
    service.wait_for("stopped", timeout=5)

    # restarted, it serves the certificate it stored instead of ordering a new one
    again = start_service(*args, ca=pebble)  # type: ignore[operator]
    stored = again.wait_for("(stored)")
    again.wait_for("serving https://")
    _, restarted_serial = fetch(port, name, trust)
    assert f"{restarted_serial:x}" in stored
    again.process.send_signal(signal.SIGTERM)
    assert again.process.wait(timeout=30) == 0
