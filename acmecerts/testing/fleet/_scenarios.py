"""The named scenarios: who appears when, what the CA does, from a size and a seed.

A :class:`Scenario` builds a :class:`Plan` from ``(certificates, days, seed)``: the
services (one certificate each, one name each), the fleet's events (a service added or
removed at an instant), the simulated CA's options (outages, always-failing names, a
mass revocation) and the profile ordered. The same arguments give the same plan.

Names: ``svc<i>.d<k>.example`` with ``k = i % domains``, so each registered domain
(``d<k>.example``) carries ``certificates / domains`` names.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import random
from collections.abc import Callable
from typing import Any, Literal

from acmecerts.errors import InvalidInput
from acmecerts.testing.simulated_ca import MassRevocation, Outage

__all__ = ["SCENARIOS", "FleetEvent", "Plan", "Scenario", "Service", "scenario"]

#: Where every scenario but (b) starts (the day acmecerts' test bed lives in).
DEFAULT_START = _dt.datetime(2026, 12, 2, tzinfo=_dt.UTC)
#: (b) starts three weeks before classic's step to 64 days (2027-02-10).
STEADY_START = _dt.datetime(2027, 1, 20, tzinfo=_dt.UTC)
_DAY = _dt.timedelta(days=1)
_HOUR = _dt.timedelta(hours=1)


@dataclasses.dataclass(frozen=True, slots=True)
class Service:
    """One service: a certificate named ``name`` for ``identifiers``."""

    name: str
    identifiers: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class FleetEvent:
    """At ``at``, the service ``name`` appears (``"add"``) or is deleted (``"remove"``)."""

    at: _dt.datetime
    action: Literal["add", "remove"]
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """One reproducible run: the fleet's life and the CA's, from a scenario and a seed."""

    scenario: str
    seed: int
    start: _dt.datetime
    days: float
    profile: str
    domains: int
    #: Every service that appears at some point, by name.
    services: dict[str, Service]
    #: The fleet's events, in time order (the first adds are at ``start``).
    events: tuple[FleetEvent, ...]
    #: Keyword arguments of :class:`~acmecerts.testing.simulated_ca.SimulatedCA`.
    ca_options: dict[str, Any]
    #: How many replicas of the strategy run, sharing one store.
    replicas: int = 1
    #: Names whose validation always fails (left out of coverage; watched for pauses).
    zombies: frozenset[str] = frozenset()
    #: ``(replica, at)``: that replica (its index) stops at ``at`` and serves nothing more.
    replica_stops: tuple[tuple[int, _dt.datetime], ...] = ()

    @property
    def end(self) -> _dt.datetime:
        """When the run ends."""
        return self.start + self.days * _DAY

    @property
    def outage(self) -> Outage | None:
        """The CA's outage, if the plan has one."""
        outages: tuple[Outage, ...] = self.ca_options.get("outages", ())
        return outages[0] if outages else None

    @property
    def revocation(self) -> MassRevocation | None:
        """The mass revocation, if the plan has one."""
        revocation: MassRevocation | None = self.ca_options.get("mass_revocation")
        return revocation


#: Builds a plan: ``(certificates, days, seed) -> Plan``.
Builder = Callable[[int, float, int], Plan]


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """A named, documented way for a fleet to live; :meth:`plan` makes one run of it."""

    name: str
    title: str
    description: str
    build: Builder
    certificates: int
    days: float

    def plan(
        self, certificates: int | None = None, days: float | None = None, seed: int = 0
    ) -> Plan:
        """The plan for this size (the scenario's defaults where ``None``) and seed."""
        n = self.certificates if certificates is None else certificates
        d = self.days if days is None else days
        if n < 1:
            raise InvalidInput(f"a fleet needs at least one certificate, not {n}")
        if not d > 0:
            raise InvalidInput(f"a run lasts a positive number of days, not {d}")
        return self.build(n, d, seed)


def _services(n: int, domains: int) -> dict[str, Service]:
    out: dict[str, Service] = {}
    for i in range(n):
        name = f"svc{i}.d{i % domains}.example"
        out[name] = Service(name, (name,))
    return out


def _domains_for(n: int) -> int:
    """Enough registered domains that the first issuance fits each one's weekly 50."""
    return max(1, math.ceil(n / 40))


def _all_at(start: _dt.datetime, services: dict[str, Service]) -> tuple[FleetEvent, ...]:
    return tuple(FleetEvent(start, "add", name) for name in services)


def _plan(name: str, n: int, days: float, seed: int, **kw: Any) -> Plan:
    start = kw.pop("start", DEFAULT_START)
    domains = kw.pop("domains", _domains_for(n))
    services = _services(n, domains)
    events = kw.pop("events", None)
    return Plan(
        scenario=name,
        seed=seed,
        start=start,
        days=days,
        profile=kw.pop("profile", "tlsserver"),
        domains=domains,
        services=services,
        events=events if events is not None else _all_at(start, services),
        ca_options=kw.pop("ca_options", {}),
        **kw,
    )


def onboarding(n: int, days: float, seed: int) -> Plan:
    """(a) ``n`` names over 20 registered domains appear at once on day 0."""
    return _plan("onboarding", n, days, seed, domains=min(20, n))


def steady(n: int, days: float, seed: int) -> Plan:
    """(b) classic certificates through 2027-02-10 (64 d) and 2028-02-16 (45 d).

    The fleet arrives spread evenly over its first 30 days (a fleet in its steady
    state has certificates of every age), starting 2027-01-20 with 90-day certificates.
    """
    rng = random.Random(seed)  # noqa: S311 - a simulation, reproducible by seed
    domains = _domains_for(n)
    services = _services(n, domains)
    events = sorted(
        (
            FleetEvent(STEADY_START + rng.uniform(0, min(30.0, days)) * _DAY, "add", name)
            for name in services
        ),
        key=lambda e: (e.at, e.name),
    )
    return _plan(
        "steady", n, days, seed, start=STEADY_START, profile="classic", events=tuple(events)
    )


def churn(n: int, days: float, seed: int) -> Plan:
    """(c) every day 5 % of the live services are deleted, and each is created again
    later: half of them within 7 days (the duplicate window), half after 7 to 14 days.
    """
    rng = random.Random(seed)  # noqa: S311 - a simulation, reproducible by seed
    start = DEFAULT_START
    services = _services(n, _domains_for(n))
    events = list(_all_at(start, services))
    back_at: dict[str, _dt.datetime] = {}  # deleted services, and when they come back
    for day in range(1, math.ceil(days)):
        today = start + day * _DAY
        for name, when in list(back_at.items()):
            if when < today:
                del back_at[name]
        live = [s for s in services if s not in back_at]
        for name in rng.sample(live, k=min(len(live), round(0.05 * len(services)))):
            gone = today + rng.uniform(0, 24) * _HOUR
            away = rng.uniform(1 / 24, 7) if rng.random() < 0.5 else rng.uniform(7, 14)
            back = gone + away * _DAY
            events.append(FleetEvent(gone, "remove", name))
            events.append(FleetEvent(back, "add", name))
            back_at[name] = back
    events.sort(key=lambda e: (e.at, e.name))
    return _plan("churn", n, days, seed, events=tuple(events))


def outage(n: int, days: float, seed: int) -> Plan:
    """(d) the CA answers ``503`` (no ``Retry-After``) for 6 hours, in the renewal window.

    160-hour ``shortlived`` certificates issued on day 0 are due for renewal at half their
    life (80 h): the outage starts then, so a whole fleet's renewals meet it.
    """
    start = DEFAULT_START
    cut = Outage(start + 80 * _HOUR, _dt.timedelta(hours=6))
    return _plan("outage", n, days, seed, profile="shortlived", ca_options={"outages": (cut,)})


def revocation(n: int, days: float, seed: int) -> Plan:
    """(e) on day 2, 30 % of the certificates must be replaced within 24 hours."""
    start = DEFAULT_START
    at = start + 2 * _DAY
    staged = MassRevocation(at, 0.30, at + 24 * _HOUR)
    return _plan("revocation", n, days, seed, ca_options={"mass_revocation": staged})


def zombies(n: int, days: float, seed: int) -> Plan:
    """(f) 1 % of the names (at least one) always fail validation."""
    rng = random.Random(seed)  # noqa: S311 - a simulation, reproducible by seed
    plan = _plan("zombies", n, days, seed)
    bad = frozenset(rng.sample(sorted(plan.services), k=max(1, round(0.01 * n))))
    return dataclasses.replace(plan, ca_options={"always_fail": bad}, zombies=bad)


def replicas(n: int, days: float, seed: int) -> Plan:
    """(g) two replicas of the strategy share one store and keep the same fleet."""
    return _plan("replicas", n, days, seed, replicas=2)


def replicas_revocation(n: int, days: float, seed: int) -> Plan:
    """(g) with (e): two replicas, and on day 2 30 % must be replaced within 24 hours."""
    plan = revocation(n, days, seed)
    return dataclasses.replace(plan, scenario="replicas-revocation", replicas=2)


def replicas_failover(n: int, days: float, seed: int) -> Plan:
    """(g) with a replica dying: two replicas of ``shortlived`` (160 h) certificates;
    replica 0 stops for good after 24 hours, and on day 2 30 % must be replaced within 24
    hours. The other replica alone replaces them and renews the whole fleet.
    """
    start = DEFAULT_START
    at = start + 2 * _DAY
    staged = MassRevocation(at, 0.30, at + 24 * _HOUR)
    return _plan(
        "replicas-failover",
        n,
        days,
        seed,
        profile="shortlived",
        replicas=2,
        replica_stops=((0, start + _DAY),),
        ca_options={"mass_revocation": staged},
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("onboarding", "(a) onboarding", onboarding.__doc__ or "", onboarding, 1000, 30),
        Scenario("steady", "(b) steady state", steady.__doc__ or "", steady, 1000, 400),
        Scenario("churn", "(c) churn 5 %/day", churn.__doc__ or "", churn, 1000, 30),
        Scenario("outage", "(d) 6-hour CA outage", outage.__doc__ or "", outage, 1000, 7),
        Scenario(
            "revocation", "(e) mass revocation", revocation.__doc__ or "", revocation, 1000, 5
        ),
        Scenario("zombies", "(f) 1 % zombies", zombies.__doc__ or "", zombies, 1000, 30),
        Scenario("replicas", "(g) two replicas", replicas.__doc__ or "", replicas, 1000, 30),
        Scenario(
            "replicas-revocation",
            "(g)+(e) two replicas, mass revocation",
            replicas_revocation.__doc__ or "",
            replicas_revocation,
            1000,
            5,
        ),
        Scenario(
            "replicas-failover",
            "(g) a replica dies",
            replicas_failover.__doc__ or "",
            replicas_failover,
            1000,
            8,
        ),
    )
}


def scenario(name: str) -> Scenario:
    """The scenario called ``name`` (:class:`~acmecerts.errors.InvalidInput` if none)."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise InvalidInput(
            f"no fleet scenario {name!r} (scenarios: {', '.join(SCENARIOS)})"
        ) from None
