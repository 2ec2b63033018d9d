"""Problem documents (RFC 7807, RFC 8555 §6.7) mapped to typed exceptions."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from typing import Any

from acmecerts.errors import (
    AcmeProblem,
    ErrorKind,
    ProblemType,
    RateLimited,
    ServerBusy,
    problem_class,
)

__all__ = ["PROBLEM_CONTENT_TYPE", "problem_from_document", "problem_from_response"]

PROBLEM_CONTENT_TYPE = "application/problem+json"
_MAX_DEPTH = 4


def problem_from_document(
    document: Mapping[str, Any],
    *,
    status_code: int | None = None,
    url: str | None = None,
    retry_after: _dt.datetime | None = None,
    reached_ca: bool = True,
    _depth: int = 0,
) -> AcmeProblem:
    """Build the typed exception for a problem document (never raises for odd input).

    ``reached_ca=False``: the CA refused the request unprocessed (nothing was created).
    """
    ptype = document.get("type")
    if not isinstance(ptype, str) or not ptype:
        ptype = "about:blank"
    detail = document.get("detail")
    if not isinstance(detail, str):
        detail = ""
    identifier = document.get("identifier")
    ident: dict[str, str] | None = None
    if isinstance(identifier, Mapping):
        ident = {str(k): str(v) for k, v in identifier.items() if isinstance(v, str)}
    subs: list[AcmeProblem] = []
    raw_subs = document.get("subproblems")
    if isinstance(raw_subs, list) and _depth < _MAX_DEPTH:
        for sub in raw_subs[:100]:
            if isinstance(sub, Mapping):
                subs.append(problem_from_document(sub, url=url, _depth=_depth + 1))
    cls = problem_class(ptype)
    if cls is AcmeProblem and status_code == 429:
        cls = RateLimited
    problem = cls(
        ptype,
        detail,
        status_code=status_code,
        url=url,
        identifier=ident,
        subproblems=subs,
        retry_after=retry_after,
        document=document,
        reached_ca=reached_ca,
    )
    if status_code == 503 and cls is not RateLimited:
        problem.kind = ErrorKind.SERVER_BUSY if retry_after else ErrorKind.TRANSIENT
    if isinstance(problem, ServerBusy) and retry_after is None:
        problem.kind = ErrorKind.TRANSIENT
    return problem


def problem_from_response(
    *,
    status_code: int,
    content_type: str,
    body: bytes,
    url: str,
    retry_after: _dt.datetime | None = None,
    reached_ca: bool = True,
) -> AcmeProblem | None:
    """Parse an error answer's body as a problem document, or return ``None``.

    Only ``application/problem+json`` (and, leniently, ``application/json`` with a ``type``
    member) is accepted.
    """
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in (PROBLEM_CONTENT_TYPE, "application/json"):
        return None
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nesting too deep: not a problem
        return None
    if not isinstance(document, Mapping):
        return None
    if media == "application/json" and "type" not in document:
        return None
    return problem_from_document(
        document, status_code=status_code, url=url, retry_after=retry_after, reached_ca=reached_ca
    )


def synthetic_problem(
    status_code: int,
    *,
    url: str,
    retry_after: _dt.datetime | None,
    reason: str,
    reached_ca: bool = True,
) -> AcmeProblem:
    """A problem for a 429/503 answer that carried no problem document."""
    ptype = ProblemType.RATE_LIMITED if status_code == 429 else ProblemType.SERVER_INTERNAL
    return problem_from_document(
        {"type": str(ptype), "detail": f"HTTP {status_code} {reason}".strip()},
        status_code=status_code,
        url=url,
        retry_after=retry_after,
        reached_ca=reached_ca,
    )
