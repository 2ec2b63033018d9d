"""What a fleet run measures (issue #26 item 5), and how.

* **Coverage** is sampled on the virtual clock (every hour by default): a service that
  exists is covered when every replica serves a certificate that is valid now (inside
  its validity and not revoked by a mass revocation's deadline). An uncovered service
  is *missing* until it held a certificate once since it (re)appeared, *expired* after.
  Always-failing names (scenario f) are left out.
* **Time to full coverage** is read from the CA's records: the last first issuance
  among the services of the first instant; its **lower bound** from the limits (tokens
  of certificates per registered domain and of new orders per account, each with its
  burst).
* **Requests** are the CA's counts (:attr:`SimulatedCA.stats`, :attr:`refusals`); what
  the protocol *needs* is ``3 + 2 * names`` requests per issued certificate (newOrder,
  one authorization fetched and one challenge answered per name, finalize, download)
  plus renewalInfo at the CA's ``Retry-After`` (4 a certificate-day).
* **Store operations** come from :class:`CountingStorage`; an hour *at rest* is one with
  no order, no finalize, no fleet event and no store deletion in it (a deletion is the
  purge of a deleted service's certificate when its retention ends: the deferred end
  of a fleet event, not the cost of keeping certificates).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as _dt
import itertools
import math
from typing import Any

from acmecerts.ratelimit import registered_domain
from acmecerts.testing.fleet._counting import CountingStorage
from acmecerts.testing.fleet._scenarios import Plan, Service
from acmecerts.testing.fleet._strategy import Running, Served
from acmecerts.testing.simulated_ca import ARI_RETRY_AFTER, CertificateRecord, Limits, SimulatedCA

__all__ = ["Measures", "Sampler", "lower_bound_hours"]

_HOUR = 3600.0
#: The simulated CA backdates notBefore an hour: a certificate was issued an hour after.
_BACKDATE = _dt.timedelta(hours=1)


def _issued_at(record: CertificateRecord) -> _dt.datetime:
    return record.not_before + _BACKDATE


@dataclasses.dataclass(slots=True)
class Measures:
    """The figures of one run (every field is JSON-ready)."""

    scenario: str
    strategy: str
    certificates: int
    days: float
    seed: int
    replicas: int
    #: Real seconds, CPU seconds (of the process), and peak resident memory.
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    cpu_seconds_per_day: float = 0.0
    peak_rss_mib: float = 0.0
    #: Hours from the start until every service of the first instant held a certificate.
    time_to_full_coverage_hours: float | None = None
    lower_bound_hours: float = 0.0
    missing_certificate_hours: float = 0.0
    expired_certificate_hours: float = 0.0
    #: Services uncovered at the end.
    uncovered_at_end: int = 0
    rate_limit_429: int = 0
    rate_limit_503: int = 0
    #: 503s of the CA's own outage (not a limit).
    outage_503: int = 0
    refusals: dict[str, int] = dataclasses.field(default_factory=dict)
    paused_identifiers: int = 0
    ca_requests: int = 0
    certificate_days: float = 0.0
    ca_requests_per_certificate_day: float = 0.0
    needed_requests_per_certificate_day: float = 0.0
    #: ``ca_requests / needed``: the goal is at most 1.5.
    request_ratio: float = 0.0
    orders: int = 0
    issued: int = 0
    peak_orders_per_hour: int = 0
    renewal_info_requests: int = 0
    store_ops: int = 0
    store_ops_by_kind: dict[str, int] = dataclasses.field(default_factory=dict)
    store_ops_per_issued_certificate: float = 0.0
    store_ops_at_rest: int = 0
    certificate_days_at_rest: float = 0.0
    store_ops_per_certificate_day_at_rest: float = 0.0
    #: (e): certificates the revocation named, and the fraction replaced by the deadline.
    revocation_affected: int | None = None
    replaced_before_deadline: float | None = None
    #: (d): services whose certificate had at least 24 h left when the outage began and
    #: that went uncovered later (the goal: 0), and their uncovered hours.
    outage_lapsed_with_24h: int | None = None
    outage_lapsed_hours: float | None = None
    #: (f): orders sent for always-failing names, and the longest run of failed
    #: authorizations of one of them (the CA pauses at 1,152).
    zombie_orders: int | None = None
    zombie_max_consecutive_failures: int | None = None
    #: Certificates issued for a set less than 6 hours after the previous one for it.
    duplicate_issuances: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The measures as a JSON-ready dictionary."""
        return dataclasses.asdict(self)


def lower_bound_hours(plan: Plan, limits: Limits) -> float:
    """Hours at least, under ``limits``, until every service of the first instant can
    hold a certificate: the slowest registered domain's bucket or the account's orders."""
    first = [plan.services[e.name] for e in plan.events if e.at == plan.start]
    if not first:
        return 0.0
    bound = 0.0
    per_domain = limits.certificates_per_registered_domain
    if per_domain is not None:
        counts = collections.Counter(registered_domain(s.identifiers[0]) for s in first)
        over = max(counts.values()) - per_domain.count
        bound = max(bound, over * per_domain.interval)
    orders = limits.new_orders_per_account
    if orders is not None:
        bound = max(bound, (len(first) - orders.count) * orders.interval)
    return max(0.0, bound) / _HOUR


def _idents(service: Service) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(("dns", i.lower()) for i in service.identifiers))


class Sampler:
    """Samples coverage, requests and store operations every ``interval`` seconds."""

    def __init__(
        self, plan: Plan, ca: SimulatedCA, storage: CountingStorage, interval: float
    ) -> None:
        self.plan, self.ca, self.storage, self.interval = plan, ca, storage, interval
        self.wanted: dict[str, Service] = {}
        #: Services that held a certificate since they last appeared.
        self.held: set[str] = set()
        self.events_since = 0
        self.missing_hours = self.expired_hours = 0.0
        self.cert_days = self.rest_cert_days = 0.0
        self.rest_ops = 0
        self.peak_orders = 0
        self._prev = (0, 0, 0, 0)
        #: (d): each service's earliest expiry among replicas when the outage began.
        self.life_at_outage: dict[str, _dt.datetime] | None = None
        self.lapsed_after_outage: set[str] = set()
        self.lapsed_hours = 0.0
        #: Per service: what it served at its last valid sample, and until when that is
        #: valid (a later sample serving the same needs no look-up in the CA).
        self._valid_until: dict[str, tuple[tuple[Served | None, ...], _dt.datetime]] = {}

    def added(self, service: Service) -> None:
        """A service appeared."""
        self.wanted[service.name] = service
        self.held.discard(service.name)
        self._valid_until.pop(service.name, None)
        self.events_since += 1

    def removed(self, service: Service) -> None:
        """A service was deleted."""
        self.wanted.pop(service.name, None)
        self._valid_until.pop(service.name, None)
        self.events_since += 1

    def _valid_end(self, record: CertificateRecord) -> _dt.datetime:
        """The instant a record valid now stops being valid (expiry, or the revocation's
        deadline if it is among the revoked)."""
        rev = self.plan.revocation
        if rev is not None and _issued_at(record) < rev.at and record.draw < rev.fraction:
            return min(record.not_after, rev.deadline)
        return record.not_after

    def _valid(self, record: CertificateRecord | None, now: _dt.datetime) -> bool:
        if record is None or not record.not_before <= now < record.not_after:
            return False
        rev = self.plan.revocation
        return not (
            rev is not None
            and now >= rev.deadline
            and _issued_at(record) < rev.at
            and record.draw < rev.fraction
        )

    def sample(self, running: Running, now: _dt.datetime) -> None:
        """One sample: coverage of every service, and the interval's counters."""
        hours = self.interval / _HOUR
        certificates = self.ca.certificates
        zombies = self.plan.zombies
        outage = self.plan.outage
        snapshot = self.life_at_outage is None and outage is not None and now >= outage.start
        if snapshot:
            self.life_at_outage = {}
        covered = 0
        valid_until = self._valid_until
        for name in self.wanted:
            if name in zombies:
                continue
            served = tuple(running.serving(name))
            known = valid_until.get(name)
            if known is not None and known[0] == served and now < known[1] and not snapshot:
                covered += 1  # what it serves is unchanged and still valid (most samples)
                continue
            records = [None if s is None else certificates.get(s.serial) for s in served]
            if all(self._valid(r, now) for r in records):
                covered += 1
                self.held.add(name)
                valid_until[name] = (served, min(self._valid_end(r) for r in records if r))
                if snapshot and self.life_at_outage is not None:
                    self.life_at_outage[name] = min(r.not_after for r in records if r)
                continue
            if name in self.held:
                self.expired_hours += hours
                life = (self.life_at_outage or {}).get(name)
                if (
                    outage is not None
                    and life is not None
                    and life - outage.start >= _dt.timedelta(hours=24)
                ):
                    self.lapsed_after_outage.add(name)
                    self.lapsed_hours += hours
            else:
                self.missing_hours += hours
        self.cert_days += covered * hours / 24
        stats = self.ca.stats
        orders, finals = stats[("newOrder", 201)], stats[("finalize", 200)]
        ops = self.storage.total
        deletes = self.storage.ops["delete"]
        d_orders, d_finals = orders - self._prev[0], finals - self._prev[1]
        d_ops, d_deletes = ops - self._prev[2], deletes - self._prev[3]
        self._prev = (orders, finals, ops, deletes)
        self.peak_orders = max(self.peak_orders, math.ceil(d_orders / hours))
        if d_orders == 0 and d_finals == 0 and d_deletes == 0 and self.events_since == 0:
            self.rest_ops += d_ops
            self.rest_cert_days += covered * hours / 24
        self.events_since = 0

    def uncovered(self, running: Running, now: _dt.datetime) -> int:
        """Services not covered at ``now`` (always-failing names left out)."""
        certificates = self.ca.certificates
        count = 0
        for name in self.wanted:
            if name in self.plan.zombies:
                continue
            served = running.serving(name)
            records = [None if s is None else certificates.get(s.serial) for s in served]
            if not all(self._valid(r, now) for r in records):
                count += 1
        return count


def ca_measures(measures: Measures, plan: Plan, ca: SimulatedCA, sampler: Sampler) -> None:
    """Fill in what the CA's records tell (requests, limits, issuance, (e), (f), (g))."""
    stats = ca.stats
    refusals = dict(ca.refusals)
    measures.refusals = refusals
    measures.rate_limit_503 = sum(v for k, v in refusals.items() if k.startswith("request_rate:"))
    measures.rate_limit_429 = sum(refusals.values()) - measures.rate_limit_503
    all_503 = sum(v for (_, status), v in stats.items() if status == 503)
    measures.outage_503 = all_503 - measures.rate_limit_503
    measures.paused_identifiers = len(ca.enforcer.paused)
    measures.ca_requests = sum(stats.values())
    measures.orders = stats[("newOrder", 201)]
    measures.issued = len(ca.certificates)
    measures.renewal_info_requests = sum(v for (e, _), v in stats.items() if e == "renewalInfo")
    cert_days = sampler.cert_days
    measures.certificate_days = round(cert_days, 2)
    needed = float(sum(3 + 2 * len(r.identifiers) for r in ca.certificates.values()))
    needed += cert_days * 86_400 / ARI_RETRY_AFTER
    if cert_days > 0:
        measures.ca_requests_per_certificate_day = measures.ca_requests / cert_days
        measures.needed_requests_per_certificate_day = needed / cert_days
    measures.request_ratio = measures.ca_requests / needed if needed else 0.0
    by_set: dict[tuple[tuple[str, str], ...], list[CertificateRecord]] = {}
    for record in ca.certificates.values():
        by_set.setdefault(record.identifiers, []).append(record)
    for records in by_set.values():
        records.sort(key=lambda r: r.not_before)
    # time to full coverage: the last first issuance among the first instant's services
    first = [plan.services[e.name] for e in plan.events if e.at == plan.start]
    firsts: list[_dt.datetime] = []
    for service in first:
        if service.name in plan.zombies:
            continue
        issued = by_set.get(_idents(service))
        if not issued:
            firsts = []
            break
        firsts.append(_issued_at(issued[0]))
    if firsts:
        measures.time_to_full_coverage_hours = round(
            (max(firsts) - plan.start).total_seconds() / _HOUR, 3
        )
    measures.duplicate_issuances = sum(
        1
        for records in by_set.values()
        for a, b in itertools.pairwise(records)
        if b.not_before - a.not_before < _dt.timedelta(hours=6)
    )
    rev = plan.revocation
    if rev is not None:
        affected = replaced = 0
        for records in by_set.values():
            for i, record in enumerate(records):
                nxt = records[i + 1] if i + 1 < len(records) else None
                # the certificate in use at the instant, issued before it (as the CA counts)
                current = _issued_at(record) < rev.at < record.not_after and (
                    nxt is None or _issued_at(nxt) >= rev.at
                )
                if not current or record.draw >= rev.fraction:
                    continue
                affected += 1
                if nxt is not None and _issued_at(nxt) <= rev.deadline:
                    replaced += 1
        measures.revocation_affected = affected
        measures.replaced_before_deadline = replaced / affected if affected else 1.0
    if plan.outage is not None:
        measures.outage_lapsed_with_24h = len(sampler.lapsed_after_outage)
        measures.outage_lapsed_hours = sampler.lapsed_hours
    if plan.zombies:
        zombie_ids = {("dns", z) for z in plan.zombies}
        measures.zombie_orders = sum(
            1 for o in ca.orders.values() if set(o.identifiers) & zombie_ids
        )
        longest = [n for (_, ident), n in ca.enforcer.consecutive.items() if ident in zombie_ids]
        measures.zombie_max_consecutive_failures = max(longest, default=0)
