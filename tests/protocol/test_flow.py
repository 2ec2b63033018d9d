"""The issuance flow (``acmecerts.protocol._flow``): every state, no event loop, no network.

The flow is fed typed resources (orders, authorizations, challenges) and told the time;
each test asserts the action it says next and that action's parameters.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts.errors import (
    AcmeProblem,
    AttemptTimeout,
    AuthorizationFailed,
    BadServerResponse,
    InvalidInput,
    NoSolverForChallenges,
    OrderFailed,
)
from acmecerts.protocol._flow import (
    Answer,
    Authorize,
    CleanUp,
    Diagnose,
    Download,
    DownloadAlternates,
    Fail,
    Finalize,
    Finish,
    IssuanceFlow,
    Poll,
    PollPolicy,
    Present,
    answer_refusal_settled,
    finalize_refusal_settled,
    needs_deactivation,
    next_poll,
    order_resumable,
)
from acmecerts.protocol._solver import ChallengeTask
from acmecerts.protocol.certificate import CertificateChain
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.resources import Authorization, Challenge, Order

NOW = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
DEADLINE = NOW + dt.timedelta(minutes=30)
ORDER_URL = "https://ca.test/order/1"
AUTHZ = ("https://ca.test/authz/a", "https://ca.test/authz/b")
TOKEN = "tok_" + "A" * 40
THUMB = "thumbprint-of-the-account-key"
NAMES = (Identifier("dns", "a.example"), Identifier("dns", "b.example"))
POLICY = PollPolicy()
#: Every status the parser accepts; the RFC gives orders only the first five (§7.1.6).
ORDER_STATUSES = ("pending", "ready", "processing", "valid", "invalid")
ODD_ORDER_STATUSES = ("expired", "deactivated", "revoked")
AUTHZ_STATUSES = ("pending", "valid", "invalid", "deactivated", "expired", "revoked")
CHALLENGE_STATUSES = ("pending", "processing", "valid", "invalid")
PROBLEM = AcmeProblem("urn:ietf:params:acme:error:unauthorized", "no such token")


class FakeSolver:
    """A solver that is never run: the flow only asks what it answers."""

    def __init__(self, challenge_type: str, *, wildcards: bool = False) -> None:
        self.challenge_type = challenge_type
        self.wildcards = wildcards

    def supports(self, identifier: Identifier) -> bool:
        return self.wildcards or not identifier.is_wildcard

    async def present(self, task: ChallengeTask) -> None:
        raise AssertionError("the flow never runs a solver")

    async def cleanup(self, task: ChallengeTask) -> None:
        raise AssertionError("the flow never runs a solver")


HTTP = FakeSolver("http-01")
DNS = FakeSolver("dns-01", wildcards=True)


def order(status: str, *, certificate: str | None = None, **kw: object) -> Order:
    fields: dict[str, object] = {
        "url": ORDER_URL,
        "status": status,
        "identifiers": NAMES,
        "authorizations": AUTHZ,
        "finalize": ORDER_URL + "/finalize",
        "certificate": certificate,
    }
    fields.update(kw)
    return Order(**fields)  # type: ignore[arg-type]


def challenge(ctype: str = "http-01", status: str = "pending", **kw: object) -> Challenge:
    fields: dict[str, object] = {
        "type": ctype,
        "url": f"https://ca.test/chall/{ctype}",
        "status": status,
        "token": TOKEN,
    }
    fields.update(kw)
    return Challenge(**fields)  # type: ignore[arg-type]


def authz(
    url: str = AUTHZ[0],
    status: str = "pending",
    challenges: tuple[Challenge, ...] | None = None,
    *,
    name: str = "a.example",
    wildcard: bool = False,
) -> Authorization:
    return Authorization(
        url=url,
        status=status,
        identifier=Identifier("dns", name),
        challenges=(challenge(), challenge("dns-01")) if challenges is None else challenges,
        wildcard=wildcard,
    )


def flow(*, solvers: tuple[FakeSolver, ...] = (HTTP,), **kw: object) -> IssuanceFlow:
    return IssuanceFlow(NAMES, solvers, thumbprint=THUMB, deadline=DEADLINE, poll=POLICY, **kw)  # type: ignore[arg-type]


def authorized_flow(**kw: object) -> IssuanceFlow:
    """A flow whose order was pending and whose authorizations all went through."""
    f = flow(**kw)  # type: ignore[arg-type]
    f.order_received(order("pending"))
    assert f.next_action(NOW) == Authorize(AUTHZ)
    f.authorized()
    return f


def finalized_flow() -> IssuanceFlow:
    """A flow whose order was ready and was finalized (the CA said ``processing``)."""
    f = flow()
    f.order_received(order("ready"))
    assert f.next_action(NOW) == Finalize(order("ready"))
    f.order_received(order("processing"))
    return f


def fail_error(action: object) -> Exception:
    assert isinstance(action, Fail), action
    return action.error


_KEY = ec.generate_private_key(ec.SECP256R1())


def chain(*issuers: str) -> CertificateChain:
    """A chain whose certificates are issued by ``issuers`` (leaf first)."""
    certs = []
    for n, issuer in enumerate(issuers):
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cert {n}")])
        certs.append(
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(_KEY.public_key())
            .serial_number(n + 1)
            .not_valid_before(NOW)
            .not_valid_after(NOW + dt.timedelta(days=90))
            .sign(_KEY, hashes.SHA256())
        )
    return CertificateChain(pem="", certificates=tuple(certs))


# -- the order as first seen (created, recovered or resumed) -------------------------------


@pytest.mark.parametrize(
    ("status", "certificate", "expected"),
    [
        ("pending", None, Authorize(AUTHZ)),
        ("ready", None, Finalize(order("ready"))),
        ("processing", None, Poll("order", ORDER_URL, POLICY.interval(1, None))),
        ("valid", "https://ca.test/cert/1", Download("https://ca.test/cert/1")),
    ],
)
def test_a_new_order_says_what_its_status_needs(
    status: str, certificate: str | None, expected: object
) -> None:
    f = flow()
    f.order_received(order(status, certificate=certificate))
    assert f.next_action(NOW) == expected
    assert f.order == order(status, certificate=certificate)


@pytest.mark.parametrize("status", ["invalid", "valid", *ODD_ORDER_STATUSES])
def test_a_new_order_that_cannot_lead_to_a_certificate_fails_at_once(status: str) -> None:
    f = flow()
    f.order_received(order(status, error=PROBLEM))  # "valid" here has no certificate URL
    error = fail_error(f.next_action(NOW))
    assert isinstance(error, OrderFailed)
    assert str(error).startswith(f"order {ORDER_URL} became {status}: ")
    assert error.order_url == ORDER_URL
    assert error.problem is PROBLEM
    assert f.cleanup() == CleanUp((), ())  # nothing presented, nothing to deactivate
    assert fail_error(f.next_action(NOW)) is error  # a failed flow stays failed


def test_the_flow_needs_an_order_first() -> None:
    with pytest.raises(RuntimeError):
        flow().next_action(NOW)


# -- polling the order after its authorizations ------------------------------------------


@pytest.mark.parametrize("status", ORDER_STATUSES + ODD_ORDER_STATUSES)
@pytest.mark.parametrize("retry_after", [None, 7.0])
def test_polling_after_the_authorizations(status: str, retry_after: float | None) -> None:
    f = authorized_flow()
    assert f.next_action(NOW) == Poll("order", ORDER_URL, POLICY.interval(1, None))
    hint = NOW + dt.timedelta(seconds=retry_after) if retry_after is not None else None
    cert = "https://ca.test/cert/1" if status == "valid" else None
    f.order_received(order(status, certificate=cert), retry_after=hint)
    action = f.next_action(NOW)
    if status == "pending":
        assert action == Poll("order", ORDER_URL, POLICY.interval(2, retry_after))
    elif status == "ready":
        assert action == Finalize(order("ready"))
    elif status == "processing":
        # a new wait starts, paced by the processing order's Retry-After (§7.4)
        assert action == Poll("order", ORDER_URL, POLICY.interval(1, retry_after))
    elif status == "valid":
        assert action == Download("https://ca.test/cert/1")
    elif status == "invalid":
        assert action == Diagnose(order("invalid"), AUTHZ)
    else:
        error = fail_error(action)
        assert isinstance(error, OrderFailed)
        assert f"became {status}" in str(error)
    if status in ("ready", "processing", "valid"):
        assert f.cleanup().deactivate == ()  # authorized: nothing left pending
    else:
        assert f.cleanup().deactivate == tuple(sorted(AUTHZ))


def test_a_pending_order_is_polled_on_a_growing_interval_until_the_deadline() -> None:
    f = authorized_flow()
    now, waits = NOW, []
    while True:
        action = f.next_action(now)
        if isinstance(action, Fail):
            break
        assert isinstance(action, Poll)
        assert action.url == ORDER_URL
        waits.append(action.after)
        now += dt.timedelta(seconds=action.after)
        f.order_received(order("pending"))
    assert isinstance(action.error, AttemptTimeout)
    assert waits[:4] == [POLICY.interval(n, None) for n in range(1, 5)]
    assert max(waits) == POLICY.max_interval
    assert min(waits) > 0
    assert now == DEADLINE  # the last wait was cut to the deadline, never past it
    assert sum(waits) == pytest.approx((DEADLINE - NOW).total_seconds())


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        (None, POLICY.interval(2, None)),
        (30.0, 30.0),  # the server's Retry-After wins
        (-5.0, POLICY.floor),  # one in the past counts as now, never below the floor
        (0.0, POLICY.floor),
        (7200.0, POLICY.max_retry_after),  # capped
    ],
)
def test_retry_after_decides_the_next_poll(retry_after: float | None, expected: float) -> None:
    f = authorized_flow()
    f.next_action(NOW)
    hint = None if retry_after is None else NOW + dt.timedelta(seconds=retry_after)
    f.order_received(order("pending"), retry_after=hint)
    assert f.next_action(NOW) == Poll("order", ORDER_URL, expected)


@pytest.mark.parametrize("retry_after", [None, 3600.0])
@pytest.mark.parametrize("left", [0.0, -1.0, 0.5])
def test_the_deadline_bounds_every_wait(retry_after: float | None, left: float) -> None:
    f = authorized_flow()
    now = DEADLINE - dt.timedelta(seconds=left)
    hint = None if retry_after is None else now + dt.timedelta(seconds=retry_after)
    f.next_action(NOW)
    f.order_received(order("pending"), retry_after=hint)
    action = f.next_action(now)
    if left > 0:
        assert action == Poll("order", ORDER_URL, min(left, POLICY.interval(2, retry_after)))
    else:
        error = fail_error(action)
        assert isinstance(error, AttemptTimeout)
        assert str(error) == "the attempt deadline passed while waiting for the CA"


# -- finalize and the wait for the certificate -------------------------------------------


@pytest.mark.parametrize("status", ORDER_STATUSES + ODD_ORDER_STATUSES)
@pytest.mark.parametrize("certificate", [None, "https://ca.test/cert/1"])
@pytest.mark.parametrize("retry_after", [None, 0.0, 30.0])
def test_the_answer_to_finalize(
    status: str, certificate: str | None, retry_after: float | None
) -> None:
    f = flow()
    f.order_received(order("ready"))
    assert f.next_action(NOW) == Finalize(order("ready"))
    hint = None if retry_after is None else NOW + dt.timedelta(seconds=retry_after)
    f.order_received(order(status, certificate=certificate), retry_after=hint)
    action = f.next_action(NOW)
    if status == "valid" and certificate is not None:
        assert action == Download(certificate)
    elif status in ("pending", "ready", "processing"):
        # §7.4: the answer's Retry-After is waited out before the first poll
        assert action == Poll("order", ORDER_URL, POLICY.interval(1, retry_after))
    else:
        error = fail_error(action)
        assert isinstance(error, OrderFailed)
        assert str(error) == f"order {ORDER_URL} became {status}"


@pytest.mark.parametrize("status", ORDER_STATUSES + ODD_ORDER_STATUSES)
@pytest.mark.parametrize("retry_after", [None, 4.0])
def test_polling_for_the_certificate(status: str, retry_after: float | None) -> None:
    f = finalized_flow()
    assert f.next_action(NOW) == Poll("order", ORDER_URL, POLICY.interval(1, None))
    hint = None if retry_after is None else NOW + dt.timedelta(seconds=retry_after)
    cert = "https://ca.test/cert/1" if status == "valid" else None
    f.order_received(order(status, certificate=cert), retry_after=hint)
    action = f.next_action(NOW)
    if status in ("pending", "ready", "processing"):
        assert action == Poll("order", ORDER_URL, POLICY.interval(2, retry_after))
    elif status == "valid":
        assert action == Download("https://ca.test/cert/1")
    else:
        assert isinstance(fail_error(action), OrderFailed)  # no diagnosis after finalize


# -- an invalid order: which authorization is to blame -------------------------------------


def diagnosing_flow() -> IssuanceFlow:
    f = authorized_flow()
    f.next_action(NOW)
    f.order_received(order("invalid", error=PROBLEM))
    assert f.next_action(NOW) == Diagnose(order("invalid", error=PROBLEM), AUTHZ)
    return f


@pytest.mark.parametrize("status", AUTHZ_STATUSES)
def test_an_invalid_authorization_explains_an_invalid_order(status: str) -> None:
    f = diagnosing_flow()
    failed = challenge(status="invalid", error=PROBLEM)
    stop = f.diagnose(authz(AUTHZ[1], status, (failed,), name="b.example"))
    assert stop is (status == "invalid")
    if not stop:
        f.diagnosed()
    error = fail_error(f.next_action(NOW))
    if status == "invalid":
        assert isinstance(error, AuthorizationFailed)
        assert error.identifier == "b.example"
        assert error.problem is PROBLEM
        assert error.authorization_url == AUTHZ[1]
        assert error.order_url == ORDER_URL
    else:
        assert isinstance(error, OrderFailed)
        assert error.problem is PROBLEM
        assert str(error) == f"order {ORDER_URL} became invalid: {PROBLEM}"


def test_diagnosis_outside_an_invalid_order_changes_nothing() -> None:
    f = authorized_flow()
    assert f.diagnose(authz(status="invalid")) is False
    f.diagnosed()
    assert isinstance(f.next_action(NOW), Poll)


# -- each authorization --------------------------------------------------------------------


def pending_flow(**kw: object) -> IssuanceFlow:
    f = flow(**kw)  # type: ignore[arg-type]
    f.order_received(order("pending"))
    assert f.next_action(NOW) == Authorize(AUTHZ)
    return f


def test_each_authorization_starts_with_a_fetch_now() -> None:
    f = pending_flow()
    assert [f.authorization_start(u) for u in AUTHZ] == [
        Poll("authorization", u, 0.0) for u in AUTHZ
    ]
    with pytest.raises(KeyError):
        f.authorization_start("https://ca.test/authz/other")


@pytest.mark.parametrize(
    ("authz_status", "challenge_status"),
    list(itertools.product(AUTHZ_STATUSES, CHALLENGE_STATUSES)),
)
def test_every_authorization_and_challenge_state(authz_status: str, challenge_status: str) -> None:
    f = pending_flow()
    offered = challenge(status=challenge_status, error=PROBLEM)
    action = f.authorization_received(authz(status=authz_status, challenges=(offered,)))
    if authz_status == "valid":
        assert action is None
        assert f.cleanup() == CleanUp((), tuple(sorted(AUTHZ)))
        return
    if authz_status != "pending":
        error = fail_error(action)
        assert isinstance(error, AuthorizationFailed)
        assert error.identifier == "a.example"
        assert error.problem is PROBLEM
        assert error.authorization_url == AUTHZ[0]
        assert error.order_url == ORDER_URL
        assert f.cleanup().tasks == ()
        return
    task = ChallengeTask(
        type="http-01",
        identifier=Identifier("dns", "a.example"),
        token=TOKEN,
        key_authorization=f"{TOKEN}.{THUMB}",
        url=offered.url,
    )
    assert action == Present(AUTHZ[0], HTTP, task)
    # recorded once said, before it is done: cleanup must not assume present succeeded
    assert f.cleanup() == CleanUp(((HTTP, task),), tuple(sorted(AUTHZ)))
    answer = f.presented(AUTHZ[0])
    if challenge_status != "pending":
        assert answer is None  # processing/valid/invalid already: nothing to answer
        return
    assert answer == Answer(AUTHZ[0], offered)
    assert f.presented(AUTHZ[0]) is None  # asked twice: answered once


@pytest.mark.parametrize("answered_status", CHALLENGE_STATUSES)
@pytest.mark.parametrize("answered_error", [None, PROBLEM])
def test_the_answer_to_a_challenge(
    answered_status: str, answered_error: AcmeProblem | None
) -> None:
    f = pending_flow()
    sent_problem = AcmeProblem("urn:ietf:params:acme:error:connection", "earlier")
    offered = challenge(error=sent_problem)
    f.authorization_received(authz(challenges=(offered,)))
    f.presented(AUTHZ[0])
    answered = dataclasses.replace(offered, status=answered_status, error=answered_error)
    action = f.challenge_answered(AUTHZ[0], answered)
    if answered_status != "invalid":
        assert action is None
        assert f.cleanup().deactivate == tuple(sorted(AUTHZ))
        return
    # decided from the challenge (a CA that validates in the POST may leave the order
    # pending for good), and that authorization is no longer deactivated
    error = fail_error(action)
    assert isinstance(error, AuthorizationFailed)
    assert error.problem is (answered_error or sent_problem)
    assert f.cleanup().deactivate == (AUTHZ[1],)


def test_solvers_are_tried_in_order_of_preference() -> None:
    offered = (challenge("http-01"), challenge("dns-01"))
    for solvers, wanted in (((HTTP, DNS), HTTP), ((DNS, HTTP), DNS)):
        f = pending_flow(solvers=solvers)
        action = f.authorization_received(authz(challenges=offered))
        assert isinstance(action, Present)
        assert action.solver is wanted
        assert action.task.type == wanted.challenge_type


def test_a_wildcard_goes_to_a_solver_that_supports_it() -> None:
    f = pending_flow(solvers=(HTTP, DNS))
    action = f.authorization_received(authz(name="example.org", wildcard=True))
    assert isinstance(action, Present)
    assert action.solver is DNS
    assert action.task.identifier == Identifier("dns", "*.example.org")
    assert action.task.dns_txt_value  # the TXT value of the key authorization


@pytest.mark.parametrize(
    ("offered", "start", "hint"),
    [
        ((), "the CA offered no challenge for a.example; no configured solver answers any", ""),
        (
            ("tls-alpn-01",),
            "the CA offered tls-alpn-01 only for a.example; no configured solver answers it",
            "tls-alpn-01 (TlsAlpn01Server)",
        ),
        (
            ("dns-account-01", "dns-01"),
            "the CA offered dns-account-01, dns-01 for a.example; no configured solver answers",
            "dns-01 (Rfc2136Solver or DnsHookSolver)",
        ),
        (("dns-persist-01",), "the CA offered dns-persist-01 only", "no built-in solver"),
    ],
)
def test_no_solver_for_what_the_ca_offers_is_a_typed_failure(
    offered: tuple[str, ...], start: str, hint: str
) -> None:
    f = pending_flow()
    error = fail_error(f.authorization_received(authz(challenges=tuple(map(challenge, offered)))))
    # not InvalidInput: the CA chose the types, another solver (or the CA later) may answer
    assert isinstance(error, NoSolverForChallenges)
    assert not isinstance(error, InvalidInput)
    assert error.reached_ca is True
    assert error.offered == offered
    assert error.identifier == "a.example"
    assert error.solver_types == ("http-01",)
    assert str(error).startswith(start)
    assert "(the solvers answer http-01)" in str(error)
    assert hint in str(error)
    assert f.cleanup() == CleanUp((), tuple(sorted(AUTHZ)))


def test_a_challenge_without_a_token_is_a_bad_answer() -> None:
    f = pending_flow()
    error = fail_error(f.authorization_received(authz(challenges=(challenge(token=None),))))
    assert isinstance(error, BadServerResponse)
    assert f.cleanup().tasks == ()


def test_both_authorizations_presented_then_cleaned_up_in_order() -> None:
    f = pending_flow(solvers=(HTTP, DNS))
    second = f.authorization_received(
        authz(AUTHZ[1], challenges=(challenge("dns-01"),), name="b.example")
    )
    first = f.authorization_received(authz(AUTHZ[0]))
    assert isinstance(first, Present)
    assert isinstance(second, Present)
    assert f.cleanup().tasks == ((DNS, second.task), (HTTP, first.task))


# -- the certificate -----------------------------------------------------------------------


def downloading_flow(preferred: str | None) -> IssuanceFlow:
    f = flow(preferred_chain=preferred)
    f.order_received(order("valid", certificate="https://ca.test/cert/1"))
    assert f.next_action(NOW) == Download("https://ca.test/cert/1")
    return f


@pytest.mark.parametrize("preferred", [None, "Root X"])
def test_the_default_chain_is_kept_without_alternates(preferred: str | None) -> None:
    f = downloading_flow(preferred)
    default = chain("Int A", "Root X")
    f.chain_received(default, ["https://ca.test/cert/1/1"])
    finish = f.next_action(NOW)
    assert finish == Finish(order("valid", certificate="https://ca.test/cert/1"), default, ())
    assert f.finished
    assert f.cleanup() == CleanUp((), ())


@pytest.mark.parametrize(
    ("preferred", "pick"),
    [("Root Y", 1), ("Int Z", 2), ("Nobody", 0)],  # root wins, else intermediate, else default
)
def test_a_preferred_chain_is_looked_for_among_the_alternates(preferred: str, pick: int) -> None:
    f = downloading_flow(preferred)
    default = chain("Int A", "Root X")
    f.chain_received(default, ["https://ca.test/alt/1", "https://ca.test/alt/2"])
    assert f.next_action(NOW) == DownloadAlternates(
        ("https://ca.test/alt/1", "https://ca.test/alt/2")
    )
    offered = [default, chain("Int B", "Root Y"), chain("Int Z", "Root W")]
    f.alternates_received(offered[1:])
    finish = f.next_action(NOW)
    assert isinstance(finish, Finish)
    assert finish.chain is offered[pick]
    assert finish.alternates == tuple(c for c in offered if c is not offered[pick])


def test_alternates_that_could_not_be_downloaded_leave_the_default() -> None:
    f = downloading_flow("Root Y")
    default = chain("Int A", "Root X")
    f.chain_received(default, ["https://ca.test/alt/1"])
    f.alternates_received([])
    assert f.next_action(NOW) == Finish(f.order, default, ())  # type: ignore[arg-type]


# -- the pure helpers ------------------------------------------------------------------------


def test_next_poll_is_the_one_poll_decision() -> None:
    assert next_poll(
        POLICY,
        resource="authorization",
        url="u",
        attempt=3,
        retry_after=None,
        now=NOW,
        deadline=DEADLINE,
    ) == Poll("authorization", "u", POLICY.interval(3, None))
    late = next_poll(
        POLICY,
        resource="order",
        url="u",
        attempt=1,
        retry_after=None,
        now=DEADLINE,
        deadline=DEADLINE,
    )
    assert isinstance(fail_error(late), AttemptTimeout)


@pytest.mark.parametrize("status", ORDER_STATUSES + ODD_ORDER_STATUSES)
def test_which_orders_can_be_resumed(status: str) -> None:
    why = order_resumable(order(status), NAMES, NOW)
    assert (why is None) is (status in ("pending", "ready", "processing", "valid"))
    assert order_resumable(order("pending"), NAMES[:1], NOW) == "it is for other identifiers"
    past = order("pending", expires=NOW)
    assert order_resumable(past, NAMES, NOW) == "it has expired"
    assert order_resumable(order("pending", expires=DEADLINE), tuple(reversed(NAMES)), NOW) is None


@pytest.mark.parametrize("status", ORDER_STATUSES + ODD_ORDER_STATUSES)
def test_a_refused_finalize_got_through_only_if_the_order_moved_on(status: str) -> None:
    assert finalize_refusal_settled(order(status)) is (status in ("processing", "valid"))


@pytest.mark.parametrize(
    ("authz_status", "challenge_status"),
    list(itertools.product(AUTHZ_STATUSES, CHALLENGE_STATUSES)),
)
def test_a_refused_answer_got_through_unless_the_challenge_still_waits(
    authz_status: str, challenge_status: str
) -> None:
    sent = challenge()
    now = authz(status=authz_status, challenges=(challenge(status=challenge_status),))
    settled = answer_refusal_settled(sent, now)
    if authz_status != "valid" and challenge_status == "pending":
        assert settled is None
    else:
        assert settled == challenge(status=challenge_status)
    # a challenge the CA no longer lists: the one sent stands for it
    gone = answer_refusal_settled(sent, authz(status=authz_status, challenges=()))
    assert gone == (sent if authz_status == "valid" else None)


@pytest.mark.parametrize("status", AUTHZ_STATUSES)
def test_cleanup_deactivates_only_pending_authorizations(status: str) -> None:
    assert needs_deactivation(authz(status=status)) is (status == "pending")
