"""Certificate signing requests for finalize (RFC 8555 §7.4)."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import NameOID

from acmecerts.errors import InvalidInput
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import PrivateKey

__all__ = ["ParsedCsr", "build_csr", "parse_csr"]

_CN_MAX = 64


def build_csr(identifiers: Sequence[Identifier], key: PrivateKey) -> bytes:
    """Return the DER CSR for ``identifiers`` signed by ``key``.

    Every identifier goes into the subjectAltName extension; the first DNS name that fits
    (64 characters) is also the subject common name, as most CAs expect.
    """
    if not identifiers:
        raise InvalidInput("a CSR needs at least one identifier")
    sans: list[x509.GeneralName] = []
    common_name: str | None = None
    for ident in identifiers:
        if ident.type == "dns":
            sans.append(x509.DNSName(ident.value))
            if common_name is None and len(ident.value) <= _CN_MAX:
                common_name = ident.value
        elif ident.type == "ip":
            sans.append(x509.IPAddress(ipaddress.ip_address(ident.value)))
        else:
            raise InvalidInput(f"cannot put identifier type {ident.type!r} in a CSR")
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, common_name)] if common_name else []
    )
    builder = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
    )
    csr = builder.sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.DER)


@dataclasses.dataclass(frozen=True, slots=True)
class ParsedCsr:
    """A CSR someone else made (``issue(csr=...)``), checked: what finalize sends."""

    #: The CSR, DER (what finalize sends, base64url).
    der: bytes
    #: The names it asks for: its subjectAltName entries, then its common name if that is
    #: not among them; in that order, without repeats.
    identifiers: tuple[Identifier, ...]
    #: The public key the certificate will be for (the private key stays with its owner).
    public_key: CertificatePublicKeyTypes


def parse_csr(data: bytes) -> ParsedCsr:
    """Read a CSR, PEM or DER, and check it is usable: a valid self-signature, names.

    Raises :class:`InvalidInput` (nothing is sent) for anything else: not a CSR, a
    signature that does not verify (a tampered request), no names, a name that is no
    valid identifier, or a subjectAltName entry other than a DNS name or IP address.
    """
    stripped = data.lstrip()
    try:
        if stripped.startswith(b"-----BEGIN"):
            csr = x509.load_pem_x509_csr(stripped)
        else:
            csr = x509.load_der_x509_csr(data)
    except ValueError as exc:
        raise InvalidInput(f"not a certificate signing request (PEM or DER): {exc}") from None
    try:
        signed = csr.is_signature_valid
        public_key = csr.public_key()
    except Exception as exc:  # an unsupported key or signature algorithm
        raise InvalidInput(f"the CSR cannot be checked: {exc}") from None
    if not signed:
        raise InvalidInput("the CSR's signature does not verify: it was altered after signing")
    values: list[str] = []
    try:
        sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = None
    except ValueError as exc:  # a malformed extension
        raise InvalidInput(f"the CSR's extensions cannot be read: {exc}") from None
    for entry in sans or ():
        if isinstance(entry, x509.DNSName):
            values.append(entry.value)
        elif isinstance(entry, x509.IPAddress):
            values.append(str(entry.value))
        else:
            raise InvalidInput(
                f"the CSR asks for {type(entry).__name__} {entry.value!r}: "
                "only DNS names and IP addresses can be certified"
            )
    for attribute in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME):
        value = attribute.value
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        values.append(value)
    if not values:
        raise InvalidInput("the CSR names nothing (no subjectAltName, no common name)")
    return ParsedCsr(
        der=csr.public_bytes(serialization.Encoding.DER),
        identifiers=parse_identifiers(values),
        public_key=public_key,
    )
