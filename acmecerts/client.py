"""``AcmeClient``: one account on one CA, driving RFC 8555 over the transport.

The client turns the protocol layer's requests into HTTP through
:class:`~acmecerts.transport.AcmeTransport`, polls with the server's ``Retry-After``
(or a short growing interval, never a tight loop), runs every issuance attempt under a
deadline (30 minutes by default) and cleans up after itself: challenge responses are
removed and pending authorizations deactivated however an attempt ends.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import httpx
from cryptography import x509

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Clock, SystemClock, as_seconds
from acmecerts.errors import (
    AccountDoesNotExist,
    AcmeCertsError,
    AcmeProblem,
    AttemptTimeout,
    AuthorizationFailed,
    BadServerResponse,
    ErrorKind,
    ExternalAccountRequired,
    InvalidInput,
    OrderFailed,
    OrderNotReady,
    ProblemType,
    RateLimitDeferred,
    UnsupportedChallenge,
)
from acmecerts.protocol.ari import (
    RenewalInfoResult,
    ari_retry_after,
    cert_id,
    load_certificate,
    renewal_info_url,
)
from acmecerts.protocol.certificate import (
    CertificateChain,
    certificate_info,
    check_certificate_matches,
    parse_pem_chain,
)
from acmecerts.protocol.challenges import key_authorization
from acmecerts.protocol.csr import build_csr
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.jws import eab_binding, key_change_inner
from acmecerts.protocol.keys import (
    AccountKey,
    KeyType,
    PrivateKey,
    generate_private_key,
    private_key_pem,
)
from acmecerts.protocol.resources import (
    Account,
    Authorization,
    Challenge,
    Directory,
    Order,
    parse_account,
    parse_authorization,
    parse_challenge,
    parse_order,
    parse_renewal_info,
)
from acmecerts.ratelimit._model import RateLimitModel, model_for_directory
from acmecerts.ratelimit._throttle import RatesTable, RequestRates
from acmecerts.retry import RequestRetry
from acmecerts.solvers._base import ChallengeTask, Solver
from acmecerts.transport import (
    AcmeResponse,
    AcmeTransport,
    ProxySetting,
    RequestHook,
    RequestThrottle,
    UrlPolicy,
)

if TYPE_CHECKING:
    from acmecerts.ratelimit import Decision, RateLimitLedger

__all__ = ["AcmeClient", "ExternalAccountBinding", "OrderHook", "PollPolicy", "RevocationReason"]

#: Called with a new order and its certificate key before anything else is sent for it.
OrderHook = Callable[[Order, PrivateKey], Awaitable[None]]

log = logging.getLogger("acmecerts.client")

_PEM_CHAIN = "application/pem-certificate-chain"
_CLEANUP_SECONDS = 15.0
#: How long a deferred registration is repeated to the client's other requests without
#: looking the key up again (``onlyReturnExisting``).
_ACCOUNT_RECHECK_SECONDS = 30.0
#: Bounds of the search for an unrecorded order in the account's orders list.
_MAX_ORDER_PAGES = 5
_MAX_ORDERS_LOOKED_AT = 20


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


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PollPolicy:
    """How to poll an order or authorization that is still being processed.

    The server's ``Retry-After`` wins when it gives one (bounded by ``max_interval``
    scaled up to ``max_retry_after``); otherwise the interval starts at ``initial`` and
    grows by ``multiplier`` up to ``max_interval``. Never below ``floor``.
    """

    initial: float = 0.25
    multiplier: float = 1.6
    max_interval: float = 10.0
    floor: float = 0.05
    #: The longest server ``Retry-After`` honoured for a poll (a longer one is capped).
    max_retry_after: float = 600.0

    def interval(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before poll number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(max(self.floor, retry_after), self.max_retry_after)
        computed = self.initial * self.multiplier ** max(0, attempt - 1)
        return max(self.floor, min(self.max_interval, computed))


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


class AcmeClient:
    """An async ACME client for one account on one CA.

    Args:
        directory_url: The CA's directory URL.
        account_key: The account key; a new P-256 key is generated when omitted (save
            ``client.account_key.to_pem()`` to reuse the account).
        account_url: The account URL if known (saves a ``newAccount`` round-trip).
        contact: Contact URIs (``mailto:...``) for a new account.
        eab: External account binding for CAs that require it.
        ca_bundle: Extra CA certificate to trust for the CA's TLS (e.g. Pebble's).
        clock: Time source (inject a fake one in tests).
        request_timeout: Per-HTTP-request timeout.
        request_retry: Request-level retry policy.
        attempt_timeout: Deadline for one issuance attempt, new order through download
            (default 30 minutes).
        poll: Polling policy for authorizations and orders.
        transport: A ready transport (otherwise one is made from the arguments above).
        on_request: Called with ``(method, url)`` for every HTTP request.
        ledger: A :class:`~acmecerts.ratelimit.RateLimitLedger` of the CA's rate limits:
            an order or a new account that would exceed one is not sent
            (:class:`RateLimitDeferred`; see :meth:`register`), and orders, certificates,
            new accounts, failed authorizations and ``rateLimited`` answers are recorded
            in it.
        url_policy: Which URLs the CA may send the client to (:class:`UrlPolicy`; ignored
            with ``transport``, which has its own). The default allows the directory URL's
            origin only; a CA that names another host gets :class:`UnsafeUrl` and nothing
            is sent there.
        http2: Speak HTTP/2 through httpx's transport when the CA offers it, instead of
            acmecerts' leaner HTTP/1.1 keep-alive pool (the default; see
            :class:`~acmecerts.transport.AcmeTransport`).
        request_rates: The request throttle: how fast the client may call each ACME
            endpoint, shared by every task using the client. ``"auto"`` (the default)
            takes the rates of the limits model in use: the ledger's
            (:attr:`RateLimitLedger.model`), or without a ledger the one
            :func:`~acmecerts.ratelimit.model_for_directory` picks (Let's Encrypt's
            published rates for Let's Encrypt, none for Pebble and other CAs). Or a
            :class:`~acmecerts.ratelimit.RateLimitModel` (its ``request_rates``), a table
            (:class:`~acmecerts.ratelimit.RequestRates` or ``{"newOrder": (300, 200),
            ...}``), a :class:`~acmecerts.transport.RequestThrottle` shared with other
            clients, or ``None``: no throttle. With ``transport``, configure the
            throttle on the transport instead.
        proxy: The HTTP proxy to the CA: ``"env"`` (the default) honours
            ``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (and their
            lower-case forms) as curl does, read once when the client is made; a proxy
            URL (``"http://[USER:PASSWORD@]proxy.example:3128"``) sends every request
            through that proxy whatever the environment says; a
            :class:`~acmecerts.ProxyConfig` sets proxies per scheme with ``no_proxy``
            exceptions; ``None`` connects directly whatever the environment says. A
            proxy that cannot be reached or refuses the tunnel raises
            :class:`~acmecerts.ProxyError`. With ``transport``, configure the proxy on
            the transport instead.
    """

    def __init__(
        self,
        directory_url: str,
        *,
        account_key: AccountKey | None = None,
        account_url: str | None = None,
        contact: Sequence[str] = (),
        eab: ExternalAccountBinding | None = None,
        ca_bundle: str | Path | None = None,
        clock: Clock | None = None,
        request_timeout: float | _dt.timedelta = 30.0,
        request_retry: RequestRetry | None = None,
        attempt_timeout: float | _dt.timedelta = _dt.timedelta(minutes=30),
        poll: PollPolicy | None = None,
        http2: bool = False,
        transport: AcmeTransport | None = None,
        on_request: RequestHook | None = None,
        ledger: RateLimitLedger | None = None,
        url_policy: UrlPolicy | None = None,
        request_rates: RatesTable
        | RateLimitModel
        | RequestThrottle
        | Literal["auto"]
        | None = "auto",
        proxy: ProxySetting = "env",
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.ledger = ledger
        if transport is not None:
            if not (isinstance(request_rates, str) and request_rates == "auto"):
                raise InvalidInput(
                    "request_rates cannot be given with transport: give it to the "
                    "AcmeTransport (AcmeTransport(..., request_rates=...))"
                )
            if not (isinstance(proxy, str) and proxy == "env"):
                raise InvalidInput(
                    "proxy cannot be given with transport: give it to the AcmeTransport "
                    "(AcmeTransport(..., proxy=...))"
                )
            self.transport = transport
        else:
            self.transport = AcmeTransport(
                directory_url,
                ca_bundle=ca_bundle,
                timeout=request_timeout,
                retry=request_retry,
                clock=self.clock,
                http2=http2,
                on_request=on_request,
                url_policy=url_policy,
                request_rates=_request_rates(request_rates, directory_url, ledger),
                proxy=proxy,
            )
        self.account_key = account_key or AccountKey.generate()
        self.account_url = account_url
        self.contact = tuple(contact)
        self.eab = eab
        self.attempt_timeout = as_seconds(attempt_timeout)
        if self.attempt_timeout <= 0:
            raise InvalidInput("attempt_timeout must be positive")
        self.poll = poll or PollPolicy()
        self._account_lock = anyio.Lock()
        #: When the last implicit registration was deferred, and how (see ``_kid``).
        self._account_deferred: tuple[_dt.datetime, RateLimitDeferred] | None = None

    async def __aenter__(self) -> AcmeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self.transport.aclose()

    def __repr__(self) -> str:
        return (
            f"AcmeClient({self.transport.directory_url!r}, account_url={self.account_url!r}, "
            f"key={self.account_key!r})"
        )

    # -- directory and account (RFC 8555 §7.1.1, §7.3) ---------------------------------

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
        kid = await self._kid()
        return await self.transport.post(
            url,
            key=self.account_key,
            kid=kid,
            payload=payload,
            accept=accept,
            idempotent=idempotent,
        )

    async def _kid(self) -> str:
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
        terms_of_service_agreed: bool = True,
        eab: ExternalAccountBinding | None = None,
    ) -> Account:
        """Create the account for this key, or return the existing one (§7.3, §7.3.1).

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
            error = ExternalAccountRequired(
                ProblemType.EXTERNAL_ACCOUNT_REQUIRED,
                "the CA requires external account binding (its directory says "
                "externalAccountRequired); pass eab=ExternalAccountBinding(kid, hmac_key) "
                "with the key ID and MAC key the CA gave you (CLI: --eab-kid/--eab-hmac-key)",
                url=directory.new_account,
            )
            error.reached_ca = False  # decided from the directory: nothing was sent
            raise error
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
            when = refusal.not_before.isoformat() if refusal.not_before else "later"
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
        url = await self._kid()
        response = await self._post(url, None)
        return parse_account(response.json(), url=url)

    async def update_contact(self, contact: Sequence[str]) -> Account:
        """Replace the account's contact URIs (§7.3.2)."""
        url = await self._kid()
        response = await self._post(url, {"contact": list(contact)})
        self.contact = tuple(contact)
        return parse_account(response.json(), url=url)

    async def deactivate_account(self) -> Account:
        """Deactivate the account (§7.3.6). The CA refuses its key afterwards."""
        url = await self._kid()
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
        account_url = await self._kid()
        inner = key_change_inner(
            old_key=self.account_key,
            new_key=new_key,
            account_url=account_url,
            url=directory.key_change,
        )
        try:
            await self._post(directory.key_change, inner, idempotent=False)
        except AcmeCertsError as exc:
            if exc.kind is not ErrorKind.TRANSIENT or not exc.reached_ca:
                raise  # the CA refused it, or it never got there: the old key still holds
            try:  # §7.3.1: onlyReturnExisting finds the account of a key without creating one
                found = await self.transport.post(
                    directory.new_account,
                    key=new_key,
                    kid=None,
                    payload={"onlyReturnExisting": True},
                )
            except AcmeCertsError:
                raise exc from None
            if found.location != account_url:
                raise
        self.account_key = new_key

    # -- orders, authorizations, challenges (§7.4, §7.5) --------------------------------

    async def new_order(
        self,
        identifiers: Iterable[Identifier | str],
        *,
        profile: str | None = None,
        replaces: str | None = None,
        renewal_of: Sequence[Identifier | str] | None = None,
    ) -> Order:
        """Create an order (§7.4). ``replaces`` is the ARI certID of the certificate renewed.

        With a :attr:`ledger`, the order is first reserved in it; one that would exceed a
        rate limit is not sent (:class:`~acmecerts.errors.RateLimitDeferred`).
        ``renewal_of`` (the identifiers of the certificate renewed) tells it the order
        is a renewal, exempt from some limits when the identifiers are the same.
        """
        idents = _as_identifiers(identifiers)
        directory = await self.directory()
        payload: dict[str, Any] = {"identifiers": [i.to_json() for i in idents]}
        if profile is not None:
            # draft-aaron-acme-profiles: only a profile the directory's meta.profiles lists
            # (a CA without profiles would ignore the field and issue its default silently).
            if profile not in directory.profiles:
                offered = ", ".join(sorted(directory.profiles)) or "none, it predates profiles"
                raise InvalidInput(f"the CA offers no profile {profile!r} (offered: {offered})")
            payload["profile"] = profile
        if replaces is not None:
            payload["replaces"] = replaces
        reservation = await self._ledger_preflight(idents, replaces, renewal_of)
        try:
            response = await self._post(directory.new_order, payload, idempotent=False)
        except BaseException as exc:
            await self._ledger_order_refused(reservation, exc, idents, replaces, renewal_of)
            raise
        return parse_order(response.json(), url=response.require_location())

    # -- rate-limit ledger hooks (acmecerts.ratelimit): all of them are here -------------

    async def _ledger_preflight(
        self,
        idents: tuple[Identifier, ...],
        replaces: str | None,
        renewal_of: Sequence[Identifier | str] | None,
    ) -> Decision | None:
        if self.ledger is None:
            return None
        return await self.ledger.preflight(
            idents, account=await self._kid(), renewal_of=renewal_of, replaces=bool(replaces)
        )

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

    async def _ledger_order_refused(
        self,
        reservation: Decision | None,
        error: BaseException,
        idents: tuple[Identifier, ...],
        replaces: str | None,
        renewal_of: Sequence[Identifier | str] | None,
    ) -> None:
        if self.ledger is None or reservation is None or self.account_url is None:
            return
        with anyio.CancelScope(shield=True):
            await self.ledger.order_refused(
                reservation,
                error,
                idents,
                account=self.account_url,
                renewal_of=renewal_of,
                replaces=bool(replaces),
            )

    async def _ledger_attempt_ended(
        self,
        idents: tuple[Identifier, ...],
        order: Order,
        replaces: str | None,
        renewal_of: Sequence[Identifier | str] | None,
        error: BaseException | None,
    ) -> None:
        if self.ledger is None or self.account_url is None:
            return
        try:
            await self.ledger.attempt_ended(
                idents,
                account=self.account_url,
                renewal_of=renewal_of,
                replaces=bool(replaces),
                authorized=order.status in ("ready", "processing", "valid"),
                finalized=order.status in ("processing", "valid"),
                error=error,
            )
        except AcmeCertsError as exc:
            # bookkeeping must not undo the attempt: raised here (in the attempt's
            # cleanup), it would drop a certificate already downloaded or hide the error
            # the attempt failed with (e.g. a store-backed ledger whose store is down)
            log.warning(
                "the ledger could not record the attempt for %s (%s): %s",
                ", ".join(i.value for i in idents),
                "failed" if error is not None else "issued",
                exc,
            )

    async def find_unfinished_order(self, identifiers: Iterable[Identifier | str]) -> Order | None:
        """An order of this account for exactly ``identifiers`` that is pending or ready.

        For a process that died between sending ``newOrder`` and recording the answer: the
        CA may hold an order nobody knows the URL of. RFC 8555 §7.1.2.1: the account's
        ``orders`` URL lists its orders (pending ones at least), paginated with ``Link:
        rel="next"``. Best effort and bounded (a few pages, at most 20 orders looked at,
        the last listed first): ``None`` when the CA keeps no such list (Let's Encrypt
        does not), nothing matches, or the list cannot be read. Only ``pending`` and
        ``ready`` orders qualify: their CSR, and so the certificate key, is not chosen yet.
        """
        wanted = set(_as_identifiers(identifiers))
        looked_at = 0
        try:
            account_url = await self._kid()
            response = await self._post(account_url, None)
            page = parse_account(response.json(), url=account_url).orders
            for _ in range(_MAX_ORDER_PAGES):
                if page is None:
                    break
                response = await self._post(page, None)
                for url in reversed(_order_urls(response.json(), url=page)):
                    if looked_at >= _MAX_ORDERS_LOOKED_AT:
                        return None
                    looked_at += 1
                    order = await self.get_order(url)
                    if (
                        order.status in ("pending", "ready")
                        and set(order.identifiers) == wanted
                        and (order.expires is None or order.expires > self.clock.now())
                    ):
                        log.info("found unrecorded order %s (%s)", url, order.status)
                        return order
                following = response.links("next")
                page = following[0] if following else None
        except RateLimitDeferred:
            raise  # no account and no room for one: the order would be deferred too
        except AcmeCertsError as exc:
            log.info("could not look for an unrecorded order: %s", exc)
        return None

    async def get_order(self, url: str) -> Order:
        """Fetch an order (POST-as-GET)."""
        response = await self._post(url, None)
        return parse_order(response.json(), url=url)

    async def get_authorization(self, url: str) -> Authorization:
        """Fetch an authorization (POST-as-GET)."""
        response = await self._post(url, None)
        return parse_authorization(response.json(), url=url)

    async def answer_challenge(self, challenge: Challenge) -> Challenge:
        """Tell the CA the challenge is ready to be validated (§7.5.1)."""
        response = await self._post(challenge.url, {})
        return parse_challenge(response.json(), url=challenge.url)

    async def deactivate_authorization(self, url: str) -> Authorization:
        """Deactivate an authorization (§7.5.2) so it stops counting as pending."""
        response = await self._post(url, {"status": "deactivated"})
        return parse_authorization(response.json(), url=url)

    async def finalize(self, order: Order, csr_der: bytes) -> Order:
        """Send the CSR (§7.4); the order moves to ``processing`` or ``valid``."""
        from acmecerts.protocol.challenges import b64url

        response = await self._post(order.finalize, {"csr": b64url(csr_der)})
        return parse_order(response.json(), url=order.url)

    async def download_certificate(self, url: str) -> tuple[CertificateChain, list[str]]:
        """Download a chain (§7.4.2); returns it and the URLs of alternate chains."""
        response = await self._post(url, None, accept=_PEM_CHAIN)
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
        directory = await self.directory()
        if directory.revoke_cert is None:
            raise InvalidInput("the CA has no revokeCert endpoint")
        payload = {"certificate": b64url(der), "reason": reason}
        if certificate_key is None:
            await self._post(directory.revoke_cert, payload)
        else:
            await self.transport.post(
                directory.revoke_cert,
                key=AccountKey(certificate_key),
                kid=None,
                payload=payload,
            )

    # -- renewal information (RFC 9773) -------------------------------------------------

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

    # -- polling ------------------------------------------------------------------------

    async def _sleep_until_next_poll(
        self, attempt: int, response_retry_after: _dt.datetime | None, deadline: _dt.datetime
    ) -> None:
        now = self.clock.now()
        retry_after = (
            max(0.0, (response_retry_after - now).total_seconds())
            if response_retry_after is not None
            else None
        )
        delay = self.poll.interval(attempt, retry_after)
        remaining = (deadline - now).total_seconds()
        if remaining <= 0:
            raise AttemptTimeout("the attempt deadline passed while waiting for the CA")
        await self.clock.sleep(min(delay, remaining))

    async def wait_order(
        self,
        order: Order,
        *,
        until: frozenset[str],
        deadline: _dt.datetime,
        retry_after: _dt.datetime | None = None,
    ) -> Order:
        """Poll ``order`` until its status is in ``until`` (or ``invalid``)."""
        attempt = 0
        while order.status not in until and order.status != "invalid":
            attempt += 1
            await self._sleep_until_next_poll(attempt, retry_after, deadline)
            response = await self._post(order.url, None)
            order = parse_order(response.json(), url=order.url)
            retry_after = response.retry_after
        return order

    async def wait_authorization(
        self, url: str, *, deadline: _dt.datetime, retry_after: _dt.datetime | None = None
    ) -> Authorization:
        """Poll an authorization until it is no longer ``pending``."""
        attempt = 0
        while True:
            attempt += 1
            await self._sleep_until_next_poll(attempt, retry_after, deadline)
            response = await self._post(url, None)
            authz = parse_authorization(response.json(), url=url)
            if authz.status != "pending":
                return authz
            retry_after = response.retry_after

    # -- the one-call API ---------------------------------------------------------------

    async def issue(
        self,
        names: Iterable[str | Identifier],
        *,
        solver: Solver | None = None,
        solvers: Iterable[Solver] = (),
        key_type: KeyType | str = KeyType.EC256,
        private_key: PrivateKey | None = None,
        profile: str | None = None,
        replaces: str | None = None,
        preferred_chain: str | None = None,
        attempt_timeout: float | _dt.timedelta | None = None,
        renewal_of: Sequence[Identifier | str] | None = None,
        resume_order_url: str | None = None,
        on_order: OrderHook | None = None,
        before_order: Callable[[PrivateKey], Awaitable[None]] | None = None,
        recover_order: bool = False,
    ) -> IssuedCertificate:
        """Issue one certificate for ``names``: order, validate, finalize, download.

        Every authorization of the order is solved concurrently. The attempt runs under
        ``attempt_timeout`` (default: the client's, 30 minutes); however it ends,
        challenge responses are cleaned up and authorizations still pending are
        deactivated. Bad input raises :class:`InvalidInput` before any request is sent.

        Args:
            names: DNS names (``*.`` wildcards allowed with dns-01) and IP addresses.
            solver: The solver to use; ``solvers`` gives several (one per challenge type,
                tried in order of preference).
            key_type: Certificate key type when ``private_key`` is not given.
            private_key: Reuse this key for the certificate.
            profile: A certificate profile the CA offers.
            replaces: ARI certID of the certificate this one renews (RFC 9773 §5).
            renewal_of: The identifiers of the certificate this one renews (for the
                rate-limit ledger's renewal exemptions; see :meth:`new_order`).
            resume_order_url: An order a previous attempt created (pass the same
                ``private_key``): it is continued where it stands (pending, ready,
                processing or valid) instead of sending a new ``newOrder``; if the CA no
                longer has it usable, a new order is created.
            on_order: Awaited with the order and the certificate key right after a new
                order is created (or an unrecorded one found), before anything else is
                sent: persist them here so that a restarted process can resume the order.
            before_order: Awaited with the certificate key right before ``newOrder`` is
                sent: persist an intent here, so that a process that dies before
                ``on_order`` knows to pass ``recover_order`` when it restarts.
            recover_order: A previous attempt may have created an order it never
                recorded (it died between ``newOrder`` and ``on_order``): before
                ordering, look for it with :meth:`find_unfinished_order`.
            preferred_chain: The common name of the root (or else of an intermediate)
                the chain should lead to; among the chains the CA offers (``Link:
                rel="alternate"``) the one whose root issuer has this name wins, then one
                with an intermediate so named; the CA's default chain when none matches.
        """
        identifiers = _as_identifiers(names)
        solver_list = ([solver] if solver is not None else []) + list(solvers)
        if not solver_list:
            raise InvalidInput("issue() needs a solver (e.g. Http01Server)")
        for ident in identifiers:
            if not any(s.supports(ident) for s in solver_list):
                types = ", ".join(s.challenge_type for s in solver_list)
                raise UnsupportedChallenge(
                    f"no solver for {ident.value} among {types}"
                    + (" (wildcards need dns-01)" if ident.is_wildcard else "")
                )
        key = private_key or generate_private_key(key_type)
        csr_der = build_csr(identifiers, key)
        timeout = (
            as_seconds(attempt_timeout) if attempt_timeout is not None else self.attempt_timeout
        )
        if not timeout > 0:  # also NaN
            raise InvalidInput(f"attempt_timeout must be positive, got {attempt_timeout!r}")
        deadline = self.clock.now() + _dt.timedelta(seconds=timeout)
        with anyio.move_on_after(timeout):
            return await self._issue_attempt(
                identifiers,
                solver_list,
                key,
                csr_der,
                deadline=deadline,
                profile=profile,
                replaces=replaces,
                preferred_chain=preferred_chain,
                renewal_of=renewal_of,
                resume_order_url=resume_order_url,
                on_order=on_order,
                before_order=before_order,
                recover_order=recover_order,
            )
        # only the deadline's own cancel scope gets here (a solver's TimeoutError does not)
        raise AttemptTimeout(
            f"issuance for {', '.join(i.value for i in identifiers)} did not finish "
            f"within {timeout:g} s"
        )

    async def _issue_attempt(
        self,
        identifiers: tuple[Identifier, ...],
        solvers: list[Solver],
        key: PrivateKey,
        csr_der: bytes,
        *,
        deadline: _dt.datetime,
        profile: str | None,
        replaces: str | None,
        preferred_chain: str | None,
        renewal_of: Sequence[Identifier | str] | None = None,
        resume_order_url: str | None = None,
        on_order: OrderHook | None = None,
        before_order: Callable[[PrivateKey], Awaitable[None]] | None = None,
        recover_order: bool = False,
    ) -> IssuedCertificate:
        order = None
        if resume_order_url is not None:
            order = await self._resumable_order(resume_order_url, identifiers)
        if order is None and recover_order:
            order = await self.find_unfinished_order(identifiers)
            if order is not None and on_order is not None:
                await on_order(order, key)
        if order is None:
            if before_order is not None:
                await before_order(key)
            order = await self.new_order(
                identifiers, profile=profile, replaces=replaces, renewal_of=renewal_of
            )
            if on_order is not None:
                await on_order(order, key)
        log.debug("order %s for %s is %s", order.url, identifiers, order.status)
        presented: list[tuple[Solver, ChallengeTask]] = []
        pending_authz: set[str] = set()
        finished = False
        outcome: BaseException | None = None
        try:
            if order.status == "pending":
                # any of them may be left pending if the attempt ends early; cleanup
                # looks at each and deactivates only those still pending
                pending_authz.update(order.authorizations)
                await self._solve_authorizations(order, solvers, presented, pending_authz)
                order = await self.wait_order(
                    order, until=frozenset({"ready", "processing", "valid"}), deadline=deadline
                )
                if order.status == "invalid":
                    raise await self._explain_invalid_order(order)
                pending_authz.clear()
            if order.status == "ready":
                order = await self._finalize_once(order, csr_der)
            order = await self.wait_order(order, until=frozenset({"valid"}), deadline=deadline)
            if order.status != "valid" or order.certificate is None:
                problem = order.error
                raise OrderFailed(
                    f"order {order.url} became {order.status}"
                    + (f": {problem}" if problem else ""),
                    order_url=order.url,
                    problem=problem,
                )
            issued = await self._download(order, key, identifiers, preferred_chain)
            finished = True
            return issued
        except BaseException as exc:
            outcome = exc
            raise
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS):
                await self._cleanup(presented, pending_authz if not finished else set())
                await self._ledger_attempt_ended(identifiers, order, replaces, renewal_of, outcome)

    async def _resumable_order(self, url: str, identifiers: tuple[Identifier, ...]) -> Order | None:
        """The order at ``url`` if it can still lead to a certificate for ``identifiers``."""
        try:
            order = await self.get_order(url)
        except AcmeCertsError as exc:
            if exc.kind is not ErrorKind.PERMANENT:
                raise
            log.info("order %s cannot be resumed (%s); ordering anew", url, exc)
            return None
        if order.status in ("invalid", "expired", "deactivated", "revoked"):
            log.info("order %s is %s; ordering anew", url, order.status)
            return None
        if set(order.identifiers) != set(identifiers):
            log.warning("order %s is for other identifiers; ordering anew", url)
            return None
        if order.expires is not None and order.expires <= self.clock.now():
            return None
        log.info("resuming order %s (%s)", url, order.status)
        return order

    async def _solve_authorizations(
        self,
        order: Order,
        solvers: list[Solver],
        presented: list[tuple[Solver, ChallengeTask]],
        pending_authz: set[str],
    ) -> None:
        async def solve(url: str) -> None:
            authz = await self.get_authorization(url)
            if authz.status == "valid":
                return
            if authz.status != "pending":
                raise AuthorizationFailed(
                    authz.dns_name, authz.error, authorization_url=url, order_url=order.url
                )
            pending_authz.add(url)
            ident = Identifier(authz.identifier.type, authz.dns_name)
            for candidate in solvers:
                challenge = authz.challenge(candidate.challenge_type)
                if challenge is not None and candidate.supports(ident):
                    break
            else:
                offered = ", ".join(c.type for c in authz.challenges)
                unsupported = UnsupportedChallenge(
                    f"the CA offers {offered or 'no challenges'} for {ident.value}; "
                    "no configured solver answers any of them"
                )
                unsupported.reached_ca = True  # the order exists at the CA already
                raise unsupported
            if challenge.token is None:
                raise BadServerResponse(f"{challenge.type} challenge without a token", url=url)
            task = ChallengeTask(
                type=challenge.type,
                identifier=ident,
                token=challenge.token,
                key_authorization=key_authorization(challenge.token, self.account_key.thumbprint),
                url=challenge.url,
            )
            presented.append((candidate, task))
            await candidate.present(task)
            if challenge.status == "pending":
                answered = await self._answer_challenge_once(challenge, url)
                if answered.status == "invalid":
                    # A CA that validates inside the challenge POST (acme2certifier) may
                    # answer "invalid" and leave the order "pending" for good: decide from
                    # the challenge instead of polling the order until the deadline.
                    pending_authz.discard(url)
                    raise AuthorizationFailed(
                        authz.dns_name,
                        answered.error or challenge.error,
                        authorization_url=url,
                        order_url=order.url,
                    )

        try:
            async with anyio.create_task_group() as tg:
                for url in order.authorizations:
                    tg.start_soon(solve, url)
        except BaseExceptionGroup as group:
            # one authorization's failure cancels the others; report the root cause
            raise _first_error(group) from None

    async def _finalize_once(self, order: Order, csr_der: bytes) -> Order:
        """Finalize ``order``; a refusal because it is already finalized is no failure.

        The transport replays a finalize whose answer was lost; the first copy may have
        got through, and the CA then refuses the replay (``orderNotReady``: the order is
        ``processing`` or ``valid`` already). The order's state decides.
        """
        try:
            return await self.finalize(order, csr_der)
        except OrderNotReady as exc:
            try:
                current = await self.get_order(order.url)
            except AcmeCertsError:
                raise exc from None
            if current.status not in ("processing", "valid"):
                raise
            log.info("order %s was finalized already (%s)", order.url, current.status)
            return current

    async def _answer_challenge_once(self, challenge: Challenge, authz_url: str) -> Challenge:
        """Answer ``challenge``; a refusal because it was answered already is no failure.

        The transport replays an answer whose response was lost; if the first copy got
        through, the CA refuses the replay (the challenge is no longer ``pending``). The
        challenge's state decides: ``processing``/``valid`` (or ``invalid``, reported by
        the caller) is returned, a challenge still ``pending`` re-raises the refusal.
        """
        try:
            return await self.answer_challenge(challenge)
        except AcmeProblem as exc:
            if exc.kind is not ErrorKind.PERMANENT:
                raise
            try:
                authz = await self.get_authorization(authz_url)
            except AcmeCertsError:
                raise exc from None
            current = authz.challenge(challenge.type) or challenge
            if authz.status != "valid" and current.status == "pending":
                raise
            log.info("challenge %s was answered already (%s)", challenge.url, current.status)
            return current

    async def _explain_invalid_order(self, order: Order) -> AcmeCertsError:
        for url in order.authorizations:
            try:
                authz = await self.get_authorization(url)
            except AcmeCertsError:
                continue
            if authz.status == "invalid":
                return AuthorizationFailed(
                    authz.dns_name, authz.error, authorization_url=url, order_url=order.url
                )
        problem = order.error
        return OrderFailed(
            f"order {order.url} became invalid" + (f": {problem}" if problem else ""),
            order_url=order.url,
            problem=problem,
        )

    async def _download(
        self,
        order: Order,
        key: PrivateKey,
        identifiers: tuple[Identifier, ...],
        preferred_chain: str | None,
    ) -> IssuedCertificate:
        assert order.certificate is not None
        chain, alternate_urls = await self.download_certificate(order.certificate)
        alternates: list[CertificateChain] = []
        if preferred_chain is not None and chain.root_issuer_name != preferred_chain:
            # §7.4.2: the other chains are behind Link: rel="alternate"; fetched only when
            # the default one does not already lead to the preferred root.
            offered = [chain]
            for alt_url in alternate_urls:
                try:
                    offered.append((await self.download_certificate(alt_url))[0])
                except AcmeCertsError as exc:  # the certificate is issued: never lose it
                    log.warning("could not download alternate chain %s: %s", alt_url, exc)
            chosen = _pick_chain(offered, preferred_chain)
            if chosen is None:
                log.info("no chain with issuer %r offered; keeping the default", preferred_chain)
                chosen = chain
            alternates = [c for c in offered if c is not chosen]
            chain = chosen
        check_certificate_matches(chain, key=key, identifiers=identifiers)
        return IssuedCertificate(
            identifiers=identifiers,
            chain=chain,
            private_key_pem=private_key_pem(key).decode("ascii"),
            info=certificate_info(chain.leaf),
            order_url=order.url,
            certificate_url=order.certificate,
            alternate_chains=tuple(alternates),
        )

    async def _cleanup(
        self, presented: list[tuple[Solver, ChallengeTask]], pending_authz: set[str]
    ) -> None:
        for solver, task in presented:
            try:
                await solver.cleanup(task)
            except Exception:  # a broken solver must not hide the attempt's outcome
                log.exception("cleanup of %s for %s failed", task.type, task.identifier)
        for url in sorted(pending_authz):
            try:
                authz = await self.get_authorization(url)
                if authz.status == "pending":
                    await self.deactivate_authorization(url)
                    log.info("deactivated pending authorization %s", url)
            except (AcmeCertsError, httpx.HTTPError) as exc:
                log.warning("could not deactivate authorization %s: %s", url, exc)


def _request_rates(
    value: RequestRates | RatesTable | RateLimitModel | RequestThrottle | str | None,
    directory_url: str,
    ledger: RateLimitLedger | None,
) -> RatesTable | RequestThrottle | None:
    """What ``AcmeClient(request_rates=value)`` gives the transport."""
    if isinstance(value, str):
        if value != "auto":
            raise InvalidInput(
                f"request_rates={value!r}: give 'auto', a RateLimitModel, RequestRates, "
                "a mapping of endpoint class to (rate, burst), a RequestThrottle or None"
            )
        model = ledger.model if ledger is not None else model_for_directory(directory_url)
        return model.request_rates
    if isinstance(value, RateLimitModel):
        return value.request_rates
    return value


def _pick_chain(chains: Sequence[CertificateChain], issuer: str) -> CertificateChain | None:
    """The first chain whose root is issued by ``issuer`` (a common name), else the first
    that passes through a certificate issued by it (an intermediate's name), else ``None``.

    Roots win so that a cross-signed chain that merely passes through the preferred root
    does not shadow the chain that ends there (certbot's ``--preferred-chain``).
    """
    for chain in chains:
        if chain.root_issuer_name == issuer:
            return chain
    for chain in chains:
        if issuer in chain.issuer_names:
            return chain
    return None


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The most telling error in a task group's exception group.

    An acmecerts error beats cancellation noise; an authorization failure beats the
    rest (it explains why the order cannot finish).
    """
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    for wanted in (AuthorizationFailed, AcmeCertsError, Exception):
        for leaf in leaves:
            if isinstance(leaf, wanted):
                return leaf
    return leaves[0] if leaves else group


def _order_urls(data: object, *, url: str) -> list[str]:
    """The order URLs of an orders list object (RFC 8555 §7.1.2.1)."""
    orders = data.get("orders") if isinstance(data, dict) else None
    if not isinstance(orders, list) or not all(isinstance(u, str) for u in orders):
        raise BadServerResponse("an orders list without an array of URLs", url=url)
    return list(orders)


def _as_identifiers(values: Iterable[Identifier | str]) -> tuple[Identifier, ...]:
    """Validate strings; keep ready :class:`Identifier` objects as they are."""
    result: dict[Identifier, None] = {}
    for value in values:
        ident = value if isinstance(value, Identifier) else parse_identifiers([value])[0]
        result.setdefault(ident, None)
    if not result:
        raise InvalidInput("an order needs at least one identifier")
    return tuple(result)
