"""The scheduler at rest: a renewalInfo re-check costs no scheduler tick of its own.

A certificate re-checked while the scheduler sleeps until an earlier instant is planned
at that instant's tick (it is due no sooner): no wake-up, no extra tick (issue #26, the
fleet's CPU). What must still wake the scheduler at once: stored certificates waiting
for a read slot (at most ``MAX_LOADS`` read at a time), new certificates.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from acmecerts import VirtualClock
from acmecerts.manager import CertificateManager
from acmecerts.manager._scheduler import MAX_LOADS
from acmecerts.ratelimit import LETS_ENCRYPT
from acmecerts.storage import FileStorage
from acmecerts.testing.simulated_ca import ARI_RETRY_AFTER, SimulatedCA, SimulatedSolver

from ._sim import START, client_for

CERTS = MAX_LOADS + 8  # more than are read from the store at once


@pytest.mark.timeout(120)
def test_a_recheck_at_rest_takes_no_tick_of_its_own(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    rng = random.Random(5)
    # each request takes its own time: re-checks end at instants of their own
    ca = SimulatedCA(clock, seed=5, latency=lambda method, url: rng.uniform(0.05, 3.0))
    names = [f"tick{i}.team{i % 5}.example" for i in range(CERTS)]

    async def main() -> tuple[int, int, int]:
        client = client_for(ca, request_rates=LETS_ENCRYPT.request_rates)
        solvers = [SimulatedSolver(ca.published)]
        async with FileStorage(tmp_path) as storage:
            first = CertificateManager(client, solvers=solvers, clock=clock, storage=storage)
            async with first:
                for name in names:
                    first.manage(name, [name], profile="classic")  # 90 days: no renewal
                await clock.sleep(3600)
            # a restart: every certificate is read from the store, MAX_LOADS at a time
            manager = CertificateManager(client, solvers=solvers, clock=clock, storage=storage)
            scheduler = manager._scheduler
            ticks = 0
            plan_tick = scheduler.plan_tick

            def counted(now: object) -> object:
                nonlocal ticks
                ticks += 1
                return plan_tick(now)  # type: ignore[arg-type]

            scheduler.plan_tick = counted  # type: ignore[method-assign,assignment]
            async with manager:
                for name in names:
                    manager.manage(name, [name], profile="classic")  # 90 days: no renewal
                await clock.sleep(60)
                # every one read from the store, though only MAX_LOADS are read at a
                # time: a read ending starts the next at once (none is issued again)
                issued = sum(1 for n in names if (s := manager.status(n)) and s.not_after)
                assert ca.stats[("newOrder", 201)] == CERTS
                await clock.sleep(ARI_RETRY_AFTER)
                before, ticks = ca.stats[("renewalInfo", 200)], 0
                await clock.sleep(2 * 86400)
                checks = ca.stats[("renewalInfo", 200)] - before
        return issued, checks, ticks

    issued, checks, ticks = clock.run(main)
    assert issued == CERTS
    assert CERTS * 8 - CERTS <= checks <= CERTS * 8 + CERTS, checks
    # one tick at each due instant at most; a re-check's end wakes nothing (before: a
    # tick at each due instant and another after each re-check, twice as many)
    assert ticks <= 1.2 * checks, (ticks, checks)
