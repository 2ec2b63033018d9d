"""The account's identity and the requests signed for it (RFC 8555 §6.2, §6.3).

:class:`AccountIdentity` is who the client is at the CA: its key and, once known, its
account URL (the ``kid`` of every JWS but ``newAccount``'s). :class:`SignedRequests` is
the one way the resource objects talk to the CA: it asks for the ``kid`` (registering
first when the client knows no account, through the function it is given) and hands
the request to :meth:`AcmeTransport.post`, which signs it, takes a fresh nonce from
the last answer's ``Replay-Nonce`` and replays it once on ``badNonce`` (§6.5).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from acmecerts.protocol.keys import AccountKey
from acmecerts.protocol.resources import Directory
from acmecerts.transport import AcmeResponse, AcmeTransport


class AccountIdentity:
    """The account's key and URL (``None`` until registered or found)."""

    __slots__ = ("key", "url")

    def __init__(self, key: AccountKey | None = None, url: str | None = None) -> None:
        #: The account key: a new P-256 key when none is given.
        self.key = key or AccountKey.generate()
        #: The account URL, the ``kid`` of signed requests (RFC 8555 §6.2).
        self.url = url

    def __repr__(self) -> str:
        return f"AccountIdentity(url={self.url!r}, key={self.key!r})"


class SignedRequests:
    """Requests to the CA signed for one account: ``kid``, JWS, nonces, POST-as-GET.

    ``account_url`` is awaited before each request signed with the ``kid``: it returns
    the account URL, registering the account first if need be
    (:meth:`Registration.account_url`).
    """

    __slots__ = ("_account_url", "identity", "transport")

    def __init__(
        self,
        transport: AcmeTransport,
        identity: AccountIdentity,
        account_url: Callable[[], Awaitable[str]],
    ) -> None:
        self.transport = transport
        self.identity = identity
        self._account_url = account_url

    async def directory(self) -> Directory:
        """The CA's directory (fetched once by the transport)."""
        return await self.transport.directory()

    async def kid(self) -> str:
        """The account URL the requests are signed for (registering first if unknown)."""
        return await self._account_url()

    async def post(
        self,
        url: str,
        payload: Mapping[str, Any] | None,
        *,
        accept: str | None = None,
        idempotent: bool = True,
    ) -> AcmeResponse:
        """POST ``payload`` to ``url``, signed by the account key with its ``kid`` (§6.2).

        ``idempotent=False`` for a request whose replay would do something twice
        (``newOrder``, ``keyChange``): the transport then replays it only when the CA
        cannot have acted on it.
        """
        kid = await self._account_url()
        return await self.transport.post(
            url,
            key=self.identity.key,
            kid=kid,
            payload=payload,
            accept=accept,
            idempotent=idempotent,
        )

    async def post_as_get(self, url: str, *, accept: str | None = None) -> AcmeResponse:
        """Fetch ``url`` with a POST-as-GET (§6.3): an empty payload, signed."""
        kid = await self._account_url()  # straight to the transport: the hottest request
        return await self.transport.post(
            url, key=self.identity.key, kid=kid, payload=None, accept=accept
        )

    async def post_with_key(
        self, url: str, key: AccountKey, payload: Mapping[str, Any]
    ) -> AcmeResponse:
        """POST ``payload`` signed by ``key`` with its public key (``jwk``), no ``kid``:
        for a request not made as the account (revocation by the certificate key, §7.6)."""
        return await self.transport.post(url, key=key, kid=None, payload=payload)
