"""End-to-end issuance against a real Pebble with the in-process http-01 solver."""

from __future__ import annotations

import datetime as dt

import anyio
import pytest
from cryptography.hazmat.primitives import serialization
from requests_seen import on_requests

from acmecerts import (
    AcmeClient,
    AcmeProblem,
    AttemptTimeout,
    AuthorizationFailed,
    ChallengeTask,
    FakeClock,
    Http01Server,
    InvalidIdentifier,
    KeyType,
    UnsupportedChallenge,
)
from acmecerts.client import AttemptEnded, ChallengePresented, ClientEvent, RequestSent
from acmecerts.protocol.identifiers import Identifier
from acmecerts.testing import PebbleServer

from .conftest import assert_valid_chain

pytestmark = pytest.mark.anyio


async def test_single_name(pebble: PebbleServer, client: AcmeClient, http01: Http01Server) -> None:
    issued = await client.issue(["single.example.test"], solver=http01)
    assert_valid_chain(issued, pebble, ["single.example.test"])
    assert issued.order_url.startswith("https://127.0.0.1:")
    assert "PRIVATE" not in repr(issued)


async def test_ten_names(pebble: PebbleServer, client: AcmeClient, http01: Http01Server) -> None:
    names = [f"n{i}.ten.example.test" for i in range(10)]
    issued = await client.issue(names, solver=http01)
    assert_valid_chain(issued, pebble, names)


async def test_ipv4_identifier(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    issued = await client.issue(["127.0.0.1"], solver=http01)
    assert_valid_chain(issued, pebble, ["127.0.0.1"])


@pytest.mark.parametrize("key_type", [KeyType.EC384, KeyType.RSA2048])
async def test_other_key_types(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server, key_type: KeyType
) -> None:
    issued = await client.issue(
        [f"{key_type.value}.example.test"], solver=http01, key_type=key_type
    )
    assert_valid_chain(issued, pebble, [f"{key_type.value}.example.test"])


async def test_twenty_concurrently(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    results: dict[str, object] = {}

    async def one(i: int) -> None:
        name = f"c{i}.concurrent.example.test"
        results[name] = await client.issue([name], solver=http01)

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
    assert len(results) == 20
    serials = set()
    for name, issued in results.items():
        assert_valid_chain(issued, pebble, [name])  # type: ignore[arg-type]
        serials.add(issued.serial)  # type: ignore[attr-defined]
    assert len(serials) == 20


async def test_revocation_by_account_and_by_certificate_key(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    first = await client.issue(["revoke1.example.test"], solver=http01)
    await client.revoke(first.fullchain_pem, reason=4)
    with pytest.raises(AcmeProblem) as info:
        await client.revoke(first.fullchain_pem)
    assert info.value.type == "urn:ietf:params:acme:error:alreadyRevoked"

    second = await client.issue(["revoke2.example.test"], solver=http01)
    key = serialization.load_pem_private_key(second.private_key_pem.encode(), None)
    await client.revoke(second.certificate_pem, certificate_key=key)  # type: ignore[arg-type]
    with pytest.raises(AcmeProblem, match="alreadyRevoked"):
        await client.revoke(second.certificate_pem)


class _SilentSolver:
    """Claims to present the token but serves nothing: validation must fail."""

    challenge_type = "http-01"

    def __init__(self) -> None:
        self.cleaned: list[str] = []

    def supports(self, identifier: Identifier) -> bool:
        return not identifier.is_wildcard

    async def present(self, task: ChallengeTask) -> None:
        return None

    async def cleanup(self, task: ChallengeTask) -> None:
        self.cleaned.append(task.token)


async def test_failed_validation_is_typed_with_ca_detail(
    pebble: PebbleServer, client: AcmeClient
) -> None:
    solver = _SilentSolver()
    # nothing listens on the validation port during this test (no http01 fixture)
    with pytest.raises(AuthorizationFailed) as info:
        await client.issue(["unserved.example.test"], solver=solver)
    error = info.value
    assert error.identifier == "unserved.example.test"
    assert error.problem is not None
    assert error.problem.type.startswith("urn:ietf:params:acme:error:")
    assert error.problem.detail
    assert "unserved.example.test" in str(error)
    assert len(solver.cleaned) == 1  # cleanup ran although validation failed


class _StuckSolver(_SilentSolver):
    """A present() that never finishes (think: DNS that never propagates)."""

    async def present(self, task: ChallengeTask) -> None:
        await anyio.sleep_forever()


async def test_attempt_deadline_deactivates_pending_authorizations(
    pebble: PebbleServer, client: AcmeClient
) -> None:
    solver = _StuckSolver()
    seen: list[str] = []
    client.subscribe(
        lambda event: seen.append(event.url) if isinstance(event, RequestSent) else None
    )
    with pytest.raises(AttemptTimeout):
        # long enough for the order to be created on a loaded machine; then present() hangs
        await client.issue(["stuck.example.test"], solver=solver, attempt_timeout=6)
    authz_urls = [u for u in seen if "/authZ/" in u]
    assert authz_urls
    authz = await client.get_authorization(authz_urls[0])
    assert authz.status == "deactivated"
    assert solver.cleaned  # cleanup ran after the timeout


async def test_bad_input_sends_nothing(pebble: PebbleServer, http01: Http01Server) -> None:
    seen: list[str] = []
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as acme:
        acme.subscribe(on_requests(lambda m, u: seen.append(u)))
        with pytest.raises(InvalidIdentifier):
            await acme.issue(["bad..name"], solver=http01)
        with pytest.raises(UnsupportedChallenge, match="wildcard"):
            await acme.issue(["*.example.test"], solver=http01)
    assert seen == []


async def test_nonce_rejection_storm_is_ridden_out(pebble_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    server: PebbleServer = pebble_factory(nonce_reject_percent=30)
    async with (
        Http01Server(host="127.0.0.1", port=server.http_port) as solver,
        AcmeClient(server.directory_url, ca_bundle=server.ca_bundle) as acme,
    ):
        for i in range(3):
            issued = await acme.issue([f"nonce{i}.example.test"], solver=solver)
            assert_valid_chain(issued, server, [f"nonce{i}.example.test"])
    posts = [r for r in server.requests_seen() if r[0] == "POST"]
    assert len(posts) >= 21  # 7 POSTs per certificate at the least; replays come on top


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_real_validation_delays_are_polled(pebble_factory) -> None:  # type: ignore[no-untyped-def]
    server: PebbleServer = pebble_factory(va_nosleep=False)
    polls: list[str] = []
    async with (
        Http01Server(host="127.0.0.1", port=server.http_port) as solver,
        AcmeClient(server.directory_url, ca_bundle=server.ca_bundle) as acme,
    ):
        acme.subscribe(on_requests(lambda m, u: polls.append(u)))
        start = dt.datetime.now(dt.UTC)
        names = ["slow1.example.test", "slow2.example.test"]
        issued = await acme.issue(names, solver=solver)
        elapsed = (dt.datetime.now(dt.UTC) - start).total_seconds()
    assert_valid_chain(issued, server, names)
    order_polls = [u for u in polls if "/my-order/" in u]
    # polling grows its interval: far fewer polls than seconds waited at 0.25 s each
    assert len(order_polls) <= 4 + elapsed / 2


class _HangingSolver(_SilentSolver):
    """A present() that awaits an event nobody sets; its calls are counted."""

    def __init__(self) -> None:
        super().__init__()
        self.presented = 0
        self.presenting = anyio.Event()
        self._never = anyio.Event()

    async def present(self, task: ChallengeTask) -> None:
        self.presented += 1
        self.presenting.set()
        await self._never.wait()


async def test_the_attempt_deadline_is_on_the_injected_clock(pebble: PebbleServer) -> None:
    """One deadline on one clock: fake time reaching it cancels a hung present()."""
    clock = FakeClock()
    solver = _HangingSolver()
    seen: list[ClientEvent] = []
    errors: list[BaseException] = []
    async with AcmeClient(
        pebble.directory_url,
        ca_bundle=pebble.ca_bundle,
        clock=clock,
        attempt_timeout=dt.timedelta(minutes=30),
    ) as client:
        client.subscribe(seen.append)
        await client.register()

        async def issue() -> None:
            try:
                await client.issue(["hung.fake-deadline.example.test"], solver=solver)
            except AttemptTimeout as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(issue)
            await solver.presenting.wait()
            clock.advance(dt.timedelta(minutes=29, seconds=59))  # one second early
            for _ in range(10):
                await anyio.lowlevel.checkpoint()
            assert not errors
            assert not [e for e in seen if isinstance(e, AttemptEnded)]
            clock.advance(1)  # the deadline: another task moves the fake time there
        [error] = errors
        assert "within 1800 s" in str(error)
        assert solver.presented == 1
        assert len(solver.cleaned) == 1  # cleanup ran after the deadline
        assert not [e for e in seen if isinstance(e, ChallengePresented)]  # never finished
        [ended] = [e for e in seen if isinstance(e, AttemptEnded)]
        # why it ended: the AttemptTimeout issue() raised, not the cancellation inside
        assert ended.error is error
        authz_urls = [e.url for e in seen if isinstance(e, RequestSent) and "/authZ/" in e.url]
        assert authz_urls
        assert (await client.get_authorization(authz_urls[0])).status == "deactivated"
