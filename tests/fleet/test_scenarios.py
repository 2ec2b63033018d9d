"""Each scenario of issue #26 at a small size, with the acmecerts strategy: its own goal.

Every run is the real CertificateManager (ledger on, Let's Encrypt's request rates) on
the simulated Let's Encrypt, on virtual time, over a counted FileStorage.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from acmecerts.testing.fleet import (
    SCENARIOS,
    FleetContext,
    FleetRun,
    Measures,
    Served,
    Service,
    lower_bound_hours,
    scenario,
    strategy,
)
from acmecerts.testing.fleet.__main__ import main
from acmecerts.testing.fleet._measures import Sampler
from acmecerts.testing.simulated_ca import Limits


def no_limit_answers(m: Measures) -> None:
    assert m.rate_limit_429 == 0, m.refusals
    assert m.rate_limit_503 == 0, m.refusals
    assert m.paused_identifiers == 0


@pytest.mark.timeout(120)
def test_churn_deletes_and_recreates_without_expiry_or_limits() -> None:
    run = FleetRun("churn", certificates=100, days=16, seed=3)
    m = run.run()
    removes = sum(1 for e in run.plan.events if e.action == "remove")
    assert removes >= 70  # 5 services a day for 15 days
    no_limit_answers(m)
    assert m.expired_certificate_hours == 0
    assert m.uncovered_at_end == 0
    # a service created again within the retention (7 days) is taken back from the
    # store: far fewer orders than appearances
    adds = sum(1 for e in run.plan.events if e.action == "add")
    assert m.orders < adds - removes // 4, (m.orders, adds, removes)
    assert m.duplicate_issuances == 0
    # the retired certificates cost a listing a day at rest, not a read of each
    assert m.store_ops_per_certificate_day_at_rest <= 0.1, m.store_ops_by_kind


@pytest.mark.timeout(120)
def test_outage_expires_nothing_that_had_a_day_left() -> None:
    # 30 certificates; the outage at 200 x 7 days is measured in tests/fleet/test_outage.py
    m = FleetRun("outage", certificates=30, days=6, seed=1).run()
    assert m.outage_503 > 0, "the outage met the renewals"
    assert m.outage_lapsed_with_24h == 0
    assert m.expired_certificate_hours == 0
    assert m.rate_limit_429 == 0
    assert m.paused_identifiers == 0
    assert m.uncovered_at_end == 0


@pytest.mark.timeout(120)
def test_mass_revocation_replaced_before_the_deadline() -> None:
    m = FleetRun("revocation", certificates=150, days=4, seed=2).run()
    assert m.revocation_affected is not None
    assert m.revocation_affected >= 25
    assert m.replaced_before_deadline == 1.0
    assert m.expired_certificate_hours == 0
    no_limit_answers(m)


@pytest.mark.timeout(120)
def test_zombies_are_not_paused_and_spend_no_limit() -> None:
    run = FleetRun("zombies", certificates=200, days=12, seed=4)
    m = run.run()
    assert len(run.plan.zombies) == 2
    assert m.zombie_orders is not None
    assert m.zombie_orders >= 2  # they were tried
    assert m.zombie_max_consecutive_failures is not None
    assert m.zombie_max_consecutive_failures < 1152
    no_limit_answers(m)
    assert m.expired_certificate_hours == 0
    assert m.uncovered_at_end == 0  # zombies left out; every other name is valid


@pytest.mark.timeout(120)
def test_two_replicas_order_each_certificate_once() -> None:
    m = FleetRun("replicas", certificates=100, days=5, seed=5).run()
    assert m.replicas == 2
    assert m.duplicate_issuances == 0
    assert m.orders == m.issued == 100
    assert m.expired_certificate_hours == 0
    assert m.uncovered_at_end == 0
    no_limit_answers(m)


class _Idle:
    """A strategy that never orders: every measure of coverage must see it."""

    name = "idle"

    @contextlib.asynccontextmanager
    async def start(self, context: FleetContext) -> AsyncIterator[_Idle]:
        yield self

    def add(self, service: Service) -> None:
        pass

    async def remove(self, service: Service) -> None:
        pass

    def serving(self, name: str) -> list[Served | None]:
        return [None]


@pytest.mark.timeout(60)
def test_a_strategy_that_does_nothing_is_measured_as_such() -> None:
    m = FleetRun("onboarding", certificates=10, days=2, strategy=_Idle()).run()
    assert m.strategy == "idle"
    assert m.missing_certificate_hours == 10 * 48
    assert m.uncovered_at_end == 10
    assert m.time_to_full_coverage_hours is None
    assert m.orders == m.ca_requests == 0


def test_lower_bound_from_the_limits() -> None:
    # 10,000 names over 20 domains: 500 a domain, 50 at once then one per 7 d / 50
    plan = scenario("onboarding").plan(10_000, 1, 0)
    hours = lower_bound_hours(plan, Limits())
    assert hours == pytest.approx(450 * 7 * 24 / 50)
    # 1,000 over 20: 50 a domain fits; 700 orders past the 300 at 36 s each bind
    assert lower_bound_hours(scenario("onboarding").plan(1000, 1, 0), Limits()) == 7.0
    assert lower_bound_hours(scenario("churn").plan(1000, 1, 0), Limits()) == 7.0


def test_plans_are_reproducible_by_seed() -> None:
    for name, sc in SCENARIOS.items():
        assert sc.plan(50, 10, 7) == sc.plan(50, 10, 7), name
    assert scenario("churn").plan(50, 10, 1).events != scenario("churn").plan(50, 10, 2).events


@pytest.mark.timeout(60)
def test_cli_prints_the_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fleet.json"
    assert main(["onboarding", "--certificates", "20", "--days", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cert-hours expired" in printed
    assert "onboarding" in printed
    [row] = json.loads(out.read_text())
    assert row["scenario"] == "onboarding"
    assert row["certificates"] == 20
    assert row["issued"] == 20


@pytest.mark.timeout(120)
def test_the_samplers_shortcut_changes_no_measure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service serving what it served at its last sample, still valid, is counted
    without looking its certificates up again: the measures are the same as when every
    sample looks everything up (a mass revocation, which a twice-daily cron client
    outlives: certificates stop being valid at the deadline, not at expiry)."""
    kept = ("cpu_seconds", "cpu_seconds_per_day", "wall_seconds", "peak_rss_mib")

    def measures() -> dict[str, object]:
        cron = strategy("certbot-cron")
        m = FleetRun("revocation", certificates=60, days=3, seed=4, strategy=cron).run()
        return {k: v for k, v in m.as_dict().items() if k not in kept}

    shortcut = measures()
    never_valid = _dt.datetime.min.replace(tzinfo=_dt.UTC)
    monkeypatch.setattr(Sampler, "_valid_end", lambda self, record: never_valid)
    assert measures() == shortcut
    assert shortcut["expired_certificate_hours"]  # served past the revocation's deadline
