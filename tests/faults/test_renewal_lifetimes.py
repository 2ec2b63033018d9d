"""Renewal on time for every lifetime, against a real Pebble 2.10 with Let's Encrypt's profiles.

Pebble 2.10 serves ARI. To show what happens without it, the fault proxy answers every
``renewalInfo`` GET with 404 (the CA's ARI is unavailable, the manager falls back); the
tests check that it was asked and refused. Then:

* a ``shortlived`` (160-hour) certificate is renewed at half its life, a ``classic``
  (90-day) one at two thirds of it, and a given ``renewal_fraction`` overrides both;
* with ARI (straight to Pebble) the CA's window wins, whatever the fraction;
* a ``shortlived`` renewal that keeps failing never waits past a quarter of the time its
  certificate has left (the daily step would), run on a fake clock over simulated days,
  in the manager and in ``issue_with_retries(expires_at=...)``.

The policy alone (the 10-day boundary, the floor, Retry-After) is in
``tests/retry/test_renewal_timing.py`` and ``tests/protocol/test_ari.py``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random

import anyio
import pytest

from acmecerts import AcmeClient, FakeClock, Http01Server, IssuedCertificate
from acmecerts.attempts import issue_with_retries
from acmecerts.manager import (
    CertificateEvent,
    CertificateFailed,
    CertificateManager,
    CertificateSpec,
    IssuedResult,
)
from acmecerts.retry import AttemptSchedule, AttemptState
from acmecerts.testing import PebbleServer
from tests.faults.proxy import FaultProxy, Match, Respond

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

#: Pebble 2.10's renewalInfo resource.
RENEWAL_INFO = "/draft-ietf-acme-ari-03/renewalInfo/"
#: Pebble's newOrder path.
NEW_ORDER = "/order-plz"
SECOND = dt.timedelta(seconds=1)
MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)


def without_ari(proxy: FaultProxy) -> None:
    """The CA's renewalInfo answers 404 from now on: the manager cannot use ARI."""
    proxy.add_rule(
        Match(RENEWAL_INFO, "GET"),
        Respond(404, "urn:ietf:params:acme:error:malformed", "no renewal information here"),
        times=None,
    )


def issued(result: object) -> IssuedCertificate:
    assert isinstance(result, IssuedResult), result
    return result.certificate


def at_part_of_life(certificate: IssuedCertificate, part: float) -> dt.datetime:
    return certificate.not_before + (certificate.not_after - certificate.not_before) * part


async def test_without_ari_shortlived_renews_at_half_and_classic_at_two_thirds(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server
) -> None:
    without_ari(proxy)
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle) as client:
        # first_ari_check=0: the window is asked for at issuance (and refused), not hours later
        manager = CertificateManager(client, solvers=[http01], first_ari_check=0)
        short, classic = await manager.issue_many(
            [
                CertificateSpec.of("short.lifetimes.example.test", profile="shortlived"),
                CertificateSpec.of("classic.lifetimes.example.test", profile="classic"),
            ]
        )
        short_cert, classic_cert = issued(short), issued(classic)
        # Let's Encrypt's lifetimes (notAfter is inclusive: the last second counts)
        assert short_cert.not_after - short_cert.not_before == 160 * HOUR - SECOND
        assert classic_cert.not_after - classic_cert.not_before == dt.timedelta(days=90) - SECOND

        short_at = manager.renewal_at("short.lifetimes.example.test")
        classic_at = manager.renewal_at("classic.lifetimes.example.test")
        assert short_at is not None
        assert classic_at is not None
        # 80 hours before expiry, not 53 h 20 min (a third) as before
        assert abs(short_at - at_part_of_life(short_cert, 1 / 2)) <= SECOND
        assert abs(short_cert.not_after - short_at - 80 * HOUR) <= SECOND
        # 30 days before expiry
        assert abs(classic_at - at_part_of_life(classic_cert, 2 / 3)) <= SECOND
    # the manager asked for each certificate's window and was refused: the no-ARI path
    asked = proxy.requests_to(RENEWAL_INFO, "GET")
    assert len(asked) == 2
    assert {r.status for r in asked} == {404}


async def test_a_given_renewal_fraction_overrides_the_lifetime_rule(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server
) -> None:
    without_ari(proxy)
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle) as client:
        manager = CertificateManager(client, solvers=[http01], renewal_fraction=1 / 4)
        short, classic = await manager.issue_many(
            [
                CertificateSpec.of("short.fraction.example.test", profile="shortlived"),
                CertificateSpec.of("classic.fraction.example.test", profile="classic"),
            ]
        )
        for name, result in (("short", short), ("classic", classic)):
            planned = manager.renewal_at(f"{name}.fraction.example.test")
            assert planned is not None
            # a quarter of the lifetime left, whatever the lifetime
            assert abs(planned - at_part_of_life(issued(result), 3 / 4)) <= SECOND, name


async def test_with_ari_the_cas_window_wins(pebble: PebbleServer, http01: Http01Server) -> None:
    """Pebble's window is around a third of the lifetime left, ±24 h: later than half."""
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        for fraction in (None, 0.9):
            manager = CertificateManager(  # the window asked for at issuance
                client,
                solvers=[http01],
                renewal_fraction=fraction,
                rng=random.Random(5),
                first_ari_check=0,
            )
            name = f"ari-{fraction}.lifetimes.example.test".replace(".", "-", 1)
            [result] = await manager.issue_many([CertificateSpec.of(name, profile="shortlived")])
            certificate = issued(result)
            window = await client.renewal_info(certificate.chain.leaf)
            planned = manager.renewal_at(name)
            assert planned is not None
            assert window.window_start <= planned <= window.window_end
            # not the fallback: half the life (or 10 % of it) would be before the window
            assert at_part_of_life(certificate, 1 / 2) < window.window_start
            assert at_part_of_life(certificate, 0.1) < window.window_start


async def test_a_failing_shortlived_renewal_never_waits_past_a_quarter_of_what_is_left(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server
) -> None:
    """Renewals refused from the half-life on: 1 min, 10 min, 100 min, then never a day.

    A day is what Let's Encrypt's schedule says after the third failure; with 78 hours
    left that would be fine, but the waits must shrink as expiry comes closer: each is at
    most a quarter of the time left (not below 10 minutes).
    """
    without_ari(proxy)
    name = "failing.lifetimes.example.test"
    clock = FakeClock()
    failures: list[CertificateFailed] = []
    enough = anyio.Event()
    state: dict[str, dt.datetime] = {}

    def on_event(event: CertificateEvent) -> None:
        if isinstance(event, CertificateFailed):
            failures.append(event)
            if event.at >= state["not_after"] - 12 * HOUR:
                enough.set()

    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        manager = CertificateManager(client, solvers=[http01], clock=clock, rng=random.Random(3))
        [result] = await manager.issue_many([CertificateSpec.of(name, profile="shortlived")])
        certificate = issued(result)
        state["not_after"] = certificate.not_after
        renew_at = manager.renewal_at(name)
        assert renew_at is not None
        # every renewal order is refused from now on
        refuse = proxy.add_rule(
            Match(NEW_ORDER, "POST"),
            Respond(403, "urn:ietf:params:acme:error:unauthorized", "not today"),
            times=None,
        )
        manager.subscribe(on_event)
        async with manager:
            with anyio.fail_after(60):
                await enough.wait()

    not_after = certificate.not_after
    assert refuse.hits == len(failures) >= 8
    # the first refused renewal came at half the life, 80 hours before expiry
    assert abs(failures[0].at - renew_at) <= MINUTE
    assert abs(not_after - failures[0].at - 80 * HOUR) <= MINUTE
    waits = []
    for failure in failures:
        assert failure.next_attempt_at is not None
        wait, left = failure.next_attempt_at - failure.at, not_after - failure.at
        assert wait <= max(10 * MINUTE, left / 4), (failure.at, wait, left)
        waits.append(wait)
    # the schedule's first three steps, ±10 %; then the cut, never the day
    for wait, step in zip(waits[:3], (MINUTE, 10 * MINUTE, 100 * MINUTE), strict=True):
        assert 0.9 * step <= wait <= 1.1 * step
    assert all(wait < 20 * HOUR for wait in waits[3:])
    # attempts happened when planned: each failure at the previous one's next instant
    for earlier, later in itertools.pairwise(failures):
        assert earlier.next_attempt_at is not None
        assert later.at - earlier.next_attempt_at < MINUTE


async def test_issue_with_retries_cuts_its_waits_for_a_renewal(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server
) -> None:
    """``issue_with_retries(expires_at=...)``: the certificate being replaced has 30 h left.

    Three failures are behind it (its next step is a day); two more orders are refused.
    Each wait is a quarter of what is left then (7.5 h, then 5 h 37.5 min), not a day.
    """
    clock = FakeClock()
    refuse = proxy.add_rule(
        Match(NEW_ORDER, "POST"),
        Respond(403, "urn:ietf:params:acme:error:unauthorized", "not yet"),
        times=2,
    )
    expires_at = clock.now() + 30 * HOUR
    waits: list[tuple[dt.timedelta, dt.timedelta]] = []

    async def on_state(state: AttemptState) -> None:
        if state.next_attempt_at is not None:
            waits.append((state.next_attempt_at - clock.now(), expires_at - clock.now()))

    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        certificate = await issue_with_retries(
            client,
            ["cut.retries.example.test"],
            schedule=AttemptSchedule(jitter=0),
            state=AttemptState(attempts=3),
            on_state=on_state,
            expires_at=expires_at,
            solver=http01,
            profile="shortlived",
        )
    assert refuse.hits == 2
    assert list(certificate.names) == ["cut.retries.example.test"]
    assert [wait for wait, _ in waits] == [7.5 * HOUR, 5.625 * HOUR]
    assert all(wait == left / 4 for wait, left in waits)
