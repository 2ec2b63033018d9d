"""The simulated CA's issuer: one P-256 key, real X.509 leaves, ARI certIDs and windows.

One issuer key is made per :class:`Issuer` (about a millisecond); every leaf is a real
certificate signed by it (``cryptography``), with the CSR's public key, its names as
SANs, an Authority Key Identifier (so ARI's certID exists, RFC 9773 §4.1) and a random
serial. Signing a leaf costs about 0.1 ms: the simulation signs each one, none is
pre-made.

ARI windows are placed as Let's Encrypt's Boulder places them (``RenewalInfoSimple``):
a point two thirds of the way through the validity (half way for a certificate of under
10 days), with a margin of 1 % of the validity on either side: a window 2 % of the
validity wide. A certificate the CA wants replaced at once (a mass revocation) gets
Boulder's ``RenewalInfoImmediate`` window: from an hour before now, 30 minutes long.
"""

from __future__ import annotations

import base64
import datetime as _dt
import random

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Issuer", "ari_window", "immediate_window"]

_SHORT = _dt.timedelta(days=10)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def ari_window(
    not_before: _dt.datetime, not_after: _dt.datetime
) -> tuple[_dt.datetime, _dt.datetime]:
    """Let's Encrypt's suggested window for a certificate (see the module docstring)."""
    # Boulder counts the validity inclusively: notAfter is the last second it is valid.
    validity = not_after + _dt.timedelta(seconds=1) - not_before
    offset = validity / 2 if validity < _SHORT else validity / 3
    ideal = not_after - offset
    margin = validity / 100
    return ideal - margin, ideal + margin


def immediate_window(now: _dt.datetime) -> tuple[_dt.datetime, _dt.datetime]:
    """The window of a certificate to replace at once: it began an hour ago, 30 min long."""
    start = now - _dt.timedelta(hours=1)
    return start, start + _dt.timedelta(minutes=30)


class Issuer:
    """Signs leaves with one CA key; ``chain_pem`` is what follows a leaf in downloads."""

    def __init__(self, rng: random.Random, *, name: str = "acmecerts simulated CA") -> None:
        self._rng = rng
        self.key = ec.generate_private_key(ec.SECP256R1())
        public = self.key.public_key()
        self.ski = x509.SubjectKeyIdentifier.from_public_key(public)
        self._aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(self.ski)
        #: ``base64url(keyIdentifier)``: the first half of every certID this CA makes.
        self.aki_b64 = _b64(self.ski.digest)
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        start = _dt.datetime(2000, 1, 1, tzinfo=_dt.UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + _dt.timedelta(days=365 * 100))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(self.ski, critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.chain_pem = self.certificate.public_bytes(serialization.Encoding.PEM)

    def new_serial(self) -> int:
        """A random positive 127-bit serial (unique in practice)."""
        return self._rng.getrandbits(126) | (1 << 126)

    def cert_id(self, serial: int) -> str:
        """The ARI certID of this issuer's certificate with ``serial`` (RFC 9773 §4.1)."""
        octets = serial.to_bytes(serial.bit_length() // 8 + 1, "big", signed=True)
        return f"{self.aki_b64}.{_b64(octets)}"

    def sign(
        self,
        csr: x509.CertificateSigningRequest,
        names: list[x509.GeneralName],
        serial: int,
        not_before: _dt.datetime,
        not_after: _dt.datetime,
    ) -> bytes:
        """A leaf for ``csr``'s key naming ``names``; returns its PEM."""
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.name)
            .public_key(csr.public_key())
            .serial_number(serial)
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName(names), critical=True)
            .add_extension(self._aki, critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        return leaf.public_bytes(serialization.Encoding.PEM)


def _b64d(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _csr_identifiers(csr: x509.CertificateSigningRequest) -> set[tuple[str, str]]:
    try:
        san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    names = {("dns", n.lower()) for n in san.get_values_for_type(x509.DNSName)}
    names |= {("ip", str(a)) for a in san.get_values_for_type(x509.IPAddress)}
    return names


def _iso(instant: _dt.datetime) -> str:
    return instant.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
