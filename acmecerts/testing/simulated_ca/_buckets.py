"""Let's Encrypt's rate limits as token buckets, kept the way Let's Encrypt keeps them.

Let's Encrypt (Boulder's ``ratelimits`` package) runs every limit as a GCRA token
bucket: a limit of ``count`` per ``period`` refills one token every ``period / count``
and holds at most ``count`` (the burst). A bucket is one number, its "theoretical
arrival time" (TAT): the instant it would be full again. Spending ``cost`` tokens moves
the TAT by ``cost`` emission intervals past ``max(TAT, now)``; the spend is refused when
the new TAT would lie more than a full bucket's worth of intervals past now, and the
refusal's ``Retry-After`` is exactly when enough tokens will have dripped back.

:class:`Buckets` holds the buckets of one limit, keyed by what the limit counts (an
account, a registered domain, an identifier set...). :class:`Limits` names every limit
of the simulated CA with Let's Encrypt's production values (https://letsencrypt.org/docs/
rate-limits/, as of 2026); a simulation passes other values, or ``None`` to switch a
limit off.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Hashable

__all__ = ["Buckets", "Limit", "Limits"]

_HOUR = 3600.0
_DAY = 86_400.0
#: Less than this past the tolerance is float rounding, not a spent bucket: the client's
#: throttle counts exact microseconds, and ``125 * (0.5 / 125)`` is ``0.5000000000000003``.
_ROUNDING = 1e-6


@dataclasses.dataclass(frozen=True, slots=True)
class Limit:
    """``count`` tokens per ``period`` seconds (the burst is ``count``)."""

    count: int
    period: float

    @property
    def interval(self) -> float:
        """Seconds for one token to drip back."""
        return self.period / self.count


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """The limits a :class:`~acmecerts.testing.SimulatedCA` enforces; ``None`` is off.

    Defaults are Let's Encrypt's production values. The per-endpoint request rates are
    ``(requests per second, burst)`` per source address, answered with ``503``; the
    others with ``429 rateLimited``.
    """

    #: New orders per account: 300 per 3 hours (spent by ``newOrder``).
    new_orders_per_account: Limit | None = Limit(300, 3 * _HOUR)
    #: Certificates per registered domain: 50 per 7 days (an IPv4 address, an IPv6 /64
    #: counts as one domain); checked by ``newOrder``, spent by issuance.
    certificates_per_registered_domain: Limit | None = Limit(50, 7 * _DAY)
    #: Certificates per exact identifier set: 5 per 7 days (renewals count too);
    #: checked by ``newOrder``, spent by issuance.
    certificates_per_exact_set: Limit | None = Limit(5, 7 * _DAY)
    #: Failed authorizations per identifier per account: 5 per hour (checked by
    #: ``newOrder``, spent by a failed validation).
    authorization_failures_per_identifier: Limit | None = Limit(5, _HOUR)
    #: Consecutive failed authorizations per identifier per account before the
    #: identifier is paused for that account (1,152; one refills a day; a valid
    #: authorization resets the count). ``None``: never paused.
    consecutive_failures_before_pause: int | None = 1152
    #: New accounts per source address: 10 per 3 hours.
    new_accounts_per_ip: Limit | None = Limit(10, 3 * _HOUR)
    #: Per-endpoint request rates, ``{endpoint: (per second, burst)}``; endpoints are
    #: ``directory``, ``newNonce``, ``newAccount``, ``newOrder``, ``revokeCert``,
    #: ``renewalInfo`` and ``other`` (every other URL). Empty: no request limits.
    request_rates: dict[str, tuple[float, int]] | None = dataclasses.field(  # type: ignore[assignment]
        default_factory=lambda: {
            "directory": (40, 40),
            "newNonce": (20, 10),
            "newAccount": (5, 15),
            "newOrder": (300, 200),
            "revokeCert": (10, 100),
            "renewalInfo": (1000, 100),
            "other": (250, 125),
        }
    )

    @classmethod
    def none(cls) -> Limits:
        """No limit at all (every field ``None``)."""
        return cls(None, None, None, None, None, None, None)


class Buckets:
    """The GCRA buckets of one limit, one per key (see the module docstring)."""

    __slots__ = ("_tat", "interval", "limit", "name", "tolerance")

    def __init__(self, name: str, limit: Limit) -> None:
        self.name = name
        self.limit = limit
        self.interval = limit.interval
        #: How far past now a TAT may lie: a full bucket's worth of intervals.
        self.tolerance = limit.count * self.interval
        self._tat: dict[Hashable, float] = {}

    def wait(self, key: Hashable, now: float, cost: int = 1) -> float:
        """Seconds until ``cost`` tokens are there for ``key`` (0: now). Spends nothing."""
        tat = max(self._tat.get(key, now), now) + cost * self.interval
        over = tat - now - self.tolerance
        return over if over > _ROUNDING else 0.0

    def spend(self, key: Hashable, now: float, cost: int = 1) -> float:
        """Spend ``cost`` tokens if there; else spend nothing. Seconds to wait (0: spent)."""
        tat = max(self._tat.get(key, now), now) + cost * self.interval
        over = tat - now - self.tolerance
        if over > _ROUNDING:
            return over
        self._tat[key] = tat
        return 0.0

    def refund(self, key: Hashable, now: float, cost: int = 1) -> None:
        """Give ``cost`` tokens back (never more than a full bucket)."""
        tat = self._tat.get(key)
        if tat is not None:
            self._tat[key] = max(now, tat - cost * self.interval)

    def remaining(self, key: Hashable, now: float) -> int:
        """Whole tokens left for ``key`` now."""
        tat = max(self._tat.get(key, now), now)
        return int((self.tolerance - (tat - now)) // self.interval)


def seconds_since(start: _dt.datetime, instant: _dt.datetime) -> float:
    """``instant - start`` in seconds (the buckets count on a float time line)."""
    return (instant - start).total_seconds()
