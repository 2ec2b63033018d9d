"""How ``AcmeClient`` is put together: its transport, then its parts wired to each other.

The parts, each an object of its own that holds what it uses (no part reaches into
another's private state):

* :class:`AccountIdentity`: the account key and URL;
* :class:`Registration`: ``newAccount`` and the key's account lookup; it sets the URL;
* :class:`SignedRequests`: every request signed for the account (``kid`` from the
  registration, JWS, nonces and POST-as-GET through the transport);
* the RFC resources over them: :class:`AccountRequests`, :class:`OrderRequests`,
  :class:`AuthorizationRequests`, :class:`CertificateRequests`,
  :class:`RenewalInfoRequests`;
* :class:`Polling`: the poll policy on the clock;
* :class:`Issuer`: the issuance flow driven over the resources.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from acmecerts._time import Clock, duration_seconds
from acmecerts.client._account import AccountRequests
from acmecerts.client._authorization import AuthorizationRequests
from acmecerts.client._certificate import CertificateRequests
from acmecerts.client._events import IssuanceEvent
from acmecerts.client._issue import Issuer
from acmecerts.client._order import OrderRequests
from acmecerts.client._polling import Polling
from acmecerts.client._registration import ExternalAccountBinding, Registration
from acmecerts.client._renewal_info import RenewalInfoRequests
from acmecerts.client._signed import AccountIdentity, SignedRequests
from acmecerts.errors import InvalidInput
from acmecerts.protocol._polling import PollPolicy
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.protocol.keys import AccountKey
from acmecerts.ratelimit._model import RateLimitModel, model_for_directory
from acmecerts.ratelimit._profiles import CaProfiles
from acmecerts.ratelimit._throttle import RatesTable, RequestRates
from acmecerts.retry import RequestRetry
from acmecerts.transport import AcmeTransport, ProxySetting, RequestHook, RequestThrottle, UrlPolicy
from acmecerts.transport._events import EventSubscribers

if TYPE_CHECKING:
    from acmecerts.ratelimit import LedgerLike


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClientParts:
    """The objects an :class:`AcmeClient` is made of (see the module)."""

    clock: Clock
    transport: AcmeTransport
    ledger: LedgerLike | None
    identity: AccountIdentity
    registration: Registration
    signed: SignedRequests
    accounts: AccountRequests
    orders: OrderRequests
    authorizations: AuthorizationRequests
    certificates: CertificateRequests
    renewal_info: RenewalInfoRequests
    polling: Polling
    issuer: Issuer
    #: The client-wide subscribers of issuance events.
    events: EventSubscribers[IssuanceEvent]


def build_parts(
    transport: AcmeTransport,
    *,
    clock: Clock,
    account_key: AccountKey | None = None,
    account_url: str | None = None,
    contact: Sequence[str] = (),
    eab: ExternalAccountBinding | None = None,
    ledger: LedgerLike | None = None,
    ca_profiles: CaProfiles | None = None,
    poll: PollPolicy | None = None,
    attempt_timeout: float = 1800.0,
    terms_of_service_agreed: bool = True,
    send_replaces: bool = True,
) -> ClientParts:
    """The parts of a client for one account on ``transport``'s CA, wired together."""
    identity = AccountIdentity(account_key, account_url)
    registration = Registration(
        transport,
        identity,
        clock=clock,
        ledger=ledger,
        contact=contact,
        eab=eab,
        terms_of_service_agreed=terms_of_service_agreed,
    )
    signed = SignedRequests(transport, identity, registration.account_url)
    polling = Polling(clock, poll)
    events: EventSubscribers[IssuanceEvent] = EventSubscribers()
    orders = OrderRequests(
        signed,
        polling,
        events,
        clock=clock,
        ledger=ledger,
        ca_profiles=ca_profiles,
        send_replaces=send_replaces,
    )
    authorizations = AuthorizationRequests(signed, polling)
    certificates = CertificateRequests(signed)
    issuer = Issuer(
        identity,
        orders,
        authorizations,
        certificates,
        polling=polling,
        events=events,
        clock=clock,
        attempt_timeout=attempt_timeout,
    )
    return ClientParts(
        clock=clock,
        transport=transport,
        ledger=ledger,
        identity=identity,
        registration=registration,
        signed=signed,
        accounts=AccountRequests(signed, registration),
        orders=orders,
        authorizations=authorizations,
        certificates=certificates,
        renewal_info=RenewalInfoRequests(transport, clock),
        polling=polling,
        issuer=issuer,
        events=events,
    )


def transport_for(
    directory_url: DirectoryUrl,
    *,
    clock: Clock,
    ledger: LedgerLike | None,
    transport: AcmeTransport | None,
    ca_bundle: str | Path | None,
    request_timeout: float | _dt.timedelta,
    request_retry: RequestRetry | None,
    http2: bool,
    on_request: RequestHook | None,
    url_policy: UrlPolicy | None,
    request_rates: RatesTable | RateLimitModel | RequestThrottle | str | None,
    proxy: ProxySetting,
) -> AcmeTransport:
    """``transport``, or the one ``AcmeClient(...)``'s arguments describe."""
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
        return transport
    return AcmeTransport(
        directory_url,
        ca_bundle=ca_bundle,
        timeout=duration_seconds(request_timeout, "request_timeout", positive=True),
        retry=request_retry,
        clock=clock,
        http2=http2,
        on_request=on_request,
        url_policy=url_policy,
        request_rates=_request_rates(request_rates, directory_url, ledger),
        proxy=proxy,
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


def ca_profiles_for(
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


F = TypeVar("F", bound=Callable[..., Any])


def documented_by(part_method: Callable[..., Any]) -> Callable[[F], F]:
    """Give a facade method the docstring of the part's method it hands the call to: the
    behaviour is written down once, beside the code that has it."""

    def document(method: F) -> F:
        method.__doc__ = part_method.__doc__
        return method

    return document
