"""The account resource (RFC 8555 §7.3): read it, update its contacts, deactivate it,
roll its key over. Creating or finding it is :mod:`acmecerts.client._registration`'s."""

from __future__ import annotations

import json
from collections.abc import Sequence

from acmecerts.client._registration import Registration
from acmecerts.client._signed import SignedRequests
from acmecerts.errors import AcmeCertsError, BadServerResponse, ErrorKind, InvalidInput
from acmecerts.protocol.jws import key_change_inner
from acmecerts.protocol.keys import AccountKey
from acmecerts.protocol.resources import Account, parse_account


class AccountRequests:
    """The account object (§7.3.2, §7.3.5, §7.3.6), reached by signed requests."""

    __slots__ = ("registration", "signed")

    def __init__(self, signed: SignedRequests, registration: Registration) -> None:
        self.signed = signed
        self.registration = registration

    async def get(self) -> Account:
        """Fetch the account object (POST-as-GET)."""
        url = await self.signed.kid()
        response = await self.signed.post_as_get(url)
        return parse_account(response.json(), url=url)

    async def update_contact(self, contact: Sequence[str]) -> Account:
        """Replace the account's contact URIs (§7.3.2)."""
        url = await self.signed.kid()
        response = await self.signed.post(url, {"contact": list(contact)})
        self.registration.contact = tuple(contact)
        return parse_account(response.json(), url=url)

    async def deactivate(self) -> Account:
        """Deactivate the account (§7.3.6). The CA refuses its key afterwards."""
        url = await self.signed.kid()
        response = await self.signed.post(url, {"status": "deactivated"})
        return parse_account(response.json(), url=url)

    async def change_key(self, new_key: AccountKey) -> None:
        """Roll the account over to ``new_key`` (§7.3.5); the old key stops working.

        ``account_key`` becomes ``new_key`` once the CA has switched. Store ``new_key``
        before calling and the old key until this returns, so that neither can be lost.
        The request is never replayed blindly (after a success whose answer was lost, a
        replay signed by the old key would be refused): when the outcome is unknown, the
        CA is asked whether ``new_key`` now owns the account.
        """
        identity = self.signed.identity
        directory = await self.signed.directory()
        if directory.key_change is None:
            raise InvalidInput("the CA does not support account key rollover (no keyChange)")
        account_url = await self.signed.kid()
        inner = key_change_inner(
            old_key=identity.key,
            new_key=new_key,
            account_url=account_url,
            url=directory.key_change,
        )
        try:
            answer = await self.signed.post(directory.key_change, inner, idempotent=False)
        except AcmeCertsError as exc:
            if exc.kind is not ErrorKind.TRANSIENT or not exc.reached_ca:
                raise  # the CA refused it, or it never got there: the old key still holds
            try:
                owner = await self.registration.owner_of(new_key)
            except AcmeCertsError:
                raise exc from None
            if owner != account_url:
                raise
        else:
            if not _is_account_object(answer.content):
                # §7.3.5: a success carries the account object. A bare answer (Pebble
                # 2.10 gives an empty 200 even when the key belongs to another account)
                # proves nothing: ask the CA whom the new key belongs to.
                owner = await self.registration.owner_of(new_key)
                if owner != account_url:
                    raise BadServerResponse(
                        "the CA answered the key rollover without the account object, and "
                        + (
                            f"the new key belongs to another account ({owner})"
                            if owner
                            else "no account has the new key"
                        )
                        + "; the old key still holds",
                        url=directory.key_change,
                    )
        identity.key = new_key


def _is_account_object(content: bytes) -> bool:
    """Whether ``content`` is a JSON account object (it has a ``status``)."""
    try:
        body = json.loads(content)
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("status"), str)
