"""The scheduler at rest: a renewalInfo re-check costs no scheduler tick of its own.

A certificate re-checked while the scheduler sleeps until an earlier instant is planned
at that instant's tick (it is due no sooner): no wake-up, no extra tick (issue #26, the
fleet's CPU). What must still wake the scheduler at once: stored certificates waiting
for a read slot (at most ``MAX_LOADS`` read at a time), new certificates.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest
from requests_seen import on_requests

from acmecerts import VirtualClock
from acmecerts.manager import CertificateManager
from acmecerts.manager._scheduler import MAX_LOADS, RECHECK_LANES, on_recheck_grid
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


@pytest.mark.timeout(120)
def test_rechecks_due_together_share_one_tick_and_a_few_lane_tasks() -> None:
    """Re-checks come on the 1-minute grid; those due at one instant share its tick and
    at most ``RECHECK_LANES`` tasks (not one task per re-check: issue #26)."""
    clock = VirtualClock(START)
    ca = SimulatedCA(clock, seed=7)
    names = [f"lane{i}.team{i % 5}.example" for i in range(CERTS)]
    asked: list[dt.datetime] = []

    async def main() -> tuple[int, int]:
        client = client_for(ca, request_rates=LETS_ENCRYPT.request_rates)
        client.subscribe(
            on_requests(lambda method, url: asked.append(clock.now()) if "renewal" in url else None)
        )
        manager = CertificateManager(client, solvers=[SimulatedSolver(ca.published)], clock=clock)
        loop = asyncio.get_running_loop()
        tasks = 0

        def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> Any:
            nonlocal tasks
            tasks += 1
            return asyncio.Task(coro, loop=loop, **kw)

        async with manager:
            for name in names:
                manager.manage(name, [name], profile="classic")  # 90 days: no renewal
            await clock.sleep(ARI_RETRY_AFTER)
            asked.clear()
            loop.set_task_factory(counting_factory)
            await clock.sleep(2 * 86400)
            loop.set_task_factory(None)
        return tasks, len(set(asked))

    tasks, instants = clock.run(main)
    assert CERTS * 8 - CERTS <= len(asked) <= CERTS * 8 + CERTS, len(asked)
    assert all(at == on_recheck_grid(at) for at in asked), asked  # on the grid
    # the certificates were issued within minutes: their re-checks share few instants,
    # and each instant at most RECHECK_LANES tasks (before: a task per re-check)
    assert instants < len(asked) / 4, (instants, len(asked))
    assert tasks <= instants * RECHECK_LANES, (tasks, instants)
    assert tasks < len(asked) / 2, (tasks, len(asked))
