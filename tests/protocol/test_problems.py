"""Problem documents become typed exceptions with the right retry classification."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from acmecerts.errors import (
    ERROR_PREFIX,
    AcmeProblem,
    BadNonce,
    ErrorKind,
    ProblemType,
    RateLimited,
    problem_class,
)
from acmecerts.protocol.problems import problem_from_document, problem_from_response

T = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_every_problem_type_is_an_acme_urn() -> None:
    assert len(ProblemType) >= 25
    for member in ProblemType:
        assert member.value.startswith(ERROR_PREFIX)
        assert issubclass(problem_class(member.value), AcmeProblem)


@pytest.mark.parametrize(
    ("ptype", "status", "cls", "kind"),
    [
        ("badNonce", 400, BadNonce, ErrorKind.TRANSIENT),
        ("rateLimited", 429, RateLimited, ErrorKind.RATE_LIMITED),
        ("unauthorized", 403, AcmeProblem, ErrorKind.PERMANENT),
        ("serverInternal", 500, AcmeProblem, ErrorKind.TRANSIENT),
        ("malformed", 400, AcmeProblem, ErrorKind.PERMANENT),
    ],
)
def test_classification(ptype: str, status: int, cls: type[AcmeProblem], kind: ErrorKind) -> None:
    document = {"type": ERROR_PREFIX + ptype, "detail": "d"}
    problem = problem_from_document(document, status_code=status)
    assert isinstance(problem, cls)
    assert problem.kind is kind


def test_503_with_retry_after_is_server_busy() -> None:
    problem = problem_from_document(
        {"type": ERROR_PREFIX + "serverInternal"}, status_code=503, retry_after=T
    )
    assert problem.kind is ErrorKind.SERVER_BUSY
    assert problem.retry_after == T


def test_subproblems_and_identifier_are_kept() -> None:
    doc = {
        "type": ERROR_PREFIX + "compound",
        "detail": "two problems",
        "subproblems": [
            {
                "type": ERROR_PREFIX + "rejectedIdentifier",
                "detail": "no",
                "identifier": {"type": "dns", "value": "bad.example"},
            },
            "junk",
        ],
    }
    problem = problem_from_document(doc, status_code=403)
    assert len(problem.subproblems) == 1
    assert problem.subproblems[0].identifier == {"type": "dns", "value": "bad.example"}
    assert "bad.example" in str(problem)


def test_unknown_type_is_generic_and_a_429_is_rate_limited() -> None:
    assert type(problem_from_document({"type": "about:blank"}, status_code=400)) is AcmeProblem
    assert isinstance(problem_from_document({}, status_code=429), RateLimited)


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/html", b"<h1>oops</h1>"),
        ("application/problem+json", b"{not json"),
        ("application/problem+json", b"[1, 2]"),
        ("application/json", b'{"status": "valid"}'),
    ],
)
def test_non_problem_bodies_give_none(content_type: str, body: bytes) -> None:
    assert (
        problem_from_response(status_code=400, content_type=content_type, body=body, url="u")
        is None
    )


def test_deeply_nested_subproblems_are_bounded() -> None:
    doc: dict[str, object] = {"type": ERROR_PREFIX + "compound"}
    inner = doc
    for _ in range(50):
        nxt: dict[str, object] = {"type": ERROR_PREFIX + "compound"}
        inner["subproblems"] = [nxt]
        inner = nxt
    problem = problem_from_response(
        status_code=400,
        content_type="application/problem+json; charset=utf-8",
        body=json.dumps(doc).encode(),
        url="u",
    )
    assert problem is not None
    depth = 0
    while problem.subproblems:
        problem = problem.subproblems[0]
        depth += 1
    assert depth <= 4
