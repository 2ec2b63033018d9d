"""The request throttle in the transport: fair waiting on the clock, endpoint classes.

:class:`RequestThrottle` on a :class:`FakeClock` (only the request at the head of a queue
sleeps, so the fake time moves exactly as far as the rate says), and
:class:`AcmeTransport` with a throttle behind ``httpx.MockTransport`` (the fake at the
transport seam) to show which endpoint class each request counts against, that
``badNonce`` replays and retries take tokens, and how :class:`AcmeClient` picks its rates.
The throttle against the real Pebble is in ``tests/faults/test_throttle_burst.py``.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable

import anyio
import anyio.lowlevel
import httpx
import pytest

from acmecerts import AcmeClient, Clock, FakeClock, InvalidInput, RequestRetry
from acmecerts.protocol.keys import AccountKey
from acmecerts.ratelimit import (
    LETS_ENCRYPT,
    NO_LIMITS,
    EndpointClass,
    RateLimitLedger,
    RequestRates,
)
from acmecerts.transport import AcmeTransport, RequestThrottle

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
BASE = "https://ca.test"
DIRECTORY = {
    "newNonce": f"{BASE}/nonce",
    "newAccount": f"{BASE}/acct",
    "newOrder": f"{BASE}/order",
    "revokeCert": f"{BASE}/revoke",
    "keyChange": f"{BASE}/key-change",
    "renewalInfo": f"{BASE}/ari/",
}
KEY = AccountKey.generate()
Handler = Callable[[httpx.Request], httpx.Response]


def ms(n: float) -> dt.timedelta:
    return dt.timedelta(milliseconds=n)


class ManualClock:
    """A clock whose sleepers stay asleep until the test moves the time past their end."""

    def __init__(self) -> None:
        self._now = T0
        self._sleepers: list[tuple[dt.datetime, anyio.Event]] = []

    def now(self) -> dt.datetime:
        return self._now

    async def sleep(self, seconds: float) -> None:
        woken = anyio.Event()
        entry = (self._now + dt.timedelta(seconds=seconds), woken)
        self._sleepers.append(entry)
        try:
            await woken.wait()
        finally:
            self._sleepers.remove(entry)

    def advance(self, seconds: float) -> None:
        self._now += dt.timedelta(seconds=seconds)
        for end, woken in self._sleepers:
            if end <= self._now:
                woken.set()


async def until(condition: Callable[[], bool]) -> None:
    """Let the other tasks run until ``condition()`` holds (bounded by the test timeout)."""
    while not condition():
        await anyio.lowlevel.checkpoint()


# -- RequestThrottle on a fake clock -------------------------------------------------------


async def test_concurrent_waiters_are_served_in_order_at_exact_instants() -> None:
    clock = FakeClock(T0)
    throttle = RequestThrottle({"newOrder": (10, 2)}, clock=clock)
    served: list[tuple[int, dt.datetime]] = []

    async def request(i: int) -> None:
        await throttle.acquire(EndpointClass.NEW_ORDER)
        served.append((i, clock.now()))

    async with anyio.create_task_group() as tg:
        for i in range(7):
            tg.start_soon(request, i)
    # two from the burst, then one every 100 ms, first come first served
    assert served == [(i, T0 + ms(100 * max(0, i - 1))) for i in range(7)]
    # only the head of the queue slept, each time exactly until the next token
    assert clock.sleeps == [0.1] * 5
    stats = throttle.stats()[EndpointClass.NEW_ORDER]
    assert (stats.granted, stats.waited, stats.queued) == (7, 5, 0)
    # (the fake clock moved on when the head began to sleep: 3 to 6 queued at +100 ms)
    assert stats.waited_seconds == pytest.approx(0.1 + 0.1 + 0.2 + 0.3 + 0.4)


async def test_a_cancelled_waiter_leaves_the_queue_and_passes_the_head_on() -> None:
    clock = ManualClock()
    throttle = RequestThrottle({"other": (10, 1)}, clock=clock)
    assert throttle.try_take(EndpointClass.OTHER)  # the bucket is now empty
    served: list[tuple[str, dt.datetime]] = []
    scopes: dict[str, anyio.CancelScope] = {}

    def queued() -> int:
        return throttle.stats()[EndpointClass.OTHER].queued

    async def request(name: str) -> None:
        with anyio.CancelScope() as scope:
            scopes[name] = scope
            await throttle.acquire(EndpointClass.OTHER)
            served.append((name, clock.now()))

    async with anyio.create_task_group() as tg:
        for count, name in enumerate("abcd", start=1):
            tg.start_soon(request, name)
            while queued() < count:  # they queue in this order
                await anyio.lowlevel.checkpoint()
        scopes["b"].cancel()  # behind the head
        scopes["a"].cancel()  # the head, asleep until its token
        await until(lambda: queued() == 2)
        clock.advance(0.1)  # c, the head now, gets the token a was waiting for
        await until(lambda: queued() == 1)
        clock.advance(0.1)
    assert served == [("c", T0 + ms(100)), ("d", T0 + ms(200))]
    assert queued() == 0


async def test_unthrottled_classes_never_wait() -> None:
    clock = FakeClock(T0)
    throttle = RequestThrottle({"newOrder": (1, 1)}, clock=clock)
    for _ in range(100):
        await throttle.acquire(EndpointClass.OTHER)
    assert clock.sleeps == []
    assert EndpointClass.OTHER not in throttle.stats()


def test_a_throttle_needs_rates() -> None:
    with pytest.raises(InvalidInput, match="at least one rate"):
        RequestThrottle({})
    with pytest.raises(InvalidInput, match="no endpoint class"):
        RequestThrottle({"newOrders": (1, 1)})


# -- the throttle in the transport ----------------------------------------------------------


class CA:
    """A fake CA at the transport seam: a directory, nonces, and a handler for the rest."""

    def __init__(self, handler: Handler | None = None, clock: Clock | None = None) -> None:
        self.handler = handler or (lambda r: httpx.Response(200, json={}, headers=self.nonce()))
        self.requests: list[tuple[str, str, dt.datetime]] = []
        self.nonces = 0
        self.fake = FakeClock(T0)
        self.clock: Clock = clock or self.fake

    def nonce(self) -> dict[str, str]:
        self.nonces += 1
        return {"Replay-Nonce": f"nonce-{self.nonces:06d}-abcdefg"}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path, self.clock.now()))
        if request.url.path == "/dir":
            return httpx.Response(200, json=DIRECTORY)
        if request.url.path == "/nonce":
            return httpx.Response(200, headers=self.nonce())
        return self.handler(request)

    def transport(self, **kwargs: object) -> AcmeTransport:
        client = httpx.AsyncClient(transport=httpx.MockTransport(self))
        return AcmeTransport(
            f"{BASE}/dir",
            client=client,
            clock=self.clock,
            retry=RequestRetry(floor=0.5, cap=4, max_attempts=4),
            **kwargs,  # type: ignore[arg-type]
        )


async def post(transport: AcmeTransport, path: str) -> None:
    await transport.post(f"{BASE}{path}", key=KEY, kid=f"{BASE}/acct/1", payload=None)


async def test_requests_are_classified_by_the_directory_urls() -> None:
    transport = CA().transport(request_rates=LETS_ENCRYPT.request_rates)
    assert transport.endpoint_class(f"{BASE}/dir") is EndpointClass.DIRECTORY
    assert transport.endpoint_class(f"{BASE}/order") is EndpointClass.OTHER  # not known yet
    await transport.directory()
    expected = {
        "/dir": EndpointClass.DIRECTORY,
        "/nonce": EndpointClass.NEW_NONCE,
        "/acct": EndpointClass.NEW_ACCOUNT,
        "/acct/1": EndpointClass.OTHER,
        "/order": EndpointClass.NEW_ORDER,
        "/revoke": EndpointClass.REVOKE_CERT,
        "/ari/": EndpointClass.RENEWAL_INFO,
        "/ari/aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE": EndpointClass.RENEWAL_INFO,
        "/ari": EndpointClass.OTHER,
        "/key-change": EndpointClass.OTHER,
        "/authz/1": EndpointClass.OTHER,
        "/finalize/1": EndpointClass.OTHER,
    }
    assert {path: transport.endpoint_class(BASE + path) for path in expected} == expected


async def test_new_nonce_requests_keep_to_the_lets_encrypt_rate() -> None:
    ca = CA()
    transport = ca.transport(request_rates=LETS_ENCRYPT.request_rates)
    for _ in range(25):
        await transport.new_nonce()
    heads = [when for method, path, when in ca.requests if method == "HEAD"]
    # newNonce: 20/s, burst 10 (the directory GET has a bucket of its own)
    assert heads == [T0] * 10 + [T0 + ms(50 * k) for k in range(1, 16)]
    assert ca.fake.sleeps == [0.05] * 15


async def test_bad_nonce_replays_and_retries_take_tokens() -> None:
    answers = iter(["badNonce", "badNonce", "503", "ok"])

    def handler(request: httpx.Request) -> httpx.Response:
        answer = next(answers)
        if answer == "badNonce":
            body = {"type": "urn:ietf:params:acme:error:badNonce", "detail": "stale"}
            return httpx.Response(400, json=body, headers=ca.nonce())
        if answer == "503":
            return httpx.Response(503, headers={"Retry-After": "0"})
        return httpx.Response(200, json={}, headers=ca.nonce())

    ca = CA(handler)
    transport = ca.transport(request_rates={"other": (1, 1)})
    await post(transport, "/authz/1")
    posts = [when for method, _, when in ca.requests if method == "POST"]
    assert len(posts) == 4  # two replays, one retry, the answer
    stats = transport.throttle.stats() if transport.throttle else {}
    assert stats[EndpointClass.OTHER].granted == 4
    # one token a second, the first at once: no two POSTs less than a second apart
    assert all(b - a >= dt.timedelta(seconds=1) for a, b in itertools.pairwise(posts))


async def test_a_post_cancelled_in_the_throttle_leaves_no_nonce_promise_behind() -> None:
    ca = CA(clock=ManualClock())
    transport = ca.transport(request_rates={"other": (1, 1)})
    throttle = transport.throttle
    assert throttle is not None
    await post(transport, "/authz/1")  # takes the only token
    async with anyio.create_task_group() as tg:
        tg.start_soon(post, transport, "/authz/2")
        await until(lambda: throttle.stats()[EndpointClass.OTHER].queued == 1)
        # the POST waiting for its token holds a nonce: it counts as one on its way
        assert transport._nonce_supply.promised == 1
        tg.cancel_scope.cancel()
    assert transport._nonce_supply.promised == 0
    assert throttle.stats()[EndpointClass.OTHER].queued == 0
    assert [p for m, p, _ in ca.requests if m == "POST"] == ["/authz/1"]


async def test_concurrent_first_calls_fetch_the_directory_once() -> None:
    ca = CA()
    transport = ca.transport()
    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(transport.directory)
    assert [p for _, p, _ in ca.requests] == ["/dir"]


async def test_without_rates_there_is_no_throttle_and_nothing_waits() -> None:
    ca = CA()
    transport = ca.transport()
    assert transport.throttle is None
    for i in range(50):
        await post(transport, f"/authz/{i}")
    assert ca.fake.sleeps == []
    assert ca.fake.now() == T0
    assert ca.transport(request_rates=RequestRates()).throttle is None
    assert ca.transport(request_rates=None).throttle is None


def test_the_transport_refuses_a_bad_throttle() -> None:
    with pytest.raises(InvalidInput, match="request_rates must be"):
        CA().transport(request_rates=300)
    with pytest.raises(InvalidInput, match="no endpoint class"):
        CA().transport(request_rates={"orders": (1, 1)})


# -- what AcmeClient chooses -------------------------------------------------------------


LE = "https://acme-v02.api.letsencrypt.org/directory"
PEBBLE = "https://127.0.0.1:14000/dir"


def rates_of(client: AcmeClient) -> RequestRates | None:
    throttle = client.transport.throttle
    return None if throttle is None else throttle.rates


async def test_the_client_follows_the_limits_model() -> None:
    # by default: the model of the CA the directory names...
    assert rates_of(AcmeClient(LE)) == LETS_ENCRYPT.request_rates
    assert rates_of(AcmeClient(PEBBLE)) is None
    # ...or the ledger's model, which says what the CA's limits are
    assert rates_of(AcmeClient(PEBBLE, ledger=RateLimitLedger(LETS_ENCRYPT))) == (
        LETS_ENCRYPT.request_rates
    )
    assert rates_of(AcmeClient(LE, ledger=RateLimitLedger(NO_LIMITS))) is None
    # configured: a model, a table, off, or one throttle shared by two clients
    assert rates_of(AcmeClient(PEBBLE, request_rates=LETS_ENCRYPT)) == LETS_ENCRYPT.request_rates
    assert rates_of(AcmeClient(PEBBLE, request_rates={"newOrder": (5, 5)})) == RequestRates(
        {"newOrder": (5, 5)}
    )
    assert rates_of(AcmeClient(LE, request_rates=None)) is None
    shared = RequestThrottle({"other": (100, 10)})
    one, two = AcmeClient(PEBBLE, request_rates=shared), AcmeClient(LE, request_rates=shared)
    assert one.transport.throttle is shared
    assert two.transport.throttle is shared


async def test_the_client_refuses_bad_throttle_settings() -> None:
    with pytest.raises(InvalidInput, match="request_rates='fast'"):
        AcmeClient(PEBBLE, request_rates="fast")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="a request burst must be"):
        AcmeClient(PEBBLE, request_rates={"newOrder": (5, 0)})
    with pytest.raises(InvalidInput, match="give it to the AcmeTransport"):
        AcmeClient(PEBBLE, transport=AcmeTransport(PEBBLE), request_rates=None)
