"""Scenario (d), a 6-hour CA outage (503, no Retry-After), ridden out (issue #26).

Before the fix a 503 never escalated the attempt schedule (it did not "reach the CA")
and every certificate retried about once a minute through the outage, each attempt
taking the store's lock and writing its state: at 200 certificates x 7 days, 7.6 times
the requests the protocol needs and 79 store operations per certificate-day at rest.
Now the manager holds its background work while the CA fails and sends one probe at a
time (a directory ``GET``), backing off exponentially (1 min doubling to 1 h).
"""

from __future__ import annotations

import pytest

from acmecerts.testing.fleet import FleetRun


@pytest.mark.timeout(120)
def test_outage_is_ridden_out_with_few_requests_and_no_store_writes() -> None:
    run = FleetRun("outage", certificates=100, days=4, seed=1)
    m = run.run()
    assert run.ca is not None
    assert m.outage_503 > 0, "the outage met the renewals"
    assert m.outage_lapsed_with_24h == 0
    assert m.expired_certificate_hours == 0
    assert m.uncovered_at_end == 0
    assert m.request_ratio <= 1.5, m.request_ratio
    # the gate's probes over 6 h (1, 2, 4 ... 32 min, then hourly: about 11) plus the
    # attempts under way when it began (at most the concurrency, 16), each at most 5
    # calls of the transport: before the fix, every certificate's attempts every minute
    assert m.outage_503 <= (11 + 2 + 16) * 5, m.outage_503
    assert m.store_ops_per_certificate_day_at_rest <= 0.1, m.store_ops_by_kind
