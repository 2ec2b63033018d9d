"""Renewal information (ARI, RFC 9773)."""

from __future__ import annotations

import re

from cryptography import x509

from acmecerts._time import Clock
from acmecerts.errors import BadServerResponse, InvalidInput
from acmecerts.protocol.ari import (
    RenewalInfoResult,
    ari_retry_after,
    load_certificate,
    renewal_info_url,
)
from acmecerts.protocol.ari import cert_id as certificate_id
from acmecerts.protocol.resources import parse_renewal_info, renewal_info_from_body
from acmecerts.transport import AcmeTransport

#: An ARI certID (RFC 9773 §4.1): base64url of the AKI keyIdentifier, ".", of the serial.
_CERT_ID = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class RenewalInfoRequests:
    """Renewal information (RFC 9773): an unsigned ``GET``, no account needed."""

    __slots__ = ("clock", "transport")

    def __init__(self, transport: AcmeTransport, clock: Clock) -> None:
        self.transport = transport
        self.clock = clock

    async def get(
        self,
        certificate: x509.Certificate | str | bytes | None = None,
        *,
        cert_id: str | None = None,
    ) -> RenewalInfoResult:
        """Fetch the CA's suggested renewal window for ``certificate`` (RFC 9773 §4.1-4.3).

        ``certificate`` is a ``cryptography`` certificate, PEM (a chain: its leaf first) or
        DER; or pass its certID (:func:`~acmecerts.protocol.ari.cert_id`, e.g. an earlier
        result's ``cert_id``) as ``cert_id`` instead, which spares computing it again (what a
        program checking thousands of certificates every few hours wants). The request is
        an unauthenticated ``GET {renewalInfo}/{certID}``; the result's
        ``retry_after`` says when to ask again (the server's ``Retry-After`` bounded to one
        minute..six hours, six hours when it sent none). Pass ``result.cert_id`` as
        ``replaces`` to :meth:`issue` when renewing.

        Raises:
            InvalidInput: the CA's directory has no ``renewalInfo``, the certificate has
                no Authority Key Identifier (so no certID), ``cert_id`` is not of the form
                ``base64url.base64url``, or not exactly one of ``certificate`` and
                ``cert_id`` was given.
            BadServerResponse: the answer is not a valid RenewalInfo object (§4.2: treat it
                as no answer and fall back to your own schedule).
        """
        if (certificate is None) == (cert_id is None):
            raise InvalidInput("renewal_info() takes a certificate or its cert_id (one of them)")
        if certificate is not None:
            ident = certificate_id(load_certificate(certificate))
        elif cert_id is not None and _CERT_ID.fullmatch(cert_id) is not None:
            ident = cert_id
        else:
            raise InvalidInput(
                f"cert_id {str(cert_id)[:120]!r} is not an ARI certID (base64url.base64url, "
                "RFC 9773 §4.1)"
            )
        directory = await self.transport.directory()
        if directory.renewal_info is None:
            raise InvalidInput(
                "the CA does not support ARI: its directory has no renewalInfo (RFC 9773 §3)"
            )
        url = renewal_info_url(directory.renewal_info, ident)
        response = await self.transport.get(url)
        info = None
        if response.media_type == "application/json":
            info = renewal_info_from_body(response.content)  # the usual answer, read fast
        if info is None:
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
