"""ARI windows and exemptions, profiles and their dated steps, failures, outages, latency,
mass revocation: the simulated CA through the real client."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any

from acmecerts import AcmeClient, RateLimited
from acmecerts.errors import AcmeCertsError
from acmecerts.testing.simulated_ca import (
    ARI_RETRY_AFTER,
    Limit,
    Limits,
    MassRevocation,
    Outage,
    SimulatedCA,
    SimulatedSolver,
    ari_window,
)

from ._sim import START, no_retry, run

DAY = _dt.timedelta(days=1)


def test_ari_window_is_two_percent_around_two_thirds_and_retry_after_6h() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        cert = await client.issue(["ari.example"], solvers=[solver], profile="classic")
        return cert, await client.renewal_info(cert.certificate_pem)

    (cert, info), ca = run(body)
    validity = cert.not_after + _dt.timedelta(seconds=1) - cert.not_before
    middle = cert.not_before + validity * 2 / 3
    assert abs(info.info.window_start - (middle - validity / 100)) < _dt.timedelta(seconds=2)
    assert abs(info.info.window_end - (middle + validity / 100)) < _dt.timedelta(seconds=2)
    assert info.retry_after == ca.clock.now() + _dt.timedelta(seconds=ARI_RETRY_AFTER)
    # under 10 days: half way
    start, end = ari_window(START, START + _dt.timedelta(hours=160) - _dt.timedelta(seconds=1))
    assert start + (end - start) / 2 == START + _dt.timedelta(hours=80, seconds=-1)


def test_ari_renewals_with_replaces_are_exempt_from_every_limit() -> None:
    tight = dataclasses.replace(
        Limits(),
        request_rates=None,
        new_orders_per_account=Limit(1, 3 * 3600),
        certificates_per_exact_set=Limit(1, 7 * 86400),
        certificates_per_registered_domain=Limit(1, 7 * 86400),
    )

    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        cert = await client.issue(["x.example"], solvers=[solver])
        info = await client.renewal_info(cert.certificate_pem)
        renewed = await client.issue(["x.example"], solvers=[solver], replaces=info.cert_id)
        try:
            await client.issue(["x.example"], solvers=[solver])
        except RateLimited as exc:
            return renewed, exc
        return renewed, None

    (renewed, refusal), ca = run(body, limits=tight, client={"retry": no_retry()})
    assert renewed is not None
    assert isinstance(refusal, RateLimited)
    old = min(ca.certificates.values(), key=lambda r: r.not_before)
    assert old.replaced_by == int(renewed.serial, 16)


def test_classic_lifetime_and_authorization_reuse_follow_the_dates() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        seen = []
        for when in ("2027-01-01", "2027-02-11", "2028-02-17"):
            instant = _dt.datetime.fromisoformat(when).replace(tzinfo=_dt.UTC)
            await ca.clock.sleep((instant - ca.clock.now()).total_seconds())
            cert = await client.issue([f"p{when}.example"], solvers=[solver], profile="classic")
            presented = ca.published.presented
            await ca.clock.sleep(8 * 3600)  # past 7 h, within 10 and 30 days
            await client.issue([f"p{when}.example"], solvers=[solver], profile="classic")
            reused = ca.published.presented == presented
            seen.append((cert.not_after - cert.not_before + _dt.timedelta(seconds=1), reused))
        return seen

    seen, _ = run(body, limits=Limits.none())
    assert seen == [(90 * DAY, True), (64 * DAY, True), (45 * DAY, False)]


def test_tlsserver_and_shortlived_lifetimes() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        out = []
        for profile in ("tlsserver", "shortlived"):
            cert = await client.issue([f"{profile}.example"], solvers=[solver], profile=profile)
            out.append(cert.not_after - cert.not_before + _dt.timedelta(seconds=1))
        return out

    lifetimes, _ = run(body)
    assert lifetimes == [45 * DAY, _dt.timedelta(hours=160)]


def test_failure_rate_fails_some_validations() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        failed = 0
        for i in range(40):
            try:
                await client.issue([f"f{i}.d{i}.example"], solvers=[solver])
            except AcmeCertsError:
                failed += 1
        return failed

    failed, _ = run(body, limits=Limits.none(), failure_rate=0.5, seed=3)
    assert 8 <= failed <= 32
    none, _ = run(body, limits=Limits.none(), failure_rate=0.0)
    assert none == 0


def test_outage_answers_503_then_recovers() -> None:
    outage = Outage(START + _dt.timedelta(hours=1), _dt.timedelta(hours=6), retry_after=600)

    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        await client.issue(["o.example"], solvers=[solver])
        await ca.clock.sleep(2 * 3600)
        try:
            await client.issue(["o2.example"], solvers=[solver])
        except AcmeCertsError as exc:
            during: Any = exc
        else:
            during = None
        await ca.clock.sleep(6 * 3600)
        await client.issue(["o3.example"], solvers=[solver])
        return during

    during, ca = run(body, outages=(outage,), client={"retry": no_retry()})
    assert during is not None
    assert ca.stats[("newOrder", 503)] >= 1
    assert len(ca.certificates) == 2


def test_latency_is_virtual_time() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        await client.issue(["slow.example"], solvers=[solver])
        return sum(ca.stats.values())

    requests, ca = run(body, latency=2.0)
    assert ca.clock.now() - START >= _dt.timedelta(seconds=2 * requests)


def test_mass_revocation_moves_windows_into_the_past() -> None:
    at = START + 10 * DAY
    revocation = MassRevocation(at, 0.5, at + DAY)

    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        certs = [await client.issue([f"m{i}.d{i}.example"], solvers=[solver]) for i in range(20)]
        await ca.clock.sleep(10 * 86400 + 60)
        infos = [await client.renewal_info(c.certificate_pem) for c in certs]
        await ca.clock.sleep(86400)
        for c in certs[:1]:
            await client.renewal_info(c.certificate_pem)
        return infos

    infos, _ca = run(body, limits=Limits.none(), mass_revocation=revocation, seed=5)
    past = [i for i in infos if i.info.window_end < at]
    assert 4 <= len(past) <= 16
    assert all(i.info.window_start == at - _dt.timedelta(hours=1) for i in past)


def test_a_replacement_issued_at_the_revocation_instant_is_not_revoked_again() -> None:
    # found by the fleet runs: notBefore is backdated an hour, so a replacement issued
    # at the revocation's instant looked "issued before it" and, drawn under the
    # fraction, was asked to be replaced again (a cascade of replacements)
    at = START + DAY
    revocation = MassRevocation(at, 1.0, at + DAY)

    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        old = await client.issue(["r.example"], solvers=[solver])
        await ca.clock.sleep(86400)
        moved = await client.renewal_info(old.certificate_pem)
        new = await client.issue(["r.example"], solvers=[solver], replaces=moved.cert_id)
        return moved, await client.renewal_info(new.certificate_pem)

    (moved, fresh), _ca = run(body, limits=Limits.none(), mass_revocation=revocation)
    assert moved.info.window_end < at  # every certificate issued before it: 100 %
    assert fresh.info.window_start > at + 10 * DAY  # the replacement: its own window
