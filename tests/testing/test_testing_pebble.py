"""The Pebble test bed (:mod:`acmecerts.testing`) really runs, isolates and stops Pebble.

These tests use only the standard library, httpx and the ``acme`` package, not acmecerts'
own client, so a harness bug cannot hide behind a client bug (or the reverse).
"""

from __future__ import annotations

import datetime
import http.server
import os
import secrets
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx
import josepy as jose
import pytest
from acme import challenges, client, messages
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pebble_health import PebbleProbe

from acmecerts.testing import PebbleServer
from acmecerts.testing import _pebble as pebble_module

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    PebbleFactory = Callable[..., PebbleServer]


def _client(pebble: PebbleServer) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(pebble.ca_bundle))
    return httpx.Client(verify=ctx, trust_env=False, timeout=10)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- the server answers --------------------------------------------------------------------


def test_directory_answers_over_tls_verified_with_ca_bundle(pebble: PebbleServer) -> None:
    with _client(pebble) as http:
        directory = http.get(pebble.directory_url).json()
    assert pebble.directory_url.startswith("https://127.0.0.1:")
    assert {"newNonce", "newAccount", "newOrder", "revokeCert", "keyChange"} <= directory.keys()
    # URLs are built from the Host header we sent.
    assert directory["newNonce"].startswith(pebble.directory_url.removesuffix("/dir"))


def test_directory_is_not_trusted_without_ca_bundle(pebble: PebbleServer) -> None:
    with (
        httpx.Client(trust_env=False, timeout=10) as http,
        pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        http.get(pebble.directory_url)


def test_https_leaf_covers_localhost_and_loopback(pebble: PebbleServer) -> None:
    leaf = x509.load_pem_x509_certificate(pebble.tls_cert_path.read_bytes())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}
    assert isinstance(leaf.public_key(), ec.EllipticCurvePublicKey)
    assert pebble.tls_key_path.stat().st_mode & 0o777 == 0o600
    with _client(pebble) as http:  # "localhost" verifies too
        port = pebble.directory_url.split(":")[2].split("/")[0]
        assert http.get(f"https://localhost:{port}/dir").status_code == 200


def test_management_serves_the_issuing_root_and_intermediate(pebble: PebbleServer) -> None:
    root = x509.load_pem_x509_certificate(pebble.root_pem().encode())
    intermediate = x509.load_pem_x509_certificate(pebble.intermediate_pem().encode())
    assert root.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert intermediate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert intermediate.issuer == root.subject
    intermediate.verify_directly_issued_by(root)
    # The issuing root is Pebble's own, not the throwaway CA of its HTTPS API.
    https_ca = x509.load_pem_x509_certificate(pebble.ca_bundle.read_bytes())
    assert root.subject != https_ca.subject
    assert pebble.management_url.startswith("https://127.0.0.1:")


def test_requests_seen_records_get_dir(pebble: PebbleServer) -> None:
    before = pebble.requests_seen().count(("GET", "/dir"))
    with _client(pebble) as http:
        http.get(pebble.directory_url)
        http.head(pebble.directory_url.replace("/dir", "/nonce-plz"))
    seen = pebble.requests_seen()
    assert seen.count(("GET", "/dir")) == before + 1
    assert seen[-1] == ("HEAD", "/nonce-plz")


# -- challtestsrv DNS ----------------------------------------------------------------------


def _dns_query(port: int, name: str, qtype: int) -> list[bytes]:
    """Ask 127.0.0.1:port over UDP; the raw RDATA of each answer record."""
    ident = secrets.randbits(16)
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split("."))
    packet = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + b"\0"
    packet += struct.pack(">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(packet, ("127.0.0.1", port))
        reply = sock.recv(4096)
    got_id, _flags, qdcount, ancount = struct.unpack(">HHHH", reply[:8])
    assert got_id == ident
    offset = 12
    for _ in range(qdcount):
        offset = _skip_name(reply, offset) + 4
    rdatas = []
    for _ in range(ancount):
        offset = _skip_name(reply, offset)
        _type, _cls, _ttl, rdlength = struct.unpack(">HHIH", reply[offset : offset + 10])
        offset += 10
        rdatas.append(reply[offset : offset + rdlength])
        offset += rdlength
    return rdatas


def _skip_name(msg: bytes, offset: int) -> int:
    while msg[offset]:
        if msg[offset] & 0xC0 == 0xC0:  # compression pointer ends the name
            return offset + 2
        offset += msg[offset] + 1
    return offset + 1


def test_set_txt_and_clear_txt_change_what_dns_answers(pebble: PebbleServer) -> None:
    assert pebble.dns_port is not None
    host = f"_acme-challenge.{secrets.token_hex(4)}.example.com"
    assert _dns_query(pebble.dns_port, host, 16) == []
    pebble.set_txt(host, "token-value")
    assert _dns_query(pebble.dns_port, host, 16) == [b"\x0btoken-value"]
    pebble.clear_txt(host)
    assert _dns_query(pebble.dns_port, host, 16) == []


def test_every_name_resolves_to_loopback(pebble: PebbleServer) -> None:
    assert pebble.dns_port is not None
    assert _dns_query(pebble.dns_port, "anything.example.org", 1) == [bytes([127, 0, 0, 1])]
    assert _dns_query(pebble.dns_port, "anything.example.org", 28) == []  # no AAAA


# -- real issuance through the harness -----------------------------------------------------


@pytest.fixture
def acme_client(pebble: PebbleServer) -> Iterator[client.ClientV2]:
    """The ``acme`` package's client with a fresh account on the session Pebble."""
    key = jose.JWKEC(key=ec.generate_private_key(ec.SECP256R1()))
    net = client.ClientNetwork(key, alg=jose.ES256, verify_ssl=str(pebble.ca_bundle))
    net.session.trust_env = False  # never send loopback traffic to a proxy
    acme = client.ClientV2(client.ClientV2.get_directory(pebble.directory_url, net), net)
    acme.new_account(messages.NewRegistration.from_data(terms_of_service_agreed=True))
    try:
        yield acme
    finally:
        net.session.close()


def _csr(name: str) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def _issue(acme: client.ClientV2, name: str, kind: type[challenges.Challenge], solve: Any) -> str:
    order = acme.new_order(_csr(name))
    (authz,) = order.authorizations
    chall = next(c for c in authz.body.challenges if isinstance(c.chall, kind))
    response, validation = chall.response_and_validation(acme.net.key)
    solve(chall, validation)
    acme.answer_challenge(chall, response)
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=20)
    done = acme.poll_and_finalize(order, deadline)
    assert done.fullchain_pem is not None
    return str(done.fullchain_pem)


def _serve_http01(port: int, path: str, body: str) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == path
            self.send_response(200 if ok else 404)
            self.end_headers()
            if ok:
                self.wfile.write(body.encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_issues_with_http01_on_http_port(
    pebble: PebbleServer, acme_client: client.ClientV2
) -> None:
    servers: list[http.server.ThreadingHTTPServer] = []

    def solve(chall: messages.ChallengeBody, validation: str) -> None:
        servers.append(_serve_http01(pebble.http_port, chall.chall.path, validation))

    name = f"h{secrets.token_hex(4)}.example.com"
    try:
        chain = _issue(acme_client, name, challenges.HTTP01, solve)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    leaf = x509.load_pem_x509_certificate(chain.encode())
    # Pebble logs routes, not full paths: resource IDs do not appear.
    assert {("POST", "/chalZ/"), ("POST", "/finalize-order/")} <= set(pebble.requests_seen())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [name]


def test_issues_with_dns01_through_set_txt(
    pebble: PebbleServer, acme_client: client.ClientV2
) -> None:
    name = f"d{secrets.token_hex(4)}.example.com"

    def solve(chall: messages.ChallengeBody, validation: str) -> None:
        pebble.set_txt(f"_acme-challenge.{name}", validation)

    try:
        chain = _issue(acme_client, name, challenges.DNS01, solve)
    finally:
        pebble.clear_txt(f"_acme-challenge.{name}")
    assert "BEGIN CERTIFICATE" in chain


# -- lifecycle and configuration -----------------------------------------------------------


def test_two_servers_run_at_once_on_different_ports(
    pebble: PebbleServer, pebble_factory: PebbleFactory
) -> None:
    other = pebble_factory()
    assert other.directory_url != pebble.directory_url
    assert other.management_url != pebble.management_url
    assert (other.http_port, other.tls_port) != (pebble.http_port, pebble.tls_port)
    assert other.dns_port != pebble.dns_port
    for server in (pebble, other):
        with _client(server) as http:
            assert http.get(server.directory_url).status_code == 200
    assert other.root_pem() != pebble.root_pem()  # each has its own issuing CA


def test_stop_ends_both_processes_and_is_idempotent(pebble_factory: PebbleFactory) -> None:
    server = pebble_factory()
    pids = server.pids
    assert len(pids) == 2
    assert all(_pid_alive(pid) for pid in pids)
    assert server.running
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5  # SIGTERM is enough; no SIGKILL wait
    assert not any(_pid_alive(pid) for pid in pids)
    assert server.pids == []
    assert not server.running
    with pytest.raises(httpx.ConnectError), _client(server) as http:
        http.get(server.directory_url)
    server.stop()


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with PebbleServer(tmp_path) as server:
        pids = server.pids
        assert all(_pid_alive(pid) for pid in pids)
    assert not any(_pid_alive(pid) for pid in pids)


def test_environment_knobs_reach_pebble(pebble_factory: PebbleFactory) -> None:
    server = pebble_factory(
        va_nosleep=False, nonce_reject_percent=30, authz_reuse_percent=0, extra_env={"X": "1"}
    )
    log = server.log_path.read_text()
    assert "Configured to reject 30% of good nonces" in log
    assert "authz reuse for each identifier 0% of the time" in log
    assert "Disabling random VA sleeps" not in log


def test_session_pebble_rejects_no_nonces_and_does_not_sleep(pebble: PebbleServer) -> None:
    log = pebble.log_path.read_text()
    assert "Configured to reject 0% of good nonces" in log
    assert "Disabling random VA sleeps" in log


def test_eab_is_advertised_when_required(pebble_factory: PebbleFactory) -> None:
    server = pebble_factory(
        eab_required=True, eab_mac_keys={"kid-1": "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG4"}
    )
    with _client(server) as http:
        meta = http.get(server.directory_url).json()["meta"]
    assert meta["externalAccountRequired"] is True


def test_external_dns_server_skips_challtestsrv(pebble_factory: PebbleFactory) -> None:
    server = pebble_factory(dns_server="127.0.0.1:1")
    assert server.dns_port is None
    assert server.challtestsrv_url is None
    assert len(server.pids) == 1
    with pytest.raises(RuntimeError, match="not running"):
        server.set_txt("_acme-challenge.example.com", "x")


def test_the_health_probe_tells_a_pebble_that_stopped_answering(
    pebble_factory: PebbleFactory,
) -> None:
    # A frozen Pebble stands in for a deadlocked one: it accepts connections, never answers.
    server = pebble_factory()
    probe = PebbleProbe()
    assert probe.answers(server) is None  # registers its account, orders
    assert probe.answers(server) is None  # orders again with the same account
    os.kill(server.pids[0], signal.SIGSTOP)
    try:
        problem = probe.answers(server, timeout=1.0)
    finally:
        os.kill(server.pids[0], signal.SIGCONT)
    assert problem is not None
    assert "TimeoutError" in problem
    assert probe.answers(server) is None


def test_a_process_that_dies_fails_start_and_leaves_nothing_running(tmp_path: Path) -> None:
    server = PebbleServer(tmp_path, pebble_binary="false")
    with pytest.raises(RuntimeError, match="exited with status 1") as info:
        server.start()
    assert "pebble-challtestsrv.log" in str(info.value)  # the log tails are in the message
    assert server.pids == []
    assert server.challtestsrv_url is not None
    with pytest.raises(httpx.ConnectError):  # challtestsrv, started first, was stopped
        httpx.post(server.challtestsrv_url + "/set-txt", trust_env=False)


def test_a_port_taken_meanwhile_is_retried_with_fresh_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_free_ports = pebble_module._free_ports
    squatter = socket.create_server(("127.0.0.1", 0))
    calls = 0

    def free_ports(count: int, *, udp_for_last: bool = False) -> list[int]:
        nonlocal calls
        calls += 1
        ports = real_free_ports(count, udp_for_last=udp_for_last)
        if calls == 1:  # someone grabbed the ACME port between picking and binding
            ports[0] = squatter.getsockname()[1]
        return ports

    monkeypatch.setattr(pebble_module, "_free_ports", free_ports)
    with squatter, PebbleServer(tmp_path) as server:
        assert calls == 2
        assert server.directory_url != f"https://127.0.0.1:{squatter.getsockname()[1]}/dir"
        with _client(server) as http:
            assert http.get(server.directory_url).status_code == 200


def test_a_forgotten_server_is_stopped_at_interpreter_exit(tmp_path: Path) -> None:
    script = (
        "import sys; from pathlib import Path; from acmecerts.testing import PebbleServer; "
        "s = PebbleServer(Path(sys.argv[1])); s.start(); print(*s.pids)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    pids = [int(pid) for pid in out.split()]
    assert len(pids) == 2
    assert not any(_pid_alive(pid) for pid in pids)


def test_missing_binary_fails_with_install_hint(tmp_path: Path) -> None:
    server = PebbleServer(tmp_path, pebble_binary="no-such-pebble-binary")
    with pytest.raises(RuntimeError, match="apt-get install -y pebble"):
        server.start()


def test_not_started_server_has_no_addresses(tmp_path: Path) -> None:
    server = PebbleServer(tmp_path)
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.directory_url
    server.stop()  # harmless


def test_percentages_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nonce_reject_percent"):
        PebbleServer(tmp_path, nonce_reject_percent=101)
    with pytest.raises(ValueError, match="authz_reuse_percent"):
        PebbleServer(tmp_path, authz_reuse_percent=-1)


def test_default_ipv6_must_be_an_ipv6_address(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="default_ipv6"):
        PebbleServer(tmp_path, default_ipv6="127.0.0.1")
    assert PebbleServer(tmp_path).default_ipv6 == ""  # no AAAA answers, as before
