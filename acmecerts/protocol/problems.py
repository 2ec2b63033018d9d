"""Problem documents (RFC 7807, RFC 8555 §6.7) mapped to typed exceptions."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from typing import Any

from acmecerts._time import retry_after_from_detail
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
    request: str | None = None,
    now: _dt.datetime | None = None,
    _depth: int = 0,
) -> AcmeProblem:
    """Build the typed exception for a problem document (never raises for odd input).

    ``reached_ca=False``: the CA refused the request unprocessed (nothing was created).
    ``request`` (``"GET https://..."``) is named in the message unless it names the URL.
    With ``now``, a rate limit without ``retry_after`` takes the instant its detail
    gives (Let's Encrypt's "retry after ..." text), if any.
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
    kind = None  # the class's own
    if status_code == 503 and cls is not RateLimited:
        kind = ErrorKind.SERVER_BUSY if retry_after else ErrorKind.TRANSIENT
    elif issubclass(cls, ServerBusy) and retry_after is None:
        kind = ErrorKind.TRANSIENT
    if issubclass(cls, RateLimited) and retry_after is None and now is not None:
        retry_after = retry_after_from_detail(detail, now=now)
    return cls(
        ptype,
        detail,
        status_code=status_code,
        url=url,
        identifier=ident,
        subproblems=subs,
        retry_after=retry_after,
        document=document,
        reached_ca=reached_ca,
        kind=kind,
        request=request,
    )


def problem_from_response(
    *,
    status_code: int,
    content_type: str,
    body: bytes,
    url: str,
    retry_after: _dt.datetime | None = None,
    reached_ca: bool = True,
    request: str | None = None,
    now: _dt.datetime | None = None,
) -> AcmeProblem | None:
    """Parse an error answer's body as a problem document, or return ``None``.

    Only ``application/problem+json`` (and, leniently, ``application/json`` with a ``type``
    member) is accepted. ``request`` and ``now``: see :func:`problem_from_document`.
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
        document,
        status_code=status_code,
        url=url,
        retry_after=retry_after,
        reached_ca=reached_ca,
        request=request,
        now=now,
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
