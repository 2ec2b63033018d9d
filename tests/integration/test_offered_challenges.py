"""A CA that offers only challenge types no solver answers: retried, never parked for good.

The fault proxy strips http-01 from Pebble 2.10's authorizations, so the CA offers only
tls-alpn-01 to a manager whose one solver answers http-01: the attempt fails with the
offered types named and follows the attempt schedule (on a fake clock), and a manager
with another solver set (a restart with a tls-alpn-01 solver) orders at once. A wildcard
with http-01 only, which no CA could accept, stays parked (nothing sent) until the
solvers change.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from acmecerts import (
    AcmeClient,
    DnsHookSolver,
    Http01Server,
    NoSolverForChallenges,
    Solver,
    TlsAlpn01Server,
    UnsupportedChallenge,
)
from acmecerts._time import FakeClock
from acmecerts.manager import (
    CertificateManager,
    CertificateSpec,
    CertificateState,
    DeferredResult,
    FailedResult,
    IssuedResult,
)
from acmecerts.retry import AttemptSchedule, AttemptState
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer
from tests.faults.proxy import FaultProxy, Match, only_challenges

from .conftest import assert_valid_chain

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: 1 min, 10 min, 100 min, then a day: exact, so the test can name the instants
SCHEDULE = AttemptSchedule(jitter=0)


@pytest.fixture
async def tls_alpn(pebble: PebbleServer) -> AsyncIterator[TlsAlpn01Server]:
    """A tls-alpn-01 solver where the session Pebble validates (127.0.0.1:tls_port)."""
    async with TlsAlpn01Server(host="127.0.0.1", port=pebble.tls_port) as solver:
        yield solver


def orders(proxy: FaultProxy) -> int:
    return len(proxy.requests_to("/order-plz", "POST"))


async def stored_state(path: Path, proxy: FaultProxy, name: str) -> AttemptState | None:
    value = await FileStorage(path).load(KeyLayout(proxy.directory_url).attempt_state(name))
    return None if value is None else AttemptState.from_json(json.loads(value.data))


def manager_for(
    client: AcmeClient, solvers: list[Solver], store: Path, clock: FakeClock
) -> CertificateManager:
    return CertificateManager(
        client, solvers=solvers, storage=FileStorage(store), schedule=SCHEDULE, clock=clock
    )


async def test_only_other_types_offered_follows_the_schedule_and_other_solvers_go_at_once(
    pebble: PebbleServer,
    proxy: FaultProxy,
    http01: Http01Server,
    tls_alpn: TlsAlpn01Server,
    tmp_path: Path,
) -> None:
    proxy.add_rule(Match("/authZ/", "POST"), only_challenges("tls-alpn-01"), times=None)
    name = "offered.manager.example.test"
    store = tmp_path / "store"
    clock = FakeClock()
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        manager = manager_for(client, [http01], store, clock)
        [first] = await manager.issue_many([CertificateSpec.of(name)])

        assert isinstance(first, FailedResult)
        error = first.error
        assert isinstance(error, NoSolverForChallenges)
        assert error.offered == ("tls-alpn-01",)
        assert error.solver_types == ("http-01",)
        assert str(error).startswith(f"the CA offered tls-alpn-01 only for {name}")
        assert "TlsAlpn01Server" in str(error)
        assert orders(proxy) == 1  # the order exists: not bad input
        failed_at = clock.now()
        assert first.next_attempt_at == failed_at + dt.timedelta(minutes=1)
        status = manager.status(name)
        assert status is not None
        assert status.state is CertificateState.RETRYING  # not PARKED
        assert status.next_at == failed_at + dt.timedelta(minutes=1)
        assert status.reason is not None
        assert "tls-alpn-01 only" in status.reason
        stored = await stored_state(store, proxy, name)
        assert stored is not None
        assert stored.parked is None
        assert stored.next_attempt_at == failed_at + dt.timedelta(minutes=1)
        assert stored.attempts == 1

        # before the schedule's instant nothing is sent; after it the CA is asked again
        [early] = await manager.issue_many([name])
        assert isinstance(early, DeferredResult)
        assert orders(proxy) == 1
        clock.advance(dt.timedelta(minutes=1, seconds=1))
        [second] = await manager.issue_many([name])
        assert isinstance(second, FailedResult)
        assert isinstance(second.error, NoSolverForChallenges)
        assert orders(proxy) == 2
        assert second.next_attempt_at == clock.now() + dt.timedelta(minutes=10)

        # a restart with another solver set: ordered at once, the 10 min wait is not its
        restarted = manager_for(client, [tls_alpn], store, clock)
        [third] = await restarted.issue_many([name])
        assert isinstance(third, IssuedResult), third
        assert orders(proxy) == 3
        assert_valid_chain(third.certificate, pebble, [name])
        assert await stored_state(store, proxy, name) is None  # the fresh state again


def challtestsrv_dns(pebble: PebbleServer) -> DnsHookSolver:
    """dns-01 through pebble-challtestsrv (the DNS server Pebble's validation asks)."""
    url = pebble.challtestsrv_url
    assert url is not None

    async def set_record(name: str, value: str) -> None:
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{url}/set-txt", json={"host": f"{name}.", "value": value})
            answer.raise_for_status()

    async def clear_record(name: str, value: str) -> None:
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{url}/clear-txt", json={"host": f"{name}."})
            answer.raise_for_status()

    return DnsHookSolver(set_record, clear_record, propagation=None)


async def test_a_wildcard_with_http_01_stays_parked_and_sends_nothing(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server, tmp_path: Path
) -> None:
    name = "*.parked.manager.example.test"
    store = tmp_path / "store"
    clock = FakeClock()
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        manager = manager_for(client, [http01], store, clock)
        spec = CertificateSpec.of("parked", [name])
        for attempt in range(2):
            [result] = await manager.issue_many([spec])
            assert isinstance(result, FailedResult)
            # the first time from the client's check, then the stored error replayed
            assert isinstance(result.error, UnsupportedChallenge) or attempt > 0
            assert "wildcards need dns-01" in str(result.error)
            status = manager.status("parked")
            assert status is not None
            assert status.state is CertificateState.PARKED
            assert status.next_at is None
            clock.advance(dt.timedelta(days=2))  # waiting does not lift it
        assert [r for r in proxy.requests if r.method == "POST"] == []  # nothing sent
        stored = await stored_state(store, proxy, "parked")
        assert stored is not None
        assert stored.parked == spec.fingerprint
        assert stored.next_attempt_at is None

        # another solver set is another input: no longer parked, ordered at once
        restarted = manager_for(client, [http01, challtestsrv_dns(pebble)], store, clock)
        [issued] = await restarted.issue_many([spec])
        assert isinstance(issued, IssuedResult), issued
        assert orders(proxy) == 1


async def test_a_state_an_earlier_version_parked_for_the_offer_is_tried_again(
    pebble: PebbleServer, proxy: FaultProxy, tls_alpn: TlsAlpn01Server, tmp_path: Path
) -> None:
    """Before NoSolverForChallenges, the CA's offer parked the certificate for good; such a
    stored state (no ``solvers`` recorded) no longer holds it back."""
    proxy.add_rule(Match("/authZ/", "POST"), only_challenges("tls-alpn-01"), times=None)
    name = "earlier.manager.example.test"
    spec = CertificateSpec.of(name)
    store = tmp_path / "store"
    earlier = AttemptState(
        attempts=0,
        last_error=(
            f"UnsupportedChallenge: the CA offers tls-alpn-01 for {name}; no configured solver "
            "answers any of them"
        ),
        last_error_kind="permanent",
        parked=spec.fingerprint,
    )
    key = KeyLayout(proxy.directory_url).attempt_state(name)
    await FileStorage(store).store(key, json.dumps(earlier.to_json()).encode())
    clock = FakeClock()
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        manager = manager_for(client, [tls_alpn], store, clock)
        [result] = await manager.issue_many([spec])
    assert isinstance(result, IssuedResult), result
    assert orders(proxy) == 1
