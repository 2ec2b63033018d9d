"""200 certificates kept by the real CertificateManager for 30 simulated days, in seconds."""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path

import pytest

from acmecerts import VirtualClock
from acmecerts.manager import CertificateManager
from acmecerts.ratelimit import LETS_ENCRYPT
from acmecerts.storage import FileStorage
from acmecerts.testing.simulated_ca import SimulatedCA, SimulatedSolver

from ._sim import START, client_for


@pytest.mark.timeout(120)
def test_200_certificates_over_30_days(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    ca = SimulatedCA(clock, seed=7)
    names = [f"svc{i}.team{i % 10}.example" for i in range(200)]

    async def main() -> list[_dt.datetime | None]:
        # Let's Encrypt's request rates, as the client keeps them against Let's Encrypt
        # (the simulated CA's URL is not Let's Encrypt's, so "auto" would pick none: 16
        # attempts at once then exceed 250 requests/s of virtual time and get 503s)
        client = client_for(ca, request_rates=LETS_ENCRYPT.request_rates)
        manager = CertificateManager(
            client,
            solvers=[SimulatedSolver(ca.published)],
            clock=clock,
            storage=FileStorage(tmp_path),
        )
        async with manager:
            for name in names:
                manager.manage(name, [name], profile="tlsserver")
            await clock.sleep(30 * 86400)
            return [s.not_after if (s := manager.status(n)) else None for n in names]

    began = time.perf_counter()
    expiries = clock.run(main)
    elapsed = time.perf_counter() - began
    end = clock.now()
    assert end >= START + _dt.timedelta(days=30)
    assert all(e is not None and e > end for e in expiries), "every certificate valid at the end"
    orders = ca.stats[("newOrder", 201)]
    # 200 first issuances; 45-day certificates renew at 2/3 (day 30) - a few may fall in
    assert 200 <= orders <= 400
    assert ca.stats[("renewalInfo", 200)] >= 200
    # 10 teams x 20 names: under every limit, so no 429 at all
    assert not [k for k in ca.refusals if not k.startswith("request_rate:")], ca.refusals
    # the client's throttle at Let's Encrypt's rates and the CA's buckets agree (they
    # disagreed by float rounding at a full burst until h/fleet: a 503 now and then)
    assert not ca.refusals, ca.refusals
    print(
        f"200 certs / 30 days: {elapsed:.1f} s, {orders} orders, "
        f"{ca.stats[('renewalInfo', 200)]} renewalInfo, {clock.jumps} jumps"
    )
    assert elapsed < 60
