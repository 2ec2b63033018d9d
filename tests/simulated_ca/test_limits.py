"""Each of Let's Encrypt's limits, as the simulated CA enforces it, seen by the real client.

Every test runs the same requests twice: with the limit on (a 429 or 503 with
``Retry-After``) and with only that limit off (no refusal), so a rule that stopped
working fails here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from acmecerts import AcmeClient, RateLimited
from acmecerts.errors import AcmeCertsError
from acmecerts.testing.simulated_ca import Limit, Limits, SimulatedCA, SimulatedSolver

from ._sim import client_for, no_retry, run

HOUR = 3600.0
WEEK = 7 * 86400.0


def limits(**changes: Any) -> Limits:
    """Let's Encrypt's limits with ``changes`` (no request rates: not under test here)."""
    return dataclasses.replace(Limits(), request_rates=None, **changes)


async def issue_all(
    client: AcmeClient, solver: SimulatedSolver, sets: list[list[str]]
) -> list[BaseException | None]:
    outcomes: list[BaseException | None] = []
    for names in sets:
        try:
            await client.issue(names, solvers=[solver])
        except AcmeCertsError as exc:
            outcomes.append(exc)
        else:
            outcomes.append(None)
    return outcomes


def refused(outcomes: list[BaseException | None]) -> list[RateLimited]:
    return [o for o in outcomes if isinstance(o, RateLimited)]


def test_new_orders_per_account_are_a_token_bucket() -> None:
    sets = [[f"n{i}.d{i}.example"] for i in range(4)]

    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        first = await issue_all(client, solver, sets)
        await ca.clock.sleep(HOUR)  # one token drips back every hour (3 per 3 h)
        return first, await issue_all(client, solver, [["late.d9.example"]])

    (on, later), ca = run(
        body, limits=limits(new_orders_per_account=Limit(3, 3 * HOUR)), client={"retry": no_retry()}
    )
    assert on[:3] == [None, None, None]
    assert len(refused(on)) == 1
    assert ca.refusals["new_orders_per_account"] == 1
    assert ca.stats[("newOrder", 429)] == 1
    assert later == [None]
    (off, _), ca = run(body, limits=limits(new_orders_per_account=None))
    assert off == [None] * 4
    assert not ca.refusals


def test_retry_after_is_computed_from_the_bucket() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        return await issue_all(client, solver, [[f"r{i}.d{i}.example"] for i in range(3)])

    outcomes, ca = run(
        body, limits=limits(new_orders_per_account=Limit(2, 2 * HOUR)), client={"retry": no_retry()}
    )
    (error,) = refused(outcomes)
    # two orders spent the burst at t≈0: the next token is an hour (one interval) away
    assert error.retry_after is not None
    wait = (error.retry_after - ca.clock.now()).total_seconds()
    assert 3500 < wait <= 3601


def test_certificates_per_registered_domain_count_ips_and_psl() -> None:
    sets = [["a.example.co.uk"], ["b.x.example.co.uk"], ["c.example.co.uk"], ["d.other.co.uk"]]

    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        return await issue_all(client, solver, sets)

    on, ca = run(
        body,
        limits=limits(certificates_per_registered_domain=Limit(2, WEEK)),
        client={"retry": no_retry()},
    )
    # example.co.uk (Public Suffix List) is full after two; other.co.uk is its own domain
    assert [o is None for o in on] == [True, True, False, True]
    assert ca.refusals["certificates_per_registered_domain"] == 1
    off, ca = run(body, limits=limits(certificates_per_registered_domain=None))
    assert off == [None] * 4


def test_ipv6_addresses_in_one_slash_64_are_one_domain() -> None:
    from acmecerts.testing.simulated_ca._enforce import domain_of

    assert domain_of(("ip", "2001:db8:1:2::5")) == domain_of(("ip", "2001:db8:1:2::9"))
    assert domain_of(("ip", "2001:db8:1:3::5")) != domain_of(("ip", "2001:db8:1:2::5"))
    assert domain_of(("ip", "192.0.2.7")) == "192.0.2.7"


def test_exact_identifier_set_five_per_week_renewals_count() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        return await issue_all(client, solver, [["same.example", "www.same.example"]] * 6)

    on, ca = run(body, limits=limits(), client={"retry": no_retry()})
    assert on[:5] == [None] * 5
    assert isinstance(on[5], RateLimited)
    assert ca.refusals["certificates_per_exact_set"] == 1
    off, ca = run(body, limits=limits(certificates_per_exact_set=None))
    assert off == [None] * 6


def test_renewals_of_an_identical_set_skip_the_orders_and_domain_limits() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        return await issue_all(client, solver, [["r.example"]] * 4)

    tight = limits(
        new_orders_per_account=Limit(1, 3 * HOUR),
        certificates_per_registered_domain=Limit(1, WEEK),
    )
    on, ca = run(body, limits=tight, client={"retry": no_retry()})
    assert on == [None] * 4
    assert not ca.refusals

    # the same limits refuse a second *new* set at once
    async def other(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        return await issue_all(client, solver, [["r.example"], ["s.example"]])

    outcomes, ca = run(other, limits=tight, client={"retry": no_retry()})
    assert outcomes[0] is None
    assert isinstance(outcomes[1], RateLimited)


def test_authorization_failures_per_identifier_per_account() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        return await issue_all(client, solver, [["broken.example"]] * 6)

    on, ca = run(
        body, limits=limits(), always_fail={"broken.example"}, client={"retry": no_retry()}
    )
    assert all(o is not None for o in on)
    assert not isinstance(on[4], RateLimited)
    assert isinstance(on[5], RateLimited)
    assert ca.refusals["authorization_failures_per_identifier"] == 1
    off, ca = run(
        body,
        limits=limits(authorization_failures_per_identifier=None),
        always_fail={"broken.example"},
    )
    assert not refused(off)
    assert not ca.refusals


def test_consecutive_failures_pause_the_identifier() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        first = await issue_all(client, solver, [["zombie.example"]] * 4)
        ca.unpause(client.account_url or "", "zombie.example")
        ca.always_fail = frozenset()
        return first, await issue_all(client, solver, [["zombie.example"]])

    paused = limits(authorization_failures_per_identifier=None, consecutive_failures_before_pause=3)
    (on, after), ca = run(
        body, limits=paused, always_fail={"zombie.example"}, client={"retry": no_retry()}
    )
    assert isinstance(on[3], RateLimited)
    assert "paused" in str(on[3])
    assert ca.refusals["paused"] == 1
    assert after == [None]
    (off, _), ca = run(
        body,
        limits=dataclasses.replace(paused, consecutive_failures_before_pause=None),
        always_fail={"zombie.example"},
    )
    assert not refused(off)


def test_new_accounts_per_source_address() -> None:
    from acmecerts.protocol.keys import AccountKey

    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        outcomes = []
        for source in ("10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2"):
            other = client_for(
                ca, source=source, account_key=AccountKey.generate(), retry=no_retry()
            )
            try:
                await other.register()
            except RateLimited as exc:
                outcomes.append(exc)
            else:
                outcomes.append(None)
        return outcomes

    on, ca = run(body, limits=limits(new_accounts_per_ip=Limit(2, 3 * HOUR)))
    assert [o is None for o in on] == [True, True, False, True]
    assert ca.refusals["new_accounts_per_ip"] == 1
    off, _ = run(body, limits=limits(new_accounts_per_ip=None))
    assert off == [None] * 4


def test_request_rates_are_answered_503_and_the_transport_waits() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        return await issue_all(client, solver, [[f"q{i}.d{i}.example"] for i in range(3)])

    rates = dataclasses.replace(Limits.none(), request_rates={"other": (0.1, 2)})
    on, ca = run(body, limits=rates)
    # the transport obeyed each 503's Retry-After and every issuance went through
    assert on == [None] * 3
    assert ca.refusals["request_rate:other"] >= 1
    assert sum(n for (ep, status), n in ca.stats.items() if status == 503) >= 1
    off, ca = run(body, limits=Limits.none())
    assert off == [None] * 3
    assert not ca.refusals


def test_a_full_burst_and_a_token_per_interval_are_never_refused_by_rounding() -> None:
    # found by the fleet runs: 125 * (0.5 / 125) is 0.5000000000000003 in floats, so the
    # 125th request of a burst (and, later, a request sent exactly when its token was
    # back, as the client's microsecond throttle sends it) got a 503 it should not
    from acmecerts.testing.simulated_ca._buckets import Buckets

    bucket = Buckets("other", Limit(125, 0.5))
    assert all(bucket.spend("ip", 0.0) == 0 for _ in range(125))
    assert bucket.spend("ip", 0.0) > 0  # the 126th is over
    refused = [i for i in range(1, 500) if bucket.spend("ip", 0.004 * i) > 0]
    assert refused == []
    assert bucket.spend("ip", 0.004 * 499) > 0
