"""The request throttle's policy: request rates per ACME endpoint class, as token buckets.

A CA limits how fast one client may call each of its endpoints, apart from what it limits
per domain or account. Let's Encrypt publishes these per-endpoint request rates (per IP
address; https://letsencrypt.org/docs/rate-limits/, "Overall Requests"):

=============  ==========  =====
endpoint       per second  burst
=============  ==========  =====
directory      40          40
newNonce       20          10
newAccount     5           15
newOrder       300         200
revokeCert     10          100
renewalInfo    1000        100
other          250         125
=============  ==========  =====

A request over them is refused with 503 before the CA looks at it. The throttle keeps a
client under them: every request first takes a token of its :class:`EndpointClass`.

* :class:`RequestRate`: ``rate`` tokens per second refill a bucket of ``burst``.
* :class:`RequestRates`: the rate of each throttled endpoint class (a class not named is
  not throttled). :attr:`RateLimitModel.request_rates
  <acmecerts.ratelimit.RateLimitModel.request_rates>` carries them, so the model that
  describes a CA's limits also says how fast to talk to it.
* :class:`RequestBucket` / :class:`RequestBuckets`: the pure arithmetic (no I/O, no
  waiting). Asked at an instant, a bucket either gives a token or names the exact later
  instant the next one is there; it never answers "now" without giving a token, so the
  caller cannot spin. The waiting itself (fair, cancellable, on the injected clock) is
  :class:`acmecerts.transport.RequestThrottle`.

The buckets are GCRA (the "virtual scheduling" form of a token bucket, as Let's Encrypt
itself uses) in integer microseconds, so "the next instant" is exact and repeatable; a
token's interval is ``1 / rate`` rounded *up* to a microsecond, never more generous.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import math
from collections.abc import Iterator, Mapping

from acmecerts.errors import InvalidInput
from acmecerts.ratelimit._instants import from_us, to_us

__all__ = [
    "EndpointClass",
    "RequestBucket",
    "RequestBuckets",
    "RequestRate",
    "RequestRates",
]

_US_PER_SECOND = 1_000_000


class EndpointClass(enum.StrEnum):
    """What a request counts against: the ACME endpoint it goes to, by directory name."""

    #: The directory URL itself.
    DIRECTORY = "directory"
    #: ``newNonce`` (RFC 8555 §7.2).
    NEW_NONCE = "newNonce"
    #: ``newAccount`` (RFC 8555 §7.3), also ``onlyReturnExisting`` look-ups.
    NEW_ACCOUNT = "newAccount"
    #: ``newOrder`` (RFC 8555 §7.4).
    NEW_ORDER = "newOrder"
    #: ``revokeCert`` (RFC 8555 §7.6).
    REVOKE_CERT = "revokeCert"
    #: ``renewalInfo`` and every URL below it (RFC 9773 §4.1).
    RENEWAL_INFO = "renewalInfo"
    #: Everything else: authorizations, challenges, finalize, orders, certificates,
    #: account updates, ``keyChange``.
    OTHER = "other"


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class RequestRate:
    """A request rate: ``rate`` tokens per second refill a bucket that holds ``burst``.

    Args:
        rate: Requests per second in the long run (a positive, finite number, at most
            one per microsecond).
        burst: Requests allowed back to back after a quiet spell (an int, at least 1).

    Over any span of ``t`` seconds a bucket lets through at most ``burst + rate * t``
    requests.
    """

    #: Tokens per second.
    rate: float
    #: Tokens in a full bucket.
    burst: int
    _interval_us: int = dataclasses.field(init=False, compare=False)

    def __post_init__(self) -> None:
        rate, burst = self.rate, self.burst
        if (
            isinstance(rate, bool)
            or not isinstance(rate, (int, float))
            or not math.isfinite(rate)
            or not 0 < rate <= _US_PER_SECOND
        ):
            raise InvalidInput(
                f"a request rate must be a number of requests per second in (0, 1000000], "
                f"got {rate!r}"
            )
        if type(burst) is not int or burst < 1:
            raise InvalidInput(f"a request burst must be an int >= 1, got {burst!r}")
        # Frozen: the checked values are set once, here (``rate`` as a float).
        rate = float(rate)
        object.__setattr__(self, "rate", rate)
        # ceil: a token never comes back sooner than 1/rate says
        object.__setattr__(self, "_interval_us", max(1, math.ceil(_US_PER_SECOND / rate)))

    @property
    def interval(self) -> _dt.timedelta:
        """The time one token takes to come back (``1 / rate``, rounded up to 1 µs)."""
        return _dt.timedelta(microseconds=self._interval_us)

    @property
    def interval_us(self) -> int:
        """:attr:`interval` in whole microseconds."""
        return self._interval_us

    def __repr__(self) -> str:
        return f"RequestRate({self.rate:g}, burst={self.burst})"


#: One class's rate as given: a :class:`RequestRate` or a ``(rate per second, burst)`` pair.
RateSpec = RequestRate | tuple[float, int]
#: Rates as given: :class:`RequestRates`, or a mapping of endpoint class (or its name) to a
#: :data:`RateSpec`.
RatesTable = Mapping[EndpointClass, RateSpec] | Mapping[str, RateSpec]


def _endpoint(key: object) -> EndpointClass:
    try:
        return EndpointClass(key)  # type: ignore[arg-type]
    except ValueError:
        known = ", ".join(c.value for c in EndpointClass)
        raise InvalidInput(f"no endpoint class {key!r} (known: {known})") from None


def _rate(key: EndpointClass, value: object) -> RequestRate:
    if isinstance(value, RequestRate):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        rate, burst = value
        try:
            return RequestRate(rate, burst)
        except InvalidInput as exc:
            raise InvalidInput(f"{key.value}: {exc}") from None
    raise InvalidInput(
        f"{key.value}: give a RequestRate or a (rate per second, burst) pair, got {value!r}"
    )


class RequestRates(Mapping[EndpointClass, RequestRate]):
    """The request rate of each throttled endpoint class; an immutable mapping.

    Args:
        rates: ``{endpoint class: rate}``; keys are :class:`EndpointClass` members or
            their names (``"newOrder"``), values :class:`RequestRate` objects or
            ``(rate per second, burst)`` pairs. A class not named is not throttled;
            no rates at all means no throttle.

    ::

        RequestRates({"newOrder": (300, 200), "other": (250, 125)})

    Bad names and values raise :class:`~acmecerts.errors.InvalidInput`.
    """

    __slots__ = ("_rates",)

    def __init__(self, rates: RatesTable | None = None) -> None:
        if rates is not None and not isinstance(rates, Mapping):
            raise InvalidInput(
                f"request rates are a mapping of endpoint class to rate, got {rates!r}"
            )
        given: dict[EndpointClass, RequestRate] = {}
        for key, value in (rates or {}).items():
            endpoint = _endpoint(key)
            if endpoint in given:
                raise InvalidInput(f"{endpoint.value} is given twice")
            given[endpoint] = _rate(endpoint, value)
        # a fixed order (EndpointClass's), whatever the order given
        self._rates = {c: given[c] for c in EndpointClass if c in given}

    def __getitem__(self, key: EndpointClass) -> RequestRate:
        return self._rates[key]

    def __iter__(self) -> Iterator[EndpointClass]:
        return iter(self._rates)

    def __len__(self) -> int:
        return len(self._rates)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RequestRates):
            return self._rates == other._rates
        return super().__eq__(other)

    def __hash__(self) -> int:
        return hash(tuple(self._rates.items()))

    def with_overrides(self, overrides: RatesTable) -> RequestRates:
        """A copy with the rates of some classes replaced (or added)."""
        merged: dict[EndpointClass | str, RateSpec] = {}
        for rates in (self, RequestRates(overrides)):
            for key, value in rates.items():
                merged[key] = value
        return RequestRates(merged)

    def without(self, *endpoints: EndpointClass | str) -> RequestRates:
        """A copy that does not throttle ``endpoints``."""
        dropped = {_endpoint(e) for e in endpoints}
        return RequestRates({c: r for c, r in self._rates.items() if c not in dropped})

    def __repr__(self) -> str:
        inner = ", ".join(f"{c.value}: {r.rate:g}/s burst {r.burst}" for c, r in self.items())
        return f"RequestRates({{{inner}}})"


class RequestBucket:
    """One endpoint class's token bucket: pure arithmetic on integer microseconds.

    It starts full. :meth:`take_us` either takes a token (answers 0) or, taking nothing,
    answers how many microseconds until the next token is there (always at least 1).
    Asked again at exactly that instant, it gives the token: no busy loop, no drift.
    """

    __slots__ = ("_interval", "_span", "_tat", "rate")

    def __init__(self, rate: RequestRate) -> None:
        if not isinstance(rate, RequestRate):
            raise InvalidInput(f"a bucket needs a RequestRate, got {rate!r}")
        #: The rate this bucket enforces.
        self.rate = rate
        self._interval = rate.interval_us
        #: burst * interval: how far ahead of now the schedule may run
        self._span = rate.interval_us * rate.burst
        #: GCRA's theoretical arrival time: the bucket is full again at this instant
        #: (``None``: it has never been used).
        self._tat: int | None = None

    def take_us(self, now_us: int) -> int:
        """Take a token at ``now_us`` (µs): 0 when one was taken, else µs until the next.

        When the answer is not 0, nothing was taken and the answer is at least 1.
        """
        tat = self._tat
        if tat is None or tat <= now_us:  # full
            self._tat = now_us + self._interval
            return 0
        if tat > now_us + self._span:
            # Only a clock that stepped back gets here (a token taken at t leaves the
            # schedule at most burst intervals ahead of t): treat the bucket as empty.
            tat = now_us + self._span
        # Conforming when the schedule is at most burst - 1 intervals ahead of now.
        wait = tat - self._span + self._interval - now_us
        if wait <= 0:
            self._tat = tat + self._interval
            return 0
        self._tat = tat
        return wait

    def wait_us(self, now_us: int) -> int:
        """µs from ``now_us`` until a token is there (0: there is one now); takes nothing."""
        tat = self._tat
        if tat is None or tat <= now_us:
            return 0
        tat = min(tat, now_us + self._span)
        return max(0, tat - self._span + self._interval - now_us)

    def available_at(self, now_us: int) -> int:
        """Tokens in the bucket at ``now_us`` (0 to ``burst``)."""
        tat = self._tat
        if tat is None or tat <= now_us:
            return self.rate.burst
        ahead = min(tat, now_us + self._span) - now_us
        return (self._span - ahead) // self._interval

    def __repr__(self) -> str:
        return f"RequestBucket({self.rate!r})"


class RequestBuckets:
    """The buckets of one client's throttle, one per throttled endpoint class.

    Pure state: ask it at an instant (an aware ``datetime`` from the client's
    :class:`~acmecerts.Clock`) whether a request may go. :class:`RequestThrottle
    <acmecerts.transport.RequestThrottle>` holds one and does the waiting::

        buckets = RequestBuckets(LETS_ENCRYPT.request_rates)
        when = buckets.take(EndpointClass.NEW_NONCE, clock.now())
        # None: send now; else wait until `when` (always later than now) and ask again
    """

    __slots__ = ("_buckets", "rates")

    def __init__(self, rates: RatesTable) -> None:
        #: The rates the buckets enforce.
        self.rates = rates if isinstance(rates, RequestRates) else RequestRates(rates)
        self._buckets = {c: RequestBucket(r) for c, r in self.rates.items()}

    def bucket(self, endpoint: EndpointClass | str) -> RequestBucket | None:
        """The bucket of ``endpoint`` (``None``: that class is not throttled)."""
        return self._buckets.get(_endpoint(endpoint))

    def take(self, endpoint: EndpointClass | str, now: _dt.datetime) -> _dt.datetime | None:
        """Take a token for a request to ``endpoint`` at ``now``.

        ``None``: a token was taken, send the request. Otherwise nothing was taken and
        the answer is the exact instant the next token is there, always after ``now``.
        """
        return self._next(endpoint, now, take=True)

    def next_instant(self, endpoint: EndpointClass | str, now: _dt.datetime) -> _dt.datetime:
        """When a request to ``endpoint`` could go (``now`` if at once); takes nothing."""
        return self._next(endpoint, now, take=False) or now

    def _next(
        self, endpoint: EndpointClass | str, now: _dt.datetime, *, take: bool
    ) -> _dt.datetime | None:
        """When the next token is there (``None``: at once; then one is taken if ``take``)."""
        bucket = self.bucket(endpoint)
        if bucket is None:
            return None
        now_us = to_us(now)
        wait = bucket.take_us(now_us) if take else bucket.wait_us(now_us)
        return None if wait == 0 else from_us(now_us + wait)

    def available(self, endpoint: EndpointClass | str, now: _dt.datetime) -> int | None:
        """Tokens left for ``endpoint`` at ``now`` (``None``: not throttled)."""
        bucket = self.bucket(endpoint)
        return None if bucket is None else bucket.available_at(to_us(now))

    def __repr__(self) -> str:
        return f"RequestBuckets({self.rates!r})"
