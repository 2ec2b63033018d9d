"""The account resource (RFC 8555 §7.3) and the signed-request base of the client."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from acmecerts._time import Again, Backoff, Clock, poll_until, show_instant
from acmecerts.errors import (
    AccountDoesNotExist,
    AcmeCertsError,
    AttemptTimeout,
    BadServerResponse,
    ErrorKind,
    ExternalAccountRequired,
    InvalidInput,
    ProblemType,
    RateLimitDeferred,
)
from acmecerts.protocol._polling import PollPolicy
from acmecerts.protocol.jws import eab_binding, key_change_inner
from acmecerts.protocol.keys import AccountKey
from acmecerts.protocol.resources import Account, Directory, parse_account
from acmecerts.transport import AcmeResponse, AcmeTransport
from acmecerts.transport._events import EventSubscribers

if TYPE_CHECKING:
    from acmecerts.client._events import IssuanceEvent
    from acmecerts.ratelimit import Decision, LedgerLike

log = logging.getLogger("acmecerts.client")
T = TypeVar("T")

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


class _AccountRequests:
    """The account (RFC 8555 §7.3) and what every request needs: the directory, the kid.

    The base of the client's resource classes: every other resource is reached by
    requests signed for this account (:meth:`_post`).
    """

    clock: Clock
    ledger: LedgerLike | None
    transport: AcmeTransport
    account_key: AccountKey
    account_url: str | None
    contact: tuple[str, ...]
    eab: ExternalAccountBinding | None
    attempt_timeout: float
    poll: PollPolicy
    terms_of_service_agreed: bool
    send_replaces: bool
    #: The client-wide subscribers of issuance events (see :meth:`AcmeClient.subscribe`).
    _issuance_events: EventSubscribers[IssuanceEvent]
    _account_lock: anyio.Lock
    #: When the last implicit registration was deferred (:meth:`account_url_or_register`).
    _account_deferred: tuple[_dt.datetime, RateLimitDeferred] | None

    async def directory(self) -> Directory:
        """The CA's directory (fetched once)."""
        return await self.transport.directory()

    async def _post(
        self,
        url: str,
        payload: Mapping[str, Any] | None,
        *,
        accept: str | None = None,
        idempotent: bool = True,
    ) -> AcmeResponse:
        kid = await self.account_url_or_register()
        return await self.transport.post(
            url,
            key=self.account_key,
            kid=kid,
            payload=payload,
            accept=accept,
            idempotent=idempotent,
        )

    async def _poll_until(
        self, check: Callable[[], Awaitable[T | Again[T]]], deadline: _dt.datetime
    ) -> T:
        """``check()`` until it is done, paced by the client's :class:`PollPolicy`."""
        return await poll_until(
            check,
            clock=self.clock,
            backoff=_poll_backoff(self.poll),
            deadline=deadline,
            on_deadline=lambda: AttemptTimeout(
                "the attempt deadline passed while waiting for the CA"
            ),
        )

    async def account_url_or_register(self) -> str:
        """The account URL; when the client knows none yet, :meth:`register` first.

        What every request signed for the account does before it is sent: the first
        caller registers (or finds the key's existing account), concurrent callers wait
        for it and share its URL. A registration the ledger deferred moments ago is
        repeated as the same :class:`~acmecerts.errors.RateLimitDeferred` without asking
        the CA again. Raises what :meth:`register` raises.
        """
        if self.account_url is None:
            async with self._account_lock:
                if self.account_url is None:
                    self._raise_if_recently_deferred()
                    try:
                        await self.register()
                    except RateLimitDeferred as exc:
                        self._account_deferred = (self.clock.now(), exc)
                        raise
        assert self.account_url is not None
        return self.account_url

    def _raise_if_recently_deferred(self) -> None:
        """Repeat a registration deferred moments ago instead of asking the CA again.

        Many attempts that start together without an account (a manager's first pass)
        would each look the key up; within :data:`_ACCOUNT_RECHECK_SECONDS` of a deferral
        (and before its instant) they get the same answer without a request.
        """
        if self._account_deferred is None:
            return
        at, deferred = self._account_deferred
        now = self.clock.now()
        fresh = now - at < _dt.timedelta(seconds=_ACCOUNT_RECHECK_SECONDS)
        if fresh and (deferred.retry_after is None or now < deferred.retry_after):
            raise RateLimitDeferred(
                str(deferred),
                retry_after=deferred.retry_after,
                limit=deferred.limit,
                scope_key=deferred.scope_key,
            )
        self._account_deferred = None

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
        directory = await self.directory()
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
        if eab is not None:
            payload["externalAccountBinding"] = eab_binding(
                self.account_key,
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
        reservation = await self._ledger_reserve_account()
        if reservation is not None and not reservation.allowed:
            return await self._existing_account_or_defer(reservation)
        try:
            response = await self.transport.post(
                directory.new_account, key=self.account_key, kid=None, payload=payload
            )
        except BaseException as exc:
            await self._ledger_account_refused(reservation, exc)
            raise
        created = response.status_code == 201
        if not created and reservation is not None and self.ledger is not None:
            # §7.3.1: 200 means the key already had an account; nothing was created
            with anyio.CancelScope(shield=True):
                await self.ledger.release(reservation)
        url = response.require_location()
        account = parse_account(response.json(), url=url)
        self.account_url = url
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
        """Look up the account of this key without creating one (``onlyReturnExisting``).

        Raises :class:`~acmecerts.errors.AccountDoesNotExist` if there is none.
        """
        directory = await self.directory()
        response = await self.transport.post(
            directory.new_account,
            key=self.account_key,
            kid=None,
            payload={"onlyReturnExisting": True},
        )
        url = response.require_location()
        self.account_url = url
        return parse_account(response.json(), url=url)

    async def account(self) -> Account:
        """Fetch the account object (POST-as-GET)."""
        url = await self.account_url_or_register()
        response = await self._post(url, None)
        return parse_account(response.json(), url=url)

    async def update_contact(self, contact: Sequence[str]) -> Account:
        """Replace the account's contact URIs (§7.3.2)."""
        url = await self.account_url_or_register()
        response = await self._post(url, {"contact": list(contact)})
        self.contact = tuple(contact)
        return parse_account(response.json(), url=url)

    async def deactivate_account(self) -> Account:
        """Deactivate the account (§7.3.6). The CA refuses its key afterwards."""
        url = await self.account_url_or_register()
        response = await self._post(url, {"status": "deactivated"})
        return parse_account(response.json(), url=url)

    async def change_key(self, new_key: AccountKey) -> None:
        """Roll the account over to ``new_key`` (§7.3.5); the old key stops working.

        ``account_key`` becomes ``new_key`` once the CA has switched. Store ``new_key``
        before calling and the old key until this returns, so that neither can be lost.
        The request is never replayed blindly (after a success whose answer was lost, a
        replay signed by the old key would be refused): when the outcome is unknown, the
        CA is asked whether ``new_key`` now owns the account.
        """
        directory = await self.directory()
        if directory.key_change is None:
            raise InvalidInput("the CA does not support account key rollover (no keyChange)")
        account_url = await self.account_url_or_register()
        inner = key_change_inner(
            old_key=self.account_key,
            new_key=new_key,
            account_url=account_url,
            url=directory.key_change,
        )
        try:
            answer = await self._post(directory.key_change, inner, idempotent=False)
        except AcmeCertsError as exc:
            if exc.kind is not ErrorKind.TRANSIENT or not exc.reached_ca:
                raise  # the CA refused it, or it never got there: the old key still holds
            try:
                owner = await self._account_of(new_key, directory.new_account)
            except AcmeCertsError:
                raise exc from None
            if owner != account_url:
                raise
        else:
            if not _is_account_object(answer.content):
                # §7.3.5: a success carries the account object. A bare answer (Pebble
                # 2.10 gives an empty 200 even when the key belongs to another account)
                # proves nothing: ask the CA whom the new key belongs to.
                owner = await self._account_of(new_key, directory.new_account)
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
        self.account_key = new_key

    async def _account_of(self, key: AccountKey, new_account_url: str) -> str | None:
        """The URL of the account ``key`` belongs to, asked without creating one (§7.3.1)."""
        try:
            found = await self.transport.post(
                new_account_url, key=key, kid=None, payload={"onlyReturnExisting": True}
            )
        except AccountDoesNotExist:
            return None
        return found.location

    async def _ledger_reserve_account(self) -> Decision | None:
        if self.ledger is None:
            return None
        return await self.ledger.reserve_new_account()

    async def _ledger_account_refused(
        self, reservation: Decision | None, error: BaseException
    ) -> None:
        if self.ledger is None or reservation is None:
            return
        with anyio.CancelScope(shield=True):
            await self.ledger.account_refused(reservation, error)


@functools.lru_cache(maxsize=16)
def _poll_backoff(policy: PollPolicy) -> Backoff:
    """The :class:`~acmecerts._time.Backoff` of ``policy``: the same pauses, no jitter."""
    return Backoff(
        floor=policy.floor,
        cap=max(policy.max_interval, policy.floor),
        initial=policy.initial,
        multiplier=policy.multiplier,
        max_retry_after=policy.max_retry_after,
    )


def _is_account_object(content: bytes) -> bool:
    """Whether ``content`` is a JSON account object (it has a ``status``)."""
    try:
        body = json.loads(content)
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("status"), str)
