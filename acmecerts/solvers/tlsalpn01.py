"""tls-alpn-01 solver (RFC 8737): a TLS listener that answers ``acme-tls/1`` handshakes.

The CA connects to port 443 of the identifier, offers the ALPN protocol ``acme-tls/1`` and
names the identifier in SNI (an IP address by its reverse-DNS name, RFC 8738 §6). It
accepts the self-signed certificate the server presents when the certificate names the
identifier, and only it, in its subjectAltName and carries the critical
``id-pe-acmeIdentifier`` extension holding SHA-256 of the key authorization (RFC 8737 §3).
No application data is exchanged: the handshake is the whole conversation.

:class:`TlsAlpn01Server` is that listener. For each connection it:

1. reads the ClientHello (within ``timeout``) and looks at the SNI and the ALPN
   protocols offered;
2. refuses with a fatal TLS alert, before any certificate is sent, a client that does not
   offer ``acme-tls/1`` (``no_application_protocol``, RFC 7301 §3.2) or names no identifier
   being validated (``unrecognized_name``, RFC 6066 §3);
3. completes the handshake (TLS 1.2 or later, ALPN ``acme-tls/1`` only) with the validation
   certificate of that name, and closes the connection.

The ClientHello is read by acmecerts, not only by OpenSSL, because the standard library's
``ssl`` cannot refuse a handshake whose client offers no ALPN at all: it would complete it
and present the validation certificate to anyone asking for the name. Having parsed the
SNI too, the server wraps the connection directly in the name's own ``SSLContext`` (what an
``SSLContext.sni_callback`` would otherwise switch to).

Wildcard names cannot be validated this way (RFC 8737 §3): use dns-01.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import ipaddress
import logging
import os
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final

import anyio
import anyio.abc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts.errors import UnsupportedChallenge
from acmecerts.solvers._checks import _refuse_unsupported
from acmecerts.solvers._listener import _ListeningServer

if TYPE_CHECKING:
    from collections.abc import Sequence

    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask

__all__ = [
    "ACME_TLS_1",
    "ID_PE_ACME_IDENTIFIER",
    "TlsAlpn01Server",
    "sni_name",
    "validation_certificate",
]

logger = logging.getLogger(__name__)

_CHALLENGE_TYPE: Final = "tls-alpn-01"
#: RFC 8737 §6.2: the ALPN protocol of validation handshakes.
ACME_TLS_1: Final = "acme-tls/1"
#: RFC 8737 §6.1: ``id-pe-acmeIdentifier``, the extension carrying the key authorization hash.
ID_PE_ACME_IDENTIFIER: Final = x509.ObjectIdentifier("1.3.6.1.5.5.7.1.31")

#: TLS record and handshake constants (RFC 8446 §5.1, §4, §6).
_HANDSHAKE_RECORD: Final = 22
_CLIENT_HELLO: Final = 1
_EXT_SERVER_NAME: Final = 0
_EXT_ALPN: Final = 16
_ALERT_UNRECOGNIZED_NAME: Final = 112
_ALERT_NO_APPLICATION_PROTOCOL: Final = 120
#: The largest ClientHello accepted (post-quantum key shares make them ~2 KiB today).
_MAX_CLIENT_HELLO: Final = 64 * 1024
_RECEIVE_SIZE: Final = 16384
#: How long a finished connection waits for the client to hang up first.
_LINGER_SECONDS: Final = 1.0
#: Validity of the self-signed validation certificates (only the CA ever sees them).
_CERT_BACKDATE: Final = _dt.timedelta(hours=1)
_CERT_LIFETIME: Final = _dt.timedelta(days=7)


def _supports(identifier: Identifier) -> bool:
    # RFC 8737 §3 (DNS names, not wildcards) and RFC 8738 §6 (IP addresses).
    return identifier.type in ("dns", "ip") and not identifier.is_wildcard


def sni_name(identifier: Identifier) -> str:
    """The SNI the CA sends when validating ``identifier``.

    A DNS name is sent as itself (RFC 8737 §3); an IP address as its reverse-DNS name,
    ``4.3.2.1.in-addr.arpa`` or the nibble form under ``ip6.arpa`` (RFC 8738 §6).
    """
    if identifier.type == "ip":
        return ipaddress.ip_address(identifier.value).reverse_pointer
    return identifier.value.lower()


def validation_certificate(
    identifier: Identifier,
    key_authorization: str,
    *,
    key: ec.EllipticCurvePrivateKey | None = None,
    now: _dt.datetime | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The self-signed tls-alpn-01 certificate for ``identifier`` and its (P-256) key.

    RFC 8737 §3: the subjectAltName holds exactly the identifier (an ``iPAddress`` for IP
    identifiers, RFC 8738 §6), and the critical ``id-pe-acmeIdentifier`` extension holds
    the DER ``OCTET STRING`` of SHA-256 of the key authorization. For a TLS server of your
    own (serve it when the ClientHello offers ``acme-tls/1`` and names :func:`sni_name`).
    """
    if not _supports(identifier):
        raise UnsupportedChallenge(f"tls-alpn-01 cannot validate {identifier.value!r}")
    key = key or ec.generate_private_key(ec.SECP256R1())
    now = now or _dt.datetime.now(_dt.UTC)
    digest = hashlib.sha256(key_authorization.encode("ascii")).digest()
    # RFC 8737 §3: Authorization ::= OCTET STRING (SIZE (32)), DER: tag 0x04, length 0x20.
    acme_identifier = x509.UnrecognizedExtension(ID_PE_ACME_IDENTIFIER, b"\x04\x20" + digest)
    san: x509.GeneralName = (
        x509.IPAddress(ipaddress.ip_address(identifier.value))
        if identifier.type == "ip"
        else x509.DNSName(identifier.value)
    )
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "acmecerts tls-alpn-01")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CERT_BACKDATE)
        .not_valid_after(now + _CERT_LIFETIME)
        .add_extension(x509.SubjectAlternativeName([san]), critical=False)
        .add_extension(acme_identifier, critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _server_context(identifier: Identifier, key_authorization: str) -> ssl.SSLContext:
    """A server context presenting the validation certificate (blocking: keygen, files)."""
    cert, key = validation_certificate(identifier, key_authorization)
    pem = serialization.Encoding.PEM
    material = cert.public_bytes(pem) + key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # RFC 8737 §3: TLS 1.2 or higher
    context.set_alpn_protocols([ACME_TLS_1])
    context.num_tickets = 0  # nothing is sent after the handshake
    # load_cert_chain() reads files only: a private directory (0700), removed at once.
    with tempfile.TemporaryDirectory(prefix="acmecerts-tlsalpn-") as directory:
        path = Path(directory) / "cert.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(material)
        context.load_cert_chain(path)
    return context


# ---------------------------------------------------------------------------
# ClientHello inspection (RFC 8446 §4.1.2, RFC 6066 §3, RFC 7301 §3.1)
# ---------------------------------------------------------------------------


class _NotAClientHello(Exception):
    """The first bytes of the connection are not a well-formed TLS ClientHello."""


@dataclasses.dataclass(frozen=True, slots=True)
class _ClientHello:
    server_name: str | None
    alpn_protocols: tuple[bytes, ...]


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise _NotAClientHello
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, length_size: int) -> _Reader:
        return _Reader(self.take(self.number(length_size)))

    @property
    def done(self) -> bool:
        return self.pos >= len(self.data)


def _client_hello_body(buffer: bytes) -> bytes | None:
    """The ClientHello message body reassembled from TLS records; ``None`` if incomplete."""
    message = bytearray()
    pos = 0
    while len(buffer) - pos >= 5:
        content_type, major = buffer[pos], buffer[pos + 1]
        length = int.from_bytes(buffer[pos + 3 : pos + 5], "big")
        if content_type != _HANDSHAKE_RECORD or major != 3 or not 0 < length <= 1 << 14:
            raise _NotAClientHello
        if len(buffer) - pos - 5 < length:
            return None
        message += buffer[pos + 5 : pos + 5 + length]
        pos += 5 + length
        if len(message) >= 4:
            if message[0] != _CLIENT_HELLO:
                raise _NotAClientHello
            end = 4 + int.from_bytes(message[1:4], "big")
            if end > _MAX_CLIENT_HELLO:
                raise _NotAClientHello
            if len(message) >= end:
                return bytes(message[4:end])
    return None


def _parse_client_hello(body: bytes) -> _ClientHello:
    hello = _Reader(body)
    hello.take(2 + 32)  # legacy_version, random
    hello.vector(1)  # legacy_session_id
    hello.vector(2)  # cipher_suites
    hello.vector(1)  # legacy_compression_methods
    server_name: str | None = None
    alpn: list[bytes] = []
    extensions = hello.vector(2) if not hello.done else _Reader(b"")
    while not extensions.done:
        ext_type = extensions.number(2)
        data = extensions.vector(2)
        if ext_type == _EXT_SERVER_NAME:
            names = data.vector(2)
            while not names.done:
                name_type = names.number(1)
                host = names.vector(2).data
                if name_type == 0 and server_name is None:  # host_name
                    try:
                        server_name = host.decode("ascii").lower().removesuffix(".")
                    except UnicodeDecodeError as exc:
                        raise _NotAClientHello from exc
        elif ext_type == _EXT_ALPN:
            protocols = data.vector(2)
            while not protocols.done:
                alpn.append(protocols.vector(1).data)
    return _ClientHello(server_name, tuple(alpn))


def _alert(description: int) -> bytes:
    """A fatal TLS alert record (RFC 8446 §6)."""
    return bytes((21, 3, 3, 0, 2, 2, description))


# ---------------------------------------------------------------------------
# TlsAlpn01Server
# ---------------------------------------------------------------------------


class _Presented:
    """The validation contexts served per SNI name, one per presented task.

    Several orders may present the same name at once; the latest presented task is
    served until it is cleaned up, then the one before it.
    """

    def __init__(self) -> None:
        self._by_name: dict[str, list[tuple[ChallengeTask, ssl.SSLContext]]] = {}

    def add(self, name: str, task: ChallengeTask, context: ssl.SSLContext) -> None:
        self._by_name.setdefault(name, []).append((task, context))

    def discard(self, name: str, task: ChallengeTask) -> None:
        entries = self._by_name.get(name)
        if entries is None:
            return
        for index, (held, _context) in enumerate(entries):
            if held == task:
                del entries[index]
                break
        if not entries:
            del self._by_name[name]

    def context(self, name: str) -> ssl.SSLContext | None:
        entries = self._by_name.get(name)
        return entries[-1][1] if entries else None

    def __len__(self) -> int:
        return len(self._by_name)


class TlsAlpn01Server(_ListeningServer):
    """A tls-alpn-01 solver (RFC 8737): an in-process TLS listener for validation handshakes.

    One server answers for any number of concurrent orders: :meth:`present` makes a
    self-signed validation certificate for the task's identifier (DNS name, or IP address
    per RFC 8738) and serves it to clients that ask for that name with ALPN
    ``acme-tls/1``; :meth:`cleanup` stops serving it. Any other client is refused with a
    TLS alert before a certificate is sent (see the module docstring).

    Lifecycle, as for :class:`~acmecerts.solvers.Http01Server`::

        async with TlsAlpn01Server(port=443) as solver:  # serves inside a task group
            await client.issue(names, solvers=[solver])

        solver = TlsAlpn01Server()
        await solver.start()                            # or let present() start it
        ...
        await solver.aclose()

    :param host: address to listen on, or several (one port for all); the default ``"::"``
        is every IPv4 and IPv6 address (dual-stack), ``"0.0.0.0"`` every IPv4 address
        only, as for :class:`~acmecerts.solvers.Http01Server`.
    :param port: port to listen on; the CA always connects to 443, so another port only
        makes sense behind a port forward. ``0`` picks a free port.
    :param timeout: deadline (seconds or ``timedelta``) for one connection's handshake.
    :param max_connections: the most connections served at once (more are closed at once).
    """

    #: The challenge type this solver answers.
    challenge_type: str = _CHALLENGE_TYPE
    _logger: ClassVar[logging.Logger] = logger

    def __init__(
        self,
        *,
        host: str | Sequence[str] = "::",
        port: int = 443,
        timeout: float | _dt.timedelta = 10.0,
        max_connections: int = 1024,
    ) -> None:
        super().__init__(host=host, port=port, timeout=timeout, max_connections=max_connections)
        self._presented = _Presented()

    # -- introspection --------------------------------------------------------

    def _repr_detail(self) -> str:
        return f"names={len(self._presented)}"

    # -- Solver ---------------------------------------------------------------

    def supports(self, identifier: Identifier) -> bool:
        """DNS names and IP addresses, but not wildcard names (RFC 8737 §3, RFC 8738 §6)."""
        return _supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        """Serve the validation certificate for ``task``, starting the server if needed.

        Raises :class:`~acmecerts.errors.UnsupportedChallenge` for a wildcard or a non
        tls-alpn-01 task, and :class:`~acmecerts.solvers.ListenError` if a lazy start
        cannot bind.
        """
        _refuse_unsupported(self, task, _CHALLENGE_TYPE, _supports)
        context = await anyio.to_thread.run_sync(
            _server_context, task.identifier, task.key_authorization
        )
        self._presented.add(sni_name(task.identifier), task, context)
        if self._running is None:
            await self.start()

    async def cleanup(self, task: ChallengeTask) -> None:
        """Stop serving the certificate of ``task`` (once no other task presents the name).

        Idempotent; never raises; does not wait, so it works in a cancelled scope too.
        """
        if _supports(task.identifier):
            self._presented.discard(sni_name(task.identifier), task)

    # -- serving --------------------------------------------------------------

    async def _serve_connection(self, stream: anyio.abc.SocketStream) -> None:
        """Hold one validation handshake, within ``timeout`` (closed by the caller)."""
        with anyio.move_on_after(self._timeout):
            await self._converse(stream)

    async def _close_connection(self, stream: anyio.abc.SocketStream) -> None:
        """Close without a TLS goodbye: the handshake is the whole conversation."""
        await anyio.aclose_forcefully(stream)

    async def _converse(self, stream: anyio.abc.SocketStream) -> None:
        buffer = b""
        try:
            while (body := _client_hello_body(buffer)) is None:
                try:
                    buffer += await stream.receive(_RECEIVE_SIZE)
                except anyio.EndOfStream:
                    return
            hello = _parse_client_hello(body)
        except _NotAClientHello:
            logger.debug("tls-alpn-01 server: not a TLS ClientHello, closing")
            return
        if ACME_TLS_1.encode("ascii") not in hello.alpn_protocols:
            logger.debug("tls-alpn-01 server: refused a client without ALPN acme-tls/1")
            await stream.send(_alert(_ALERT_NO_APPLICATION_PROTOCOL))
            return
        context = self._presented.context(hello.server_name or "")
        if context is None:
            logger.debug("tls-alpn-01 server: refused unknown SNI %r", hello.server_name)
            await stream.send(_alert(_ALERT_UNRECOGNIZED_NAME))
            return
        if await self._handshake(stream, context, buffer):
            logger.info("tls-alpn-01 server: answered a validation of %s", hello.server_name)

    async def _handshake(
        self, stream: anyio.abc.SocketStream, context: ssl.SSLContext, received: bytes
    ) -> bool:
        """Complete the handshake, then close politely; return whether it succeeded."""
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_side=True)
        incoming.write(received)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    await stream.send(outgoing.read())
                try:
                    incoming.write(await stream.receive(_RECEIVE_SIZE))
                except anyio.EndOfStream:
                    return False
            except ssl.SSLError as exc:
                logger.debug("tls-alpn-01 handshake failed: %s", exc)
                if outgoing.pending:  # the alert OpenSSL wrote
                    await stream.send(outgoing.read())
                return False
        if tls.selected_alpn_protocol() != ACME_TLS_1:  # pragma: no cover - checked above
            return False
        with contextlib.suppress(ssl.SSLError):
            tls.unwrap()  # close_notify; the CA hangs up after the handshake (RFC 8737 §3)
        if outgoing.pending:
            await stream.send(outgoing.read())
        with anyio.move_on_after(_LINGER_SECONDS):
            while True:  # let the client hang up first, so no reset destroys our last flight
                try:
                    await stream.receive(_RECEIVE_SIZE)
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
        return True
