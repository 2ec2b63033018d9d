"""Fleets on the simulated Let's Encrypt: named scenarios, a pluggable strategy, measures.

:class:`FleetRun` runs one scenario (:data:`SCENARIOS`: ``onboarding``, ``steady``,
``churn``, ``outage``, ``revocation``, ``zombies``, ``replicas``) at a size and a seed,
with a :class:`Strategy` (acmecerts' own :class:`~acmecerts.CertificateManager` by
default, :class:`AcmecertsStrategy`) against a
:class:`~acmecerts.testing.simulated_ca.SimulatedCA` on a
:class:`~acmecerts.VirtualClock`, over a counted
:class:`~acmecerts.storage.FileStorage`, and returns its :class:`Measures`::

    from acmecerts.testing.fleet import FleetRun

    measures = FleetRun("revocation", certificates=300, days=4, seed=1).run()
    print(measures.replaced_before_deadline)

From a shell: ``python -m acmecerts.testing.fleet churn --certificates 500 --days 30``
prints a table and ``--json PATH`` writes the measures.

To replay a fleet of your own, build a :class:`Plan` (its services and their events)
and pass a :class:`Scenario` whose ``build`` returns it. To measure another client,
write a :class:`Strategy`: a ``name`` and ``start(context)``, an async context manager
yielding a :class:`Running` (``add``, ``remove``, ``serving``).
"""

from __future__ import annotations

from acmecerts.testing.fleet._baselines import (
    STRATEGIES,
    CertbotCron,
    CertManagerPolicy,
    NaiveOperator,
    strategy,
)
from acmecerts.testing.fleet._counting import CountingStorage
from acmecerts.testing.fleet._measures import Measures, lower_bound_hours
from acmecerts.testing.fleet._run import FleetRun
from acmecerts.testing.fleet._scenarios import (
    SCENARIOS,
    FleetEvent,
    Plan,
    Scenario,
    Service,
    scenario,
)
from acmecerts.testing.fleet._strategy import (
    AcmecertsStrategy,
    FleetContext,
    Running,
    Served,
    Strategy,
)

__all__ = [
    "SCENARIOS",
    "STRATEGIES",
    "AcmecertsStrategy",
    "CertManagerPolicy",
    "CertbotCron",
    "CountingStorage",
    "FleetContext",
    "FleetEvent",
    "FleetRun",
    "Measures",
    "NaiveOperator",
    "Plan",
    "Running",
    "Scenario",
    "Served",
    "Service",
    "Strategy",
    "lower_bound_hours",
    "scenario",
    "strategy",
]
