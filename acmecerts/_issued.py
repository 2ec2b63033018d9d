"""What an issuance returns: :class:`IssuedCertificate`."""

from __future__ import annotations

import dataclasses
import datetime as _dt

from acmecerts.protocol.certificate import CertificateChain, CertificateInfo
from acmecerts.protocol.identifiers import Identifier

__all__ = ["IssuedCertificate"]


class LeafInfo:
    """A certificate's :attr:`info` (names, validity, serial) as its own properties.

    The base of :class:`IssuedCertificate` and of the manager's compact
    ``HeldCertificate``, which are read alike.
    """

    __slots__ = ()

    #: Names, validity and serial of the leaf.
    info: CertificateInfo

    @property
    def names(self) -> tuple[str, ...]:
        """The subjectAltName entries of the leaf."""
        return self.info.names

    @property
    def not_before(self) -> _dt.datetime:
        """Start of validity (UTC)."""
        return self.info.not_before

    @property
    def not_after(self) -> _dt.datetime:
        """End of validity (UTC)."""
        return self.info.not_after

    @property
    def serial(self) -> str:
        """Serial number, lower-case hex."""
        return self.info.serial


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class IssuedCertificate(LeafInfo):
    """A certificate the CA issued, with its private key (unless it was issued for the
    caller's CSR) and parsed metadata.

    The repr never shows the private key.
    """

    #: The identifiers that were requested.
    identifiers: tuple[Identifier, ...]
    #: The chain the CA returned (or the preferred alternate): leaf first.
    chain: CertificateChain
    #: The certificate's private key, PKCS#8 PEM; ``None`` when it was issued for the
    #: caller's own CSR (``issue(csr=...)``): the key never left its owner.
    private_key_pem: str | None = dataclasses.field(repr=False)
    #: Names, validity and serial of the leaf.
    info: CertificateInfo
    #: The order URL at the CA.
    order_url: str
    #: The certificate URL at the CA (re-download without re-ordering).
    certificate_url: str
    #: Other chains the CA offered (``Link: rel="alternate"``), if they were fetched.
    alternate_chains: tuple[CertificateChain, ...] = ()

    @property
    def certificate_pem(self) -> str:
        """The leaf certificate alone (``cert.pem``)."""
        return self.chain.leaf_pem

    @property
    def chain_pem(self) -> str:
        """The intermediates without the leaf (``chain.pem``)."""
        return self.chain.intermediates_pem

    @property
    def fullchain_pem(self) -> str:
        """Leaf plus intermediates (``fullchain.pem``), what servers usually want."""
        return self.chain.pem

    def __repr__(self) -> str:
        return (
            f"IssuedCertificate(names={list(self.names)!r}, serial={self.serial!r}, "
            f"not_after={self.not_after.isoformat()!r})"
        )
