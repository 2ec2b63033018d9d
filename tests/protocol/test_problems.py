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


# -- built whole: what the answer says goes to the constructor, nothing is patched after ----


def test_the_request_is_named_unless_the_message_names_its_url() -> None:
    doc = {"type": ERROR_PREFIX + "malformed", "detail": "no such thing"}
    named = problem_from_document(
        doc, status_code=404, url="https://ca/x", request="GET https://ca/x"
    )
    assert str(named) == "malformed: no such thing (GET https://ca/x)"
    assert named.request == "GET https://ca/x"
    doc["detail"] = "https://ca/x does not exist"
    told = problem_from_document(
        doc, status_code=404, url="https://ca/x", request="GET https://ca/x"
    )
    assert str(told) == "malformed: https://ca/x does not exist"
    assert problem_from_document(doc, status_code=404, url="https://ca/x").request is None


def test_a_rate_limit_takes_the_instant_its_detail_gives_when_no_header_did() -> None:
    doc = {
        "type": ERROR_PREFIX + "rateLimited",
        "detail": "too many certificates (5) already issued: retry after 2026-01-01 06:00:00 UTC",
    }
    body = json.dumps(doc).encode()
    answer = {"status_code": 429, "content_type": "application/problem+json", "body": body}
    from_detail = problem_from_response(**answer, url="u", now=T)
    assert isinstance(from_detail, RateLimited)
    assert from_detail.retry_after == T + dt.timedelta(hours=6)
    header = T + dt.timedelta(minutes=5)
    from_header = problem_from_response(**answer, url="u", now=T, retry_after=header)
    assert from_header is not None
    assert from_header.retry_after == header
    unread = problem_from_response(**answer, url="u")  # no clock: the detail is not read
    assert unread is not None
    assert unread.retry_after is None


def test_a_given_kind_overrides_the_class_and_the_status() -> None:
    assert AcmeProblem("t", "d", status_code=500).kind is ErrorKind.TRANSIENT
    assert AcmeProblem("t", "d", status_code=500, kind=ErrorKind.PERMANENT).kind is (
        ErrorKind.PERMANENT
    )
    assert BadNonce("t", "d", kind=ErrorKind.PERMANENT).kind is ErrorKind.PERMANENT
    assert BadNonce("t", "d").kind is ErrorKind.TRANSIENT
    busy = problem_from_document(
        {"type": ERROR_PREFIX + "serverInternal"}, status_code=503, retry_after=T
    )
    assert (busy.kind, vars(busy)["kind"]) == (ErrorKind.SERVER_BUSY, ErrorKind.SERVER_BUSY)
    bare = problem_from_document({"type": ERROR_PREFIX + "serverInternal"}, status_code=500)
    assert bare.kind is ErrorKind.TRANSIENT
