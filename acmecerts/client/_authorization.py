"""The authorization and challenge resources (RFC 8555 §7.1.4, §7.5)."""

from __future__ import annotations

import datetime as _dt

from acmecerts._time import Again
from acmecerts.client._polling import Polling
from acmecerts.client._signed import SignedRequests
from acmecerts.protocol.resources import (
    Authorization,
    Challenge,
    parse_authorization,
    parse_challenge,
)


class AuthorizationRequests:
    """Authorizations and challenges (RFC 8555 §7.5)."""

    __slots__ = ("polling", "signed")

    def __init__(self, signed: SignedRequests, polling: Polling) -> None:
        self.signed = signed
        self.polling = polling

    async def get(self, url: str) -> Authorization:
        """Fetch an authorization (POST-as-GET)."""
        return (await self.fetch(url))[0]

    async def fetch(self, url: str) -> tuple[Authorization, _dt.datetime | None]:
        """:meth:`get`, with the answer's ``Retry-After`` (when to ask again)."""
        response = await self.signed.post_as_get(url)
        return parse_authorization(response.json(), url=url), response.retry_after

    async def answer(self, challenge: Challenge) -> Challenge:
        """Tell the CA the challenge is ready to be validated (§7.5.1)."""
        response = await self.signed.post(challenge.url, {})
        return parse_challenge(response.json(), url=challenge.url)

    async def deactivate(self, url: str) -> Authorization:
        """Deactivate an authorization (§7.5.2) so it stops counting as pending."""
        response = await self.signed.post(url, {"status": "deactivated"})
        return parse_authorization(response.json(), url=url)

    async def wait(
        self, url: str, *, deadline: _dt.datetime, retry_after: _dt.datetime | None = None
    ) -> Authorization:
        """Poll an authorization until it is no longer ``pending``."""
        first = True

        async def check() -> Authorization | Again[Authorization]:
            nonlocal first
            if first:  # every poll, the first too, waits as the poll policy says
                first = False
                return Again(retry_after)
            authz, pause = await self.fetch(url)
            return authz if authz.status != "pending" else Again(pause)

        return await self.polling.until(check, deadline)
