"""The transport's handling of malformed and faulty answers (httpx.MockTransport).

These are parser and policy edge cases that a real Pebble never produces; the real
protocol is exercised in tests/integration and tests/faults.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

import httpx
import pytest

from acmecerts._time import FakeClock
from acmecerts.errors import (
    BadNonce,
    BadServerResponse,
    ConnectError,
    ErrorKind,
    InvalidInput,
    RateLimited,
    ServerBusy,
    TransportError,
)
from acmecerts.protocol.keys import AccountKey
from acmecerts.retry import RequestRetry
from acmecerts.transport import USER_AGENT, AcmeTransport, NoncePool

pytestmark = pytest.mark.anyio

BASE = "https://ca.test"
DIRECTORY = {
    "newNonce": f"{BASE}/nonce",
    "newAccount": f"{BASE}/acct",
    "newOrder": f"{BASE}/order",
}
T0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """Counts requests and hands out numbered nonces."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpx.Request] = []
        self.nonce = 0

    def next_nonce(self) -> str:
        self.nonce += 1
        return f"nonce-{self.nonce:04d}-abcdefgh"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/dir":
            return httpx.Response(200, json=DIRECTORY)
        if request.url.path == "/nonce":
            return httpx.Response(200, headers={"Replay-Nonce": self.next_nonce()})
        return self.handler(request)

    def paths(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]


def make(handler: Handler, **kwargs: object) -> tuple[AcmeTransport, Recorder, FakeClock]:
    rec = Recorder(handler)
    clock = FakeClock(T0)
    client = httpx.AsyncClient(transport=httpx.MockTransport(rec))
    transport = AcmeTransport(
        f"{BASE}/dir",
        client=client,
        clock=clock,
        retry=RequestRetry(floor=0.5, cap=4, max_attempts=4),
        **kwargs,  # type: ignore[arg-type]
    )
    return transport, rec, clock


KEY = AccountKey.generate()


async def post(transport: AcmeTransport, path: str = "/thing") -> object:
    response = await transport.post(f"{BASE}{path}", key=KEY, kid=f"{BASE}/acct/1", payload=None)
    return response.json()


async def test_json_answer_and_nonce_reuse() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert request.headers["content-type"] == "application/jose+json"
        assert request.headers["user-agent"].startswith(USER_AGENT)
        assert body["payload"] == ""
        return httpx.Response(200, json={"ok": True}, headers={"Replay-Nonce": "fresh-nonce-123"})

    transport, rec, _ = make(handler)
    assert await post(transport) == {"ok": True}
    assert await post(transport) == {"ok": True}
    # one newNonce for the first POST; the second reuses the Replay-Nonce
    assert rec.paths() == ["GET /dir", "HEAD /nonce", "POST /thing", "POST /thing"]
    assert transport.request_count == 4


async def test_bad_json_is_bad_server_response() -> None:
    transport, _, _ = make(
        lambda r: httpx.Response(
            200, content=b"{oops", headers={"content-type": "application/json"}
        )
    )
    with pytest.raises(BadServerResponse, match="not valid JSON"):
        await post(transport)


async def test_wrong_content_type() -> None:
    transport, _, _ = make(lambda r: httpx.Response(200, html="<p>hello</p>"))
    with pytest.raises(BadServerResponse, match="expected application/json"):
        await post(transport)


async def test_missing_location() -> None:
    transport, _, _ = make(lambda r: httpx.Response(201, json={"status": "pending"}))
    response = await transport.post(f"{BASE}/order", key=KEY, kid="k", payload={})
    with pytest.raises(BadServerResponse, match="Location"):
        response.require_location()


async def test_new_nonce_without_replay_nonce() -> None:
    def all_without_nonce(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    rec = Recorder(all_without_nonce)

    def no_nonce(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/dir":
            return httpx.Response(200, json=DIRECTORY)
        return httpx.Response(200)

    client = httpx.AsyncClient(transport=httpx.MockTransport(no_nonce))
    transport = AcmeTransport(f"{BASE}/dir", client=client, clock=FakeClock(T0))
    with pytest.raises(BadServerResponse, match="Replay-Nonce"):
        await post(transport)
    assert rec.requests == []
    await client.aclose()


async def test_bad_nonce_is_replayed_with_a_fresh_nonce() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        protected = json.loads(request.content)["protected"]
        seen.append(protected)
        if len(seen) < 3:
            return httpx.Response(
                400,
                json={"type": "urn:ietf:params:acme:error:badNonce", "detail": "stale"},
                headers={
                    "content-type": "application/problem+json",
                    "Replay-Nonce": f"replay-{len(seen)}-xxxxxxxxx",
                },
            )
        return httpx.Response(200, json={"ok": 1})

    transport, rec, clock = make(handler)
    assert await post(transport) == {"ok": 1}
    assert len(set(seen)) == 3  # every try signed with another nonce
    assert rec.paths().count("HEAD /nonce") == 1  # the replays used the badNonce answers' nonces
    assert clock.sleeps == []


async def test_bad_nonce_storm_is_bounded() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            400,
            json={"type": "urn:ietf:params:acme:error:badNonce"},
            headers={"content-type": "application/problem+json", "Replay-Nonce": "n-12345678"},
        )

    transport, rec, _ = make(handler)
    with pytest.raises(BadNonce):
        await post(transport)
    assert rec.paths().count("POST /thing") == RequestRetry().max_bad_nonce + 1


async def test_503_with_retry_after_is_waited_out() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(503, headers={"Retry-After": "7"})
        return httpx.Response(200, json={"ok": 2})

    transport, _, clock = make(handler)
    assert await post(transport) == {"ok": 2}
    assert clock.sleeps
    assert clock.sleeps[0] >= 7


async def test_long_rate_limit_is_raised_with_instant() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            429,
            json={
                "type": "urn:ietf:params:acme:error:rateLimited",
                "detail": "too many certificates, retry after 2026-03-02 00:00:00 UTC",
            },
            headers={"content-type": "application/problem+json"},
        )

    transport, rec, clock = make(handler)
    with pytest.raises(RateLimited) as info:
        await post(transport)
    assert info.value.kind is ErrorKind.RATE_LIMITED
    assert info.value.retry_after == dt.datetime(2026, 3, 2, tzinfo=dt.UTC)
    assert rec.paths().count("POST /thing") == 1
    assert clock.sleeps == []


async def test_5xx_without_problem_is_retried_then_transient() -> None:
    transport, rec, clock = make(lambda r: httpx.Response(502, text="bad gateway"))
    with pytest.raises(BadServerResponse) as info:
        await post(transport)
    assert info.value.kind is ErrorKind.TRANSIENT
    assert rec.paths().count("POST /thing") == 4
    assert all(0.5 <= s <= 4 for s in clock.sleeps)


async def test_503_problem_without_retry_after_is_transient() -> None:
    transport, _, _ = make(
        lambda r: httpx.Response(
            503,
            json={"type": "urn:ietf:params:acme:error:serverInternal"},
            headers={"content-type": "application/problem+json"},
        )
    )
    with pytest.raises(ServerBusy) as info:
        await post(transport)
    assert info.value.kind is ErrorKind.TRANSIENT


async def test_non_idempotent_post_is_not_replayed_after_reaching_ca() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ReadError("connection reset", request=request)

    transport, _, _ = make(handler)
    with pytest.raises(TransportError) as info:
        await transport.post(f"{BASE}/order", key=KEY, kid="k", payload={}, idempotent=False)
    assert calls == 1
    assert getattr(info.value, "kind", None) is ErrorKind.TRANSIENT


async def test_connect_errors_never_reached_ca_and_are_retried() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    rec = Recorder(handler)
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    clock = FakeClock(T0)
    transport = AcmeTransport(
        f"{BASE}/dir", client=client, clock=clock, retry=RequestRetry(max_attempts=3)
    )
    with pytest.raises(ConnectError) as info:
        await transport.directory()
    assert info.value.reached_ca is False
    assert len(clock.sleeps) == 2
    assert rec.requests == []
    await client.aclose()


async def test_redirects_and_huge_bodies_are_refused() -> None:
    transport, _, _ = make(lambda r: httpx.Response(302, headers={"Location": "https://evil"}))
    with pytest.raises(BadServerResponse, match="redirect"):
        await post(transport)
    transport, _, _ = make(lambda r: httpx.Response(200, content=b"x" * (2 << 20)))
    with pytest.raises(BadServerResponse, match="1 MiB"):
        await post(transport)


async def test_link_headers() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            content=b"pem",
            headers=[
                ("Link", '<https://ca.test/cert/1/1>;rel="alternate", <../dir>; rel="index"'),
                ("Link", "<https://ca.test/cert/1/2>; rel=alternate"),
                ("Link", "garbage, <unterminated"),
            ],
        )

    transport, _, _ = make(handler)
    response = await transport.post(f"{BASE}/cert/1", key=KEY, kid="k", payload=None)
    assert response.links("alternate") == [f"{BASE}/cert/1/1", f"{BASE}/cert/1/2"]
    assert response.links("index") == [f"{BASE}/dir"]
    assert response.links("up") == []


async def test_directory_is_cached() -> None:
    transport, rec, _ = make(lambda r: httpx.Response(404))
    d1 = await transport.directory()
    d2 = await transport.directory()
    assert d1 is d2
    assert rec.paths() == ["GET /dir"]


def test_directory_url_must_be_https() -> None:
    with pytest.raises(InvalidInput):
        AcmeTransport("http://ca.test/dir")
    with pytest.raises(InvalidInput):
        AcmeTransport("not a url")


def test_ca_bundle_must_exist(tmp_path: object) -> None:
    with pytest.raises(InvalidInput, match="CA bundle"):
        AcmeTransport(f"{BASE}/dir", ca_bundle="/nonexistent/ca.pem")


def test_nonce_pool_is_lifo_bounded_and_filters_junk() -> None:
    pool = NoncePool(capacity=2)
    pool.put("first-nonce-01")
    pool.put("bad nonce with spaces")
    pool.put("x" * 17)  # 4k+1 characters: not decodable base64url
    pool.put("second-nonce")
    pool.put("third-nonce-03")
    assert len(pool) == 2
    assert pool.take() == "third-nonce-03"
    assert pool.take() == "second-nonce"
    assert pool.take() is None


async def test_busy_transport_waits_for_replay_nonces_instead_of_asking_new_nonce() -> None:
    import anyio

    release = anyio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"ok": True}, headers={"Replay-Nonce": "reply-nonce-00"})

    rec = Recorder(handler)

    async def slow_handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/thing":
            await release.wait()
        return rec(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(slow_handler))
    transport = AcmeTransport(
        f"{BASE}/dir", client=client, clock=FakeClock(T0), nonce_circulation=4
    )
    results: list[object] = []

    async def one() -> None:
        results.append(await post(transport))

    async with anyio.create_task_group() as tg:
        for _ in range(12):
            tg.start_soon(one)
        await anyio.sleep(0.1)
        # four requests are in flight; the other eight wait for their Replay-Nonces
        assert rec.paths().count("HEAD /nonce") == 4
        release.set()
    assert len(results) == 12
    assert rec.paths().count("HEAD /nonce") == 4
    assert rec.paths().count("POST /thing") == 12
    await client.aclose()


async def _burst(count: int, *, warm: bool) -> tuple[Recorder, list[str]]:
    """``count`` POSTs started at once against a CA answering each after a short delay."""
    import anyio

    used: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"ok": True}, headers={"Replay-Nonce": rec.next_nonce()})

    rec = Recorder(handler)

    async def delayed(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            used.append(json.loads(request.content)["protected"])
        await anyio.sleep(0.01)
        return rec(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(delayed))
    transport = AcmeTransport(f"{BASE}/dir", client=client, clock=FakeClock(T0))
    if warm:
        await post(transport)  # the pool now holds one nonce
        rec.requests.clear()
        used.clear()
    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(post, transport)
    await client.aclose()
    return rec, used


async def test_a_burst_waits_for_nonces_on_their_way_instead_of_asking_for_each() -> None:
    # ten authorizations of one order fetched at once with one nonce in the pool: a request
    # waits whenever a nonce is on its way that no one else waits for, so about half ask
    # newNonce (the RFC-minimal 10 POSTs plus 4 HEADs, not plus 9)
    rec, used = await _burst(10, warm=True)
    assert rec.paths().count("POST /thing") == 10
    assert rec.paths().count("HEAD /nonce") == 4
    assert len(set(used)) == len(used)  # every POST signed a different nonce


async def test_a_cold_burst_never_reuses_a_nonce() -> None:
    rec, used = await _burst(40, warm=False)
    assert rec.paths().count("POST /thing") == 40
    assert 1 <= rec.paths().count("HEAD /nonce") <= 32  # the circulation bound
    assert len(set(used)) == len(used)


async def test_a_stalled_answer_holds_up_other_requests_only_for_the_bounded_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A CA that takes its time with one request (seen end to end: an order poll held for
    # seconds) must not stall the client's other requests until it answers: after the
    # bounded wait for that answer's nonce, they ask newNonce.
    import anyio

    import acmecerts.transport._http as http_module

    monkeypatch.setattr(http_module, "_NONCE_WAIT", 0.05)
    release = anyio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"ok": True}, headers={"Replay-Nonce": rec.next_nonce()})

    rec = Recorder(handler)

    async def stalled(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            await release.wait()
        return rec(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(stalled))
    transport = AcmeTransport(f"{BASE}/dir", client=client, clock=FakeClock(T0))
    async with anyio.create_task_group() as tg:
        tg.start_soon(post, transport, "/slow")  # newNonce, then a POST the CA sits on
        await anyio.sleep(0.02)
        with anyio.fail_after(5):
            await post(transport)  # waits 0.05 s for the stalled answer's nonce, no longer
        assert rec.paths().count("POST /thing") == 1
        assert rec.paths().count("HEAD /nonce") == 2
        release.set()
    await client.aclose()


async def test_a_cancelled_waiter_no_longer_counts_as_waiting() -> None:
    import anyio

    release = anyio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"ok": True}, headers={"Replay-Nonce": rec.next_nonce()})

    rec = Recorder(handler)

    async def held(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/thing":
            await release.wait()
        return rec(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(held))
    transport = AcmeTransport(f"{BASE}/dir", client=client, clock=FakeClock(T0))
    async with anyio.create_task_group() as tg:
        tg.start_soon(post, transport)  # newNonce, then a POST that hangs
        await anyio.sleep(0.05)
        with anyio.move_on_after(0.05):
            await post(transport)  # waits for the hanging POST's nonce, then gives up
        # nothing waits now, so the hanging POST's nonce is free for the next request:
        # it waits for it instead of asking newNonce
        tg.start_soon(post, transport)
        await anyio.sleep(0.05)
        release.set()
    assert rec.paths().count("HEAD /nonce") == 1
    assert rec.paths().count("POST /thing") == 2
    await client.aclose()
