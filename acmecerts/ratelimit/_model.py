"""Limit models: a declarative description of a CA's rate limits as token buckets.

A :class:`Limit` is a token bucket: ``capacity`` tokens, refilled evenly over ``period``
(one token every ``period / capacity``), one bucket per *scope key* (a registered domain,
an account...). Spending needs one whole token; an empty bucket holds the request back
until the next token arrives. This is the model Let's Encrypt uses (GCRA, "refills at
1 certificate every 202 minutes"), see https://letsencrypt.org/docs/rate-limits/.

A :class:`RateLimitModel` is a named, immutable set of limits. :data:`LETS_ENCRYPT` is
Let's Encrypt's production model, :data:`LETS_ENCRYPT_STAGING` its staging environment's
(far higher limits); :data:`NO_LIMITS` suits private CAs;
:func:`model_for_directory` picks one from a directory URL;
:meth:`RateLimitModel.with_overrides` applies a CA's rate-limit override::

    model = LETS_ENCRYPT.with_overrides({"certificates_per_registered_domain": 300})

A model also carries what the CA's profiles issue (:attr:`RateLimitModel.profiles`, a
:class:`~acmecerts.ratelimit.CaProfiles` timeline; see ``_profiles.py``), which the client
checks an order against before sending it, and the CA's per-endpoint request rates
(:attr:`RateLimitModel.request_rates`, see :mod:`acmecerts.ratelimit._throttle`), which
the client's request throttle keeps to.
:func:`model_for_directory` is how acmecerts picks a model for a CA it is pointed at.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
from collections.abc import Iterable, Iterator, Mapping

from acmecerts._time import duration_seconds
from acmecerts.errors import InvalidInput
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.ratelimit._profiles import (
    LETS_ENCRYPT_PROFILES,
    LETS_ENCRYPT_STAGING_PROFILES,
    CaProfiles,
)
from acmecerts.ratelimit._throttle import EndpointClass, RatesTable, RequestRates

__all__ = [
    "LETS_ENCRYPT",
    "LETS_ENCRYPT_STAGING",
    "NO_LIMITS",
    "Event",
    "Limit",
    "RateLimitModel",
    "Scope",
    "model_for_directory",
]

_US = 1_000_000


class Scope(enum.StrEnum):
    """What one bucket of a limit counts: the scope key of a request."""

    #: One bucket per registered domain (Public Suffix List ``example.co.uk``), IPv4
    #: address, or IPv6 /64, shared by every account. An order spends one token in the
    #: bucket of each distinct registered domain it names.
    REGISTERED_DOMAIN = "registered_domain"
    #: One bucket per exact set of identifiers (order and case do not matter), shared by
    #: every account.
    IDENTIFIER_SET = "identifier_set"
    #: One bucket per ACME account.
    ACCOUNT = "account"
    #: One bucket per identifier per account (a wildcard counts as its base name).
    ACCOUNT_IDENTIFIER = "account_identifier"
    #: One bucket per source IP address the requests come from.
    SOURCE_ADDRESS = "source_address"
    #: One bucket per IPv6 /48 the requests come from (IPv6 sources only: a limit of
    #: this scope spends nothing for an IPv4 source, or one whose address is unknown).
    SOURCE_IPV6_RANGE = "source_ipv6_range"


class Event(enum.StrEnum):
    """What spends a token of a limit."""

    #: A ``newOrder`` request (spent when the order is reserved, before it is sent).
    NEW_ORDER = "new_order"
    #: A certificate (reserved with the order; given back if no certificate results).
    NEW_CERTIFICATE = "new_certificate"
    #: A failed authorization (validation). Checked before every order.
    AUTHORIZATION_FAILURE = "authorization_failure"
    #: A ``newAccount`` request that created an account.
    NEW_ACCOUNT = "new_account"


_DEFAULT_EVENT = {
    Scope.REGISTERED_DOMAIN: Event.NEW_CERTIFICATE,
    Scope.IDENTIFIER_SET: Event.NEW_CERTIFICATE,
    Scope.ACCOUNT: Event.NEW_ORDER,
    Scope.ACCOUNT_IDENTIFIER: Event.AUTHORIZATION_FAILURE,
    Scope.SOURCE_ADDRESS: Event.NEW_ACCOUNT,
    Scope.SOURCE_IPV6_RANGE: Event.NEW_ACCOUNT,
}


def _period(value: float | _dt.timedelta, what: str) -> _dt.timedelta:
    if isinstance(value, _dt.timedelta) and value > _dt.timedelta(0):
        return value  # as given: no round trip through float seconds
    return _dt.timedelta(seconds=duration_seconds(value, what, positive=True))


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Limit:
    """One rate limit of a CA: ``capacity`` per ``period`` per scope key, as a token bucket.

    Args:
        name: A stable identifier (``snake_case``); it names the limit in storage, in
            :class:`~acmecerts.errors.RateLimitDeferred` and in overrides.
        capacity: Tokens in a full bucket: the burst allowed at once (at least 1).
        period: Time to refill an empty bucket (seconds or a ``timedelta``); one token
            comes back every ``period / capacity``.
        scope: What one bucket counts (:class:`Scope`).
        event: What spends a token (default: derived from ``scope``: certificates for
            the registered-domain and identifier-set scopes, orders per account,
            authorization failures per identifier per account, new accounts per source
            address).
        renewal_exempt: A renewal of the exact same identifier set spends nothing here.
        pauses: A *consecutive failures* limit: a successful authorization refills the
            bucket at once, and emptying it pauses the identifier
            (:class:`~acmecerts.errors.IdentifierPaused`) until it is unpaused.
    """

    name: str
    capacity: int
    period: _dt.timedelta
    scope: Scope
    event: Event
    renewal_exempt: bool
    pauses: bool
    #: :attr:`interval` in whole microseconds, rounded up (never more generous).
    interval_us: int = dataclasses.field(repr=False, compare=False)

    def __init__(
        self,
        name: str,
        capacity: int,
        period: float | _dt.timedelta,
        scope: Scope | str,
        *,
        event: Event | str | None = None,
        renewal_exempt: bool = False,
        pauses: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidInput(f"a limit name must be an identifier, got {name!r}")
        if type(capacity) is not int or capacity < 1:
            raise InvalidInput(f"{name}: capacity must be an int >= 1, got {capacity!r}")
        try:
            scope = Scope(scope)
            event = _DEFAULT_EVENT[scope] if event is None else Event(event)
        except ValueError as exc:
            raise InvalidInput(f"{name}: {exc}") from None
        if pauses and event is not Event.AUTHORIZATION_FAILURE:
            raise InvalidInput(f"{name}: only authorization-failure limits can pause")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "capacity", capacity)
        object.__setattr__(self, "period", _period(period, f"{name}: period"))
        object.__setattr__(self, "scope", scope)
        object.__setattr__(self, "event", event)
        object.__setattr__(self, "renewal_exempt", bool(renewal_exempt))
        object.__setattr__(self, "pauses", bool(pauses))
        period_us = self.period // _dt.timedelta(microseconds=1)
        object.__setattr__(self, "interval_us", max(1, -(-period_us // capacity)))

    def replace(
        self, *, capacity: int | None = None, period: float | _dt.timedelta | None = None
    ) -> Limit:
        """A copy with another ``capacity`` and/or ``period``."""
        return Limit(
            self.name,
            self.capacity if capacity is None else capacity,
            self.period if period is None else period,
            self.scope,
            event=self.event,
            renewal_exempt=self.renewal_exempt,
            pauses=self.pauses,
        )

    @property
    def interval(self) -> _dt.timedelta:
        """The time one token takes to come back (``period / capacity``)."""
        return _dt.timedelta(microseconds=self.interval_us)

    def __str__(self) -> str:
        return f"{self.name}: {self.capacity} per {self.period} per {self.scope.value}"


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class RateLimitModel:
    """A CA's rate limits: an immutable, named collection of :class:`Limit` objects.

    Iterate over it, look a limit up by name (``model["new_orders_per_account"]``), or
    derive another model with :meth:`with_overrides` / :meth:`without`.

    :attr:`request_rates` are the CA's per-endpoint request rates, which an
    :class:`~acmecerts.AcmeClient` whose ledger (or directory URL) selects this model keeps
    to with its request throttle (``request_rates="auto"``); empty: no throttle.
    :attr:`profiles` is what the CA's profiles issue over time (``None``: unknown), which
    such a client checks each order against before sending it (``ca_profiles="auto"``).
    """

    name: str
    limits: tuple[Limit, ...]
    #: Per-endpoint request rates for the client's request throttle (empty: none).
    request_rates: RequestRates
    #: The CA's profiles and their rules over time (``None``: not known).
    profiles: CaProfiles | None

    def __init__(
        self,
        limits: Iterable[Limit],
        *,
        name: str = "custom",
        request_rates: RatesTable | None = None,
        profiles: CaProfiles | None = None,
    ) -> None:
        """A model of ``limits`` (names must be unique), ``request_rates`` and ``profiles``."""
        items = tuple(limits)
        seen: set[str] = set()
        for limit in items:
            if not isinstance(limit, Limit):
                raise InvalidInput(f"a model holds Limit objects, got {limit!r}")
            if limit.name in seen:
                raise InvalidInput(f"two limits are named {limit.name!r}")
            seen.add(limit.name)
        if not isinstance(request_rates, RequestRates):
            request_rates = RequestRates(request_rates)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "limits", items)
        object.__setattr__(self, "request_rates", request_rates)
        if profiles is not None and not isinstance(profiles, CaProfiles):
            raise InvalidInput(f"profiles must be CaProfiles or None, got {profiles!r}")
        object.__setattr__(self, "profiles", profiles)

    def __iter__(self) -> Iterator[Limit]:
        return iter(self.limits)

    def __len__(self) -> int:
        return len(self.limits)

    def __contains__(self, name: object) -> bool:
        return any(limit.name == name for limit in self.limits)

    def __getitem__(self, name: str) -> Limit:
        for limit in self.limits:
            if limit.name == name:
                return limit
        raise KeyError(name)

    def get(self, name: str) -> Limit | None:
        """The limit called ``name``, or ``None``."""
        for limit in self.limits:
            if limit.name == name:
                return limit
        return None

    def for_event(self, event: Event) -> tuple[Limit, ...]:
        """The limits that ``event`` spends."""
        return tuple(limit for limit in self.limits if limit.event is event)

    def with_overrides(
        self,
        overrides: Mapping[str, int | tuple[int, float | _dt.timedelta] | Limit],
        *,
        name: str | None = None,
    ) -> RateLimitModel:
        """A copy with some limits changed, e.g. after the CA granted an override.

        Each value is a new capacity (``300``), a ``(capacity, period)`` pair, or a whole
        :class:`Limit` (which may also add a limit the model lacks). Naming a limit the
        model lacks with a number raises :class:`~acmecerts.errors.InvalidInput`.
        """
        limits = {limit.name: limit for limit in self.limits}
        for key, value in overrides.items():
            if isinstance(value, Limit):
                if value.name != key:
                    raise InvalidInput(f"override {key!r} holds a limit named {value.name!r}")
                limits[key] = value
                continue
            if key not in limits:
                known = ", ".join(sorted(limits)) or "none"
                raise InvalidInput(f"no limit {key!r} to override (known: {known})")
            if isinstance(value, tuple):
                capacity, period = value
                limits[key] = limits[key].replace(capacity=capacity, period=period)
            else:
                limits[key] = limits[key].replace(capacity=value)
        return RateLimitModel(
            limits.values(),
            name=name or f"{self.name}+overrides",
            request_rates=self.request_rates,
            profiles=self.profiles,
        )

    def with_request_rates(
        self,
        request_rates: RatesTable | None,
        *,
        name: str | None = None,
    ) -> RateLimitModel:
        """A copy with other per-endpoint request rates (``None`` or empty: no throttle)."""
        return RateLimitModel(
            self.limits,
            name=name or f"{self.name}+rates",
            request_rates=request_rates,
            profiles=self.profiles,
        )

    def without(self, *names: str) -> RateLimitModel:
        """A copy without the limits called ``names``."""
        return RateLimitModel(
            (limit for limit in self.limits if limit.name not in names),
            name=f"{self.name}-" + "-".join(names),
            request_rates=self.request_rates,
            profiles=self.profiles,
        )

    def __repr__(self) -> str:
        return f"RateLimitModel({self.name!r}, {len(self.limits)} limits)"


_HOUR = _dt.timedelta(hours=1)
_WEEK = _dt.timedelta(days=7)

#: Let's Encrypt's production limits (https://letsencrypt.org/docs/rate-limits/).
LETS_ENCRYPT = RateLimitModel(
    [
        # 50 per 7 days, refill 1 per 201.6 minutes; renewals of the same set are exempt.
        Limit(
            "certificates_per_registered_domain",
            50,
            _WEEK,
            Scope.REGISTERED_DOMAIN,
            renewal_exempt=True,
        ),
        # 5 per 7 days, refill 1 per 33.6 hours; renewals count (ARI renewals do not).
        Limit("certificates_per_exact_identifier_set", 5, _WEEK, Scope.IDENTIFIER_SET),
        # 300 per 3 hours, refill 1 per 36 seconds; renewals of the same set are exempt.
        Limit("new_orders_per_account", 300, 3 * _HOUR, Scope.ACCOUNT, renewal_exempt=True),
        # 5 per hour, refill 1 per 12 minutes.
        Limit(
            "authorization_failures_per_identifier_per_account",
            5,
            _HOUR,
            Scope.ACCOUNT_IDENTIFIER,
        ),
        # 1,152 consecutive failures, refill 1 per day; then the identifier is paused.
        Limit(
            "consecutive_authorization_failures_per_identifier_per_account",
            1152,
            _dt.timedelta(days=1152),
            Scope.ACCOUNT_IDENTIFIER,
            pauses=True,
        ),
        # 10 per 3 hours, refill 1 per 18 minutes.
        Limit("new_accounts_per_ip", 10, 3 * _HOUR, Scope.SOURCE_ADDRESS),
        # 500 per 3 hours per IPv6 /48, refill 1 per 21.6 seconds.
        Limit("new_accounts_per_ipv6_range", 500, 3 * _HOUR, Scope.SOURCE_IPV6_RANGE),
    ],
    name="lets-encrypt",
    profiles=LETS_ENCRYPT_PROFILES,
    # "Overall Requests" per IP address, per endpoint: (requests per second, burst).
    request_rates={
        EndpointClass.DIRECTORY: (40, 40),
        EndpointClass.NEW_NONCE: (20, 10),
        EndpointClass.NEW_ACCOUNT: (5, 15),
        EndpointClass.NEW_ORDER: (300, 200),
        EndpointClass.REVOKE_CERT: (10, 100),
        EndpointClass.RENEWAL_INFO: (1000, 100),
        EndpointClass.OTHER: (250, 125),
    },
)

#: Let's Encrypt's staging environment (https://letsencrypt.org/docs/staging-environment/,
#: as of April 2026): production's limits with staging's values, and its request rates.
LETS_ENCRYPT_STAGING = RateLimitModel(
    [
        # "30000 per second" on the page (April 2026) reads as a slip for "per week":
        # the duplicate-certificate limit beside it, and every earlier version, say week.
        Limit(
            "certificates_per_registered_domain",
            30_000,
            _WEEK,
            Scope.REGISTERED_DOMAIN,
            renewal_exempt=True,
        ),
        Limit("certificates_per_exact_identifier_set", 30_000, _WEEK, Scope.IDENTIFIER_SET),
        Limit("new_orders_per_account", 1_500, 3 * _HOUR, Scope.ACCOUNT, renewal_exempt=True),
        Limit(
            "authorization_failures_per_identifier_per_account",
            200,
            _HOUR,
            Scope.ACCOUNT_IDENTIFIER,
        ),
        Limit(
            "consecutive_authorization_failures_per_identifier_per_account",
            3_600,
            6 * _HOUR,
            Scope.ACCOUNT_IDENTIFIER,
            pauses=True,
        ),
        Limit("new_accounts_per_ip", 50, 3 * _HOUR, Scope.SOURCE_ADDRESS),
        Limit("new_accounts_per_ipv6_range", 500, 3 * _HOUR, Scope.SOURCE_IPV6_RANGE),
    ],
    name="lets-encrypt-staging",
    profiles=LETS_ENCRYPT_STAGING_PROFILES,
    request_rates={
        EndpointClass.DIRECTORY: (40, 40),
        EndpointClass.NEW_NONCE: (20, 10),
        EndpointClass.NEW_ACCOUNT: (5, 15),
        EndpointClass.NEW_ORDER: (20, 40),
        EndpointClass.REVOKE_CERT: (10, 100),
        EndpointClass.RENEWAL_INFO: (1000, 100),
        EndpointClass.OTHER: (20, 20),
    },
)

#: No limits at all (a private CA, Pebble): no request throttle either; the ledger still
#: learns from ``rateLimited`` answers.
NO_LIMITS = RateLimitModel([], name="no-limits")

#: The models of known directory hosts.
_MODELS_BY_HOST = {
    "acme-v02.api.letsencrypt.org": LETS_ENCRYPT,
    "acme-staging-v02.api.letsencrypt.org": LETS_ENCRYPT_STAGING,
}


def model_for_directory(directory_url: str | DirectoryUrl) -> RateLimitModel:
    """The limits model of the CA at ``directory_url``, as far as acmecerts knows it.

    :data:`LETS_ENCRYPT` for Let's Encrypt's production directory,
    :data:`LETS_ENCRYPT_STAGING` for its staging directory, :data:`NO_LIMITS` for any other
    CA (its ledger still learns from the CA's ``rateLimited`` answers). Pass a
    model yourself for a CA whose limits you know, or after an override was granted. The
    CLI's ``--rate-limits auto``, :func:`~acmecerts.manager.open_manager` and
    :class:`~acmecerts.AcmeClient`'s ``request_rates="auto"`` all choose with it.

    Raises:
        InvalidInput: ``directory_url`` is no directory URL (see
            :class:`~acmecerts.DirectoryUrl`: an absolute https URL with a host).
    """
    return _MODELS_BY_HOST.get(DirectoryUrl(directory_url).host, NO_LIMITS)
