"""A certificate as the manager keeps it in memory: :class:`HeldCertificate`, a few hundred bytes.

:func:`hold` makes one of an :class:`IssuedCertificate`, sharing the issuer chain between
the certificates it issued; :meth:`HeldCertificate.issued` gives back an equal one.
"""

from __future__ import annotations

import dataclasses

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from acmecerts._issued import IssuedCertificate, LeafInfo
from acmecerts.protocol.ari import cert_id
from acmecerts.protocol.certificate import CertificateChain, CertificateInfo
from acmecerts.protocol.identifiers import Identifier

__all__ = ["HeldCertificate", "ari_cert_id", "hold"]

#: Issuer chains kept for sharing between held certificates (a CA has a handful).
_MAX_SHARED = 64
_SHARED: dict[tuple[x509.Certificate, ...], tuple[tuple[x509.Certificate, ...], str]] = {}


@dataclasses.dataclass(frozen=True, slots=True, eq=False, repr=False)
class HeldCertificate(LeafInfo):
    """A certificate as the manager keeps it in memory, in a few hundred bytes.

    An :class:`IssuedCertificate` costs kilobytes: the PEM text of the whole chain, the
    parsed leaf and what ``cryptography`` caches on it once names and extensions were
    read, the issuers parsed again for every certificate. This keeps the leaf's DER,
    the issuers shared between certificates of the same chain, and the metadata the
    schedule reads; :meth:`issued` builds an equal :class:`IssuedCertificate`.
    """

    identifiers: tuple[Identifier, ...]
    leaf_der: bytes
    issuers: tuple[x509.Certificate, ...]
    issuers_pem: str
    private_key_pem: str
    info: CertificateInfo
    order_url: str
    certificate_url: str
    #: The leaf's ARI certID once asked for (see :func:`ari_cert_id`).
    _cert_id: str | None = dataclasses.field(default=None, init=False)

    def leaf(self) -> x509.Certificate:
        """The leaf certificate, parsed again."""
        return x509.load_der_x509_certificate(self.leaf_der)

    def issued(self) -> IssuedCertificate:
        """The certificate as an :class:`IssuedCertificate` (equal to the one held)."""
        leaf = self.leaf()
        pem = leaf.public_bytes(Encoding.PEM).decode("ascii") + self.issuers_pem
        return IssuedCertificate(
            identifiers=self.identifiers,
            chain=CertificateChain(pem=pem, certificates=(leaf, *self.issuers)),
            private_key_pem=self.private_key_pem,
            info=self.info,
            order_url=self.order_url,
            certificate_url=self.certificate_url,
        )


def ari_cert_id(certificate: HeldCertificate | IssuedCertificate) -> str:
    """The ARI certID of ``certificate``'s leaf (RFC 9773 §4.1), computed once per held one.

    The manager asks renewalInfo for every certificate every few hours; parsing the leaf
    and its extensions each time cost more than the request itself.

    Raises:
        InvalidInput: the leaf has no Authority Key Identifier (so no certID).
    """
    if isinstance(certificate, IssuedCertificate):
        return cert_id(certificate.chain.leaf)
    known = certificate._cert_id
    if known is None:
        known = cert_id(certificate.leaf())
        object.__setattr__(certificate, "_cert_id", known)  # a cache: frozen otherwise
    return known


def hold(issued: IssuedCertificate) -> HeldCertificate | IssuedCertificate:
    """``issued`` in the form the manager keeps (``issued`` itself if it cannot be held)."""
    chain = issued.chain
    if issued.alternate_chains or issued.private_key_pem is None:
        return issued
    leaf_der = chain.leaf.public_bytes(Encoding.DER)
    issuers, issuers_pem = _shared(chain.certificates[1:])
    leaf_pem = x509.load_der_x509_certificate(leaf_der).public_bytes(Encoding.PEM)
    if leaf_pem.decode("ascii") + issuers_pem != chain.pem:
        return issued  # not the canonical PEM: keep it as it is
    return HeldCertificate(
        identifiers=issued.identifiers,
        leaf_der=leaf_der,
        issuers=issuers,
        issuers_pem=issuers_pem,
        private_key_pem=issued.private_key_pem,
        info=issued.info,
        order_url=issued.order_url,
        certificate_url=issued.certificate_url,
    )


def _shared(
    issuers: tuple[x509.Certificate, ...],
) -> tuple[tuple[x509.Certificate, ...], str]:
    """One copy of an issuer chain (and its PEM) for every certificate it issued."""
    shared = _SHARED.get(issuers)
    if shared is None:
        if len(_SHARED) >= _MAX_SHARED:
            _SHARED.clear()
        pem = "".join(cert.public_bytes(Encoding.PEM).decode("ascii") for cert in issuers)
        shared = _SHARED[issuers] = (issuers, pem)
    return shared
