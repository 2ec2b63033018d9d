"""``AcmeClient``: one account on one CA, driving RFC 8555 over the transport.

The client turns the protocol layer's requests into HTTP through
:class:`~acmecerts.transport.AcmeTransport`, polls with the server's ``Retry-After``
(or a short growing interval, never a tight loop), runs every issuance attempt under a
deadline (30 minutes by default) and cleans up after itself: challenge responses are
removed and pending authorizations deactivated however an attempt ends.

``AcmeClient`` is a facade: each method hands the call to one of its parts
(:attr:`AcmeClient.parts`, built by :func:`~acmecerts.client._build.build_parts`), and
each setting it exposes is the attribute of the one part that uses it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cryptography import x509

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Clock, SystemClock, duration_seconds
from acmecerts.client._account import AccountRequests
from acmecerts.client._attempt import BeforeOrder
from acmecerts.client._build import (
    ClientParts,
    build_parts,
    ca_profiles_for,
    documented_by,
    transport_for,
)
from acmecerts.client._certificate import RevocationReason
from acmecerts.client._events import ClientEvent, IssuanceEvent
from acmecerts.client._order import OrderHook, OrderRequests
from acmecerts.client._registration import ExternalAccountBinding, Registration
from acmecerts.client._renewal_info import RenewalInfoRequests
from acmecerts.protocol._flow import PollPolicy
from acmecerts.protocol._solver import Solver
from acmecerts.protocol.ari import RenewalInfoResult
from acmecerts.protocol.certificate import CertificateChain
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import AccountKey, KeyType, PrivateKey
from acmecerts.protocol.resources import Account, Authorization, Challenge, Directory, Order
from acmecerts.ratelimit._model import RateLimitModel
from acmecerts.ratelimit._profiles import CaProfiles
from acmecerts.ratelimit._throttle import RatesTable
from acmecerts.retry import RequestRetry
from acmecerts.transport import (
    AcmeTransport,
    ProxySetting,
    RequestHook,
    RequestThrottle,
    Subscriber,
    UrlPolicy,
)

if TYPE_CHECKING:
    from acmecerts.ratelimit import LedgerLike


class AcmeClient:
    """An async ACME client for one account on one CA.

    Args:
        directory_url: The CA's directory URL: an https URL string or a :class:`DirectoryUrl`.
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
        on_request: Called with ``(method, url)`` for every HTTP request. Deprecated
            (emits a ``DeprecationWarning``): :meth:`subscribe` to
            :class:`~acmecerts.transport.RequestSent` instead; kept as an adapter onto it.
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
        ca_profiles: What the CA's certificate profiles allow
            (:class:`~acmecerts.ratelimit.CaProfiles`): an order the CA would refuse under
            its profile (too many names, an IP identifier where the profile allows none)
            raises :class:`~acmecerts.ProfileRefused` before ``newOrder`` is sent.
            ``"auto"`` (the default) takes the limits model's (the ledger's, else the one
            :func:`~acmecerts.ratelimit.model_for_directory` picks: Let's Encrypt's rules
            for Let's Encrypt, none for other CAs); ``None``: no such check.
        terms_of_service_agreed: Whether the account holder agreed to the CA's terms of
            service (its directory's ``meta.termsOfService``). ``True`` (the default):
            :meth:`register` (also the one a first signed request makes) sends
            ``termsOfServiceAgreed: true``. ``False``: no account is created at a CA that
            publishes terms: :meth:`register` raises
            :class:`~acmecerts.TermsOfServiceNotAgreed` with only the directory fetched,
            while a CA that publishes none is sent ``termsOfServiceAgreed: false``. An
            account the client knows (``account_url``) or finds (:meth:`find_account`)
            needs no agreement. Also an attribute: set it once the holder agreed.
        send_replaces: Whether an order names the certificate it renews (RFC 9773 §5
            ``replaces``) when given one (``issue(replaces=...)``, as
            :class:`~acmecerts.manager.CertificateManager` does for a renewal at a CA with
            ARI). ``False``: never; the order is an ordinary one, and its certificate does
            not count at the CA as the old one's replacement (a rehearsal of a renewal).
    """

    def __init__(
        self,
        directory_url: str | DirectoryUrl,
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
        ledger: LedgerLike | None = None,
        url_policy: UrlPolicy | None = None,
        request_rates: RatesTable
        | RateLimitModel
        | RequestThrottle
        | Literal["auto"]
        | None = "auto",
        proxy: ProxySetting = "env",
        ca_profiles: CaProfiles | Literal["auto"] | None = "auto",
        terms_of_service_agreed: bool = True,
        send_replaces: bool = True,
    ) -> None:
        directory_url = DirectoryUrl(directory_url)  # parsed here once, then passed on
        clock = clock or SystemClock()
        timeout = duration_seconds(attempt_timeout, "attempt_timeout", positive=True)
        profiles = ca_profiles_for(ca_profiles, directory_url, ledger)
        transport = transport_for(
            directory_url,
            clock=clock,
            ledger=ledger,
            transport=transport,
            ca_bundle=ca_bundle,
            request_timeout=request_timeout,
            request_retry=request_retry,
            http2=http2,
            on_request=on_request,
            url_policy=url_policy,
            request_rates=request_rates,
            proxy=proxy,
        )
        #: The objects the client is made of (:class:`~acmecerts.client._build.ClientParts`):
        #: the account's identity and registration, the signed requests, one object per
        #: RFC resource, the polling and the issuer. Its methods hand each call to one.
        self.parts: ClientParts = build_parts(
            transport,
            clock=clock,
            account_key=account_key,
            account_url=account_url,
            contact=contact,
            eab=eab,
            ledger=ledger,
            ca_profiles=profiles,
            poll=poll,
            attempt_timeout=timeout,
            terms_of_service_agreed=terms_of_service_agreed,
            send_replaces=send_replaces,
        )

    # -- settings: each is the attribute of the one part that uses it -------------------

    @property
    def clock(self) -> Clock:
        """The time source of every deadline, poll and ledger entry."""
        return self.parts.clock

    @property
    def transport(self) -> AcmeTransport:
        """The one request path to the CA."""
        return self.parts.transport

    @property
    def ledger(self) -> LedgerLike | None:
        """The rate-limit ledger orders and new accounts are checked against and recorded in."""
        return self.parts.ledger

    @property
    def account_key(self) -> AccountKey:
        """The account key (save ``account_key.to_pem()`` to reuse the account)."""
        return self.parts.identity.key

    @account_key.setter
    def account_key(self, key: AccountKey) -> None:
        self.parts.identity.key = key

    @property
    def account_url(self) -> str | None:
        """The account URL (``None`` until registered or found); ``None`` to forget it."""
        return self.parts.identity.url

    @account_url.setter
    def account_url(self, url: str | None) -> None:
        self.parts.identity.url = url

    @property
    def contact(self) -> tuple[str, ...]:
        """The contact URIs a new account gets (and the last :meth:`update_contact` set)."""
        return self.parts.registration.contact

    @property
    def eab(self) -> ExternalAccountBinding | None:
        """The external account binding a new account is registered with."""
        return self.parts.registration.eab

    @property
    def terms_of_service_agreed(self) -> bool:
        """Whether the CA's terms of service were agreed to (``terms_of_service_agreed``)."""
        return self.parts.registration.terms_of_service_agreed

    @terms_of_service_agreed.setter
    def terms_of_service_agreed(self, agreed: bool) -> None:
        self.parts.registration.terms_of_service_agreed = agreed

    @property
    def send_replaces(self) -> bool:
        """Whether orders send ``replaces`` (see ``send_replaces``)."""
        return self.parts.orders.send_replaces

    @send_replaces.setter
    def send_replaces(self, send: bool) -> None:
        self.parts.orders.send_replaces = bool(send)

    @property
    def ca_profiles(self) -> CaProfiles | None:
        """The rules of the CA's profiles each order is checked against (``None``: none)."""
        return self.parts.orders.ca_profiles

    @ca_profiles.setter
    def ca_profiles(self, profiles: CaProfiles | None) -> None:
        self.parts.orders.ca_profiles = profiles

    @property
    def poll(self) -> PollPolicy:
        """The polling policy for authorizations and orders."""
        return self.parts.polling.policy

    @poll.setter
    def poll(self, policy: PollPolicy) -> None:
        self.parts.polling.policy = policy

    @property
    def attempt_timeout(self) -> float:
        """The deadline of one issuance attempt, in seconds."""
        return self.parts.issuer.attempt_timeout

    @attempt_timeout.setter
    def attempt_timeout(self, timeout: float | _dt.timedelta) -> None:
        self.parts.issuer.attempt_timeout = duration_seconds(
            timeout, "attempt_timeout", positive=True
        )

    # -- events and lifetime -------------------------------------------------------------

    def subscribe(
        self, subscriber: Subscriber[ClientEvent], *, requests: bool = True
    ) -> Callable[[], None]:
        """Call ``subscriber`` with every event of this client; returns an unsubscribe.

        The events of every issuance (:mod:`acmecerts.client`: :class:`OrderRequested`
        ... :class:`AttemptEnded`) and of every HTTP request of its transport
        (:class:`~acmecerts.transport.RequestSent`,
        :class:`~acmecerts.transport.ResponseReceived`; a transport shared by several
        clients reports the requests of all). ``subscriber`` may be a plain or a
        coroutine function: it is called when the event happens and awaited before the
        client goes on. If it raises, the request or issuance fails with its exception
        (except for events that report an outcome: :class:`OrderRefused`,
        :class:`AttemptEnded` and a failed request's ``ResponseReceived``, where it is
        logged). A subscriber of one issuance only: ``issue(..., events=...)``.

        With ``requests=False`` it hears the issuance events only: no request event is
        made or dispatched for it (a progress display need not pay for every request).
        """
        stop_issuance = self.parts.events.add(subscriber)
        if not requests:
            return stop_issuance
        stop_requests = self.transport.subscribe(subscriber)

        def unsubscribe() -> None:
            stop_issuance()
            stop_requests()

        return unsubscribe

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

    # -- the RFC 8555 resources (each a part: parts.accounts, parts.orders, ...) --------

    async def directory(self) -> Directory:
        """The CA's directory (fetched once)."""
        return await self.parts.signed.directory()

    @documented_by(Registration.account_url)
    async def account_url_or_register(self) -> str:
        return await self.parts.registration.account_url()

    @documented_by(Registration.register)
    async def register(
        self,
        *,
        contact: Sequence[str] | None = None,
        terms_of_service_agreed: bool | None = None,
        eab: ExternalAccountBinding | None = None,
    ) -> Account:
        return await self.parts.registration.register(
            contact=contact, terms_of_service_agreed=terms_of_service_agreed, eab=eab
        )

    async def find_account(self) -> Account:
        """Look up the account of this key without creating one (``onlyReturnExisting``).

        Raises :class:`~acmecerts.errors.AccountDoesNotExist` if there is none.
        """
        return await self.parts.registration.find_account()

    async def account(self) -> Account:
        """Fetch the account object (POST-as-GET)."""
        return await self.parts.accounts.get()

    async def update_contact(self, contact: Sequence[str]) -> Account:
        """Replace the account's contact URIs (§7.3.2)."""
        return await self.parts.accounts.update_contact(contact)

    async def deactivate_account(self) -> Account:
        """Deactivate the account (§7.3.6). The CA refuses its key afterwards."""
        return await self.parts.accounts.deactivate()

    @documented_by(AccountRequests.change_key)
    async def change_key(self, new_key: AccountKey) -> None:
        await self.parts.accounts.change_key(new_key)

    async def new_order(
        self,
        identifiers: Iterable[Identifier | str],
        *,
        profile: str | None = None,
        profile_required: bool = True,
        replaces: str | None = None,
        renewal_of: Sequence[Identifier | str] | None = None,
    ) -> Order:
        """Create an order (§7.4). ``replaces`` is the ARI certID of the certificate renewed
        (sent unless :attr:`send_replaces` is false).

        ``profile`` names a certificate profile the directory's ``meta.profiles`` lists.
        One it does not list raises :class:`~acmecerts.ProfileRefused` (nothing sent)
        while ``profile_required``; a preferred one (``profile_required=False``) falls
        back to the CA's default: the order names no profile, a warning is logged and
        :class:`ProfileFallback` emitted. With :attr:`ca_profiles`, an order that breaks
        its profile's rules (names per order, IP identifiers) raises
        :class:`~acmecerts.ProfileRefused` before it is sent.

        With a :attr:`ledger`, the order is first reserved in it; one that would exceed a
        rate limit is not sent (:class:`~acmecerts.errors.RateLimitDeferred`).
        ``renewal_of`` (the identifiers of the certificate renewed) tells it the order
        is a renewal, exempt from some limits when the identifiers are the same.
        Subscribers see :class:`OrderRequested`, then :class:`OrderCreated` (or
        :class:`OrderRefused`).
        """
        orders = self.parts.orders
        request = orders.request(
            identifiers,
            profile=profile,
            profile_required=profile_required,
            replaces=replaces,
            renewal_of=renewal_of,
        )
        return await orders.create(request)

    @documented_by(OrderRequests.find_unfinished)
    async def find_unfinished_order(self, identifiers: Iterable[Identifier | str]) -> Order | None:
        return await self.parts.orders.find_unfinished(identifiers)

    async def get_order(self, url: str) -> Order:
        """Fetch an order (POST-as-GET)."""
        return await self.parts.orders.get(url)

    async def wait_order(
        self,
        order: Order,
        *,
        until: frozenset[str],
        deadline: _dt.datetime,
        retry_after: _dt.datetime | None = None,
    ) -> Order:
        """Poll ``order`` until its status is in ``until`` (or ``invalid``)."""
        return await self.parts.orders.wait(
            order, until=until, deadline=deadline, retry_after=retry_after
        )

    async def get_authorization(self, url: str) -> Authorization:
        """Fetch an authorization (POST-as-GET)."""
        return await self.parts.authorizations.get(url)

    async def answer_challenge(self, challenge: Challenge) -> Challenge:
        """Tell the CA the challenge is ready to be validated (§7.5.1)."""
        return await self.parts.authorizations.answer(challenge)

    async def deactivate_authorization(self, url: str) -> Authorization:
        """Deactivate an authorization (§7.5.2) so it stops counting as pending."""
        return await self.parts.authorizations.deactivate(url)

    async def wait_authorization(
        self, url: str, *, deadline: _dt.datetime, retry_after: _dt.datetime | None = None
    ) -> Authorization:
        """Poll an authorization until it is no longer ``pending``."""
        return await self.parts.authorizations.wait(url, deadline=deadline, retry_after=retry_after)

    async def finalize(self, order: Order, csr_der: bytes) -> Order:
        """Send the CSR (§7.4); the order moves to ``processing`` or ``valid``."""
        return (await self.parts.certificates.finalize(order, csr_der))[0]

    async def download_certificate(self, url: str) -> tuple[CertificateChain, list[str]]:
        """Download a chain (§7.4.2); returns it and the URLs of alternate chains."""
        return await self.parts.certificates.download(url)

    async def revoke(
        self,
        certificate_pem: str | bytes,
        *,
        reason: int = RevocationReason.UNSPECIFIED,
        certificate_key: PrivateKey | None = None,
    ) -> None:
        """Revoke a certificate (§7.6), signed by the account key or by the certificate key."""
        await self.parts.certificates.revoke(
            certificate_pem, reason=reason, certificate_key=certificate_key
        )

    @documented_by(RenewalInfoRequests.get)
    async def renewal_info(
        self,
        certificate: x509.Certificate | str | bytes | None = None,
        *,
        cert_id: str | None = None,
    ) -> RenewalInfoResult:
        return await self.parts.renewal_info.get(certificate, cert_id=cert_id)

    async def issue(
        self,
        names: Iterable[str | Identifier],
        *,
        solver: Solver | None = None,
        solvers: Iterable[Solver] = (),
        key_type: KeyType | str = KeyType.EC256,
        private_key: PrivateKey | None = None,
        csr: bytes | None = None,
        profile: str | None = None,
        profile_required: bool = True,
        replaces: str | None = None,
        preferred_chain: str | None = None,
        attempt_timeout: float | _dt.timedelta | None = None,
        renewal_of: Sequence[Identifier | str] | None = None,
        resume_order_url: str | None = None,
        on_order: OrderHook | None = None,
        before_order: BeforeOrder | None = None,
        recover_order: bool = False,
        events: Subscriber[IssuanceEvent] | None = None,
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
            csr: The caller's own certificate signing request, PEM or DER (not with
                ``private_key``): finalize sends it as it is, so the private key never
                reaches acmecerts, and the :class:`IssuedCertificate` has none
                (``private_key_pem`` is ``None``). Its names (subjectAltName entries and
                common name) are the certificate's: ``names`` must be the same set, or
                empty. A CSR whose signature does not verify, or that names nothing,
                raises :class:`InvalidInput` before any request is sent.
            profile: A certificate profile the CA offers (``meta.profiles``), e.g.
                ``"tlsserver"``; ``None``: the CA's default.
            profile_required: With ``True`` (the default), a ``profile`` the CA does not
                offer raises :class:`~acmecerts.ProfileRefused` before anything is
                ordered; with ``False`` it is only preferred: the CA's default is ordered
                instead, with a warning and a :class:`ProfileFallback` event. Either way
                an order its profile's rules at the CA forbid (:attr:`ca_profiles`: names
                per order, IP identifiers) is refused before ``newOrder``.
            replaces: ARI certID of the certificate this one renews (RFC 9773 §5).
            renewal_of: The identifiers of the certificate this one renews (for the
                rate-limit ledger's renewal exemptions; see :meth:`new_order`).
            resume_order_url: An order a previous attempt created (pass the same
                ``private_key``): it is continued where it stands (pending, ready,
                processing or valid) instead of sending a new ``newOrder``; if the CA no
                longer has it usable, a new order is created.
            events: A subscriber of this issuance's events (:mod:`acmecerts.client`),
                called before the client's own (:meth:`subscribe`). A coroutine is
                awaited before the client goes on: persist the order journal here, an
                intent at :class:`OrderRequested` (so that a process that dies before
                the order is recorded knows to pass ``recover_order`` when it restarts)
                and the order at :class:`OrderCreated`, so that it can be resumed.
            on_order: Deprecated (emits a ``DeprecationWarning``): ``events``
                (:class:`OrderCreated`). Awaited with the order and the certificate key
                right after a new order is created (or an unrecorded one found), before
                anything else is sent.
            before_order: Deprecated (emits a ``DeprecationWarning``): ``events``
                (:class:`OrderRequested`). Awaited with the certificate key right
                before ``newOrder`` is sent.
            recover_order: A previous attempt may have created an order it never
                recorded (it died between ``newOrder`` and :class:`OrderCreated`): before
                ordering, look for it with :meth:`find_unfinished_order`.
            preferred_chain: The common name of the root (or else of an intermediate)
                the chain should lead to; among the chains the CA offers (``Link:
                rel="alternate"``) the one whose root issuer has this name wins, then one
                with an intermediate so named; the CA's default chain when none matches.
        """
        return await self.parts.issuer.issue(
            names,
            solver=solver,
            solvers=solvers,
            key_type=key_type,
            private_key=private_key,
            csr=csr,
            profile=profile,
            profile_required=profile_required,
            replaces=replaces,
            preferred_chain=preferred_chain,
            attempt_timeout=attempt_timeout,
            renewal_of=renewal_of,
            resume_order_url=resume_order_url,
            on_order=on_order,
            before_order=before_order,
            recover_order=recover_order,
            events=events,
        )
