"""Polling as RFC 8555 says, against Pebble 2.10 (and the fault proxy where Pebble cannot
produce the case): the finalize answer's ``Retry-After`` is waited out before the first
order poll (§7.4), an authorization's ``Retry-After`` paces the next poll (§7.5.1), a
challenge the CA puts back to ``pending`` after a failed validation is answered again,
up to a bound, with the CA's reason shown (§8.2), and a long ``Retry-After`` never
outlives the attempt's deadline.

The client's clock records every sleep it is asked for together with how many requests
the proxy had answered by then, so each wait is tied to the answer that caused it; the
tests assert the waits requested and count requests, they do not time anything.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import http.server
import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from acmecerts import (
    AcmeClient,
    AttemptTimeout,
    AuthorizationFailed,
    ChallengeTask,
    FakeClock,
    Http01Server,
    Identifier,
    PollPolicy,
    SystemClock,
)
from acmecerts.client import ChallengeAnswered, ChallengeRetried, ClientEvent, OrderCreated
from acmecerts.testing import PebbleServer
from tests.conftest import PebbleFactory
from tests.faults.proxy import FaultProxy, Match, RecordedRequest, Respond, Rewrite, make_proxy

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

POLICY = PollPolicy()
#: A fast pace for the tests that go through several looks (every poll 0.1 s).
QUICK = PollPolicy(initial=0.1, multiplier=1.0, max_interval=0.1)
CONNECTION = "urn:ietf:params:acme:error:connection"
REASON = "127.0.0.1: Fetching http://x/.well-known/acme-challenge/t: Timeout (injected)"


def _name(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}.polling.example.test"


class _Recorder(SystemClock):
    """The real clock, remembering every sleep as ``(requests answered, seconds, now)``."""

    def __init__(self, proxy: FaultProxy) -> None:
        self._proxy = proxy
        self.sleeps: list[tuple[int, float, dt.datetime]] = []
        #: Called before each sleep (after it is recorded).
        self.on_sleep: Callable[[], None] | None = None

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append((len(self._proxy.requests), seconds, self.now()))
        if self.on_sleep is not None:
            self.on_sleep()
        await super().sleep(seconds)


class _PacedFakeClock(FakeClock):
    """A :class:`FakeClock` whose sleeps also let 20 ms of real time pass, so that polls
    in fake time do not ask Pebble as fast as it answers; it records the request count
    at each sleep like :class:`_Recorder`."""

    def __init__(self, proxy: FaultProxy) -> None:
        super().__init__()
        self._proxy = proxy
        self.marks: list[tuple[int, float]] = []

    async def sleep(self, seconds: float) -> None:
        self.marks.append((len(self._proxy.requests), seconds))
        await super().sleep(seconds)
        await anyio.sleep(0.02)


def _index(proxy: FaultProxy, request: RecordedRequest) -> int:
    return next(i for i, r in enumerate(proxy.requests) if r.arrival == request.arrival)


def _header(request: RecordedRequest, name: str) -> str | None:
    for key, value in request.response_headers:
        if key.lower() == name.lower():
            return value
    return None


def _waited(
    sleeps: list[tuple[int, float, dt.datetime]], answered: int
) -> tuple[float, dt.datetime]:
    """The one sleep between the ``answered``-th answer and the next request."""
    found = [(seconds, at) for count, seconds, at in sleeps if count == answered]
    assert len(found) == 1, (answered, sleeps)
    return found[0]


def _asked(header: str, at: dt.datetime) -> float:
    """The wait a ``Retry-After`` value asks for, seen at ``at`` (never below the floor)."""
    if header.strip().isdigit():
        return float(header)
    when = email.utils.parsedate_to_datetime(header)
    return max(POLICY.floor, (when - at).total_seconds())


def _assert_retry_afters_honoured(
    proxy: FaultProxy, clock: _Recorder, path: str, *, at_least: int
) -> int:
    """Every answer under ``path`` with ``Retry-After`` was followed by that wait."""
    honoured = 0
    for request in proxy.requests_to(path, "POST"):
        header = _header(request, "Retry-After")
        if header is None:
            continue
        seconds, at = _waited(clock.sleeps, _index(proxy, request) + 1)
        asked = _asked(header, at)
        # parsed when the answer came, slept a moment later: at most that much less
        assert asked - 0.5 <= seconds <= asked + 0.01, (request.path, header, seconds)
        honoured += 1
    assert honoured >= at_least, path
    return honoured


class _HeldHttp01:
    """An http-01 solver whose server holds Pebble's validation request until
    ``release`` is set, so the challenge stays ``processing`` as long as the test wants."""

    challenge_type = "http-01"

    def __init__(self, port: int) -> None:
        self.release = threading.Event()
        self._tokens: dict[str, str] = {}
        tokens, release = self._tokens, self.release

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                release.wait(30)
                answer = tokens.get(self.path.rsplit("/", 1)[-1])
                self.send_response(200 if answer is not None else 404)
                body = (answer or "").encode()
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> _HeldHttp01:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()

    def supports(self, identifier: Identifier) -> bool:
        return identifier.type == "dns" and not identifier.is_wildcard

    async def present(self, task: ChallengeTask) -> None:
        self._tokens[task.token] = task.key_authorization

    async def cleanup(self, task: ChallengeTask) -> None:
        self._tokens.pop(task.token, None)


@pytest.fixture
def pebble_ra(pebble_factory: PebbleFactory) -> PebbleServer:
    """A Pebble 2.10 that sends ``Retry-After`` (seconds or an HTTP-date, at random):
    2 s on a processing order (the finalize answer, order polls), 1 s on an
    authorization whose challenge is processing."""
    return pebble_factory(retry_after_order=2, retry_after_authz=1, authz_reuse_percent=0)


# -- Pebble 2.10's own Retry-After ---------------------------------------------------------------


async def test_the_finalize_answers_retry_after_is_waited_out_before_the_first_poll(
    pebble_ra: PebbleServer,
) -> None:
    with make_proxy(pebble_ra) as proxy:
        clock = _Recorder(proxy)
        async with (
            Http01Server(host="127.0.0.1", port=pebble_ra.http_port) as solver,
            AcmeClient(proxy.directory_url, ca_bundle=pebble_ra.ca_bundle, clock=clock) as acme,
        ):
            await acme.issue([_name("finalize")], solver=solver)
    (finalize,) = proxy.requests_to("/finalize-order/", "POST")
    header = _header(finalize, "Retry-After")
    assert header is not None  # Pebble 2.10 answers "processing" with Retry-After
    seconds, at = _waited(clock.sleeps, _index(proxy, finalize) + 1)
    assert seconds > POLICY.initial or _asked(header, at) <= POLICY.initial
    _assert_retry_afters_honoured(proxy, clock, "/finalize-order/", at_least=1)
    _assert_retry_afters_honoured(proxy, clock, "/my-order/", at_least=0)
    # the certificate was ready when the CA said: one poll after finalize, not several
    after = [r for r in proxy.requests_to("/my-order/", "POST") if r.arrival > finalize.arrival]
    assert len(after) == 1


async def test_an_authorizations_retry_after_paces_the_next_poll(pebble_ra: PebbleServer) -> None:
    with make_proxy(pebble_ra) as proxy, _HeldHttp01(pebble_ra.http_port) as solver:
        clock = _Recorder(proxy)

        def release_after_the_first_look() -> None:
            # the validation is held until an authorization was fetched while its
            # challenge was processing, so Pebble answered with Retry-After
            looks = [
                r
                for r in proxy.requests_to("/authZ/", "POST")
                if proxy.requests_to("/chalZ/", "POST")
                and r.arrival > proxy.requests_to("/chalZ/", "POST")[0].arrival
                and _header(r, "Retry-After") is not None
            ]
            if looks:
                solver.release.set()

        clock.on_sleep = release_after_the_first_look
        async with AcmeClient(
            proxy.directory_url, ca_bundle=pebble_ra.ca_bundle, clock=clock
        ) as acme:
            await acme.issue([_name("authz")], solver=solver)
    (answer,) = proxy.requests_to("/chalZ/", "POST")
    authz_after = [r for r in proxy.requests_to("/authZ/", "POST") if r.arrival > answer.arrival]
    # the order was polled twice, then the third poll looked at the authorization
    polls = [r for r in proxy.requests_to("/my-order/", "POST") if r.arrival > answer.arrival]
    assert len([p for p in polls if p.arrival < authz_after[0].arrival]) == (
        POLICY.authorization_look - 1
    )
    assert _header(authz_after[0], "Retry-After") is not None
    _assert_retry_afters_honoured(proxy, clock, "/authZ/", at_least=1)


# -- what Pebble cannot produce: the fault proxy ---------------------------------------------------


def _put_back(document: Any) -> Any:
    """An authorization as a CA shows it after a failed validation it will retry when
    asked (RFC 8555 §8.2): pending, its http-01 challenge pending with an error."""
    for challenge in document.get("challenges", []):
        if challenge.get("type") == "http-01":
            challenge["status"] = "pending"
            challenge["error"] = {"type": CONNECTION, "detail": REASON, "status": 400}
    document["status"] = "pending"
    return document


def _processing(token: str = "t" * 43) -> Respond:
    """A challenge POST's answer the proxy gives instead of Pebble (which never sees it)."""
    body = {
        "type": "http-01",
        "url": "https://127.0.0.1/chalZ/kept-by-the-proxy",
        "status": "processing",
        "token": token,
    }
    return Respond(200, body=json.dumps(body).encode())


async def test_a_challenge_put_back_to_pending_is_answered_again_and_the_reason_shown(
    pebble: PebbleServer,
    proxy: FaultProxy,
    http01: Http01Server,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the first answer never reaches Pebble (its challenge stays pending), and the first
    # look at the authorization shows it put back to pending with the CA's reason
    proxy.add_rule(Match("/chalZ/", "POST"), _processing())
    seen: list[ClientEvent] = []
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle) as acme:
        acme.subscribe(seen.append)
        await acme.register()
        first = len(proxy.requests)

        def arm(event: ClientEvent) -> None:
            # the next fetch of the authorization is the first look (the fetch before
            # presenting is left alone)
            if isinstance(event, ChallengeAnswered) and len(seen_answers) == 0:
                seen_answers.append(event)
                proxy.add_rule(Match("/authZ/", "POST"), Rewrite(_put_back))

        seen_answers: list[ChallengeAnswered] = []

        acme.subscribe(arm)
        with caplog.at_level(logging.WARNING, logger="acmecerts.client"):
            issued = await acme.issue([_name("retried")], solver=http01)
    assert issued.chain.leaf is not None
    answers = [r for r in proxy.requests[first:] if r.method == "POST" and "/chalZ/" in r.path]
    assert len(answers) == 2  # answered again: Pebble validated the second answer
    (retried,) = [e for e in seen if isinstance(e, ChallengeRetried)]
    assert retried.attempt == 2
    assert retried.challenge.error is not None
    assert retried.challenge.error.detail == REASON
    assert any(REASON in r.getMessage() and "2 of 3" in r.getMessage() for r in caplog.records)


async def test_a_challenge_that_keeps_failing_ends_with_the_cas_reason(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    # no answer reaches Pebble; every look shows the challenge put back to pending
    proxy.add_rule(Match("/chalZ/", "POST"), _processing(), times=None)
    seen: list[ClientEvent] = []
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, poll=QUICK) as acme:
        acme.subscribe(seen.append)
        await acme.register()

        armed: list[bool] = []

        def arm(event: ClientEvent) -> None:
            if isinstance(event, ChallengeAnswered) and not armed:
                armed.append(True)
                proxy.add_rule(Match("/authZ/", "POST"), Rewrite(_put_back), times=None)

        acme.subscribe(arm)
        with pytest.raises(AuthorizationFailed) as failed:
            await acme.issue([_name("failing")], solver=http01)
    error = failed.value
    assert error.problem is not None
    assert error.problem.detail == REASON
    assert REASON in str(error)
    assert f"after {QUICK.challenge_answers} answers" in str(error)
    assert len(proxy.requests_to("/chalZ/", "POST")) == QUICK.challenge_answers
    retries = [e.attempt for e in seen if isinstance(e, ChallengeRetried)]
    assert retries == list(range(2, QUICK.challenge_answers + 1))


async def test_an_http_date_retry_after_on_finalize_is_waited_out(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    clock = _PacedFakeClock(proxy)
    when = email.utils.format_datetime(clock.now() + dt.timedelta(seconds=90), usegmt=True)
    proxy.add_rule(Match("/finalize-order/", "POST"), Rewrite(headers={"Retry-After": when}))
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as acme:
        await acme.issue([_name("http-date")], solver=http01)
    (finalize,) = proxy.requests_to("/finalize-order/", "POST")
    (wait,) = [s for count, s in clock.marks if count == _index(proxy, finalize) + 1]
    # the HTTP-date names a whole second; the fake clock drifts a little from real time
    assert 86 <= wait <= 91


async def test_an_hour_long_retry_after_on_finalize_is_cut_at_the_deadline(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    clock = _PacedFakeClock(proxy)
    proxy.add_rule(Match("/finalize-order/", "POST"), Rewrite(headers={"Retry-After": "3600"}))
    created: list[OrderCreated] = []
    name = _name("hour")
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as acme:
        acme.subscribe(lambda e: created.append(e) if isinstance(e, OrderCreated) else None)
        with pytest.raises(AttemptTimeout):
            await acme.issue([name], solver=http01, attempt_timeout=300)
        (finalize,) = proxy.requests_to("/finalize-order/", "POST")
        (wait,) = [s for count, s in clock.marks if count == _index(proxy, finalize) + 1]
        # neither the hour nor max_retry_after (600 s): what was left of the 300 s
        assert 250 < wait < 300
        assert not [
            r for r in proxy.requests_to("/my-order/", "POST") if r.arrival > finalize.arrival
        ]
        # the order was finalized at the CA: the next attempt resumes it, no new order
        (order,) = created
        assert order.private_key is not None
        orders_before = len(proxy.requests_to("/order-plz", "POST"))
        issued = await acme.issue(
            [name],
            solver=http01,
            resume_order_url=order.order.url,
            private_key=order.private_key,
        )
    assert issued.order_url == order.order.url
    assert len(proxy.requests_to("/order-plz", "POST")) == orders_before
