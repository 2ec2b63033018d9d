"""The certificate: finalize, download, revoke (RFC 8555 §7.4, §7.4.2, §7.6)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping

from acmecerts.client._signed import SignedRequests
from acmecerts.errors import InvalidInput
from acmecerts.protocol.certificate import CertificateChain, parse_pem_chain
from acmecerts.protocol.keys import AccountKey, PrivateKey
from acmecerts.protocol.resources import Order, parse_order

_PEM_CHAIN = "application/pem-certificate-chain"


class RevocationReason:
    """CRL reason codes accepted by ACME revocation (RFC 5280 §5.3.1)."""

    UNSPECIFIED = 0
    KEY_COMPROMISE = 1
    AFFILIATION_CHANGED = 3
    SUPERSEDED = 4
    CESSATION_OF_OPERATION = 5

    ALL: Mapping[str, int] = {
        "unspecified": 0,
        "keyCompromise": 1,
        "affiliationChanged": 3,
        "superseded": 4,
        "cessationOfOperation": 5,
    }


class CertificateRequests:
    """Finalize, download and revoke (RFC 8555 §7.4, §7.4.2, §7.6)."""

    __slots__ = ("signed",)

    def __init__(self, signed: SignedRequests) -> None:
        self.signed = signed

    async def finalize(self, order: Order, csr_der: bytes) -> tuple[Order, _dt.datetime | None]:
        """Send the CSR (§7.4): the order (``processing`` or ``valid``) and the answer's
        ``Retry-After`` (when to poll first)."""
        from acmecerts.protocol.challenges import b64url

        response = await self.signed.post(order.finalize, {"csr": b64url(csr_der)})
        return parse_order(response.json(), url=order.url), response.retry_after

    async def download(self, url: str) -> tuple[CertificateChain, list[str]]:
        """Download a chain (§7.4.2); returns it and the URLs of alternate chains."""
        response = await self.signed.post_as_get(url, accept=_PEM_CHAIN)
        return parse_pem_chain(response.content, url=url), response.links("alternate")

    async def revoke(
        self,
        certificate_pem: str | bytes,
        *,
        reason: int = RevocationReason.UNSPECIFIED,
        certificate_key: PrivateKey | None = None,
    ) -> None:
        """Revoke a certificate (§7.6), signed by the account key or by the certificate key."""
        from cryptography.hazmat.primitives import serialization

        from acmecerts.protocol.challenges import b64url

        if reason not in RevocationReason.ALL.values():
            raise InvalidInput(f"revocation reason {reason} is not allowed by ACME")
        chain = parse_pem_chain(certificate_pem)
        der = chain.leaf.public_bytes(serialization.Encoding.DER)
        directory = await self.signed.directory()
        if directory.revoke_cert is None:
            raise InvalidInput("the CA has no revokeCert endpoint")
        payload = {"certificate": b64url(der), "reason": reason}
        if certificate_key is None:
            await self.signed.post(directory.revoke_cert, payload)
        else:
            await self.signed.post_with_key(
                directory.revoke_cert, AccountKey(certificate_key), payload
            )
