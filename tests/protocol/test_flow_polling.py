"""Polling as RFC 8555 says, in the issuance flow: the finalize answer's ``Retry-After``,
the look at the authorizations of an order that stays pending, and the challenges a CA
puts back to ``pending`` after a failed validation (§8.2). No event loop, no network."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from acmecerts.errors import AcmeProblem, AttemptTimeout, AuthorizationFailed, InvalidInput
from acmecerts.protocol._flow import (
    Answer,
    Authorize,
    Finalize,
    IssuanceFlow,
    Poll,
    PollPolicy,
    Present,
)
from tests.protocol.test_flow import (
    AUTHZ,
    DEADLINE,
    HTTP,
    NAMES,
    NOW,
    ORDER_URL,
    POLICY,
    THUMB,
    authz,
    challenge,
    fail_error,
    flow,
    order,
)

CONNECTION = AcmeProblem("urn:ietf:params:acme:error:connection", "timeout during connect")


def seconds(n: float) -> dt.datetime:
    return NOW + dt.timedelta(seconds=n)


def answered_flow(**kw: object) -> IssuanceFlow:
    """A flow whose two authorizations were presented and answered (``processing``)."""
    f = flow(**kw)  # type: ignore[arg-type]
    f.order_received(order("pending"))
    assert f.next_action(NOW) == Authorize(AUTHZ)
    for url in AUTHZ:
        assert f.authorization_start(url) == Poll("authorization", url, 0.0)
        present = f.authorization_received(authz(url, challenges=(challenge(),)))
        assert isinstance(present, Present)
        answer = f.presented(url)
        assert answer == Answer(url, challenge())
        assert answer.attempt == 1
        assert f.challenge_answered(url, challenge(status="processing")) is None
    f.authorized()
    return f


def look(f: IssuanceFlow) -> Authorize:
    """Poll the pending order until the flow looks at the authorizations instead (it
    does so at most ``authorization_look`` polls later)."""
    for _ in range(POLICY.authorization_look):
        action = f.next_action(NOW)
        if isinstance(action, Authorize):
            return action
        assert isinstance(action, Poll)
        assert action.resource == "order"
        f.order_received(order("pending"))
    raise AssertionError("no look at the authorizations")


def put_back(url: str, problem: AcmeProblem = CONNECTION) -> object:
    """The authorization as a CA shows it after a failed validation it will retry."""
    return authz(url, challenges=(challenge(status="pending", error=problem),))


# -- the finalize answer's Retry-After, bounded -----------------------------------------------


def test_an_hour_long_retry_after_on_finalize_is_capped_and_the_deadline_still_applies() -> None:
    f = flow()
    f.order_received(order("ready"))
    assert isinstance(f.next_action(NOW), Finalize)
    f.order_received(order("processing"), retry_after=seconds(3600))
    now, waits = NOW, []
    while True:
        action = f.next_action(now)
        if not isinstance(action, Poll):
            break
        waits.append(action.after)
        now += dt.timedelta(seconds=action.after)
        f.order_received(order("processing"), retry_after=now + dt.timedelta(hours=1))
    # capped at max_retry_after (600 s): polled every 10 minutes, never past the deadline
    assert waits == [POLICY.max_retry_after] * 3
    assert now == DEADLINE
    assert isinstance(fail_error(action), AttemptTimeout)


# -- the look at the authorizations of an order that stays pending ----------------------------


def test_an_order_ready_at_its_first_poll_costs_no_look() -> None:
    f = answered_flow()
    assert f.next_action(NOW) == Poll("order", ORDER_URL, POLICY.interval(1, None))
    f.order_received(order("ready"))
    assert f.next_action(NOW) == Finalize(order("ready"))


def test_every_third_poll_of_a_pending_order_looks_at_the_authorizations() -> None:
    f = answered_flow()
    assert look(f) == Authorize(AUTHZ)
    wait = POLICY.interval(POLICY.authorization_look, None)
    # each fetched after the wait the order's poll would have had
    assert [f.authorization_start(u) for u in AUTHZ] == [
        Poll("authorization", u, wait) for u in AUTHZ
    ]
    # one valid, one still being validated: the order is polled again, paced by the
    # authorization's Retry-After
    assert f.authorization_received(authz(AUTHZ[0], "valid")) is None
    processing = authz(AUTHZ[1], challenges=(challenge(status="processing"),))
    assert f.authorization_received(processing, retry_after=seconds(20), now=NOW) is None
    f.authorized()
    assert f.next_action(NOW) == Poll("order", ORDER_URL, 20.0)
    f.order_received(order("pending"))
    assert f.next_action(NOW) == Poll("order", ORDER_URL, POLICY.interval(5, None))
    f.order_received(order("pending"))
    # the next look fetches only the authorization not yet seen valid
    assert f.next_action(NOW) == Authorize(AUTHZ[1:])


def test_a_look_that_finds_every_authorization_valid_finalizes_without_another_poll() -> None:
    f = answered_flow()
    look(f)
    for url in AUTHZ:
        f.authorization_start(url)
        assert f.authorization_received(authz(url, "valid")) is None
    f.authorized()
    assert f.next_action(NOW) == Finalize(order("pending"))
    assert f.cleanup().deactivate == ()


def test_a_look_can_be_every_poll() -> None:
    f = IssuanceFlow(
        NAMES, (HTTP,), thumbprint=THUMB, deadline=DEADLINE, poll=PollPolicy(authorization_look=1)
    )
    f.order_received(order("pending"))
    f.next_action(NOW)
    for url in AUTHZ:
        f.authorization_start(url)
        f.authorization_received(authz(url, challenges=(challenge(),)))
        f.presented(url)
        f.challenge_answered(url, challenge(status="processing"))
    f.authorized()
    assert f.next_action(NOW) == Authorize(AUTHZ)


@pytest.mark.parametrize("status", ["invalid", "deactivated", "expired"])
def test_an_authorization_that_failed_in_a_look_fails_with_the_cas_reason(status: str) -> None:
    f = answered_flow()
    look(f)
    failed = authz(AUTHZ[0], status, (challenge(status="invalid", error=CONNECTION),))
    error = fail_error(f.authorization_received(failed))
    assert isinstance(error, AuthorizationFailed)
    assert error.problem is CONNECTION
    assert "timeout during connect" in str(error)


# -- a challenge put back to pending (RFC 8555 §8.2) -------------------------------------------


@pytest.mark.parametrize("retry_after", [None, 5.0, 3600.0])
def test_a_challenge_put_back_to_pending_is_answered_again_up_to_the_bound(
    retry_after: float | None,
) -> None:
    f = answered_flow()
    hint = None if retry_after is None else seconds(retry_after)
    for attempt in range(2, POLICY.challenge_answers + 1):
        look(f)
        f.authorization_start(AUTHZ[0])
        action = f.authorization_received(put_back(AUTHZ[0]), retry_after=hint, now=NOW)
        again = challenge(status="pending", error=CONNECTION)
        expected = 0.0 if retry_after is None else min(retry_after, POLICY.max_retry_after)
        assert action == Answer(AUTHZ[0], again, after=expected, attempt=attempt)
        assert f.challenge_answered(AUTHZ[0], challenge(status="processing")) is None
        f.authorized()
    look(f)
    f.authorization_start(AUTHZ[0])
    error = fail_error(f.authorization_received(put_back(AUTHZ[0]), now=NOW))
    assert isinstance(error, AuthorizationFailed)
    assert error.problem is CONNECTION
    assert str(error) == (
        f"validation of a.example failed after {POLICY.challenge_answers} answers: {CONNECTION}"
    )
    # still pending at the CA: deactivated in cleanup
    assert AUTHZ[0] in f.cleanup().deactivate


def test_a_pending_challenge_without_an_error_is_not_answered_again() -> None:
    f = answered_flow()
    look(f)
    f.authorization_start(AUTHZ[0])
    # e.g. Pebble 2.4 shows the challenge pending until it validates
    assert f.authorization_received(authz(AUTHZ[0], challenges=(challenge(),))) is None


def test_the_wait_before_answering_again_stops_at_the_deadline() -> None:
    f = answered_flow()
    look(f)
    f.authorization_start(AUTHZ[0])
    late = DEADLINE - dt.timedelta(seconds=3)
    action = f.authorization_received(
        put_back(AUTHZ[0]), retry_after=late + dt.timedelta(seconds=60), now=late
    )
    assert isinstance(action, Answer)
    assert action.after == 3.0


def test_a_timeout_after_a_failed_validation_names_the_cas_reason() -> None:
    f = answered_flow()
    look(f)
    f.authorization_start(AUTHZ[0])
    assert isinstance(f.authorization_received(put_back(AUTHZ[0]), now=NOW), Answer)
    f.challenge_answered(AUTHZ[0], challenge(status="processing"))
    f.authorized()
    error = fail_error(f.next_action(DEADLINE))
    assert isinstance(error, AttemptTimeout)
    assert str(error) == (
        "the attempt deadline passed while waiting for the CA; the CA's last validation "
        f"error for a.example: {CONNECTION}"
    )
    assert error.problem is CONNECTION
    plain = AttemptTimeout("cut short")
    assert flow().timeout_error(plain) is plain  # nothing failed: unchanged


@pytest.mark.parametrize("field", ["challenge_answers", "authorization_look"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_the_bounds_are_positive_integers(field: str, value: object) -> None:
    with pytest.raises(InvalidInput, match=field):
        PollPolicy(**{field: value})  # type: ignore[arg-type]
    assert dataclasses.asdict(PollPolicy())[field] == 3
