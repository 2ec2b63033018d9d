"""The manager under a ledger deferral: those deferred on one bucket queue, one token
apart, instead of all waking at the instant the next token is back (issue #26).

Found by the fleet simulation: 1,000 names on day 0 (300 orders per account per 3 h)
left 700 certificates deferred to the same instant; one got the token, the others were
deferred again, and so on: about n²/2 attempts for n deferred (each building a key and
a CSR and writing the store), minutes of CPU for 1,000 certificates.
"""

from __future__ import annotations

import datetime as _dt

import pytest

from acmecerts import VirtualClock
from acmecerts.manager import CertificateDeferred, CertificateEvent, CertificateManager
from acmecerts.ratelimit import Limit, RateLimitLedger, RateLimitModel, Scope
from acmecerts.testing.simulated_ca import Limit as CaLimit
from acmecerts.testing.simulated_ca import Limits, SimulatedCA, SimulatedSolver

from ._sim import START, client_for

HOUR = 3600.0


@pytest.mark.timeout(60)
def test_certificates_deferred_on_one_bucket_wake_one_token_apart() -> None:
    clock = VirtualClock(START)
    # 10 new orders per account per 3 hours, at the CA and in the ledger: one every 18 min
    ca = SimulatedCA(clock, seed=1, limits=Limits(new_orders_per_account=CaLimit(10, 3 * HOUR)))
    model = RateLimitModel(
        [Limit("new_orders_per_account", 10, 3 * HOUR, Scope.ACCOUNT, renewal_exempt=True)],
        name="ten-per-3h",
    )
    names = [f"q{i}.d{i}.example" for i in range(30)]
    deferrals: list[CertificateEvent] = []

    async def main() -> _dt.datetime:
        client = client_for(ca, ledger=RateLimitLedger(model, clock=clock))
        manager = CertificateManager(
            client, solvers=[SimulatedSolver(ca.published)], clock=clock, concurrency=4
        )
        manager.subscribe(
            lambda e: deferrals.append(e) if isinstance(e, CertificateDeferred) else None
        )
        async with manager:
            for name in names:
                manager.manage(name, [name], profile="tlsserver")
            while any(manager.get(n) is None for n in names):
                await clock.sleep(60)
            return clock.now()

    done = clock.run(main)
    assert len(ca.certificates) == 30
    assert not ca.refusals  # the ledger kept every order within the limit
    # 20 past the burst, one every 18 minutes: 6 hours, not later
    assert done - START <= _dt.timedelta(hours=6, minutes=5)
    # each of the 20 deferred about once (a queue), not ~200 times (a herd)
    assert len(deferrals) <= 40, len(deferrals)
