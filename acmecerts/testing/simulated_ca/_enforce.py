"""Applying Let's Encrypt's limits to requests: what is checked and spent, and when.

* ``newOrder`` (:meth:`Enforcer.new_order`): an order with ``replaces`` (an ARI renewal)
  is exempt from every limit. Otherwise: a paused identifier refuses; failed
  authorizations per identifier, the exact set and (unless the order renews an
  identical set) certificates per registered domain are *checked*; new orders per
  account is *spent* (unless a renewal). The first limit that refuses answers.
* Issuance (:meth:`Enforcer.issued`): the exact set's and (unless a renewal) every
  registered domain's bucket are spent; ARI renewals spend nothing.
* A failed authorization (:meth:`Enforcer.authorization_failed`) spends the
  identifier's failure bucket and counts a consecutive failure (a valid one resets the
  count); reaching the pause threshold pauses the identifier for the account.
* ``newAccount`` spends the source address's bucket; every request spends its
  endpoint's request-rate bucket (a refusal there is a ``503``).

Every refusal is a :class:`Refusal` with the seconds of ``Retry-After`` (rounded up).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import ipaddress
import math
from collections import Counter
from collections.abc import Hashable

from acmecerts.ratelimit import registered_domain
from acmecerts.testing.simulated_ca._buckets import Buckets, Limit, Limits

__all__ = ["Enforcer", "Refusal"]

Ident = tuple[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """A limit said no: answer ``status`` with ``Retry-After: retry_after``."""

    limit: str
    detail: str
    retry_after: int
    status: int = 429


def domain_of(ident: Ident) -> str:
    """What the per-domain limit counts: the registered domain, an IPv4 address, an
    IPv6 /64 (from the Public Suffix List, via :func:`acmecerts.ratelimit.registered_domain`)."""
    kind, value = ident
    if kind == "ip":
        address = ipaddress.ip_address(value)
        if address.version == 6:
            return str(ipaddress.IPv6Network((address, 64), strict=False))
        return address.compressed
    return registered_domain(value)


def _after(seconds: float) -> int:
    return max(1, math.ceil(seconds))


class Enforcer:
    """The limits of one simulated CA, on a float time line (seconds since its start)."""

    def __init__(self, limits: Limits, start: _dt.datetime) -> None:
        self.limits = limits
        self.start = start
        self._buckets: dict[str, Buckets] = {}
        for name in (
            "new_orders_per_account",
            "certificates_per_registered_domain",
            "certificates_per_exact_set",
            "authorization_failures_per_identifier",
            "new_accounts_per_ip",
        ):
            limit = getattr(limits, name)
            if limit is not None:
                self._buckets[name] = Buckets(name, limit)
        self._rates: dict[str, Buckets] = {}
        for endpoint, (per_second, burst) in (limits.request_rates or {}).items():
            self._rates[endpoint] = Buckets(endpoint, Limit(burst, burst / per_second))
        #: Consecutive failed authorizations per (account, identifier).
        self.consecutive: Counter[tuple[int, Ident]] = Counter()
        #: Identifiers paused per account.
        self.paused: set[tuple[int, Ident]] = set()

    def _t(self, now: _dt.datetime) -> float:
        return (now - self.start).total_seconds()

    def _check(self, name: str, key: Hashable, now: float) -> float:
        bucket = self._buckets.get(name)
        return 0.0 if bucket is None else bucket.wait(key, now)

    def request(self, endpoint: str, source: str, now: _dt.datetime) -> Refusal | None:
        """Spend a request token of ``endpoint`` for ``source``; a 503 refusal if none."""
        bucket = self._rates.get(endpoint) or self._rates.get("other")
        if bucket is None:
            return None
        wait = bucket.spend(source, self._t(now))
        if wait <= 0:
            return None
        return Refusal(
            f"request_rate:{endpoint}",
            f"too many requests to {endpoint}: retry after {_after(wait)} s",
            _after(wait),
            status=503,
        )

    def new_account(self, source: str, now: _dt.datetime) -> Refusal | None:
        """Spend the source address's registration token."""
        bucket = self._buckets.get("new_accounts_per_ip")
        if bucket is None:
            return None
        wait = bucket.spend(source, self._t(now))
        if wait <= 0:
            return None
        return Refusal(
            "new_accounts_per_ip",
            f"too many new registrations from {source}: retry after {_after(wait)} s",
            _after(wait),
        )

    def new_order(
        self,
        account: int,
        identifiers: tuple[Ident, ...],
        *,
        replaces: bool,
        renewal: bool,
        now: _dt.datetime,
    ) -> Refusal | None:
        """Check (and spend what ``newOrder`` spends) for an order (see the module)."""
        if replaces:
            return None
        t = self._t(now)
        for ident in identifiers:
            if (account, ident) in self.paused:
                return Refusal(
                    "paused",
                    f"account {account} is paused for {ident[1]} after "
                    f"{self.limits.consecutive_failures_before_pause} consecutive failed "
                    "authorizations: unpause it at the CA",
                    86_400,
                )
        for ident in identifiers:
            wait = self._check("authorization_failures_per_identifier", (account, ident), t)
            if wait > 0:
                return Refusal(
                    "authorization_failures_per_identifier",
                    f"too many failed authorizations for {ident[1]}: retry after {_after(wait)} s",
                    _after(wait),
                )
        wait = self._check("certificates_per_exact_set", identifiers, t)
        if wait > 0:
            return Refusal(
                "certificates_per_exact_set",
                f"too many certificates for this exact set of identifiers: retry after "
                f"{_after(wait)} s",
                _after(wait),
            )
        if not renewal:
            for domain in sorted({domain_of(ident) for ident in identifiers}):
                wait = self._check("certificates_per_registered_domain", domain, t)
                if wait > 0:
                    return Refusal(
                        "certificates_per_registered_domain",
                        f"too many certificates already issued for {domain}: retry after "
                        f"{_after(wait)} s",
                        _after(wait),
                    )
            orders = self._buckets.get("new_orders_per_account")
            if orders is not None:
                wait = orders.spend(account, t)
                if wait > 0:
                    return Refusal(
                        "new_orders_per_account",
                        f"too many new orders by account {account}: retry after {_after(wait)} s",
                        _after(wait),
                    )
        return None

    def issued(
        self, identifiers: tuple[Ident, ...], *, replaces: bool, renewal: bool, now: _dt.datetime
    ) -> None:
        """Spend what an issuance spends (nothing for an ARI renewal)."""
        if replaces:
            return
        t = self._t(now)
        exact = self._buckets.get("certificates_per_exact_set")
        if exact is not None:
            exact.spend(identifiers, t)
        domains = self._buckets.get("certificates_per_registered_domain")
        if domains is not None and not renewal:
            for domain in {domain_of(ident) for ident in identifiers}:
                domains.spend(domain, t)

    def authorization_failed(self, account: int, ident: Ident, now: _dt.datetime) -> None:
        """Spend the failure token; count the consecutive failure (pause at the threshold)."""
        failures = self._buckets.get("authorization_failures_per_identifier")
        if failures is not None:
            failures.spend((account, ident), self._t(now))
        self.consecutive[(account, ident)] += 1
        threshold = self.limits.consecutive_failures_before_pause
        if threshold is not None and self.consecutive[(account, ident)] >= threshold:
            self.paused.add((account, ident))

    def authorization_valid(self, account: int, ident: Ident) -> None:
        """A valid authorization ends the run of consecutive failures."""
        self.consecutive.pop((account, ident), None)

    def unpause(self, account: int, ident: Ident) -> None:
        """What the unpause page does: the identifier may be ordered again."""
        self.paused.discard((account, ident))
        self.consecutive.pop((account, ident), None)
