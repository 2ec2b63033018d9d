"""Identifier and CAA errors keep the CA's subproblems per identifier (RFC 8555 §6.7.1).

Pebble 2.4 never sends subproblems (see tests/integration/test_protocol_features.py for its
real rejections), so the CA here is an ``httpx.MockTransport`` answering with the RFC's
example and with problems shaped like Let's Encrypt's (Boulder's) CAA failures: at
``newOrder``, at validation (an authorization's challenge error), at ``finalize`` (CAA
rechecked), and as the ``error`` of an order that became invalid.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from acmecerts import (
    AcmeClient,
    AcmeProblem,
    AuthorizationFailed,
    ChallengeTask,
    FakeClock,
    OrderFailed,
)
from acmecerts.errors import Malformed, ProblemType, RejectedIdentifier
from acmecerts.protocol.identifiers import Identifier
from acmecerts.transport import AcmeTransport

pytestmark = pytest.mark.anyio

BASE = "https://ca.test"
DIRECTORY = {
    "newNonce": f"{BASE}/nonce",
    "newAccount": f"{BASE}/acct",
    "newOrder": f"{BASE}/order",
}
PROBLEM = {"Content-Type": "application/problem+json"}
Answer = Callable[[Any], httpx.Response]

#: RFC 8555 §6.7.1, verbatim.
RFC_COMPOUND = {
    "type": "urn:ietf:params:acme:error:malformed",
    "detail": "Some of the identifiers requested were rejected",
    "subproblems": [
        {
            "type": "urn:ietf:params:acme:error:malformed",
            "detail": 'Invalid underscore in DNS name "_example.org"',
            "identifier": {"type": "dns", "value": "_example.org"},
        },
        {
            "type": "urn:ietf:params:acme:error:rejectedIdentifier",
            "detail": 'This CA will not issue for "example.net"',
            "identifier": {"type": "dns", "value": "example.net"},
        },
    ],
}


def caa_problem(detail: str, names: list[str]) -> dict[str, Any]:
    """A CAA failure for several names, one subproblem each (Boulder's shape)."""
    return {
        "type": "urn:ietf:params:acme:error:caa",
        "detail": detail,
        "status": 403,
        "subproblems": [
            {
                "type": "urn:ietf:params:acme:error:caa",
                "detail": f"CAA record for {name} prevents issuance",
                "status": 403,
                "identifier": {"type": "dns", "value": name},
            }
            for name in names
        ],
    }


def order(status: str, names: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "status": status,
        "identifiers": [{"type": "dns", "value": n} for n in names],
        "authorizations": [f"{BASE}/authz/{n}" for n in names],
        "finalize": f"{BASE}/finalize/1",
        **extra,
    }


class MockCA:
    """A minimal ACME server: ``routes`` maps a path to the answers given in turn."""

    def __init__(self, routes: dict[str, list[Answer]]) -> None:
        self.routes = routes
        self.paths: list[str] = []
        self._nonce = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        if path == "/dir":
            return httpx.Response(200, json=DIRECTORY)
        payload: Any = None
        if request.method == "POST":
            raw = json.loads(request.content)["payload"]
            payload = json.loads(base64.urlsafe_b64decode(raw + "==")) if raw else None
        if path == "/nonce":
            response = httpx.Response(200)
        elif path == "/acct":
            response = httpx.Response(
                201, json={"status": "valid"}, headers={"Location": f"{BASE}/acct/1"}
            )
        else:
            answers = self.routes[path]
            response = answers.pop(0) if len(answers) > 1 else answers[0]
            response = response(payload)
        self._nonce += 1
        response.headers["Replay-Nonce"] = f"mock-nonce-{self._nonce:08d}"
        return response


def client_for(ca: MockCA) -> AcmeClient:
    http = httpx.AsyncClient(transport=httpx.MockTransport(ca))
    clock = FakeClock(dt.datetime(2026, 3, 1, tzinfo=dt.UTC))
    transport = AcmeTransport(f"{BASE}/dir", client=http, clock=clock)
    return AcmeClient(f"{BASE}/dir", transport=transport, clock=clock)


def answer(status: int, body: dict[str, Any], **headers: str) -> Answer:
    if body.get("type", "").startswith("urn:"):
        headers = {**PROBLEM, **headers}
    return lambda payload: httpx.Response(status, json=body, headers=headers)


class PresentOnly:
    """An http-01 solver that answers nothing (the mocked CA decides the outcome)."""

    challenge_type = "http-01"

    def supports(self, identifier: Identifier) -> bool:
        return True

    async def present(self, task: ChallengeTask) -> None:
        return None

    async def cleanup(self, task: ChallengeTask) -> None:
        return None


def assert_per_identifier(problem: AcmeProblem, expected: dict[str, tuple[str, str]]) -> None:
    """``expected`` maps each identifier to its (problem type URN, detail)."""
    got = {
        sub.identifier["value"]: (sub.type, sub.detail)
        for sub in problem.subproblems
        if sub.identifier is not None
    }
    assert got == expected
    for value, (_type, detail) in expected.items():
        assert f"({value}): {detail}" in str(problem)


async def test_the_rfc_compound_problem_at_new_order_keeps_each_identifier() -> None:
    ca = MockCA({"/order": [answer(400, RFC_COMPOUND)]})
    async with client_for(ca) as acme:
        with pytest.raises(Malformed) as info:
            await acme.new_order(  # a ready Identifier is sent as it is
                [Identifier("dns", "_example.org"), "example.net", "example.com"]
            )
    error = info.value
    assert error.detail == "Some of the identifiers requested were rejected"
    assert_per_identifier(
        error,
        {
            "_example.org": (
                ProblemType.MALFORMED,
                'Invalid underscore in DNS name "_example.org"',
            ),
            "example.net": (
                ProblemType.REJECTED_IDENTIFIER,
                'This CA will not issue for "example.net"',
            ),
        },
    )
    # each subproblem is typed like a top-level problem
    assert [type(s) for s in error.subproblems] == [Malformed, RejectedIdentifier]
    assert error.subproblems[1].identifier == {"type": "dns", "value": "example.net"}


async def test_a_rejected_identifier_problem_from_issue_is_typed() -> None:
    rejected = {
        "type": "urn:ietf:params:acme:error:rejectedIdentifier",
        "detail": 'Cannot issue for "bad.example.com": The ACME server refuses to issue a '
        "certificate for this domain name, because it is forbidden by policy",
        "status": 400,
        "subproblems": [
            {
                "type": "urn:ietf:params:acme:error:rejectedIdentifier",
                "detail": "The ACME server refuses to issue a certificate for this domain "
                "name, because it is forbidden by policy",
                "identifier": {"type": "dns", "value": "bad.example.com"},
            }
        ],
    }
    ca = MockCA({"/order": [answer(400, rejected)]})
    async with client_for(ca) as acme:
        with pytest.raises(RejectedIdentifier) as info:
            await acme.issue(["ok.example.com", "bad.example.com"], solver=PresentOnly())
    assert "bad.example.com" in str(info.value)
    assert info.value.subproblems[0].identifier == {"type": "dns", "value": "bad.example.com"}


async def test_caa_at_validation_fails_the_authorization_with_the_cas_detail() -> None:
    name = "caa.example.com"
    challenge = {"type": "http-01", "url": f"{BASE}/chall/1", "token": "t" * 43}
    caa_error = {
        "type": "urn:ietf:params:acme:error:caa",
        "detail": "CAA record for caa.example.com prevents issuance",
        "status": 403,
    }
    authz = {"identifier": {"type": "dns", "value": name}, "expires": "2026-03-08T00:00:00Z"}
    ca = MockCA(
        {
            "/order": [answer(201, order("pending", [name]), Location=f"{BASE}/order/1")],
            f"/authz/{name}": [
                answer(200, {**authz, "status": "pending", "challenges": [challenge]}),
                answer(
                    200,
                    {
                        **authz,
                        "status": "invalid",
                        "challenges": [{**challenge, "status": "invalid", "error": caa_error}],
                    },
                ),
            ],
            "/chall/1": [answer(200, {**challenge, "status": "processing"})],
            "/order/1": [answer(200, order("invalid", [name]))],
        }
    )
    async with client_for(ca) as acme:
        with pytest.raises(AuthorizationFailed) as info:
            await acme.issue([name], solver=PresentOnly())
    error = info.value
    assert error.identifier == name
    assert error.problem is not None
    assert error.problem.type == ProblemType.CAA
    assert "CAA record for caa.example.com prevents issuance" in str(error)


async def test_caa_rechecked_at_finalize_keeps_each_identifier() -> None:
    names = ["a.example.com", "b.example.com", "c.example.com"]
    problem = caa_problem(
        'Error finalizing order :: Rechecking CAA for "a.example.com" and 1 more identifiers '
        "failed. Refer to sub-problems for more information",
        names[:2],
    )
    ca = MockCA(
        {
            "/order": [answer(201, order("ready", names), Location=f"{BASE}/order/1")],
            "/finalize/1": [answer(403, problem)],
        }
    )
    async with client_for(ca) as acme:
        with pytest.raises(AcmeProblem) as info:
            await acme.issue(names, solver=PresentOnly())
    error = info.value
    assert error.type == ProblemType.CAA
    assert error.status_code == 403
    assert_per_identifier(
        error,
        {n: (ProblemType.CAA, f"CAA record for {n} prevents issuance") for n in names[:2]},
    )


async def test_an_order_invalid_with_a_compound_error_is_order_failed_with_subproblems() -> None:
    names = ["a.example.com", "b.example.com"]
    problem = caa_problem("Issuance failed for 2 identifiers", names)
    ca = MockCA(
        {
            "/order": [answer(201, order("ready", names), Location=f"{BASE}/order/1")],
            "/finalize/1": [answer(200, order("processing", names))],
            "/order/1": [answer(200, order("invalid", names, error=problem))],
        }
    )
    async with client_for(ca) as acme:
        with pytest.raises(OrderFailed) as info:
            await acme.issue(names, solver=PresentOnly())
    assert info.value.problem is not None
    assert_per_identifier(
        info.value.problem,
        {n: (ProblemType.CAA, f"CAA record for {n} prevents issuance") for n in names},
    )
    for name in names:
        assert f"CAA record for {name} prevents issuance" in str(info.value)
