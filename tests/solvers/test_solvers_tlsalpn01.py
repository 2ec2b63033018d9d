"""The tls-alpn-01 solver (RFC 8737, RFC 8738 §6): what a validating CA sees, and others don't."""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
import socket
import ssl
from typing import TYPE_CHECKING

import anyio
import pytest
from cryptography import x509
from waits import within

from acmecerts.errors import InvalidInput, UnsupportedChallenge
from acmecerts.protocol.identifiers import parse_identifier
from acmecerts.solvers import ChallengeTask, ListenError, Solver, TlsAlpn01Server
from acmecerts.solvers.tlsalpn01 import (
    ACME_TLS_1,
    ID_PE_ACME_IDENTIFIER,
    sni_name,
    validation_certificate,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.anyio

THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
#: The fatal alerts the server answers with, as OpenSSL reports them to a client.
NO_ALPN = "(?i)no.application.protocol"
UNKNOWN_NAME = "(?i)unrecognized.name"


def make_task(name: str, *, type: str = "tls-alpn-01") -> ChallengeTask:
    token = secrets.token_urlsafe(32)
    return ChallengeTask(
        type=type,
        identifier=parse_identifier(name),
        token=token,
        key_authorization=f"{token}.{THUMBPRINT}",
        url=f"https://ca.test/chall/{token[:8]}",
    )


def handshake(port: int, server_name: str, alpn: list[str] | None = None) -> x509.Certificate:
    """Do what a validating CA does: handshake with SNI (and ALPN), keep the certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the certificate is self-signed by design
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        assert tls.selected_alpn_protocol() == ACME_TLS_1
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


async def validate(port: int, server_name: str, alpn: list[str] | None = None) -> x509.Certificate:
    return await anyio.to_thread.run_sync(handshake, port, server_name, alpn)


def assert_validation_certificate(cert: x509.Certificate, task: ChallengeTask) -> None:
    ext = cert.extensions.get_extension_for_oid(ID_PE_ACME_IDENTIFIER)
    assert ext.critical
    assert isinstance(ext.value, x509.UnrecognizedExtension)
    digest = hashlib.sha256(task.key_authorization.encode()).digest()
    assert ext.value.value == b"\x04\x20" + digest  # DER OCTET STRING (SIZE (32))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    if task.identifier.type == "ip":
        assert san.get_values_for_type(x509.IPAddress) == [
            ipaddress.ip_address(task.identifier.value)
        ]
        assert san.get_values_for_type(x509.DNSName) == []
    else:
        assert san.get_values_for_type(x509.DNSName) == [task.identifier.value]
        assert san.get_values_for_type(x509.IPAddress) == []
    cert.verify_directly_issued_by(cert)  # self-signed
    assert cert.issuer == cert.subject


@pytest.fixture
async def server() -> AsyncIterator[TlsAlpn01Server]:
    async with TlsAlpn01Server(host="127.0.0.1", port=0) as solver:
        yield solver


def test_is_a_solver() -> None:
    solver = TlsAlpn01Server(port=0)
    assert isinstance(solver, Solver)
    assert solver.challenge_type == "tls-alpn-01"
    assert solver.supports(parse_identifier("example.com"))
    assert solver.supports(parse_identifier("192.0.2.1"))
    assert solver.supports(parse_identifier("2001:db8::1"))
    assert not solver.supports(parse_identifier("*.example.com"))


def test_sni_names_of_identifiers() -> None:
    assert sni_name(parse_identifier("Example.COM")) == "example.com"
    assert sni_name(parse_identifier("192.0.2.1")) == "1.2.0.192.in-addr.arpa"
    v6 = sni_name(parse_identifier("2001:db8::1"))
    assert v6.endswith(".8.b.d.0.1.0.0.2.ip6.arpa")
    assert v6.startswith("1.0.0.0.")
    assert len(v6.split(".")) == 34


async def test_serves_the_validation_certificate_by_sni(server: TlsAlpn01Server) -> None:
    first, second = make_task("a.example.com"), make_task("b.example.com")
    await server.present(first)
    await server.present(second)
    cert_a = await validate(server.port, "a.example.com", [ACME_TLS_1])
    cert_b = await validate(server.port, "B.Example.com.", [ACME_TLS_1])
    assert_validation_certificate(cert_a, first)
    assert_validation_certificate(cert_b, second)


async def test_ip_identifiers_are_served_by_their_reverse_name(server: TlsAlpn01Server) -> None:
    v4, v6 = make_task("127.0.0.1"), make_task("2001:db8::1")
    await server.present(v4)
    await server.present(v6)
    assert_validation_certificate(
        await validate(server.port, "1.0.0.127.in-addr.arpa", [ACME_TLS_1]), v4
    )
    assert_validation_certificate(
        await validate(server.port, sni_name(v6.identifier), [ACME_TLS_1]), v6
    )


async def test_a_client_without_acme_tls_1_is_refused_before_any_certificate(
    server: TlsAlpn01Server,
) -> None:
    await server.present(make_task("a.example.com"))
    for alpn in (None, ["http/1.1"], ["h2", "http/1.1"]):
        with pytest.raises(ssl.SSLError, match=NO_ALPN):
            await validate(server.port, "a.example.com", alpn)
    # acme-tls/1 among others is fine
    await validate(server.port, "a.example.com", ["h2", ACME_TLS_1])


def client_hello(server_name: str, alpn: list[str] | None) -> bytes:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize(
    ("server_name", "alpn", "alert"),
    [
        ("a.example.com", None, 120),  # no_application_protocol
        ("a.example.com", ["http/1.1"], 120),
        ("b.example.com", [ACME_TLS_1], 112),  # unrecognized_name
    ],
)
async def test_the_refusal_is_one_fatal_alert_and_nothing_else(
    server: TlsAlpn01Server, server_name: str, alpn: list[str] | None, alert: int
) -> None:
    await server.present(make_task("a.example.com"))
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        await stream.send(client_hello(server_name, alpn))
        answer = b""
        with within(30, "the server to answer the ClientHello and close"):
            while True:
                try:
                    answer += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
    assert answer == bytes((21, 3, 3, 0, 2, 2, alert))  # no ServerHello, no certificate


async def test_an_unknown_or_missing_sni_is_refused(server: TlsAlpn01Server) -> None:
    task = make_task("a.example.com")
    await server.present(task)
    with pytest.raises(ssl.SSLError, match=UNKNOWN_NAME):
        await validate(server.port, "other.example.com", [ACME_TLS_1])
    with pytest.raises(ssl.SSLError, match=UNKNOWN_NAME):
        await validate(server.port, "127.0.0.1", [ACME_TLS_1])  # Python sends no SNI for IPs
    await server.cleanup(task)
    with pytest.raises(ssl.SSLError, match=UNKNOWN_NAME):
        await validate(server.port, "a.example.com", [ACME_TLS_1])


async def test_a_name_presented_twice_is_served_until_both_are_cleaned_up(
    server: TlsAlpn01Server,
) -> None:
    older, newer = make_task("shared.example.com"), make_task("shared.example.com")
    await server.present(older)
    await server.present(newer)
    assert_validation_certificate(
        await validate(server.port, "shared.example.com", [ACME_TLS_1]), newer
    )
    await server.cleanup(newer)
    assert_validation_certificate(
        await validate(server.port, "shared.example.com", [ACME_TLS_1]), older
    )
    await server.cleanup(older)
    await server.cleanup(older)  # idempotent
    with pytest.raises(ssl.SSLError, match=UNKNOWN_NAME):
        await validate(server.port, "shared.example.com", [ACME_TLS_1])


async def test_garbage_and_stalled_clients_do_not_block_validation() -> None:
    async with TlsAlpn01Server(host="127.0.0.1", port=0, timeout=0.5) as server:
        task = make_task("a.example.com")
        await server.present(task)
        stalled = await anyio.connect_tcp("127.0.0.1", server.port)
        await stalled.send(b"\x16\x03\x01\x02")  # half a record header, then nothing
        garbage = await anyio.connect_tcp("127.0.0.1", server.port)
        await garbage.send(b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n")
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await garbage.receive()  # closed without an answer
        assert_validation_certificate(
            await validate(server.port, "a.example.com", [ACME_TLS_1]), task
        )
        with (
            within(30, "the server to close a stalled client after its 0.5 s timeout"),
            pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)),
        ):
            await stalled.receive()
        await stalled.aclose()
        await garbage.aclose()


async def test_present_starts_the_server_lazily_and_aclose_stops_it() -> None:
    solver = TlsAlpn01Server(host="127.0.0.1", port=0)
    assert not solver.serving
    task = make_task("lazy.example.com")
    try:
        await solver.present(task)
        assert solver.serving
        port = solver.port
        assert port != 0
        assert_validation_certificate(await validate(port, "lazy.example.com", [ACME_TLS_1]), task)
    finally:
        await solver.aclose()
    assert not solver.serving
    await solver.aclose()  # idempotent
    with pytest.raises(OSError, match="connection attempts failed"):
        await anyio.connect_tcp("127.0.0.1", port)


async def test_the_port_is_closed_after_the_block() -> None:
    async with TlsAlpn01Server(host="127.0.0.1", port=0) as solver:
        port = solver.port
        assert "serving" in repr(solver)
    with pytest.raises(OSError, match="connection attempts failed"):
        await anyio.connect_tcp("127.0.0.1", port)


async def test_a_port_in_use_is_a_clear_listen_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ListenError, match=f"127.0.0.1:{port}") as info:
            async with TlsAlpn01Server(host="127.0.0.1", port=port):
                pass  # pragma: no cover
    assert info.value.port == port


async def test_wildcards_and_other_challenge_types_are_refused() -> None:
    solver = TlsAlpn01Server(host="127.0.0.1", port=0)
    with pytest.raises(UnsupportedChallenge, match="dns-01"):
        await solver.present(make_task("*.example.com"))
    with pytest.raises(UnsupportedChallenge, match="http-01"):
        await solver.present(make_task("example.com", type="http-01"))
    assert not solver.serving
    await solver.cleanup(make_task("*.example.com"))  # cleanup never raises


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(InvalidInput):
        TlsAlpn01Server(port=70000)
    with pytest.raises(InvalidInput):
        TlsAlpn01Server(timeout=0)
    with pytest.raises(InvalidInput):
        TlsAlpn01Server(max_connections=0)


def test_validation_certificate_for_your_own_tls_server() -> None:
    task = make_task("own.example.com")
    cert, key = validation_certificate(task.identifier, task.key_authorization)
    assert_validation_certificate(cert, task)
    assert cert.public_key() == key.public_key()
    with pytest.raises(UnsupportedChallenge):
        validation_certificate(parse_identifier("*.example.com"), task.key_authorization)
