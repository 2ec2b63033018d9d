"""``AcmeClient``: one account on one CA, driving RFC 8555 over the transport.

The client turns the protocol layer's requests into HTTP through
:class:`~acmecerts.transport.AcmeTransport`, polls with the server's ``Retry-After``
(or a short growing interval, never a tight loop), runs every issuance attempt under a
deadline (30 minutes by default) and cleans up after itself: challenge responses are
removed and pending authorizations deactivated however an attempt ends.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import anyio

from acmecerts._time import Clock, SystemClock, duration_seconds
from acmecerts.errors import InvalidInput, RateLimitDeferred
from acmecerts.protocol._flow import PollPolicy
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.protocol.keys import AccountKey
from acmecerts.ratelimit._model import RateLimitModel, model_for_directory
from acmecerts.ratelimit._profiles import CaProfiles
from acmecerts.ratelimit._throttle import RatesTable, RequestRates
from acmecerts.retry import RequestRetry
from acmecerts.transport import (
    AcmeTransport,
    ProxySetting,
    RequestHook,
    RequestThrottle,
    Subscriber,
    UrlPolicy,
)
from acmecerts.transport._events import EventSubscribers

if TYPE_CHECKING:
    from acmecerts.ratelimit import LedgerLike
from acmecerts.client._account import ExternalAccountBinding
from acmecerts.client._events import ClientEvent, IssuanceEvent
from acmecerts.client._issue import _Issuance
from acmecerts.client._renewal_info import _RenewalInfoRequests


class AcmeClient(_Issuance, _RenewalInfoRequests):
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
        self.clock: Clock = clock or SystemClock()
        self.ledger = ledger
        #: The rules of the CA's profiles each order is checked against (``None``: none).
        self.ca_profiles: CaProfiles | None = _ca_profiles(ca_profiles, directory_url, ledger)
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
                timeout=duration_seconds(request_timeout, "request_timeout", positive=True),
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
        self.attempt_timeout = duration_seconds(attempt_timeout, "attempt_timeout", positive=True)
        self.poll = poll or PollPolicy()
        if not isinstance(terms_of_service_agreed, bool):
            raise InvalidInput("terms_of_service_agreed must be True or False")
        #: Whether the CA's terms of service were agreed to (see ``terms_of_service_agreed``).
        self.terms_of_service_agreed = terms_of_service_agreed
        #: Whether orders send ``replaces`` (see ``send_replaces``).
        self.send_replaces = bool(send_replaces)
        self._account_lock = anyio.Lock()
        self._issuance_events: EventSubscribers[IssuanceEvent] = EventSubscribers()
        #: When the last implicit registration was deferred (:meth:`account_url_or_register`).
        self._account_deferred: tuple[_dt.datetime, RateLimitDeferred] | None = None

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
        stop_issuance = self._issuance_events.add(subscriber)
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


def _request_rates(
    value: RequestRates | RatesTable | RateLimitModel | RequestThrottle | str | None,
    directory_url: DirectoryUrl,
    ledger: LedgerLike | None,
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


def _ca_profiles(
    value: CaProfiles | str | None, directory_url: DirectoryUrl, ledger: LedgerLike | None
) -> CaProfiles | None:
    """What ``AcmeClient(ca_profiles=value)`` checks orders against."""
    if isinstance(value, str):
        if value != "auto":
            raise InvalidInput(f"ca_profiles={value!r}: give 'auto', CaProfiles or None")
        model = ledger.model if ledger is not None else model_for_directory(directory_url)
        return model.profiles
    if value is not None and not isinstance(value, CaProfiles):
        raise InvalidInput(f"ca_profiles must be 'auto', CaProfiles or None, got {value!r}")
    return value
