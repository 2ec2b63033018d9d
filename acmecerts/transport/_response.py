"""What the CA answered: :class:`AcmeResponse`, and what a status says (:func:`checked_answer`).

A 2xx answer becomes an :class:`AcmeResponse` (``Location``, ``Link`` relations per
RFC 8288, JSON with its content type checked, the ``Retry-After`` instant). Anything
else is raised: a problem document (RFC 8555 §6.7, RFC 7807) as its typed error, a 429
or 503 without one as a synthetic problem, a redirect or another status as
:class:`~acmecerts.errors.BadServerResponse`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from typing import Any

import httpx

from acmecerts._time import Clock, parse_retry_after
from acmecerts.errors import BadServerResponse, ErrorKind
from acmecerts.protocol.problems import problem_from_response, synthetic_problem
from acmecerts.transport._exchange import Answer

__all__ = ["MAX_BODY", "AcmeResponse", "checked_answer"]

#: The largest answer body accepted (1 MiB).
MAX_BODY = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class AcmeResponse:
    """A successful (2xx) answer from the CA."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    url: str
    #: The instant the CA's ``Retry-After`` named (aware UTC), if any.
    retry_after: _dt.datetime | None

    @property
    def location(self) -> str | None:
        """The ``Location`` header, if present."""
        location: str | None = self.headers.get("location")
        return location

    def require_location(self) -> str:
        """The ``Location`` header, or :class:`BadServerResponse` when it is missing."""
        loc = self.location
        if not loc:
            raise BadServerResponse("the answer lacks a Location header", url=self.url)
        return loc

    def links(self, rel: str) -> list[str]:
        """URLs of the ``Link`` headers with relation ``rel`` (RFC 8288), in order."""
        found: list[str] = []
        for value in self.headers.get_list("link"):
            found.extend(_parse_links(value, rel, base=self.url))
        return found

    @property
    def media_type(self) -> str:
        """The ``Content-Type``'s media type, lower case, without parameters (``""``: none)."""
        media: str = self.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        return media

    def json(self) -> Any:
        """The body as JSON; :class:`BadServerResponse` for wrong content type or bad JSON."""
        media = self.media_type
        if media not in ("application/json", "application/problem+json"):
            raise BadServerResponse(
                f"expected application/json, got {media or 'no content type'}",
                url=self.url,
                status_code=self.status_code,
            )
        try:
            return json.loads(self.content)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # also nesting too deep
            raise BadServerResponse(
                f"the answer is not valid JSON: {exc}", url=self.url, status_code=self.status_code
            ) from exc

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (replacing errors)."""
        return self.content.decode("utf-8", "replace")


def _parse_links(header: str, rel: str, *, base: str) -> list[str]:
    """Parse one ``Link`` header value (RFC 8288 §3), tolerant of junk."""
    urls: list[str] = []
    for part in _split_link_values(header):
        part = part.strip()
        if not part.startswith("<") or ">" not in part:
            continue
        target, _, params = part[1:].partition(">")
        rels: list[str] = []
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "rel":
                rels.extend(value.strip().strip('"').lower().split())
        if rel.lower() in rels:
            try:
                urls.append(str(httpx.URL(base).join(target.strip())))
            except (httpx.InvalidURL, ValueError):
                continue
    return urls


def _split_link_values(header: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    quoted = False
    current: list[str] = []
    for ch in header:
        if ch == '"' and depth == 0:
            quoted = not quoted
        elif ch == "<" and not quoted:
            depth += 1
        elif ch == ">" and not quoted:
            depth = max(0, depth - 1)
        if ch == "," and depth == 0 and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def checked_answer(answer: Answer, url: str, method: str, clock: Clock) -> AcmeResponse:
    """The :class:`AcmeResponse` of a 2xx ``answer``; for any other status, raise."""
    content = answer.content
    if len(content) > MAX_BODY:
        raise BadServerResponse("the answer is larger than 1 MiB", url=url)
    status = answer.status_code
    header = answer.headers.get("retry-after")
    if header is None and 200 <= status < 300:  # the common case: nothing to work out
        return AcmeResponse(status, answer.headers, content, url, None)
    now = clock.now()
    retry_after = parse_retry_after(header, now=now)
    if status < 400:
        if status >= 300:
            raise BadServerResponse(f"unexpected redirect ({status})", url=url)
        return AcmeResponse(status, answer.headers, content, url, retry_after)
    # a 503: the CA refused the request unprocessed, nothing was created or spent
    reached_ca = status != 503
    problem = problem_from_response(
        status_code=status,
        content_type=answer.headers.get("content-type", ""),
        body=content,
        url=url,
        retry_after=retry_after,
        reached_ca=reached_ca,
        # a wrong URL (a typo in the directory's path): say which request it was
        request=f"{method} {url}" if status == 404 else None,
        now=now,  # a rate limit's "retry after" in its detail, when no header said
    )
    if problem is None and status in (429, 503):
        problem = synthetic_problem(
            status,
            url=url,
            retry_after=retry_after,
            reason=answer.reason_phrase,
            reached_ca=reached_ca,
        )
    if problem is not None:
        raise problem
    reason = f" {answer.reason_phrase}" if answer.reason_phrase else ""
    raise BadServerResponse(
        f"{method} {url} answered HTTP {status}{reason} without a problem document",
        url=url,
        status_code=status,
        kind=ErrorKind.TRANSIENT if status >= 500 else ErrorKind.PERMANENT,
        retry_after=retry_after,
    )
