"""``FleetRun``: one scenario, one size, one seed, one strategy, on the simulated CA."""

from __future__ import annotations

import os
import resource
import tempfile
import time
from pathlib import Path

import anyio

from acmecerts import VirtualClock
from acmecerts.storage import FileStorage
from acmecerts.testing.fleet._counting import CountingStorage
from acmecerts.testing.fleet._measures import Measures, Sampler, ca_measures, lower_bound_hours
from acmecerts.testing.fleet._scenarios import Plan, Scenario, scenario
from acmecerts.testing.fleet._strategy import AcmecertsStrategy, FleetContext, Running, Strategy
from acmecerts.testing.simulated_ca import SimulatedCA

__all__ = ["FleetRun"]


class FleetRun:
    """Runs a scenario on a :class:`~acmecerts.testing.simulated_ca.SimulatedCA` on a
    :class:`~acmecerts.VirtualClock` and returns its :class:`Measures`::

        measures = FleetRun("churn", certificates=200, days=14, seed=1).run()
        assert measures.expired_certificate_hours == 0

    Args:
        scenario: A name of :data:`SCENARIOS` or a :class:`Scenario`.
        certificates: The fleet's size (the scenario's default if ``None``).
        days: Simulated days (the scenario's default if ``None``).
        seed: Seeds the plan, the CA and the strategy's randomness.
        strategy: How the fleet is kept (:class:`AcmecertsStrategy` by default).
        directory: Where the :class:`~acmecerts.storage.FileStorage` lives (if ``None``, a
            temporary directory, removed afterwards, in memory on ``/dev/shm`` where
            there is one: the same store, its ``fsync`` costing nothing).
        sample_every: Seconds of simulated time between coverage samples.
    """

    def __init__(
        self,
        scenario: str | Scenario,
        *,
        certificates: int | None = None,
        days: float | None = None,
        seed: int = 0,
        strategy: Strategy | None = None,
        directory: str | Path | None = None,
        sample_every: float = 3600.0,
    ) -> None:
        chosen = scenario if isinstance(scenario, Scenario) else _scenario(scenario)
        self.plan: Plan = chosen.plan(certificates, days, seed)
        self.strategy: Strategy = AcmecertsStrategy() if strategy is None else strategy
        self.directory = directory
        self.sample_every = sample_every
        #: Set by :meth:`run`: the CA and the counted store, to look at afterwards.
        self.ca: SimulatedCA | None = None
        self.storage: CountingStorage | None = None

    def run(self) -> Measures:
        """Run the plan to its end (blocking; its own event loop) and measure it."""
        if self.directory is not None:
            return self._run(Path(self.directory))
        with tempfile.TemporaryDirectory(prefix="acmecerts-fleet-", dir=_memory()) as tmp:
            return self._run(Path(tmp))

    def _run(self, directory: Path) -> Measures:
        plan = self.plan
        clock = VirtualClock(plan.start)
        ca = SimulatedCA(clock, seed=plan.seed, **plan.ca_options)
        storage = CountingStorage(FileStorage(directory, clock=clock))
        self.ca, self.storage = ca, storage
        sampler = Sampler(plan, ca, storage, self.sample_every)
        context = FleetContext(plan, clock, ca, storage)
        measures = Measures(
            plan.scenario,
            self.strategy.name,
            len(plan.services),
            plan.days,
            plan.seed,
            plan.replicas,
        )

        async def main() -> int:
            async with self.strategy.start(context) as running, anyio.create_task_group() as tg:
                tg.start_soon(self._drive, running, sampler, clock)
                uncovered = await self._sample(running, sampler, clock)
                tg.cancel_scope.cancel()
            await storage.aclose()
            return uncovered

        wall, cpu = time.perf_counter(), time.process_time()
        measures.uncovered_at_end = clock.run(main)
        measures.wall_seconds = round(time.perf_counter() - wall, 2)
        measures.cpu_seconds = round(time.process_time() - cpu, 2)
        measures.cpu_seconds_per_day = round(measures.cpu_seconds / plan.days, 3)
        # Linux reports kibibytes: the process's peak, this run's or an earlier one's
        measures.peak_rss_mib = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        measures.lower_bound_hours = round(lower_bound_hours(plan, ca.limits), 3)
        measures.missing_certificate_hours = sampler.missing_hours
        measures.expired_certificate_hours = sampler.expired_hours
        measures.store_ops = storage.total
        measures.store_ops_by_kind = dict(storage.ops)
        measures.store_ops_at_rest = sampler.rest_ops
        measures.certificate_days_at_rest = round(sampler.rest_cert_days, 2)
        if sampler.rest_cert_days:
            measures.store_ops_per_certificate_day_at_rest = round(
                sampler.rest_ops / sampler.rest_cert_days, 4
            )
        ca_measures(measures, plan, ca, sampler)
        busy_ops = storage.total - sampler.rest_ops
        if measures.issued:
            measures.store_ops_per_issued_certificate = round(busy_ops / measures.issued, 2)
        measures.peak_orders_per_hour = sampler.peak_orders
        return measures

    async def _drive(self, running: Running, sampler: Sampler, clock: VirtualClock) -> None:
        """The fleet's life: add and remove services at their instants."""
        plan = self.plan
        for event in plan.events:
            wait = (event.at - clock.now()).total_seconds()
            if wait > 0:
                await clock.sleep(wait)
            service = plan.services[event.name]
            if event.action == "add":
                sampler.added(service)
                running.add(service)
            else:
                sampler.removed(service)
                await running.remove(service)

    async def _sample(self, running: Running, sampler: Sampler, clock: VirtualClock) -> int:
        """Sample every ``sample_every`` seconds until the plan's end; uncovered then."""
        start, every = self.plan.start, self.sample_every
        for k in range(1, int(self.plan.days * 86_400 // every) + 1):
            wait = (start - clock.now()).total_seconds() + k * every
            await clock.sleep(wait)
            sampler.sample(running, clock.now())
        await clock.sleep((self.plan.end - clock.now()).total_seconds())
        return sampler.uncovered(running, clock.now())


def _memory() -> str | None:
    """A directory in memory for the run's store (tmpfs), or ``None``: the default."""
    shm = Path("/dev/shm")  # noqa: S108 (TemporaryDirectory makes a private one inside)
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def _scenario(name: str) -> Scenario:
    return scenario(name)
