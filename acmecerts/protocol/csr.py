"""Certificate signing requests for finalize (RFC 8555 §7.4)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID

from acmecerts.errors import InvalidInput
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import PrivateKey

__all__ = ["build_csr"]

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
