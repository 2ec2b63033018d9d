"""Onboarding where Let's Encrypt's 300 new orders per 3 h binds: a certificate the
ledger defers takes no store lock first (issue #26).

Found by the fleet simulation: of ~2,300 attempts that took a certificate's store lock
for 1,572 certificates, ~700 were refused by the ledger only after the lock, the store
reads, a key, a CSR and an order intent (~9 store operations for nothing). The manager
now asks the ledger (spending nothing) before the lock and defers such a certificate at
once, to the instant the ledger names.
"""

from __future__ import annotations

import pytest

from acmecerts.testing.fleet import FleetRun


@pytest.mark.timeout(120)
def test_onboarding_past_the_order_limit_takes_one_lock_per_certificate() -> None:
    # 450 names: 300 orders at once, then one every 36 s for the other 150 (1.5 h)
    m = FleetRun("onboarding", certificates=450, days=1, seed=11).run()
    assert m.issued >= 450
    assert m.rate_limit_429 == 0, m.refusals  # the ledger kept every order within the limit
    assert m.uncovered_at_end == 0
    # as fast as the limits allow, no slower than before the pre-check
    assert m.time_to_full_coverage_hours is not None
    assert m.time_to_full_coverage_hours <= m.lower_bound_hours * 1.05 + 1.0, (
        m.time_to_full_coverage_hours,
        m.lower_bound_hours,
    )
    locks = m.store_ops_by_kind.get("lock", 0)
    # one lock per issued certificate, not 1.34 (602 for 450: 150 deferred under the lock)
    assert locks <= 1.05 * m.issued, (locks, m.issued, m.store_ops_by_kind)
    # 16.0 store operations per issued certificate (18.3 with a deferral under the lock)
    assert m.store_ops_per_issued_certificate <= 17.0, m.store_ops_by_kind
