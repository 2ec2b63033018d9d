"""Replicas sharing a store share the renewalInfo polling: one asks, the others back it up.

Every replica manages every certificate, so without this each one asks the CA for each
certificate's ARI window at the CA's ``Retry-After`` (six hours at Let's Encrypt): two
replicas send twice the renewalInfo requests RFC 9773 asks for, three thrice.

The rule costs no store operation and needs no replica count or identity:

* A certificate this replica issued, or read from the store when it first looked (at
  start: its writer is unknown, maybe a predecessor that is gone), is re-checked at the
  CA's ``Retry-After``.
* A certificate *another replica wrote while this one runs* (found in the store in
  place of the one held, the manager's "written by a replica" path, which publishes
  :class:`~acmecerts.manager.CertificateLoaded`) is re-checked ``factor`` times as
  rarely (4 by default: every 24 hours at Let's Encrypt). Its writer asks at the CA's
  rate; this replica is the safety net.

So each certificate is asked about at the CA's rate by the replica that issued it and at
a quarter of it by each other one: 1.25 times the protocol's rate with two replicas, 1.5
with three. When a replica dies, the others still ask about its certificates every
``factor`` times the ``Retry-After`` and renew them in their windows (after which they ask at the
full rate); a mass revocation is still caught early, since the first certificate found to
need replacing makes the manager re-check every certificate at once (its sweep), and the
lifetime-based fallback renewal is unchanged. A restart makes a replica ask about every
certificate at the full rate until it sees other replicas' writes (more requests, never
fewer).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt

from acmecerts.errors import InvalidInput
from acmecerts.manager._core import FleetCore
from acmecerts.manager._entry import Entry

#: How many times as rarely a replica re-checks a certificate another replica wrote.
DEFAULT_REPLICA_RECHECK_FACTOR = 4.0


def recheck_factor(value: float) -> float:
    """``value`` checked as a ``replica_recheck_factor`` (at least 1, finite)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value < 1e6:
        raise InvalidInput(
            f"replica_recheck_factor must be a number from 1 (every replica asks at the "
            f"CA's rate) up, not {value!r}"
        )
    return float(value)


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaRechecks:
    """Stretches the ARI re-check of certificates another replica wrote (``factor``)."""

    factor: float = DEFAULT_REPLICA_RECHECK_FACTOR

    def stretch(self, core: FleetCore, entry: Entry, asked_at: _dt.datetime) -> None:
        """After an ARI answer asked at ``asked_at``: re-check later if another wrote it
        (recorded by the core: :meth:`FleetCore.stretched`)."""
        core.stretched(entry, asked_at, self.factor)
