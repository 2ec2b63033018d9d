"""Retry, backoff and deadlines, proven against the real Pebble through the fault proxy.

Pebble enforces no rate limits and never sends ``Retry-After``; the :class:`FaultProxy`
in front of it answers 429/503, ``badNonce``, resets, stalls and truncated bodies on cue
and records the arrival time of every request. Timing assertions use lower bounds that
follow from the protocol (``Retry-After``, the backoff floor, the request timeout) and
generous upper bounds, so a busy machine does not make them flaky. Hour- and day-long
waits run on a :class:`FakeClock`.
"""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import itertools
import json
import time
from collections.abc import Sequence
from typing import Any

import anyio
import httpx
import pytest
from requests_seen import on_requests

from acmecerts import (
    AcmeClient,
    AttemptSchedule,
    AttemptState,
    AttemptTimeout,
    ChallengeTask,
    ConnectError,
    FakeClock,
    Http01Server,
    Identifier,
    InvalidInput,
    PollPolicy,
    RateLimited,
    RequestRetry,
    ServerBusy,
    SystemClock,
    TransportError,
)
from acmecerts.attempts import issue_with_retries
from acmecerts.testing import PebbleServer
from tests.faults.conftest import make_proxy
from tests.faults.proxy import (
    RATE_LIMITED,
    SERVER_INTERNAL,
    BadNonce,
    Fault,
    FaultProxy,
    Match,
    RecordedRequest,
    Reset,
    Respond,
    Stall,
    Truncate,
)
from tests.integration.conftest import assert_valid_chain

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

#: Small, fast request-level retry: waits are in [0.2 s, 1 s], Retry-After up to 5 s.
FLOOR = 0.2
CAP = 1.0
FAST = RequestRetry(floor=FLOOR, cap=CAP, max_wait=5, max_attempts=6)
#: Slack for a busy machine in upper bounds (seconds).
SLACK = 3.0


#: What the proxy answers to a challenge POST it keeps from Pebble: a plausible
#: challenge that stays pending (the client only checks that the answer parses).
_PENDING = {
    "type": "http-01",
    "url": "https://127.0.0.1/chalZ/never-forwarded",
    "status": "pending",
    "token": "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0",
}


def _client(proxy: FaultProxy, pebble: PebbleServer, **options: Any) -> AcmeClient:
    """A client with a fresh account, talking to Pebble through ``proxy``."""
    options.setdefault("request_retry", FAST)
    return AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, **options)


def _gaps(requests: Sequence[RecordedRequest]) -> list[float]:
    """Seconds between consecutive arrivals."""
    return [later.arrival - earlier.arrival for earlier, later in itertools.pairwise(requests)]


def _retry_after_seconds(fault: Fault | None) -> float:
    if isinstance(fault, Respond) and fault.retry_after is not None:
        return float(fault.retry_after)
    return 0.0


def _assert_paced(requests: Sequence[RecordedRequest]) -> None:
    """Never tighter than the floor, never sooner than Retry-After, never idling long.

    The gap after an answer with ``Retry-After: N`` is at least ``max(N, floor)``; every
    gap is at most ``cap + N`` (plus slack for a busy machine).
    """
    for earlier, gap in zip(requests, _gaps(requests), strict=False):
        retry_after = _retry_after_seconds(earlier.fault)
        assert gap >= max(FLOOR, retry_after), (earlier, gap)
        assert gap <= CAP + retry_after + SLACK, (earlier, gap)


def _jws_nonce(request: RecordedRequest) -> str:
    """The nonce in the protected header of a JWS request body."""
    protected = json.loads(request.body)["protected"]
    header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
    nonce: str = header["nonce"]
    return nonce


class _RecordingClock(SystemClock):
    """The real clock, remembering every sleep as ``(monotonic time, seconds)``."""

    def __init__(self) -> None:
        self.sleeps: list[tuple[float, float]] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append((time.monotonic(), seconds))
        await super().sleep(seconds)


class _PacedFakeClock(FakeClock):
    """A :class:`FakeClock` whose short (poll, backoff) sleeps also let real time pass.

    Fake-time polling would otherwise ask Pebble as fast as it answers while its
    validation runs in real time; 20 ms per sleep keeps that polite.
    """

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds)
        if 0 < seconds < 60:
            await anyio.sleep(0.02)


class _FailingFirst:
    """An http-01 solver that serves nothing for its first ``failures`` challenges
    (so Pebble's validation fails), then serves through ``solver``."""

    challenge_type = "http-01"

    def __init__(self, solver: Http01Server, failures: int) -> None:
        self._solver = solver
        self._failures = failures
        self.presented = 0

    def supports(self, identifier: Identifier) -> bool:
        return self._solver.supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        self.presented += 1
        if self.presented > self._failures:
            await self._solver.present(task)

    async def cleanup(self, task: ChallengeTask) -> None:
        await self._solver.cleanup(task)


class _Tracking:
    """Delegates to ``solver`` and remembers the tasks presented and cleaned up."""

    challenge_type = "http-01"

    def __init__(self, solver: Http01Server) -> None:
        self._solver = solver
        self.presented: list[ChallengeTask] = []
        self.cleaned: list[ChallengeTask] = []

    def supports(self, identifier: Identifier) -> bool:
        return self._solver.supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        self.presented.append(task)
        await self._solver.present(task)

    async def cleanup(self, task: ChallengeTask) -> None:
        self.cleaned.append(task)
        await self._solver.cleanup(task)


# --------------------------------------------------------------------------- 429


@pytest.mark.parametrize("form", ["delta-seconds", "http-date"])
async def test_429_retry_after_is_waited_out_then_the_certificate_is_issued(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server, form: str
) -> None:
    name = f"{form}.wait.ratelimit.example.test"
    async with _client(proxy, pebble) as acme:
        await acme.register()  # so that the newOrder comes right after the rule is set
        if form == "delta-seconds":
            header = "2"
            not_before = None
        else:
            # an HTTP-date (IMF-fixdate) whole seconds away: 2 to 3 s from now
            not_before = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=3)
            header = email.utils.format_datetime(not_before, usegmt=True)
        proxy.add_rule(
            Match("/order-plz", "POST"),
            Respond(429, RATE_LIMITED, "too many new orders recently", retry_after=header),
        )
        issued = await acme.issue([name], solver=http01)
    assert_valid_chain(issued, pebble, [name])

    limited, accepted = proxy.requests_to("/order-plz")
    assert (limited.status, accepted.status) == (429, 201)
    gap = accepted.arrival - limited.arrival
    if not_before is None:
        assert gap >= 2.0  # Retry-After: 2, counted from the answer (after the arrival)
    else:
        assert accepted.wall >= not_before  # never sooner than the date the CA named
    assert gap <= 3.0 + CAP + SLACK
    # nothing at all was sent while waiting (the retry's nonce came with the 429)
    assert [r for r in proxy.requests if limited.arrival < r.arrival < accepted.arrival] == []


@pytest.mark.parametrize("where", ["header", "detail"])
async def test_429_with_a_far_retry_after_is_raised_and_not_retried(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server, where: str
) -> None:
    in_an_hour = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    if where == "header":
        fault = Respond(429, RATE_LIMITED, "too many certificates", retry_after="3600")
    else:  # Let's Encrypt's detail text, no header
        when = in_an_hour.strftime("%Y-%m-%d %H:%M:%S UTC")
        fault = Respond(429, RATE_LIMITED, f"too many certificates, retry after {when}: see ...")
    proxy.add_rule(Match("/order-plz", "POST"), fault, times=None)
    clock = FakeClock(dt.datetime.now(dt.UTC))
    async with _client(proxy, pebble, clock=clock) as acme:
        with pytest.raises(RateLimited) as info:
            await acme.issue([f"{where}.far.ratelimit.example.test"], solver=http01)
    retry_after = info.value.retry_after
    assert retry_after is not None
    assert abs((retry_after - in_an_hour).total_seconds()) < 60
    assert len(proxy.requests_to("/order-plz")) == 1  # not retried
    assert clock.sleeps == []  # not waited for


# --------------------------------------------------------------------------- 503


async def test_503_storm_on_new_nonce_is_ridden_out_with_backoff(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    # a load balancer in maintenance: no nonce on its answers, Retry-After or not
    storm = [
        Respond(503, SERVER_INTERNAL, "maintenance", retry_after="1", replay_nonce=False),
        Respond(503, replay_nonce=False),
        Respond(503, retry_after="1", replay_nonce=False),
        Respond(503, SERVER_INTERNAL, "overloaded", replay_nonce=False),
    ]
    for fault in storm:
        proxy.add_rule(Match("/nonce-plz", "HEAD"), fault)
    name = "storm.nonce.example.test"
    async with _client(proxy, pebble) as acme:
        issued = await acme.issue([name], solver=http01)
    assert_valid_chain(issued, pebble, [name])

    nonces = proxy.requests_to("/nonce-plz", "HEAD")
    assert [r.status for r in nonces] == [503, 503, 503, 503, 200]
    _assert_paced(nonces)


async def test_503_storm_on_new_nonce_before_a_new_order_is_one_bounded_loop(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    name = "storm.nonce-before-order.example.test"
    async with _client(proxy, pebble) as acme:
        await acme.register()
        acme.transport.nonces.clear()  # so the newOrder must ask newNonce first
        proxy.clear_requests()
        storm = [
            Respond(503, retry_after="1", replay_nonce=False),
            Respond(503, replay_nonce=False),
            Respond(503, SERVER_INTERNAL, "overloaded", replay_nonce=False),
            Respond(503, SERVER_INTERNAL, "maintenance", retry_after="1", replay_nonce=False),
        ]
        for fault in storm:
            proxy.add_rule(Match("/nonce-plz", "HEAD"), fault)
        issued = await acme.issue([name], solver=http01)
        assert_valid_chain(issued, pebble, [name])
        # the newOrder was never sent during the storm, so it was safe to go on trying
        heads = proxy.requests_to("/nonce-plz", "HEAD")
        assert [r.status for r in heads] == [503, 503, 503, 503, 200]
        _assert_paced(heads)
        assert [r.status for r in proxy.requests_to("/order-plz")] == [201]

        # A storm that does not end: the newOrder's one retry loop gives up after
        # max_attempts requests in all (not max_attempts newNonce tries per try).
        acme.transport.retry = RequestRetry(floor=FLOOR, cap=CAP, max_attempts=3)
        acme.transport.nonces.clear()
        proxy.clear_requests()
        proxy.add_rule(Match("/nonce-plz", "HEAD"), Respond(503, replay_nonce=False), times=None)
        with pytest.raises(ServerBusy) as info:
            await acme.new_order(["never.example.test"])
        assert not info.value.reached_ca  # the newOrder itself was never sent
        heads = proxy.requests_to("/nonce-plz", "HEAD")
        assert [r.status for r in heads] == [503, 503, 503]
        _assert_paced(heads)
        assert proxy.requests_to("/order-plz") == []


async def test_503_storm_with_retry_after_on_new_order_is_ridden_out(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    # The CA refused the newOrder and said when to come back: safe to send it again.
    storm = [
        Respond(503, SERVER_INTERNAL, "maintenance", retry_after="1"),
        Respond(503, retry_after="1"),
        Respond(503, SERVER_INTERNAL, "busy", retry_after="0"),  # "now": still >= floor
        Respond(503, SERVER_INTERNAL, "busy", retry_after="1"),
    ]
    for fault in storm:
        proxy.add_rule(Match("/order-plz", "POST"), fault)
    name = "storm.order.example.test"
    async with _client(proxy, pebble) as acme:
        issued = await acme.issue([name], solver=http01)
    assert_valid_chain(issued, pebble, [name])

    orders = proxy.requests_to("/order-plz")
    assert [r.status for r in orders] == [503, 503, 503, 503, 201]
    _assert_paced(orders)


async def test_bare_503_on_new_order_is_replayed_because_nothing_was_created(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    # A 503 means the CA refused the request unprocessed (no order created, nothing
    # spent), so even the non-idempotent newOrder is replayed by the transport, with
    # backoff, inside one attempt; the attempt schedule is not escalated.
    proxy.add_rule(
        Match("/order-plz", "POST"), Respond(503, SERVER_INTERNAL, "overloaded"), times=2
    )
    schedule = AttemptSchedule.from_delays([0.5, 1.0], jitter=0)
    states: list[AttemptState] = []

    async def remember(state: AttemptState) -> None:
        states.append(state)

    name = "storm.schedule.example.test"
    async with _client(proxy, pebble) as acme:
        issued = await issue_with_retries(
            acme, [name], schedule=schedule, on_state=remember, solver=http01
        )
    assert_valid_chain(issued, pebble, [name])

    orders = proxy.requests_to("/order-plz")
    assert [r.status for r in orders] == [503, 503, 201]
    assert states == [AttemptState()]  # one successful attempt
    _assert_paced(orders)


# --------------------------------------------------------------------------- stalls


async def test_stalled_request_hits_the_request_timeout_and_is_retried(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    proxy.add_rule(Match("/authZ/", "POST"), Stall(60))  # ends early when the proxy stops
    name = "stalled.request.example.test"
    async with _client(proxy, pebble, request_timeout=2) as acme:
        issued = await acme.issue([name], solver=http01)
    assert_valid_chain(issued, pebble, [name])

    stalled, *later = proxy.requests_to("/authZ/")
    assert isinstance(stalled.fault, Stall)
    retried = next(r for r in later if r.path == stalled.path)
    assert (retried.fault, retried.status) == (None, 200)
    gap = retried.arrival - stalled.arrival
    # retried after the 2 s request timeout (plus backoff), not after the 60 s stall ended
    assert 2.0 <= gap < 60.0


async def test_stalled_validation_hits_the_attempt_deadline(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    # The proxy answers the challenge POST itself, so Pebble never starts validating and
    # the authorization stays pending for good.
    proxy.add_rule(
        Match("/chalZ/", "POST"), Respond(200, body=json.dumps(_PENDING).encode()), times=None
    )
    clock = FakeClock()
    solver = _Tracking(http01)
    policy = PollPolicy()
    async with _client(proxy, pebble, clock=clock, poll=policy) as acme:
        started = clock.now()
        with pytest.raises(AttemptTimeout):
            await acme.issue(["stalled.validation.example.test"], solver=solver)
        waited = clock.now() - started

        # the default 30-minute deadline, in fake time
        assert waited == dt.timedelta(minutes=30)
        # polling slowed down to its cap and stayed there: a bounded number of polls
        polls = proxy.requests_to("/my-order/")
        # every third poll looks at the authorization instead (then cleanup fetches and
        # deactivates it)
        [answer, *_] = proxy.requests_to("/chalZ/")
        looks = [r for r in proxy.requests_to("/authZ/") if r.arrival > answer.arrival][:-2]
        assert len(looks) == (len(polls) + len(looks)) // policy.authorization_look
        # one poll or look after each pause but the last: that one ends at the deadline,
        # where the attempt is cancelled on the same (fake) clock, with nothing after it
        assert len(polls) + len(looks) == len(clock.sleeps) - 1
        assert sum(clock.sleeps) == pytest.approx(30 * 60)
        assert clock.sleeps[:-1] == sorted(clock.sleeps[:-1])
        assert max(clock.sleeps) == policy.max_interval
        assert len(polls) <= 30 * 60 / policy.max_interval + 10
        assert all(isinstance(r.fault, Respond) for r in proxy.requests_to("/chalZ/"))

        # the abandoned authorization was deactivated at the CA
        [authz_path] = {r.path for r in proxy.requests_to("/authZ/")}
        authz = await acme.get_authorization(proxy.url + authz_path)
        assert authz.status == "deactivated"
    # and the challenge response was cleaned up: the token is no longer served
    [task] = solver.presented
    assert solver.cleaned == [task]
    challenge_url = f"http://127.0.0.1:{pebble.http_port}/.well-known/acme-challenge/{task.token}"
    async with httpx.AsyncClient(trust_env=False) as web:
        assert (await web.get(challenge_url)).status_code == 404
        await http01.present(task)  # the control: a presented token is served there
        assert (await web.get(challenge_url)).text == task.key_authorization
        await http01.cleanup(task)


async def test_an_expired_attempt_is_recorded_as_transient(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    proxy.add_rule(
        Match("/chalZ/", "POST"), Respond(200, body=json.dumps(_PENDING).encode()), times=None
    )
    clock = FakeClock()
    states: list[AttemptState] = []

    async def remember(state: AttemptState) -> None:
        states.append(state)

    async with _client(proxy, pebble, clock=clock) as acme:
        with pytest.raises(InvalidInput):  # checked before anything is sent
            await acme.issue(["zero.example.test"], solver=http01, attempt_timeout=0)
        assert proxy.requests == []

        with pytest.raises(AttemptTimeout):
            await issue_with_retries(
                acme,
                ["expired.example.test"],
                schedule=AttemptSchedule.from_delays([60], repeat_last=False, jitter=0),
                on_state=remember,
                solver=http01,
                attempt_timeout=dt.timedelta(minutes=2),  # per call, instead of 30 min
            )
    # each attempt was abandoned at its 2-minute deadline, recorded as transient; the
    # order had reached the CA, so the schedule escalated, and gave up after 2 attempts
    assert [(s.attempts, s.last_error_kind) for s in states] == [
        (1, "transient"),
        (2, "transient"),
    ]
    assert all((s.last_error or "").startswith("AttemptTimeout") for s in states)
    assert [s for s in clock.sleeps if s >= 60] == [60]
    assert sum(clock.sleeps) == pytest.approx(2 * 120 + 60)
    assert len(proxy.requests_to("/order-plz")) == 2


# --------------------------------------------------------------------------- schedule


async def test_the_attempt_schedule_is_followed_exactly(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    clock = _PacedFakeClock()
    solver = _FailingFirst(http01, failures=4)
    states: list[AttemptState] = []
    order_times: list[dt.datetime] = []

    async def remember(state: AttemptState) -> None:
        states.append(state)

    def on_request(method: str, url: str) -> None:
        if url.endswith("/order-plz"):
            order_times.append(clock.now())

    name = "schedule.example.test"
    async with _client(proxy, pebble, clock=clock) as acme:
        acme.subscribe(on_requests(on_request))
        issued = await issue_with_retries(
            acme, [name], schedule=AttemptSchedule(jitter=0), on_state=remember, solver=solver
        )
    assert_valid_chain(issued, pebble, [name])

    # Let's Encrypt's 1 min, 10 min, 100 min, 24 h between the five attempts, exactly
    assert [s for s in clock.sleeps if s >= 60] == [60, 600, 6000, 86400]
    assert [s.attempts for s in states] == [1, 2, 3, 4, 0]
    assert all(s.last_error_kind == "permanent" for s in states[:4])
    assert all((s.last_error or "").startswith("AuthorizationFailed") for s in states[:4])
    assert states[-1] == AttemptState()
    assert len(order_times) == len(proxy.requests_to("/order-plz")) == 5
    delays = [60, 600, 6000, 86400]
    for (earlier, later), delay in zip(itertools.pairwise(order_times), delays, strict=True):
        assert (later - earlier).total_seconds() >= delay


async def test_a_later_retry_after_wins_over_the_schedule(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    clock = _PacedFakeClock()
    states: list[AttemptState] = []

    async def remember(state: AttemptState) -> None:
        states.append(state)
        if len(states) == 1:  # the 2nd attempt's newOrder is rate limited for 2 hours
            proxy.add_rule(
                Match("/order-plz", "POST"),
                Respond(429, RATE_LIMITED, "too many failed authorizations", retry_after="7200"),
            )

    name = "retry-after-wins.example.test"
    async with _client(proxy, pebble, clock=clock) as acme:
        issued = await issue_with_retries(
            acme,
            [name],
            schedule=AttemptSchedule(jitter=0),
            on_state=remember,
            solver=_FailingFirst(http01, failures=1),
        )
    assert_valid_chain(issued, pebble, [name])

    assert [s for s in clock.sleeps if s >= 60] == [60, 7200]  # not 600
    assert [s.attempts for s in states] == [1, 2, 0]
    assert states[1].last_error_kind == "rate-limited"
    assert [r.status for r in proxy.requests_to("/order-plz")] == [201, 429, 201]


async def test_an_error_that_never_reached_the_ca_does_not_escalate(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    clock = _PacedFakeClock()
    states: list[AttemptState] = []
    restarted = make_proxy(pebble, port=proxy.port)

    async def remember(state: AttemptState) -> None:
        states.append(state)
        if len(states) == 1:  # the CA goes unreachable: connection refused
            await anyio.to_thread.run_sync(proxy.stop)
        elif len(states) == 2:  # and comes back on the same address
            await anyio.to_thread.run_sync(restarted.start)

    name = "unreachable.example.test"
    try:
        async with _client(proxy, pebble, clock=clock) as acme:
            issued = await issue_with_retries(
                acme,
                [name],
                schedule=AttemptSchedule(jitter=0),
                on_state=remember,
                solver=_FailingFirst(http01, failures=1),
            )
    finally:
        restarted.stop()
    assert_valid_chain(issued, pebble, [name])

    # attempt 2 failed without reaching the CA: the count stays 1, the wait stays 1 min
    assert [s.attempts for s in states] == [1, 1, 0]
    assert states[1].last_error_kind == "transient"
    assert (states[1].last_error or "").startswith(ConnectError.__name__)
    assert [s for s in clock.sleeps if s >= 60] == [60, 60]
    assert len(proxy.requests_to("/order-plz")) == 1
    assert len(restarted.requests_to("/order-plz")) == 1


# --------------------------------------------------------------------------- badNonce


async def test_bad_nonce_burst_is_replayed_at_once(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    proxy.add_rule(Match("/order-plz", "POST"), BadNonce(), times=5)
    clock = _RecordingClock()
    name = "burst.badnonce.example.test"
    async with _client(proxy, pebble, clock=clock) as acme:
        issued = await acme.issue([name], solver=http01)
    assert_valid_chain(issued, pebble, [name])

    orders = proxy.requests_to("/order-plz")
    assert [r.status for r in orders] == [400] * 5 + [201]
    # each replay carries the fresh nonce from the badNonce answer
    assert len({_jws_nonce(r) for r in orders}) == 6
    # and none of them waited
    first, last = orders[0].arrival, orders[-1].arrival
    assert [s for at, s in clock.sleeps if first <= at <= last] == []
    assert last - first < SLACK


# --------------------------------------------------------------------------- broken answers


async def test_truncated_and_reset_polls_are_retried(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    faults: dict[str, Fault] = {"/authZ/": Reset(), "/my-order/": Truncate(), "/certZ/": Truncate()}
    for prefix, fault in faults.items():
        proxy.add_rule(Match(prefix, "POST"), fault)
    name = "broken.polls.example.test"
    async with _client(proxy, pebble) as acme:
        issued = await acme.issue([name], solver=http01)
    assert_valid_chain(issued, pebble, [name])

    for prefix, fault in faults.items():
        broken, *later = proxy.requests_to(prefix, "POST")
        assert broken.fault is fault
        retried = next(r for r in later if r.path == broken.path)
        assert (retried.fault, retried.status) == (None, 200)
        assert FLOOR <= retried.arrival - broken.arrival <= CAP + SLACK


async def test_a_reset_new_order_is_not_replayed_blindly(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    async with _client(proxy, pebble) as acme:
        await acme.register()
        proxy.add_rule(Match("/order-plz", "POST"), Reset())
        with pytest.raises(TransportError) as info:
            await acme.issue(["reset.order.example.test"], solver=http01)
        # the order may exist at the CA now: the error says so, and nothing was resent
        assert info.value.reached_ca
        assert not isinstance(info.value, ConnectError)
        assert len(proxy.requests_to("/order-plz")) == 1

        # the client recovers on a new connection
        issued = await acme.issue(["reset.order.example.test"], solver=http01)
    assert_valid_chain(issued, pebble, ["reset.order.example.test"])
    assert [r.status for r in proxy.requests_to("/order-plz")] == [None, 201]
