"""Renewal information (ARI, RFC 9773)."""

from __future__ import annotations

from cryptography import x509

from acmecerts.client._account import _AccountRequests
from acmecerts.errors import BadServerResponse, InvalidInput
from acmecerts.protocol.ari import (
    RenewalInfoResult,
    ari_retry_after,
    cert_id,
    load_certificate,
    renewal_info_url,
)
from acmecerts.protocol.resources import parse_renewal_info


class _RenewalInfoRequests(_AccountRequests):
    """Renewal information (RFC 9773)."""

    async def renewal_info(self, certificate: x509.Certificate | str | bytes) -> RenewalInfoResult:
        """Fetch the CA's suggested renewal window for ``certificate`` (RFC 9773 §4.1-4.3).

        ``certificate`` is a ``cryptography`` certificate, PEM (a chain: its leaf first) or
        DER. The request is an unauthenticated ``GET {renewalInfo}/{certID}``; the result's
        ``retry_after`` says when to ask again (the server's ``Retry-After`` bounded to one
        minute..one day, six hours when it sent none). Pass ``result.cert_id`` as
        ``replaces`` to :meth:`issue` when renewing.

        Raises:
            InvalidInput: the CA's directory has no ``renewalInfo``, or the certificate has
                no Authority Key Identifier (so no certID).
            BadServerResponse: the answer is not a valid RenewalInfo object (§4.2: treat it
                as no answer and fall back to your own schedule).
        """
        ident = cert_id(load_certificate(certificate))
        directory = await self.directory()
        if directory.renewal_info is None:
            raise InvalidInput(
                "the CA does not support ARI: its directory has no renewalInfo (RFC 9773 §3)"
            )
        url = renewal_info_url(directory.renewal_info, ident)
        response = await self.transport.get(url)
        info = parse_renewal_info(response.json(), url=url)
        if info.window_end <= info.window_start:
            # RFC 9773 §4.2: an end that equals or precedes the start is invalid.
            raise BadServerResponse("renewalInfo window is empty", url=url)
        return RenewalInfoResult(
            info=info,
            retry_after=ari_retry_after(response.retry_after, now=self.clock.now()),
            cert_id=ident,
            url=url,
        )
