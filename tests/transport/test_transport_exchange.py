"""One request path: the pool, an httpx client and a test's fake sit under the same code.

:class:`AcmeTransport` does the URL policy, throttle, nonces, ``badNonce`` replay, retries
and error mapping once, then hands the bytes to an :class:`HttpExchange`. These tests
record what reaches that seam from the default pool against a real Pebble, from an
``httpx.AsyncClient`` (``client=``) and from a fake, and fail if the paths diverge:
a request that skips the seam, or headers that differ between them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping

import httpx
import pytest

from acmecerts._time import FakeClock
from acmecerts.errors import AccountDoesNotExist, InvalidInput, RequestTimeout
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.retry import RequestRetry
from acmecerts.testing import PebbleServer
from acmecerts.transport import USER_AGENT, AcmeTransport, Http11Pool, HttpExchange
from acmecerts.transport._exchange import Answer, ClientExchange

pytestmark = pytest.mark.anyio

BASE = "https://ca.test"
T0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
#: What reaches the seam for one request: method, path, header names in order.
Seen = tuple[str, str, tuple[bytes, ...]]


def _seen(method: str, url: httpx.URL, headers: list[tuple[bytes, bytes]]) -> Seen:
    return method, url.path.rsplit("/", 1)[0] or "/", tuple(name for name, _ in headers)


class FakeCa:
    """An :class:`HttpExchange` answering like an ACME CA: the fake at the transport seam."""

    def __init__(self, *, bad_nonces: int = 0, resets: int = 0) -> None:
        self.seen: list[Seen] = []
        self.headers: list[dict[bytes, bytes]] = []
        self.bad_nonces = bad_nonces
        self.resets = resets
        self.nonce = 0
        self.closed = False

    def _nonce(self) -> bytes:
        self.nonce += 1
        return f"fake-nonce-{self.nonce:04d}".encode()

    async def exchange(
        self,
        method: str,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        timeouts: Mapping[str, float | None],
    ) -> Answer:
        self.seen.append(_seen(method, url, headers))
        self.headers.append(dict(headers))
        assert timeouts["read"] == 30.0  # the transport's timeouts reach the seam
        if self.resets:
            self.resets -= 1
            raise httpx.ReadTimeout("the fake CA stalls")
        nonce = [(b"Replay-Nonce", self._nonce())]
        if url.path == "/dir":
            directory = {
                "newNonce": f"{BASE}/nonce-plz",
                "newAccount": f"{BASE}/sign-me-up",
                "newOrder": f"{BASE}/order-plz",
            }
            return _json(200, directory, [])
        if method == "HEAD":
            return Answer(200, b"OK", httpx.Headers(nonce), b"")
        if self.bad_nonces:
            self.bad_nonces -= 1
            problem = {"type": "urn:ietf:params:acme:error:badNonce", "detail": "stale"}
            return _json(400, problem, nonce, media="application/problem+json")
        problem = {"type": "urn:ietf:params:acme:error:accountDoesNotExist", "detail": "none"}
        return _json(400, problem, nonce, media="application/problem+json")

    async def aclose(self) -> None:
        self.closed = True


def _json(
    status: int,
    document: object,
    headers: list[tuple[bytes, bytes]],
    *,
    media: str = "application/json",
) -> Answer:
    head = httpx.Headers([(b"Content-Type", media.encode()), *headers])
    return Answer(status, b"", head, json.dumps(document).encode())


async def _lookup(transport: AcmeTransport) -> None:
    """The same three requests on every path: directory, newNonce, a signed POST."""
    directory = await transport.directory()
    key = AccountKey.generate(KeyType.EC256)
    with pytest.raises(AccountDoesNotExist):
        await transport.post(
            directory.new_account, key=key, kid=None, payload={"onlyReturnExisting": True}
        )


def _expected(post_headers: tuple[bytes, ...]) -> list[Seen]:
    get = (b"Host", b"User-Agent")
    return [("GET", "/", get), ("HEAD", "/", get), ("POST", "/", post_headers)]


POST_HEADERS = (b"Host", b"User-Agent", b"Content-Type", b"Content-Length")


async def test_a_fake_exchange_runs_the_transports_one_path() -> None:
    fake = FakeCa()
    assert isinstance(fake, HttpExchange)
    transport = AcmeTransport(f"{BASE}/dir", client=fake, clock=FakeClock(T0))
    await _lookup(transport)
    assert fake.seen == _expected(POST_HEADERS)
    assert transport.request_count == len(fake.seen)
    first = fake.headers[0]
    assert first[b"Host"] == b"ca.test"
    assert first[b"User-Agent"] == USER_AGENT.encode()
    assert fake.headers[-1][b"Content-Type"] == b"application/jose+json"
    # the POST's Replay-Nonce went to the pool: the next POST asks no newNonce
    await _lookup(transport)
    assert [method for method, _, _ in fake.seen[3:]] == ["POST"]
    await transport.aclose()
    assert not fake.closed  # the transport closes only what it made


async def test_bad_nonce_replay_and_retries_run_above_the_seam() -> None:
    fake = FakeCa(bad_nonces=2, resets=1)
    clock = FakeClock(T0)
    transport = AcmeTransport(
        f"{BASE}/dir", client=fake, clock=clock, retry=RequestRetry(floor=1, cap=1)
    )
    await _lookup(transport)
    methods = [method for method, _, _ in fake.seen]
    # a stalled directory GET retried after the backoff, then two badNonce replays with
    # the nonces their answers brought (no newNonce for them)
    assert methods == ["GET", "GET", "HEAD", "POST", "POST", "POST"]
    assert clock.sleeps == [1.0]
    assert transport.request_count == 6


async def test_the_seam_errors_are_translated_once_for_every_exchange() -> None:
    fake = FakeCa(resets=10)
    transport = AcmeTransport(
        f"{BASE}/dir", client=fake, clock=FakeClock(T0), retry=RequestRetry(max_attempts=2)
    )
    with pytest.raises(RequestTimeout, match=r"GET https://ca\.test/dir timed out"):
        await transport.directory()
    assert len(fake.seen) == 2


def test_client_must_be_an_httpx_client_or_an_exchange() -> None:
    with pytest.raises(InvalidInput, match="HttpExchange"):
        AcmeTransport(f"{BASE}/dir", client=object())  # type: ignore[arg-type]


async def test_an_httpx_client_sends_what_the_pool_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeCa()
    seen: list[Seen] = []
    original = ClientExchange.exchange

    async def recording(
        self: ClientExchange,
        method: str,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        timeouts: Mapping[str, float | None],
    ) -> Answer:
        seen.append(_seen(method, url, headers))
        return await original(self, method, url, headers, body, timeouts)

    async def handler(request: httpx.Request) -> httpx.Response:
        headers = list(request.headers.raw)
        answer = await fake.exchange(
            request.method, request.url, headers, request.content, {"read": 30.0}
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    monkeypatch.setattr(ClientExchange, "exchange", recording)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        transport = AcmeTransport(f"{BASE}/dir", client=client, clock=FakeClock(T0))
        await _lookup(transport)
    assert seen == _expected(POST_HEADERS)
    assert transport.request_count == len(seen)
    # httpx adds its own defaults after ours, never instead of them
    assert fake.headers[0][b"User-Agent"] == USER_AGENT.encode()


@pytest.mark.timeout(60)
async def test_the_default_pool_path_sends_what_the_fakes_see(
    pebble: PebbleServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a real Pebble, every request goes through ``Http11Pool.exchange``.

    It sees exactly what :class:`FakeCa` sees (methods, header names and order): a code
    path around the seam, or one the fakes do not run, fails here.
    """
    seen: list[Seen] = []
    original = Http11Pool.exchange

    async def recording(
        self: Http11Pool,
        method: str,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        timeouts: Mapping[str, float | None],
    ) -> Answer:
        seen.append(_seen(method, url, headers))
        return await original(self, method, url, headers, body, timeouts)

    monkeypatch.setattr(Http11Pool, "exchange", recording)
    async with AcmeTransport(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, proxy=None
    ) as transport:
        await _lookup(transport)
        assert isinstance(transport._http, Http11Pool)
    fake = FakeCa()
    await _lookup(AcmeTransport(f"{BASE}/dir", client=fake, clock=FakeClock(T0)))
    assert [(m, h) for m, _, h in seen] == [(m, h) for m, _, h in fake.seen]
    assert transport.request_count == len(seen) == 3
