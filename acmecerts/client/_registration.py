"""Account registration (RFC 8555 §7.3, §7.3.1, §7.3.4): ``newAccount`` and the lookup
of a key's account, within the rate-limit ledger's budget of new accounts."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from acmecerts._time import Clock, show_instant
from acmecerts.client._signed import AccountIdentity
from acmecerts.errors import (
    AccountDoesNotExist,
    ExternalAccountRequired,
    InvalidInput,
    ProblemType,
    RateLimitDeferred,
)
from acmecerts.protocol.jws import eab_binding
from acmecerts.protocol.keys import AccountKey
from acmecerts.protocol.resources import Account, parse_account
from acmecerts.transport import AcmeTransport

if TYPE_CHECKING:
    from acmecerts.ratelimit import Decision, LedgerLike

log = logging.getLogger("acmecerts.client")

#: How long a deferred registration is repeated to the client's other requests without
#: looking the key up again (``onlyReturnExisting``).
_ACCOUNT_RECHECK_SECONDS = 30.0


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class ExternalAccountBinding:
    """External account binding credentials (RFC 8555 §7.3.4) from the CA.

    ``hmac_key`` is the base64url MAC key; it never appears in reprs or logs.
    """

    kid: str
    hmac_key: str
    algorithm: str = "HS256"

    def __repr__(self) -> str:
        return f"ExternalAccountBinding(kid={self.kid!r}, algorithm={self.algorithm!r})"


class TermsOfServiceNotAgreed(InvalidInput):
    """The CA publishes terms of service (``terms_of_service``, its directory's
    ``meta.termsOfService``) and the client was told they were not agreed to
    (``AcmeClient(terms_of_service_agreed=False)``): no account is created. Only the
    directory (``directory_url``) was fetched; nothing that creates an account was sent."""

    def __init__(self, terms_of_service: str, *, directory_url: str) -> None:
        super().__init__(
            f"the CA {directory_url} asks you to agree to its terms of service "
            f"({terms_of_service}) before an account is created: read them, then agree "
            "(terms_of_service_agreed=True); no account was created"
        )
        self.terms_of_service = terms_of_service
        self.directory_url = directory_url


class Registration:
    """Registers :attr:`identity` at the CA, or finds its account; sets its URL.

    Its requests are signed with the key's ``jwk`` (there is no ``kid`` yet), so it
    talks to the transport itself; :class:`SignedRequests` asks it for the ``kid``
    (:meth:`account_url`).
    """

    __slots__ = (
        "_deferred",
        "_lock",
        "clock",
        "contact",
        "eab",
        "identity",
        "ledger",
        "terms_of_service_agreed",
        "transport",
    )

    def __init__(
        self,
        transport: AcmeTransport,
        identity: AccountIdentity,
        *,
        clock: Clock,
        ledger: LedgerLike | None = None,
        contact: Sequence[str] = (),
        eab: ExternalAccountBinding | None = None,
        terms_of_service_agreed: bool = True,
    ) -> None:
        if not isinstance(terms_of_service_agreed, bool):
            raise InvalidInput("terms_of_service_agreed must be True or False")
        self.transport = transport
        self.identity = identity
        self.clock = clock
        self.ledger = ledger
        #: The contact URIs a new account is registered with (and the last ones set).
        self.contact = tuple(contact)
        self.eab = eab
        #: Whether the CA's terms of service were agreed to.
        self.terms_of_service_agreed = terms_of_service_agreed
        self._lock = anyio.Lock()
        #: When the last implicit registration was deferred, and how.
        self._deferred: tuple[_dt.datetime, RateLimitDeferred] | None = None

    async def account_url(self) -> str:
        """The account URL; when the client knows none yet, :meth:`register` first.

        What every request signed for the account does before it is sent: the first
        caller registers (or finds the key's existing account), concurrent callers wait
        for it and share its URL. A registration the ledger deferred moments ago is
        repeated as the same :class:`~acmecerts.errors.RateLimitDeferred` without asking
        the CA again. Raises what :meth:`register` raises.
        """
        if self.identity.url is None:
            async with self._lock:
                if self.identity.url is None:
                    self._raise_if_recently_deferred()
                    try:
                        await self.register()
                    except RateLimitDeferred as exc:
                        self._deferred = (self.clock.now(), exc)
                        raise
        url = self.identity.url
        assert url is not None
        return url

    def _raise_if_recently_deferred(self) -> None:
        """Repeat a registration deferred moments ago instead of asking the CA again.

        Many attempts that start together without an account (a manager's first pass)
        would each look the key up; within :data:`_ACCOUNT_RECHECK_SECONDS` of a deferral
        (and before its instant) they get the same answer without a request.
        """
        if self._deferred is None:
            return
        at, deferred = self._deferred
        now = self.clock.now()
        fresh = now - at < _dt.timedelta(seconds=_ACCOUNT_RECHECK_SECONDS)
        if fresh and (deferred.retry_after is None or now < deferred.retry_after):
            raise RateLimitDeferred(
                str(deferred),
                retry_after=deferred.retry_after,
                limit=deferred.limit,
                scope_key=deferred.scope_key,
            )
        self._deferred = None

    async def register(
        self,
        *,
        contact: Sequence[str] | None = None,
        terms_of_service_agreed: bool | None = None,
        eab: ExternalAccountBinding | None = None,
    ) -> Account:
        """Create the account for this key, or return the existing one (§7.3, §7.3.1).

        ``terms_of_service_agreed`` is sent as ``termsOfServiceAgreed`` (default: the
        client's :attr:`terms_of_service_agreed`). When it is false and the CA's directory
        publishes terms (``meta.termsOfService``), :class:`TermsOfServiceNotAgreed` is
        raised and nothing but the directory is requested.

        Raises :class:`ExternalAccountRequired` before sending anything when the CA's
        directory says EAB is required and none was given.

        With a :attr:`ledger`, a new account is first reserved in it (atomically, so
        replicas sharing a stored ledger never create more than it allows together); the
        token goes back when the CA answers 200 (the key had an account: nothing was
        created) or refuses the request. When the ledger has no room, ``newAccount`` is
        not sent: the key's account is looked up instead (``onlyReturnExisting``, which
        creates nothing), so a key that has an account is never held back; a key without
        one raises :class:`~acmecerts.errors.RateLimitDeferred` (``retry_after`` the
        instant a new account fits, ``reached_ca`` false: nothing that creates an account
        was sent). An error of the lookup itself (other than "no such account") is raised
        as it is.
        """
        directory = await self.transport.directory()
        if terms_of_service_agreed is None:
            terms_of_service_agreed = self.terms_of_service_agreed
        if not terms_of_service_agreed and directory.terms_of_service is not None:
            raise TermsOfServiceNotAgreed(
                directory.terms_of_service, directory_url=str(self.transport.directory_url)
            )
        eab = eab or self.eab
        contacts = tuple(self.contact if contact is None else contact)
        payload: dict[str, Any] = {"termsOfServiceAgreed": terms_of_service_agreed}
        if contacts:
            payload["contact"] = list(contacts)
        key = self.identity.key
        if eab is not None:
            payload["externalAccountBinding"] = eab_binding(
                key,
                kid=eab.kid,
                hmac_key_b64url=eab.hmac_key,
                url=directory.new_account,
                algorithm=eab.algorithm,
            )
        elif directory.external_account_required:
            raise ExternalAccountRequired(
                ProblemType.EXTERNAL_ACCOUNT_REQUIRED,
                "the CA requires external account binding (its directory says "
                "externalAccountRequired); pass eab=ExternalAccountBinding(kid, hmac_key) "
                "with the key ID and MAC key the CA gave you (CLI: --eab-kid/--eab-hmac-key)",
                url=directory.new_account,
                reached_ca=False,  # decided from the directory: nothing was sent
            )
        reservation = None if self.ledger is None else await self.ledger.reserve_new_account()
        if reservation is not None and not reservation.allowed:
            return await self._existing_account_or_defer(reservation)
        try:
            response = await self.transport.post(
                directory.new_account, key=key, kid=None, payload=payload
            )
        except BaseException as exc:
            if self.ledger is not None and reservation is not None:
                with anyio.CancelScope(shield=True):
                    await self.ledger.account_refused(reservation, exc)
            raise
        created = response.status_code == 201
        if not created and reservation is not None and self.ledger is not None:
            # §7.3.1: 200 means the key already had an account; nothing was created
            with anyio.CancelScope(shield=True):
                await self.ledger.release(reservation)
        url = response.require_location()
        account = parse_account(response.json(), url=url)
        self.identity.url = url
        log.info("account %s (%s)", url, "created" if created else "existing")
        return account

    async def _existing_account_or_defer(self, refusal: Decision) -> Account:
        """The ledger has no room for a new account: this key's account, if it has one."""
        try:
            account = await self.find_account()
        except AccountDoesNotExist:
            when = show_instant(refusal.not_before) if refusal.not_before else "later"
            raise RateLimitDeferred(
                f"newAccount deferred to {when}: a new account would exceed "
                f"{refusal.limit} for {refusal.scope_key} and this key has no account at the "
                "CA (nothing that creates one was sent)",
                retry_after=refusal.not_before,
                limit=refusal.limit,
                scope_key=refusal.scope_key,
            ) from None
        log.info("account %s (existing; the ledger had no room for a new one)", account.url)
        return account

    async def find_account(self) -> Account:
        """The key's account, without creating one (``onlyReturnExisting``, §7.3.1); its
        URL becomes the identity's. :class:`AccountDoesNotExist` if there is none."""
        directory = await self.transport.directory()
        response = await self.transport.post(
            directory.new_account,
            key=self.identity.key,
            kid=None,
            payload={"onlyReturnExisting": True},
        )
        url = response.require_location()
        self.identity.url = url
        return parse_account(response.json(), url=url)

    async def owner_of(self, key: AccountKey) -> str | None:
        """The URL of the account ``key`` belongs to (``None``: none), asked without
        creating one and without changing the identity (§7.3.1)."""
        directory = await self.transport.directory()
        try:
            found = await self.transport.post(
                directory.new_account, key=key, kid=None, payload={"onlyReturnExisting": True}
            )
        except AccountDoesNotExist:
            return None
        return found.location
