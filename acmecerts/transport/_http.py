"""One ACME server, one request path: signed POSTs, nonces, retries, error mapping.

The transport sends requests; it decides nothing about orders. Every request takes the
same path, whatever sends its bytes: the URL policy bound to the CA's directory
(:class:`UrlPolicy`), the throttle's token (:class:`RequestThrottle`, told apart by the
directory's URLs), the nonce (from a :class:`NonceSupply`: its pool fed from every
``Replay-Nonce`` header, RFC 8555 §6.5, or an answer on its way, so ``newNonce`` is
asked only when neither has one), then one
:class:`~acmecerts.transport._exchange.HttpExchange` (acmecerts' HTTP/1.1 pool by
default; an ``httpx.AsyncClient`` for HTTP/2, a caller's client or another event loop;
a test's fake), then the answer's checks, the mapping of httpx errors and problem
documents to acmecerts errors, ``badNonce`` replay and the retries
:class:`~acmecerts.retry.RequestRetry` allows.
"""

from __future__ import annotations

import datetime as _dt
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx

from acmecerts._time import Clock, SystemClock, duration_seconds
from acmecerts._version import __version__
from acmecerts.errors import (
    AcmeCertsError,
    BadServerResponse,
    InvalidInput,
    RequestTimeout,
    TransportError,
)
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.protocol.jws import sign_request
from acmecerts.protocol.keys import AccountKey
from acmecerts.protocol.resources import Directory, parse_directory
from acmecerts.ratelimit._throttle import EndpointClass, RatesTable
from acmecerts.retry import RequestRetry, retry_request
from acmecerts.transport._events import (
    Observable,
    RequestHook,
    RequestSent,
    ResponseHook,
    ResponseReceived,
)
from acmecerts.transport._exchange import (
    Answer,
    ClientExchange,
    HttpExchange,
    ResponseTooLarge,
    httpx_exchange,
)
from acmecerts.transport._nonces import NoncePool, NonceSupply
from acmecerts.transport._policy import (
    BoundUrlPolicy,
    UrlPolicy,
    connect_error,
    retry_reporter,
    ssl_context,
    warn_if_tls_unverified,
)
from acmecerts.transport._pool import Http11Pool
from acmecerts.transport._proxy import ProxyConfig, ProxySetting, proxy_error, resolve_proxy
from acmecerts.transport._response import MAX_BODY, AcmeResponse, checked_answer
from acmecerts.transport._throttle import RequestThrottle, throttle_for

__all__ = ["USER_AGENT", "AcmeResponse", "AcmeTransport", "RequestHook", "ResponseHook"]

USER_AGENT = f"acmecerts/{__version__}"
_USER_AGENT = (b"User-Agent", USER_AGENT.encode("ascii"))
_JOSE = (b"Content-Type", b"application/jose+json")
#: The longest a request waits for another request's Replay-Nonce before asking newNonce.
_NONCE_WAIT = 2.0

_E = TypeVar("_E", bound=AcmeCertsError)


def _unsent(error: _E) -> _E:
    """A new ``error`` for a request it stopped before it was sent: ``reached_ca`` false.

    The same type, message, attributes and traceback: e.g. a POST whose nonce could not
    be fetched never reached the CA, whatever the newNonce request's failure says about
    that request. Raise it ``from error.__cause__`` to keep the chain.
    """
    cls = type(error)
    unsent = cls.__new__(cls, *error.args)
    unsent.__dict__.update(error.__dict__, reached_ca=False)
    return unsent.with_traceback(error.__traceback__)


def _directory_urls(directory: Directory) -> list[str]:
    """Every resource URL of a directory, which requests may be sent to."""
    optional = (
        directory.revoke_cert,
        directory.key_change,
        directory.new_authz,
        directory.renewal_info,
    )
    required = [directory.new_nonce, directory.new_account, directory.new_order]
    return required + [url for url in optional if url is not None]


class AcmeTransport(Observable):
    """HTTP transport to one ACME server.

    Args:
        directory_url: The CA's directory URL (``str`` or :class:`DirectoryUrl`).
        ca_bundle: An extra CA certificate (PEM file) to trust besides the system store,
            e.g. Pebble's test CA. TLS verification is always on.
        timeout: Per-HTTP-request timeout (seconds or ``timedelta``), separate from the
            per-attempt deadline.
        retry: Request-level retry policy.
        clock: Time source for ``Retry-After`` and sleeps.
        http2: Use httpx's own transport and negotiate HTTP/2 when the server offers
            it. The default (``False``) is acmecerts' HTTP/1.1 keep-alive pool
            (:class:`~acmecerts.transport.Http11Pool`), which costs about a third of the
            client CPU per request (see docs/performance.md); under an event loop other
            than asyncio (trio), httpx's HTTP/1.1 transport.
        max_connections: Connections to the CA at most (in use or idle).
        client: What sends the requests instead: a ready ``httpx.AsyncClient`` (its
            settings win), or an :class:`~acmecerts.transport.HttpExchange` such as an
            :class:`~acmecerts.transport.Http11Pool` of your own or a test's fake. Every
            request still takes the transport's one path (URL policy, throttle, nonces,
            retries, error mapping). The transport does not close what it did not
            create.
        on_request: Called with ``(method, url)`` for every request sent. Deprecated
            (emits a ``DeprecationWarning``): ``subscribe`` to :class:`RequestSent`
            instead; kept as an adapter onto it.
        url_policy: Which URLs the CA may send the client to (:class:`UrlPolicy`); the
            default allows only the directory URL's origin, https. Every URL is checked
            before a request is sent to it; a refused one raises :class:`UnsafeUrl`.
        nonce_circulation: The most nonces kept in circulation. A request that finds
            the nonce pool empty waits for the ``Replay-Nonce`` of a request in flight
            when one is on its way that no other request waits for (that is never slower
            than a ``newNonce`` round-trip), and also whenever this many are on their
            way; otherwise it asks ``newNonce``.
        request_rates: A request throttle: :class:`~acmecerts.ratelimit.RequestRates`
            (or a mapping making one, e.g. a model's ``request_rates``), or a
            :class:`RequestThrottle` to share with other transports. Every request waits
            (first come, first served, on ``clock``) for a token of its endpoint class:
            the directory, ``newNonce``, ``newAccount``, ``newOrder``, ``revokeCert``,
            ``renewalInfo`` (and the URLs below it), or "other". ``None`` (the default)
            or no rates: no throttle, and nothing is spent on one.
        proxy: The HTTP proxy to the CA. ``"env"`` (the default): the environment's
            ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` and ``NO_PROXY`` (and their
            lower-case forms), read once here, as curl and httpx read them. A proxy URL
            (``"http://[USER:PASSWORD@]proxy.example:3128"``): every request through it,
            whatever the environment says. A :class:`ProxyConfig`: per scheme, with
            ``no_proxy`` exceptions. ``None``: no proxy, whatever the environment says.
            ``https`` requests go through a ``CONNECT`` tunnel (TLS end to end, the CA's
            certificate verified as without a proxy); a proxy that cannot be reached or
            refuses raises :class:`~acmecerts.errors.ProxyError`. Not with ``client``
            (configure its proxy there); other environment settings (``SSL_CERT_FILE``,
            ...) are not read.
    """

    def __init__(
        self,
        directory_url: str | DirectoryUrl,
        *,
        ca_bundle: str | Path | None = None,
        timeout: float | _dt.timedelta = 30.0,
        retry: RequestRetry | None = None,
        clock: Clock | None = None,
        http2: bool = False,
        client: httpx.AsyncClient | HttpExchange | None = None,
        on_request: RequestHook | None = None,
        max_connections: int = 100,
        url_policy: UrlPolicy | None = None,
        nonce_circulation: int = 32,
        request_rates: RequestThrottle | RatesTable | None = None,
        proxy: ProxySetting = "env",
    ) -> None:
        #: The CA's directory URL (a ``str``, parsed once: :class:`DirectoryUrl`).
        self.directory_url = directory_url = DirectoryUrl(directory_url)
        self.clock: Clock = clock or SystemClock()
        self.retry = retry or RequestRetry()
        #: Where each request's nonce comes from (the pool, an answer, newNonce).
        self._nonce_supply = NonceSupply(NoncePool(), bound=nonce_circulation, wait=_NONCE_WAIT)
        Observable.__init__(self, on_request)
        #: Where requests may go, bound to the directory (see :attr:`url_policy`).
        self._policy: BoundUrlPolicy = (url_policy or UrlPolicy()).bind(directory_url)
        #: Number of HTTP requests sent (every method, retries included).
        self.request_count = 0
        self._directory: Directory | None = None
        self._directory_lock = anyio.Lock()
        #: The request throttle (``None``: none); read for every request.
        self.throttle = throttle_for(request_rates, self.clock)
        #: Endpoint class of the directory's resource URLs; a URL not here is "other"
        #: unless it is below :attr:`_renewal_info` (filled in with the directory).
        self._endpoints: dict[str, EndpointClass] = {directory_url: EndpointClass.DIRECTORY}
        self._renewal_info: str | None = None
        seconds = duration_seconds(timeout, "timeout", positive=True)
        self._timeouts = {"connect": seconds, "read": seconds, "write": seconds, "pool": seconds}
        #: The proxies requests go through (``None``: none; with ``client``, its own).
        self.proxy: ProxyConfig | None = None
        #: Our own HTTP/1.1 pool, when the transport made one (``http2=False``, no
        #: ``client``): under asyncio the requests go to its ``exchange()``.
        self._pool: Http11Pool | None = None
        #: What sends the requests (``None`` until the first one: the pool, or httpx's
        #: HTTP/1.1 transport when the event loop is not asyncio).
        self._http: HttpExchange | None = None
        #: Whether :meth:`aclose` closes :attr:`_http` (the transport made it).
        self._owns_http = client is None
        self._max_connections = max_connections
        self._ssl_context: ssl.SSLContext | None = None
        if client is None:
            self.proxy = resolve_proxy(proxy)
            self._ssl_context = ssl_context(ca_bundle)
            if http2:
                self._http = httpx_exchange(
                    ssl_context=self._ssl_context,
                    proxy=self.proxy,
                    http2=True,
                    max_connections=max_connections,
                    timeout=seconds,
                    user_agent=USER_AGENT,
                )
            else:
                self._pool = Http11Pool(
                    ssl_context=self._ssl_context,
                    max_connections=max_connections,
                    max_body=MAX_BODY,
                    proxy=self.proxy,
                )
        else:
            if not (isinstance(proxy, str) and proxy == "env"):
                raise InvalidInput(
                    "proxy cannot be given with client: configure the proxy on the "
                    "httpx.AsyncClient (its settings win)"
                )
            if isinstance(client, httpx.AsyncClient):
                warn_if_tls_unverified(client)
                self._http = ClientExchange(client, owned=False)
            elif isinstance(client, HttpExchange):
                self._http = client
            else:
                raise InvalidInput(
                    "client must be an httpx.AsyncClient or an HttpExchange, "
                    f"got {type(client).__name__}"
                )

    @property
    def nonces(self) -> NoncePool:
        """The pool of spare nonces, fed from every ``Replay-Nonce`` header."""
        return self._nonce_supply.pool

    @property
    def nonce_circulation(self) -> int:
        """The most nonces kept in circulation (see ``nonce_circulation`` above)."""
        return self._nonce_supply.bound

    @nonce_circulation.setter
    def nonce_circulation(self, bound: int) -> None:
        self._nonce_supply.bound = bound

    @property
    def url_policy(self) -> UrlPolicy:
        """Where requests may go (checked before every request; see :class:`UrlPolicy`).

        Setting it binds the new policy to the directory URL.
        """
        return self._policy.policy

    @url_policy.setter
    def url_policy(self, policy: UrlPolicy) -> None:
        self._policy = policy.bind(self.directory_url)

    def _default_http(self) -> HttpExchange:
        """What sends the transport's own requests: the pool, or httpx off asyncio."""
        pool = self._pool
        assert pool is not None
        assert self._ssl_context is not None
        if pool.serves_here():
            return pool
        # Not asyncio (trio): httpx's HTTP/1.1 transport, with the same TLS and proxies.
        return httpx_exchange(
            ssl_context=self._ssl_context,
            proxy=self.proxy,
            http2=False,
            max_connections=self._max_connections,
            timeout=self._timeouts["read"],
            user_agent=USER_AGENT,
        )

    async def aclose(self) -> None:
        """Close the connection pool (if the transport created it)."""
        if not self._owns_http:
            return
        if self._http is not None and self._http is not self._pool:
            await self._http.aclose()
        if self._pool is not None:
            await self._pool.aclose()

    async def __aenter__(self) -> AcmeTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- sending -----------------------------------------------------------------------

    async def _send_once(
        self, method: str, url: str, *, content: bytes | None = None, accept: str | None = None
    ) -> Answer:
        # the last line of defence: nothing is sent to a refused URL
        parsed = self._policy.checked(url)
        headers = [(b"Host", parsed.netloc), _USER_AGENT]
        if content is not None:
            headers.append(_JOSE)
        if accept:
            headers.append((b"Accept", accept.encode("ascii")))
        if content is not None:
            headers.append((b"Content-Length", str(len(content)).encode("ascii")))
        post = method == "POST"  # its answer brings a nonce for another request
        supply = self._nonce_supply
        throttle = self.throttle
        if throttle is not None:
            endpoint = self.endpoint_class(url)
            if not throttle.try_take(endpoint):
                if post:
                    with supply.held():  # a nonce on its way meanwhile
                        await throttle.acquire(endpoint)
                else:
                    await throttle.acquire(endpoint)
        self.request_count += 1
        events = self._events
        if events:
            await events.emit(RequestSent(method, url))
        if post:
            supply.expect()
        try:
            response = await self._request(method, url, parsed, headers, content or b"")
        except BaseException:
            if post:
                supply.arrived(None)  # a request that counted on it looks again
            if events:  # failing already: a subscriber's error is logged, this one wins
                await events.emit_quietly(ResponseReceived(method, url, 0))
            raise
        if events:
            await events.emit(ResponseReceived(method, url, response.status_code))
        nonce = response.headers.get("replay-nonce")
        if post:
            # to a request waiting for one, else to the pool (a newNonce answer's nonce is
            # its requester's, see _fetch_nonce; a GET's, if it has one, goes to the pool)
            supply.arrived(nonce)
        elif nonce and method != "HEAD":
            self.nonces.put(nonce)
        return response

    def endpoint_class(self, url: str) -> EndpointClass:
        """The endpoint class a request to ``url`` counts against (see ``request_rates``).

        Before the directory is known only the directory URL itself is told apart.
        """
        endpoint = self._endpoints.get(url)
        if endpoint is not None:
            return endpoint
        below = self._renewal_info
        if below is not None and url.startswith(below):
            return EndpointClass.RENEWAL_INFO
        return EndpointClass.OTHER

    async def _request(
        self,
        method: str,
        url: str,
        parsed: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> Answer:
        """One exchange, whatever sends it; httpx's errors become acmecerts' here."""
        try:
            http = self._http
            if http is None:
                http = self._http = self._default_http()
            return await http.exchange(method, parsed, headers, body, self._timeouts)
        except httpx.ProxyError as exc:
            raise proxy_error(url, exc) from exc
        except httpx.ConnectTimeout as exc:
            via = f" ({exc})" if self.proxy is not None else ""  # which proxy, which step
            raise RequestTimeout(
                f"connecting to {url} timed out{via}", url=url, reached_ca=False
            ) from exc
        except httpx.PoolTimeout as exc:
            raise RequestTimeout(
                f"no free connection for {url} in time", url=url, reached_ca=False
            ) from exc
        except httpx.TimeoutException as exc:
            raise RequestTimeout(f"{method} {url} timed out", url=url) from exc
        except httpx.ConnectError as exc:
            raise connect_error(url, exc) from exc
        except ResponseTooLarge as exc:
            raise BadServerResponse("the answer is larger than 1 MiB", url=url) from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"{method} {url} failed: {exc!r}", url=url) from exc
        except ssl.SSLError as exc:
            raise connect_error(url, exc) from exc

    async def _with_retry(self, attempt: Callable[[], Any], *, idempotent: bool) -> AcmeResponse:
        report = retry_reporter(self.retry.max_attempts)  # a failed connection, at once
        result: AcmeResponse = await retry_request(
            attempt, policy=self.retry, clock=self.clock, idempotent=idempotent, on_retry=report
        )
        return result

    def check_url(self, url: str) -> str:
        """Return ``url`` if :attr:`url_policy` lets requests go there, else raise UnsafeUrl.

        The policy is bound to the directory URL: a URL polled many times is parsed once.
        """
        self._policy.checked(url)
        return url

    async def get(self, url: str, *, accept: str | None = None) -> AcmeResponse:
        """Unauthenticated GET (directory, ``renewalInfo``), retried when safe."""
        self.check_url(url)

        async def attempt() -> AcmeResponse:
            return checked_answer(
                await self._send_once("GET", url, accept=accept), url, "GET", self.clock
            )

        return await self._with_retry(attempt, idempotent=True)

    async def directory(self, *, refresh: bool = False) -> Directory:
        """The CA's directory, fetched once and cached.

        Concurrent first calls share one fetch (a burst of tasks on a new client sends
        one directory request, not one each).
        """
        directory = self._directory
        if directory is not None and not refresh:
            return directory
        async with self._directory_lock:
            if self._directory is None or refresh:
                response = await self.get(self.directory_url)
                fetched = parse_directory(response.json(), url=self.directory_url)
                # A directory that sends the client elsewhere is refused as a whole.
                for resource_url in _directory_urls(fetched):
                    self.check_url(resource_url)
                self._learn_endpoints(fetched)
                self._directory = fetched
            return self._directory

    def _learn_endpoints(self, directory: Directory) -> None:
        """Tell the directory's resource URLs apart for the throttle's endpoint classes."""
        endpoints = {
            directory.new_nonce: EndpointClass.NEW_NONCE,
            directory.new_account: EndpointClass.NEW_ACCOUNT,
            directory.new_order: EndpointClass.NEW_ORDER,
        }
        if directory.revoke_cert is not None:
            endpoints[directory.revoke_cert] = EndpointClass.REVOKE_CERT
        renewal_info = directory.renewal_info
        if renewal_info is not None:
            endpoints[renewal_info] = EndpointClass.RENEWAL_INFO
            # RFC 9773 §4.1: {renewalInfo}/{certID}, one slash between them
            self._renewal_info = renewal_info.rstrip("/") + "/"
        else:
            self._renewal_info = None
        endpoints[self.directory_url] = EndpointClass.DIRECTORY
        self._endpoints = endpoints

    async def new_nonce(self) -> str:
        """A nonce from the pool, or from ``newNonce`` (HEAD, §7.2) when the pool is empty."""
        return await self._nonce(retry=True)

    async def _nonce(self, *, retry: bool) -> str:
        """A nonce from the pool, an answer on its way, or ``newNonce`` (NonceSupply)."""
        return await self._nonce_supply.take(lambda: self._fetch_nonce(retry=retry))

    async def _fetch_nonce(self, *, retry: bool) -> str:
        directory = await self.directory()
        url = directory.new_nonce

        async def attempt() -> AcmeResponse:
            return checked_answer(await self._send_once("HEAD", url), url, "HEAD", self.clock)

        response = await (self._with_retry(attempt, idempotent=True) if retry else attempt())
        nonce = response.headers.get("replay-nonce")
        if not nonce:
            raise BadServerResponse("newNonce answered without Replay-Nonce", url=url)
        valid = self.nonces.valid(nonce)  # the requester's own: it never enters the pool
        if valid is None:
            raise BadServerResponse(f"newNonce answered a malformed nonce {nonce!r}", url=url)
        return valid

    async def post(
        self,
        url: str,
        *,
        key: AccountKey,
        kid: str | None,
        payload: Mapping[str, Any] | None,
        accept: str | None = None,
        idempotent: bool = True,
    ) -> AcmeResponse:
        """POST a JWS to ``url`` (``payload=None`` is a POST-as-GET, §6.3).

        A fresh nonce is used for every try, so ``badNonce`` answers are replayed safely.
        ``idempotent=False`` (e.g. ``newOrder``) stops a request that may have reached the
        CA from being sent twice after a transport failure.
        """
        self.check_url(url)  # before a nonce is spent on it

        async def attempt() -> AcmeResponse:
            # One retry loop, not two nested ones: the nonce is fetched once per try, so
            # ``max_attempts`` bounds every request sent (a loop inside a loop would send
            # up to max_attempts**2 newNonce requests to an unreachable CA). When it fails,
            # the POST itself was never sent: retrying is safe even if not idempotent.
            try:
                nonce = await self._nonce(retry=False)
            except AcmeCertsError as exc:  # this request was not sent, whatever that one did
                raise _unsent(exc) from exc.__cause__
            body = sign_request(key, url=url, nonce=nonce, payload=payload, kid=kid)
            return checked_answer(
                await self._send_once("POST", url, content=body, accept=accept),
                url,
                "POST",
                self.clock,
            )

        return await self._with_retry(attempt, idempotent=idempotent)

    def __repr__(self) -> str:
        return f"AcmeTransport({self.directory_url!r})"
