"""The seam under the transport: one HTTP request out, one whole answer back.

:class:`~acmecerts.transport.AcmeTransport` does everything an ACME request needs
(URL policy, throttle, nonces, ``badNonce`` replay, retries, error mapping) and then
hands the bytes to an :class:`HttpExchange`, whatever sends them:

* :class:`~acmecerts.transport.Http11Pool`, acmecerts' own HTTP/1.1 keep-alive pool
  (the default, under asyncio);
* :class:`ClientExchange`, an ``httpx.AsyncClient``: a caller's own (``client=``),
  httpx's HTTP/2 transport (``http2=True``), or httpx's HTTP/1.1 one under an event loop
  other than asyncio (trio);
* a test's fake, which therefore runs the very code the pool path runs.

An exchange raises httpx's exceptions (``httpx.ConnectError``, ``httpx.ReadTimeout``,
...); the transport translates them into acmecerts' at this seam.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import httpx

from acmecerts.errors import InvalidInput
from acmecerts.transport._proxy import ProxyConfig, ProxyRouter

__all__ = [
    "Answer",
    "ClientExchange",
    "HttpExchange",
    "RawHeaders",
    "ResponseTooLarge",
    "Timeouts",
    "httpx_exchange",
]

#: Request headers as sent: ``(name, value)`` byte pairs, in order.
RawHeaders = list[tuple[bytes, bytes]]
#: httpx's timeout kinds (``connect``, ``read``, ``write``, ``pool``) in seconds.
Timeouts = Mapping[str, float | None]


class Answer:
    """A whole HTTP answer from :meth:`HttpExchange.exchange`."""

    __slots__ = ("content", "headers", "reason", "status_code")

    def __init__(
        self, status_code: int, reason: bytes, headers: httpx.Headers, content: bytes
    ) -> None:
        self.status_code = status_code
        self.reason = reason
        #: The headers, as httpx's case-insensitive multi-dict.
        self.headers = headers
        self.content = content

    @property
    def reason_phrase(self) -> str:
        """The status line's reason phrase."""
        return self.reason.decode("ascii", "replace")


class ResponseTooLarge(httpx.RemoteProtocolError):
    """The answer's body exceeded the pool's ``max_body`` (the connection is dropped)."""


@runtime_checkable
class HttpExchange(Protocol):
    """Sends one HTTP request and returns the whole answer: the transport's seam.

    Contract:

    * ``exchange()`` MUST send ``headers`` as given (``Host``, ``User-Agent`` and, with a
      body, ``Content-Length`` are included) to ``url`` and MUST NOT follow redirects.
    * It MUST raise httpx's exceptions for failures (``httpx.ConnectError``,
      ``httpx.TimeoutException`` and its kinds, ``httpx.ProxyError``, ...), and MUST
      honour cancellation.
    * ``timeouts`` holds httpx's timeout kinds (``connect``, ``read``, ``write``,
      ``pool``) in seconds; an exchange with settings of its own MAY use those instead.
    """

    async def exchange(
        self, method: str, url: httpx.URL, headers: RawHeaders, body: bytes, timeouts: Timeouts
    ) -> Answer:
        """Send one request and return its whole answer."""
        ...

    async def aclose(self) -> None:
        """Release connections; no exchange follows."""
        ...


class ClientExchange:
    """An :class:`HttpExchange` over an ``httpx.AsyncClient`` (its settings win).

    Redirects are never followed, whatever the client says: a redirect could lead
    anywhere, around the URL policy (the transport reports a 3xx as a bad answer).
    ``timeouts`` are the client's own. :meth:`aclose` closes the client only if
    ``owned``.
    """

    __slots__ = ("client", "owned")

    def __init__(self, client: httpx.AsyncClient, *, owned: bool) -> None:
        self.client = client
        self.owned = owned

    async def exchange(
        self, method: str, url: httpx.URL, headers: RawHeaders, body: bytes, timeouts: Timeouts
    ) -> Answer:
        """Send one request through the client and return its whole answer."""
        client = self.client
        request = client.build_request(method, url, content=body or None, headers=headers)
        response = await client.send(request, follow_redirects=False)
        return Answer(
            response.status_code,
            response.reason_phrase.encode("ascii", "replace"),
            response.headers,
            response.content,
        )

    async def aclose(self) -> None:
        """Close the client if this exchange made it."""
        if self.owned:
            await self.client.aclose()

    def __repr__(self) -> str:
        return f"ClientExchange({self.client!r}, owned={self.owned})"


def httpx_exchange(
    *,
    ssl_context: ssl.SSLContext,
    proxy: ProxyConfig | None,
    http2: bool,
    max_connections: int,
    timeout: float,
    user_agent: str,
) -> ClientExchange:
    """An owned ``httpx.AsyncClient`` as the transport would configure it.

    For ``http2=True`` (HTTP/2 when the server offers it), and for HTTP/1.1 under an
    event loop other than asyncio, where :class:`~acmecerts.transport.Http11Pool` does
    not run. The same proxies apply as to the pool; the environment is not read again.

    Raises:
        InvalidInput: ``http2`` without the ``h2`` package (the ``acmecerts[http2]`` extra).
    """
    if http2:
        try:
            import h2  # noqa: F401 - only whether it is there
        except ImportError as exc:
            raise InvalidInput(
                "http2=True needs the h2 package: pip install 'acmecerts[http2]'"
            ) from exc
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    transport: httpx.AsyncBaseTransport | None = None
    if proxy is not None:

        def make(via: httpx.Proxy | None) -> httpx.AsyncHTTPTransport:
            return httpx.AsyncHTTPTransport(
                verify=ssl_context, http2=http2, limits=limits, proxy=via
            )

        transport = ProxyRouter(proxy, make)
    client = httpx.AsyncClient(
        verify=ssl_context,
        http2=http2,
        transport=transport,
        timeout=timeout,
        headers={"User-Agent": user_agent},
        limits=limits,
        follow_redirects=False,
        trust_env=False,
    )
    return ClientExchange(client, owned=True)
