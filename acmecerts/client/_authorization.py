"""The authorization and challenge resources (RFC 8555 §7.1.4, §7.5)."""

from __future__ import annotations

import datetime as _dt

from acmecerts._time import Again
from acmecerts.client._account import _AccountRequests
from acmecerts.protocol.resources import (
    Authorization,
    Challenge,
    parse_authorization,
    parse_challenge,
)


class _AuthorizationRequests(_AccountRequests):
    """Authorizations and challenges (RFC 8555 §7.5)."""

    async def get_authorization(self, url: str) -> Authorization:
        """Fetch an authorization (POST-as-GET)."""
        return (await self._fetch_authorization(url))[0]

    async def _fetch_authorization(self, url: str) -> tuple[Authorization, _dt.datetime | None]:
        """:meth:`get_authorization`, with the answer's ``Retry-After`` (when to ask again)."""
        response = await self._post(url, None)
        return parse_authorization(response.json(), url=url), response.retry_after

    async def answer_challenge(self, challenge: Challenge) -> Challenge:
        """Tell the CA the challenge is ready to be validated (§7.5.1)."""
        response = await self._post(challenge.url, {})
        return parse_challenge(response.json(), url=challenge.url)

    async def deactivate_authorization(self, url: str) -> Authorization:
        """Deactivate an authorization (§7.5.2) so it stops counting as pending."""
        response = await self._post(url, {"status": "deactivated"})
        return parse_authorization(response.json(), url=url)

    async def wait_authorization(
        self, url: str, *, deadline: _dt.datetime, retry_after: _dt.datetime | None = None
    ) -> Authorization:
        """Poll an authorization until it is no longer ``pending``."""
        first = True

        async def check() -> Authorization | Again[Authorization]:
            nonlocal first
            if first:  # every poll, the first too, waits as the poll policy says
                first = False
                return Again(retry_after)
            response = await self._post(url, None)
            authz = parse_authorization(response.json(), url=url)
            return authz if authz.status != "pending" else Again(response.retry_after)

        return await self._poll_until(check, deadline)
