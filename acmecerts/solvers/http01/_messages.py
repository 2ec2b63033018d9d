"""HTTP/1.1 messages of the built-in http-01 server: answers, reasons, request paths."""

from __future__ import annotations

import functools
import http
from typing import Final

import h11

#: How long a closing connection waits for the client to hang up (lingering close).
_LINGER_SECONDS: Final = 1.0
#: Requests served on one kept-alive connection before the server closes it.
_MAX_REQUESTS_PER_CONNECTION: Final = 100
_RECEIVE_SIZE: Final = 16384


class _RequestTooLarge(Exception):
    """The request body is larger than the server accepts."""


class _Responder:
    """One server connection's h11 state machine and the method of the request it answers.

    Both ways of serving a connection (a task over an anyio stream, asyncio callbacks)
    answer through :meth:`render`; they differ only in how the bytes are written.
    """

    __slots__ = ("h11", "method")

    def __init__(self, conn: h11.Connection) -> None:
        self.h11 = conn
        #: Method of the request being answered (``None`` before it is parsed).
        self.method: bytes | None = None

    def render(
        self,
        status: int,
        *,
        headers: list[tuple[bytes, bytes]] | None = None,
        body: bytes = b"",
        close: bool = False,
    ) -> bytes:
        """One complete response (a short text body for errors without one).

        A ``HEAD`` request gets ``GET``'s headers and no body (RFC 9110 §9.3.2).
        """
        if status >= 400 and not body:
            body = _reason(status).lower() + b"\n"
            headers = [*(headers or []), (b"content-type", b"text/plain; charset=utf-8")]
        all_headers = [*(headers or []), (b"content-length", str(len(body)).encode("ascii"))]
        if close:
            all_headers.append((b"connection", b"close"))
        conn = self.h11
        out = [conn.send(_response(status, tuple(all_headers)))]
        if self.method != b"HEAD":
            out.append(conn.send(h11.Data(data=body)))
        out.append(conn.send(h11.EndOfMessage()))
        return b"".join(chunk for chunk in out if chunk)


@functools.lru_cache(maxsize=256)
def _response(status: int, headers: tuple[tuple[bytes, bytes], ...]) -> h11.Response:
    """The (immutable) response event: the same few are sent again and again."""
    return h11.Response(status_code=status, headers=list(headers), reason=_reason(status))


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _request_path(target: bytes) -> bytes | None:
    """The path of a request target: origin form, or absolute form (RFC 9112 §3.2)."""
    if target.startswith(b"/"):
        return target.split(b"?", 1)[0].split(b"#", 1)[0]
    for scheme in (b"http://", b"https://"):
        if target[: len(scheme)].lower() == scheme:
            rest = target[len(scheme) :]
            slash = rest.find(b"/")
            return b"/" if slash < 0 else _request_path(rest[slash:])
    return None
