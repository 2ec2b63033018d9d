"""The request throttle: every request to the CA first takes a token of its endpoint class.

:class:`RequestThrottle` does the waiting for the pure buckets of
:mod:`acmecerts.ratelimit._throttle`. One throttle serves every task of a client (and may
be shared by several clients that should count as one, as a CA counting per IP address
does). Per endpoint class, requests that find the bucket empty queue up and are served
first come, first served: only the request at the head of the queue sleeps, on the
injected :class:`~acmecerts.Clock`, until the exact instant its token is there, then hands
the head to the next. A cancelled request leaves the queue (and wakes the next one if it
was at the head). A request that finds a token and nobody queued takes it without waiting
or allocating anything.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as _dt
from collections.abc import Mapping

import anyio

from acmecerts._time import Clock, SystemClock
from acmecerts.errors import InvalidInput
from acmecerts.ratelimit._throttle import (
    EndpointClass,
    RatesTable,
    RequestBucket,
    RequestRates,
)

__all__ = ["RequestThrottle", "ThrottleStats", "throttle_for"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ONE_US = _dt.timedelta(microseconds=1)


@dataclasses.dataclass(frozen=True, slots=True)
class ThrottleStats:
    """What a throttle did for one endpoint class so far."""

    #: Requests that took a token (sent).
    granted: int
    #: Of those, requests that had to wait for their token.
    waited: int
    #: The time they waited, in total (by the throttle's clock).
    waited_seconds: float
    #: Requests waiting right now.
    queued: int


class _Lane:
    """One endpoint class: its bucket and the requests queued for it, head first."""

    __slots__ = ("bucket", "granted", "queue", "wait_us", "waited")

    def __init__(self, bucket: RequestBucket) -> None:
        self.bucket = bucket
        self.queue: collections.deque[anyio.Event] = collections.deque()
        self.granted = 0
        self.waited = 0
        self.wait_us = 0


class RequestThrottle:
    """Keeps one client's requests under per-endpoint request rates.

    Args:
        rates: The rates (:class:`~acmecerts.ratelimit.RequestRates`, or a mapping that
            makes one, e.g. ``{"newOrder": (300, 200)}``, or a model's
            :attr:`~acmecerts.ratelimit.RateLimitModel.request_rates`).
        clock: Where "now" comes from and how to wait (the client's clock).

    Give it to :class:`~acmecerts.transport.AcmeTransport` or
    :class:`~acmecerts.AcmeClient` as ``request_rates=``; pass the same object to several
    clients (on one event loop) to throttle them together.
    """

    __slots__ = ("_clock", "_lanes", "rates")

    def __init__(
        self,
        rates: RatesTable,
        *,
        clock: Clock | None = None,
    ) -> None:
        #: The rates enforced.
        self.rates = rates if isinstance(rates, RequestRates) else RequestRates(rates)
        if not self.rates:
            raise InvalidInput("a request throttle needs at least one rate (or use none)")
        self._clock: Clock = clock or SystemClock()
        self._lanes = {c: _Lane(RequestBucket(r)) for c, r in self.rates.items()}

    @property
    def clock(self) -> Clock:
        """The clock the throttle reads and sleeps on."""
        return self._clock

    def _now_us(self) -> int:
        return (self._clock.now() - _EPOCH) // _ONE_US

    def try_take(self, endpoint: EndpointClass) -> bool:
        """Take a token for ``endpoint`` if one is there and nobody is queued; never waits.

        ``False``: nothing was taken; :meth:`acquire` waits for the token.
        """
        lane = self._lanes.get(endpoint)
        if lane is None:
            return True
        if lane.queue or lane.bucket.take_us(self._now_us()):
            return False
        lane.granted += 1
        return True

    async def acquire(self, endpoint: EndpointClass) -> None:
        """Wait for a token for a request to ``endpoint``, in turn; honours cancellation."""
        if self.try_take(endpoint):
            return
        lane = self._lanes[endpoint]
        me = anyio.Event()
        queue = lane.queue
        queue.append(me)
        started = self._now_us()
        try:
            if queue[0] is not me:
                await me.wait()  # set when the request ahead got its token or left
            while True:
                now = self._now_us()
                wait = lane.bucket.take_us(now)
                if not wait:
                    break
                await self._clock.sleep(wait / 1_000_000)
        finally:
            if queue[0] is me:
                queue.popleft()
                if queue:
                    queue[0].set()  # the next request is the head now
            else:
                queue.remove(me)  # cancelled while others were ahead
        lane.granted += 1
        lane.waited += 1
        lane.wait_us += max(0, now - started)

    def stats(self) -> dict[EndpointClass, ThrottleStats]:
        """What the throttle did so far, per throttled endpoint class."""
        return {
            endpoint: ThrottleStats(
                granted=lane.granted,
                waited=lane.waited,
                waited_seconds=lane.wait_us / 1_000_000,
                queued=len(lane.queue),
            )
            for endpoint, lane in self._lanes.items()
        }

    def __repr__(self) -> str:
        return f"RequestThrottle({self.rates!r})"


def throttle_for(
    request_rates: RequestThrottle | RatesTable | None,
    clock: Clock,
) -> RequestThrottle | None:
    """The throttle ``request_rates`` asks for (``None``: none, as for no rates)."""
    if request_rates is None or isinstance(request_rates, RequestThrottle):
        return request_rates
    if not isinstance(request_rates, Mapping):
        raise InvalidInput(
            "request_rates must be RequestRates, a mapping of endpoint class to "
            f"(rate, burst), a RequestThrottle or None, got {request_rates!r}"
        )
    rates = RequestRates(request_rates)
    return RequestThrottle(rates, clock=clock) if rates else None
