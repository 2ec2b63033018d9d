"""What the fleet core tells its driver to do: small frozen actions, carried out in order.

A transition of :class:`~acmecerts.manager._core.FleetCore` that needs I/O or a wake-up
returns a tuple of these; the driver
(:meth:`~acmecerts.manager._attempts.AttemptRunner.carry_out`) does exactly that, in
the order given, and decides nothing itself. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses

from acmecerts._issued import IssuedCertificate
from acmecerts.manager._entry import Entry
from acmecerts.protocol.identifiers import Identifier

__all__ = [
    "Action",
    "PlanFirstCheck",
    "Replan",
    "Retire",
    "SaveCertificate",
    "SaveState",
]


@dataclasses.dataclass(frozen=True, slots=True)
class SaveCertificate:
    """Store ``certificate`` as ``name``'s, before the core counts it as held.

    If the store fails here the attempt is retried on the error backoff and resumes its
    recorded order, instead of holding a certificate no store has (which no other
    process would ever see). The order's record stays: it names this certificate's
    order, finished by rule; the next order's intent overwrites it.
    """

    name: str
    certificate: IssuedCertificate


@dataclasses.dataclass(frozen=True, slots=True)
class SaveState:
    """Store ``entry``'s attempt state (as it is when carried out), then tell the core
    (:meth:`~acmecerts.manager._core.FleetCore.state_saved`)."""

    entry: Entry


@dataclasses.dataclass(frozen=True, slots=True)
class PlanFirstCheck:
    """Plan the renewal of the certificate ``entry`` just obtained: its first ARI check
    later, or its window asked for now
    (:meth:`~acmecerts.manager._renewals.RenewalPlanner.plan_obtained`)."""

    entry: Entry


@dataclasses.dataclass(frozen=True, slots=True)
class Retire:
    """``name`` is no longer managed: keep its stored certificate for the retention,
    then purge it (:class:`~acmecerts.manager._retention.RetiredCertificates`).

    ``identifiers`` are its last spec's (``None``: not known here); carried out outside
    the certificate's store lock (a purge takes it), and skipped when the name is
    managed again by then.
    """

    name: str
    identifiers: tuple[Identifier, ...] | None


@dataclasses.dataclass(frozen=True, slots=True)
class Replan:
    """``entry`` may need work at another time: plan it again, waking the scheduler when
    it is due sooner than the loop sleeps
    (:meth:`~acmecerts.manager._scheduler.Scheduler.changed`)."""

    entry: Entry


#: One thing the driver does for the core.
Action = SaveCertificate | SaveState | PlanFirstCheck | Retire | Replan
