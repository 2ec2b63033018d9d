"""Certificate chains (RFC 8555 §7.4.2): PEM parsing, metadata, and checks against the request."""

from __future__ import annotations

import binascii
import dataclasses
import datetime as _dt
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.utils import CryptographyDeprecationWarning

from acmecerts.errors import BadServerResponse, CertificateMismatch
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import PrivateKey

__all__ = [
    "CertificateChain",
    "CertificateInfo",
    "certificate_info",
    "check_certificate_matches",
    "parse_pem_chain",
]

_BEGIN = b"-----BEGIN CERTIFICATE-----"
_END = b"-----END CERTIFICATE-----"
_MAX_CHAIN = 10
#: The private key types :func:`check_certificate_matches` takes (else a public key).
_PRIVATE_KEYS = (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)
#: What cryptography raises for a certificate it cannot (fully) parse. Its deprecation
#: warnings (e.g. a negative serial in the Authority Key Identifier) are errors under
#: ``-W error`` and "will cause an exception in a future release".
_UNPARSEABLE = (
    ValueError,
    x509.InvalidVersion,
    x509.DuplicateExtension,
    CryptographyDeprecationWarning,
)


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateInfo:
    """What people ask about a certificate."""

    #: The subjectAltName entries (DNS names and IP addresses), in certificate order.
    names: tuple[str, ...]
    not_before: _dt.datetime
    not_after: _dt.datetime
    #: The serial number as lower-case hex.
    serial: str
    issuer: str

    @property
    def lifetime(self) -> _dt.timedelta:
        """``not_after - not_before``."""
        return self.not_after - self.not_before


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateChain:
    """A certificate chain as the CA returned it: the leaf first, then intermediates."""

    pem: str
    certificates: tuple[x509.Certificate, ...]

    @property
    def leaf(self) -> x509.Certificate:
        """The end-entity certificate."""
        return self.certificates[0]

    @property
    def leaf_pem(self) -> str:
        """The leaf alone, PEM."""
        return _to_pem(self.certificates[0])

    @property
    def intermediates_pem(self) -> str:
        """The issuer chain (without the leaf), PEM."""
        return "".join(_to_pem(c) for c in self.certificates[1:])

    @property
    def issuer_names(self) -> tuple[str, ...]:
        """Issuer common names of every certificate, to pick a preferred chain."""
        return tuple(_common_name(c.issuer) for c in self.certificates)

    @property
    def root_issuer_name(self) -> str:
        """Issuer common name of the last certificate (the root the chain leads to)."""
        return _common_name(self.certificates[-1].issuer)


def _to_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def _der_to_pem(der: bytes) -> str:
    """The PEM text ``cryptography`` writes for ``der``: 64-character lines, LF endings."""
    text = binascii.b2a_base64(der, newline=False).decode("ascii")
    lines = "\n".join([text[i : i + 64] for i in range(0, len(text), 64)])
    return f"-----BEGIN CERTIFICATE-----\n{lines}\n-----END CERTIFICATE-----\n"


def _load_block(block: bytes) -> tuple[x509.Certificate, str]:
    """The certificate of one PEM block, and its PEM text re-encoded from the DER.

    The usual block (newlines right after ``BEGIN`` and before ``END``, strict base64
    between) is decoded here and parsed as DER; anything else goes to ``cryptography``'s
    PEM parser, which decides whether it is acceptable.
    """
    body = block[len(_BEGIN) : -len(_END)]
    if body[:1] == b"\n" and body[-1:] == b"\n":
        try:
            der = binascii.a2b_base64(body.replace(b"\n", b""), strict_mode=True)
        except binascii.Error:
            pass
        else:
            return x509.load_der_x509_certificate(der), _der_to_pem(der)
    cert = x509.load_pem_x509_certificate(block)
    return cert, _to_pem(cert)


def _common_name(name: x509.Name) -> str:
    attrs = name.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    if attrs:
        value = attrs[0].value
        return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return name.rfc4514_string()


def _pem_blocks(raw: bytes) -> list[bytes]:
    """The ``BEGIN``..``END CERTIFICATE`` blocks of ``raw``, at most one more than allowed.

    A linear scan: a regular expression with a lazy ``.+?`` between the markers took
    quadratic time on a body full of ``BEGIN`` lines without an ``END`` (minutes for the
    1 MiB a hostile CA may send).
    """
    blocks: list[bytes] = []
    pos = 0
    while len(blocks) <= _MAX_CHAIN:
        start = raw.find(_BEGIN, pos)
        if start < 0:
            break
        end = raw.find(_END, start + len(_BEGIN))
        if end < 0:
            break
        pos = end + len(_END)
        blocks.append(raw[start:pos])
    return blocks


def parse_pem_chain(data: bytes | str, *, url: str | None = None) -> CertificateChain:
    """Parse ``application/pem-certificate-chain``; raise :class:`BadServerResponse`."""
    raw = data.encode("ascii", "replace") if isinstance(data, str) else data
    blocks = _pem_blocks(raw)
    if not blocks:
        raise BadServerResponse("no PEM certificate in the answer", url=url)
    if len(blocks) > _MAX_CHAIN:
        raise BadServerResponse(
            f"chain of more than {_MAX_CHAIN} certificates is too long", url=url
        )
    certs: list[x509.Certificate] = []
    pems: list[str] = []
    for block in blocks:
        try:
            cert, pem = _load_block(block)
            # cryptography parses names and extensions lazily: a malformed one must fail
            # here, as a typed error, not later in whatever reads the chain.
            cert.issuer, cert.subject, cert.extensions  # noqa: B018
        except _UNPARSEABLE as exc:
            raise BadServerResponse(f"unparseable certificate in chain: {exc}", url=url) from exc
        certs.append(cert)
        pems.append(pem)
    return CertificateChain(pem="".join(pems), certificates=tuple(certs))


def _san_names(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return ()
    except _UNPARSEABLE as exc:
        # cryptography parses extensions lazily: a malformed or repeated one surfaces here.
        raise BadServerResponse(f"the certificate's extensions do not parse: {exc}") from exc
    names: list[str] = []
    for general in ext.value:
        if isinstance(general, x509.DNSName):
            names.append(general.value.lower())
        elif isinstance(general, x509.IPAddress):
            names.append(str(general.value))
    return tuple(names)


def certificate_info(cert: x509.Certificate) -> CertificateInfo:
    """Names, validity and serial of ``cert``."""
    return CertificateInfo(
        names=_san_names(cert),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        serial=format(cert.serial_number, "x"),
        issuer=_common_name(cert.issuer),
    )


def check_certificate_matches(
    chain: CertificateChain,
    *,
    key: PrivateKey | CertificatePublicKeyTypes,
    identifiers: Sequence[Identifier],
) -> None:
    """Raise :class:`CertificateMismatch` unless the leaf is for ``key`` (a private key, or
    the public key of a CSR) and ``identifiers``."""
    leaf = chain.leaf
    try:
        leaf_key = leaf.public_key()
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CertificateMismatch(
            f"the CA's certificate has an unusable public key: {exc}"
        ) from exc
    # cryptography compares the key material (EVP_PKEY public_eq: curve and point, or
    # modulus and exponent), what comparing the DER SubjectPublicKeyInfo did at 5x the cost;
    # keys of different types are never equal.
    expected = key.public_key() if isinstance(key, _PRIVATE_KEYS) else key
    if leaf_key != expected:
        raise CertificateMismatch("the CA's certificate is not for the requested key")
    wanted = {i.value for i in identifiers}
    got = set(_san_names(leaf))
    if wanted != got:
        raise CertificateMismatch(
            f"the CA's certificate names {sorted(got)} differ from the request {sorted(wanted)}"
        )
