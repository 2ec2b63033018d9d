"""(g) two replicas sharing one store: the renewalInfo polling is shared, not doubled.

The real CertificateManager on the simulated Let's Encrypt (virtual time). A certificate
one replica wrote is re-checked by the other at a quarter of the CA's rate
(``replica_recheck_factor``), so the CA sees about 1.25 renewalInfo requests per
certificate per ``Retry-After`` instead of 2; a mass revocation and a replica that dies
are still handled in time.
"""

from __future__ import annotations

import pytest

from acmecerts.testing.fleet import FleetRun
from tests.fleet.test_scenarios import no_limit_answers


@pytest.mark.timeout(180)
def test_two_replicas_ask_renewal_info_about_once_per_retry_after() -> None:
    # before: both replicas asked at the CA's rate (ratio 1.95, renewalInfo 2.0x)
    m = FleetRun("replicas", certificates=120, days=10, seed=2).run()
    needed_ari = m.certificate_days * 4  # one per 6-hour Retry-After
    assert m.renewal_info_requests <= 1.4 * needed_ari
    assert m.request_ratio <= 1.5
    assert m.store_ops_per_certificate_day_at_rest <= 0.1
    assert m.duplicate_issuances == 0
    assert m.expired_certificate_hours == 0
    assert m.uncovered_at_end == 0
    no_limit_answers(m)


@pytest.mark.timeout(180)
def test_two_replicas_replace_every_revoked_certificate_before_the_deadline() -> None:
    m = FleetRun("replicas-revocation", certificates=60, days=4, seed=3).run()
    assert m.revocation_affected
    assert m.revocation_affected > 0
    assert m.replaced_before_deadline == 1.0
    assert m.expired_certificate_hours == 0
    assert m.uncovered_at_end == 0
    no_limit_answers(m)


@pytest.mark.timeout(180)
def test_the_replica_left_when_the_other_dies_renews_everything_in_time() -> None:
    # replica 0 stops after a day; the survivor polls its certificates at 24 h, catches
    # the revocation on day 2 (its own ones and the sweep), and renews the whole fleet
    # of 160-hour certificates in their windows
    run = FleetRun("replicas-failover", certificates=60, days=8, seed=4)
    m = run.run()
    assert run.plan.replica_stops
    assert m.revocation_affected
    assert m.revocation_affected > 0
    assert m.replaced_before_deadline == 1.0
    assert m.issued >= 2 * 60  # every certificate renewed at least once after the stop
    assert m.expired_certificate_hours == 0
    assert m.missing_certificate_hours == 0
    assert m.uncovered_at_end == 0
    no_limit_answers(m)
