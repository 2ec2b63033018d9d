"""A small scriptable fault-injecting HTTPS reverse proxy for tests.

:class:`FaultProxy` listens with TLS on ``127.0.0.1`` and forwards every request to an
upstream ACME server (the real Pebble), keeping the client's ``Host`` header so the upstream
builds every URL it returns (directory, ``Location``, ``Link``) pointing at the proxy.
Rules (:meth:`FaultProxy.add_rule`) replace or disturb the forwarding for matching requests::

    with FaultProxy(upstream=pebble.directory_url, certfile=..., keyfile=...,
                    upstream_ca=pebble.ca_bundle) as proxy:
        proxy.add_rule(Match("/order-plz", "POST"),
                       Respond(429, RATE_LIMITED, retry_after="2"))
        ...  # point the client at proxy.directory_url
        assert proxy.requests_to("/order-plz")[0].status == 429

The proxy runs its own event loop in a background thread, so it works the same under sync
tests, asyncio and trio, and never blocks the loop of the test. Every request is recorded
(:attr:`FaultProxy.requests`) with its arrival time, the status sent and the fault applied.

Faults: :class:`Respond` (answer without forwarding, e.g. 429/503 with ``Retry-After``),
:class:`BadNonce`, :class:`Reset` (RST without answering), :class:`Stall` (wait, then forward),
:class:`Truncate` (a body shorter than its ``Content-Length``, then close),
:class:`SlowBody` (dribble the body), :class:`Hold` (wait for the test's go, then forward),
:class:`Rewrite` (edit the upstream's JSON answer, e.g. :func:`only_challenges`, or set
headers such as ``Retry-After`` on it) and
:class:`AriAnswer` (a RenewalInfo object).

A :class:`Match` can also look into the request: ``Match("/order-plz", "POST",
payload_has="replaces")`` matches only the ``newOrder`` requests whose JWS payload has a
``replaces`` member, and :attr:`RecordedRequest.payload` decodes that payload afterwards.

Pebble 2.4 has no ARI (RFC 9773). :meth:`FaultProxy.emulate_ari` makes it look as if it
had: the directory the proxy forwards gains ``renewalInfo``, and the proxy answers ``GET
{renewalInfo}/{certID}`` itself::

    proxy.emulate_ari(AriAnswer(start=soon, end=later, retry_after="21600"))
    proxy.add_rule(Match("/order-plz", "POST", payload_has="replaces"),
                   Respond(409, ALREADY_REPLACED, "already replaced"), times=None)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import logging
import socket
import ssl
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import h11
import httpx

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import TracebackType

    from acmecerts.testing import PebbleServer

__all__ = [
    "ALREADY_REPLACED",
    "BAD_NONCE",
    "RATE_LIMITED",
    "SERVER_INTERNAL",
    "AriAnswer",
    "BadNonce",
    "Fault",
    "FaultProxy",
    "Hold",
    "Match",
    "RecordedRequest",
    "Reset",
    "Respond",
    "Rewrite",
    "Rule",
    "SlowBody",
    "Stall",
    "Truncate",
    "jws_payload",
    "make_proxy",
]

_log = logging.getLogger(__name__)

RATE_LIMITED = "urn:ietf:params:acme:error:rateLimited"
BAD_NONCE = "urn:ietf:params:acme:error:badNonce"
SERVER_INTERNAL = "urn:ietf:params:acme:error:serverInternal"
#: RFC 9773 §5: the certificate named by ``replaces`` was already replaced.
ALREADY_REPLACED = "urn:ietf:params:acme:error:alreadyReplaced"
MALFORMED = "urn:ietf:params:acme:error:malformed"

# RFC 9110 §7.6.1: hop-by-hop fields are not forwarded by a proxy.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
    }
)
_UPSTREAM_TIMEOUT = 30.0
_READ_SIZE = 65536


# --------------------------------------------------------------------------- rules


def jws_payload(body: bytes) -> Any:
    """The decoded payload of a flattened JWS request body (RFC 8555 §6.2), or ``None``.

    ``None`` when ``body`` is not a JSON object with a string ``payload`` member, when
    the payload is empty (a POST-as-GET, §6.3), or when it is not base64url-encoded JSON.
    """
    try:
        jws = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    encoded = jws.get("payload") if isinstance(jws, dict) else None
    if not isinstance(encoded, str) or not encoded:
        return None
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):  # binascii.Error is a ValueError
        return None


def told(requests: Iterable[RecordedRequest]) -> str:
    """``requests`` one per line with what was answered: the message of a failed count."""
    return "\n".join(
        f"#{r.connection} {r.method} {r.path} {r.status} {r.payload} -> {r.response_body[:400]!r}"
        for r in requests
    )


@dataclass(frozen=True)
class Match:
    """Which requests a rule applies to.

    ``path_prefix`` is compared with the request path (without the query string);
    ``method`` (case-insensitive) restricts the rule to one method, ``None`` matches any.
    ``payload_has`` restricts it to requests whose body is a JWS whose payload
    (:func:`jws_payload`) is a JSON object with that member, e.g. ``"replaces"``.
    """

    path_prefix: str = "/"
    method: str | None = None
    payload_has: str | None = None

    def matches(self, method: str, path: str, body: bytes | None = None) -> bool:
        """Whether a request with this method, path (no query) and ``body`` is matched.

        Without a ``body`` a rule with ``payload_has`` matches nothing.
        """
        if self.method is not None and self.method.upper() != method.upper():
            return False
        if not path.startswith(self.path_prefix):
            return False
        if self.payload_has is None:
            return True
        if body is None:
            return False
        payload = jws_payload(body)
        return isinstance(payload, dict) and self.payload_has in payload


@dataclass(frozen=True)
class Fault:
    """Base class of everything the proxy can do to a request instead of plain forwarding."""


@dataclass(frozen=True)
class Respond(Fault):
    """Answer with ``status`` without forwarding the request.

    With ``problem_type`` the body is an RFC 7807 ``application/problem+json`` document
    (``type``, ``detail``, ``status``). ``retry_after`` is sent verbatim as ``Retry-After``
    (delta-seconds such as ``"2"`` or an HTTP-date). A fresh ``Replay-Nonce`` from the
    upstream is included, as a real CA puts one on error answers too (``replay_nonce=False``
    leaves it out, as a load balancer's 503 would). ``body`` sends those bytes instead of a
    problem document, as ``content_type`` (default ``application/json``): e.g. a plausible
    ACME object, so a request can be answered without the upstream ever seeing it.
    ``headers`` are added last and override the others.
    """

    status: int
    problem_type: str | None = None
    detail: str = ""
    retry_after: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    content_type: str = "application/json"
    replay_nonce: bool = True


@dataclass(frozen=True)
class BadNonce(Fault):
    """Answer 400 ``badNonce`` with a fresh, valid ``Replay-Nonce`` from the upstream."""

    detail: str = "JWS has an invalid anti-replay nonce (injected by FaultProxy)"


@dataclass(frozen=True)
class Reset(Fault):
    """Close the connection abruptly (TCP RST, ``SO_LINGER`` 0) without answering."""


@dataclass(frozen=True)
class Stall(Fault):
    """Wait ``seconds`` before forwarding; the wait ends early when the proxy stops."""

    seconds: float


@dataclass(frozen=True)
class Hold(Fault):
    """Wait until ``release`` is set (at most ``timeout`` seconds), then forward.

    The request is recorded at once (its ``status`` stays ``None`` while it waits), so a
    test can see what is held, let the upstream reach a state first, and then release it.
    The wait also ends when the proxy stops.
    """

    release: threading.Event
    timeout: float = 30.0


@dataclass(frozen=True)
class Truncate(Fault):
    """Forward, but send only part of the body under a ``Content-Length`` promising more,
    then close the connection."""


@dataclass(frozen=True)
class SlowBody(Fault):
    """Forward, but send the response body at about ``bytes_per_second``."""

    bytes_per_second: float


@dataclass(frozen=True)
class Rewrite(Fault):
    """Forward, then answer with ``edit(document)`` instead of the upstream's JSON body.

    Only a successful JSON answer is edited (anything else is forwarded as it is); the
    headers are kept (``Content-Length`` is the new body's). E.g. :func:`only_challenges`
    makes the CA offer fewer challenge types than it does. ``edit=None`` keeps the body.
    ``headers`` are set on the answer whatever it is, replacing any of the same name
    (e.g. a ``Retry-After`` the upstream does not send).
    """

    edit: Callable[[Any], Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def only_challenges(*types: str) -> Rewrite:
    """A :class:`Rewrite` of authorizations: only the challenges of ``types`` stay."""

    def edit(document: Any) -> Any:
        if isinstance(document, dict) and isinstance(document.get("challenges"), list):
            kept = [c for c in document["challenges"] if c.get("type") in types]
            return {**document, "challenges": kept}
        return document

    return Rewrite(edit)


@dataclass(frozen=True)
class AriAnswer(Fault):
    """Answer ``200`` with an ARI RenewalInfo object (RFC 9773 §4.2), not forwarding.

    ``start``/``end`` are the ``suggestedWindow`` (timezone-aware); ``None`` means one day
    before / after the moment the request arrives, so the default window is open now.
    ``retry_after`` is sent verbatim as ``Retry-After`` (``None``: no header), and
    ``explanation_url`` as ``explanationURL`` when given. Used by
    :meth:`FaultProxy.emulate_ari`, or as a rule's fault to change the answer for the
    next requests only.
    """

    start: dt.datetime | None = None
    end: dt.datetime | None = None
    retry_after: str | None = "21600"
    explanation_url: str | None = None

    def __post_init__(self) -> None:
        for moment in (self.start, self.end):
            if moment is not None and moment.tzinfo is None:
                raise ValueError(f"AriAnswer needs timezone-aware instants, not {moment!r}")
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise ValueError("AriAnswer's window must end after it starts")

    def document(self, now: dt.datetime) -> dict[str, Any]:
        """The RenewalInfo JSON object for a request arriving at ``now``."""
        start = self.start or now - dt.timedelta(days=1)
        end = self.end or now + dt.timedelta(days=1)
        body: dict[str, Any] = {"suggestedWindow": {"start": _rfc3339(start), "end": _rfc3339(end)}}
        if self.explanation_url is not None:
            body["explanationURL"] = self.explanation_url
        return body


@dataclass
class Rule:
    """A :class:`Match` and the :class:`Fault` applied to the next matching requests.

    ``remaining`` is how many more requests the rule applies to (``None``: forever);
    ``hits`` how many it has applied to so far. Read them, do not write them.
    """

    match: Match
    fault: Fault
    remaining: int | None
    hits: int = 0

    @property
    def exhausted(self) -> bool:
        """Whether the rule will apply to no further request."""
        return self.remaining is not None and self.remaining <= 0


@dataclass(frozen=True)
class RecordedRequest:
    """One request the proxy received.

    ``arrival`` is ``time.monotonic()`` when its head was read, ``wall`` the same instant as
    an aware UTC datetime. ``status`` is the status sent to the client (``None`` if no
    response head was sent: a reset, a stall cut short, or still in progress), ``responded``
    the monotonic time the response was complete (``None`` likewise). ``fault`` is the fault
    applied, ``None`` when the request was simply forwarded. ``connection`` numbers the client
    connections (from 1, in accept order): requests sharing it came over one kept-alive
    connection. ``headers`` and ``body`` are the request as received; :attr:`payload`
    decodes a JWS body; ``response_headers`` and ``response_body`` are what was sent back
    (empty until the answer is complete).
    """

    method: str
    path: str
    arrival: float
    wall: dt.datetime
    status: int | None
    fault: Fault | None
    responded: float | None
    connection: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    response_headers: tuple[tuple[str, str], ...] = ()
    response_body: bytes = b""

    @property
    def payload(self) -> Any:
        """The request's decoded JWS payload (``None`` if none: see :func:`jws_payload`)."""
        return jws_payload(self.body)


@dataclass
class _Entry:
    method: str
    path: str
    arrival: float
    wall: dt.datetime
    fault: Fault | None
    connection: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    status: int | None = None
    responded: float | None = None
    response_headers: tuple[tuple[str, str], ...] = ()
    response_body: bytes = b""

    def freeze(self) -> RecordedRequest:
        return RecordedRequest(
            method=self.method,
            path=self.path,
            arrival=self.arrival,
            wall=self.wall,
            status=self.status,
            fault=self.fault,
            responded=self.responded,
            connection=self.connection,
            headers=self.headers,
            body=self.body,
            response_headers=self.response_headers,
            response_body=self.response_body,
        )


@dataclass
class _Upstream:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class _Aborted(Exception):
    """The connection was closed on purpose (a fault); stop serving it."""


# --------------------------------------------------------------------------- proxy


class FaultProxy:
    """A TLS reverse proxy in front of an ACME server that injects scripted faults.

    ``upstream`` is the upstream's base URL or directory URL (``https://127.0.0.1:14000`` or
    ``https://127.0.0.1:14000/dir``); ``directory_path`` defaults to the upstream URL's path,
    or ``/dir`` when it has none. ``certfile``/``keyfile`` are the proxy's own TLS
    certificate chain and key (for ``127.0.0.1``); ``upstream_ca`` the CA bundle that verifies
    the upstream (``None``: the system trust store). ``port`` 0 picks a free port.
    ``upstream_connections`` caps the connections to the upstream (``None``: httpx's
    default, 100): with 1, the upstream answers one request at a time, which a test of
    heavy client concurrency needs against Pebble, whose store deadlocks under it (see
    ``pytest_runtest_teardown`` in tests/conftest.py).

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        upstream: str,
        *,
        certfile: str | Path,
        keyfile: str | Path,
        upstream_ca: str | Path | None = None,
        directory_path: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        upstream_connections: int | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"upstream must be an http(s) URL, not {upstream!r}")
        self._upstream_base = f"{parts.scheme}://{parts.netloc}"
        self._directory_path = directory_path or parts.path or "/dir"
        self._certfile = Path(certfile)
        self._keyfile = Path(keyfile)
        self._upstream_ca = None if upstream_ca is None else Path(upstream_ca)
        self._host = host
        self._requested_port = port
        self._limits = (
            httpx.Limits(max_connections=upstream_connections)
            if upstream_connections is not None
            else httpx.Limits(max_connections=100, max_keepalive_connections=20)
        )

        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        #: Consulted for a request no rule matched, with ``(method, path, body)``: the
        #: fault it returns is applied (``None``: forward). It runs under the proxy's
        #: lock, so it must be quick and must not call the proxy. See ``limits.py``.
        self.request_hook: Callable[[str, str, bytes], Fault | None] | None = None
        self._entries: list[_Entry] = []

        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._port: int | None = None
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._connections = 0
        self._client: httpx.AsyncClient | None = None
        self._nonce_path: str | None = None
        #: ARI emulation (:meth:`emulate_ari`): the renewalInfo path and default answer.
        self._ari_path: str | None = None
        self._ari_answer: AriAnswer | None = None

    # ------------------------------------------------------------------ public API

    @property
    def url(self) -> str:
        """``https://127.0.0.1:PORT`` of the running proxy."""
        if self._port is None:
            raise RuntimeError("FaultProxy is not running")
        return f"https://{self._host}:{self._port}"

    @property
    def port(self) -> int:
        """The TCP port the proxy listens on."""
        if self._port is None:
            raise RuntimeError("FaultProxy is not running")
        return self._port

    @property
    def directory_url(self) -> str:
        """The ACME directory URL through the proxy (:attr:`url` plus the directory path)."""
        return self.url + self._directory_path

    def start(self) -> None:
        """Start listening (in a background thread); returns once the port is bound."""
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        self._ready.clear()
        self._startup_error = None
        self._thread = threading.Thread(
            target=self._thread_main, name=f"FaultProxy->{self._upstream_base}", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise RuntimeError("FaultProxy failed to start") from self._startup_error

    def stop(self, timeout: float = 10.0) -> None:
        """Stop listening, abort every connection and stall, and join the thread."""
        thread, loop, stop_event = self._thread, self._loop, self._stop_event
        if thread is None:
            return
        if loop is not None and stop_event is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError("FaultProxy thread did not stop")
        self._thread = None
        self._loop = None
        self._stop_event = None
        self._port = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def emulate_ari(self, answer: AriAnswer | None = None, *, path: str = "/renewal-info") -> None:
        """Make the upstream look ARI-capable (RFC 9773), for CAs such as Pebble 2.4.

        From now on the directory the proxy forwards has ``renewalInfo`` (``https://``
        + the request's ``Host`` + ``path``), and the proxy itself answers every ``GET
        {path}/{certID}`` no rule matched with ``answer`` (default :class:`AriAnswer`:
        a window open now, ``Retry-After: 21600``); a certID that is not two base64url
        parts joined by a dot gets ``400 malformed``. Calling it again replaces the
        answer. Rules still come first: an ``AriAnswer`` rule changes the answer for the
        next requests, a ``Respond`` rule makes the endpoint fail.
        """
        if not path.startswith("/") or path.endswith("/") or path == self._directory_path:
            raise ValueError(f"path must be an absolute path like /renewal-info, not {path!r}")
        with self._lock:
            self._ari_path = path
            self._ari_answer = answer or AriAnswer()

    def add_rule(self, match: Match, fault: Fault, *, times: int | None = 1) -> Rule:
        """Apply ``fault`` to the next ``times`` requests matching ``match`` (``None``: all).

        Rules are checked in the order they were added; the first live matching rule wins.
        """
        if times is not None and times < 1:
            raise ValueError("times must be at least 1, or None for forever")
        rule = Rule(match=match, fault=fault, remaining=times)
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove_rule(self, rule: Rule) -> None:
        """Remove one rule (no error if it is already gone)."""
        with self._lock:
            self._rules = [r for r in self._rules if r is not rule]

    def clear_rules(self) -> None:
        """Remove every rule: from now on every request is simply forwarded."""
        with self._lock:
            self._rules.clear()

    @property
    def rules(self) -> list[Rule]:
        """The rules still able to apply, in order (a copy of the list)."""
        with self._lock:
            return [r for r in self._rules if not r.exhausted]

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a snapshot)."""
        with self._lock:
            return [e.freeze() for e in self._entries]

    def requests_to(
        self, path_prefix: str, method: str | None = None, *, payload_has: str | None = None
    ) -> list[RecordedRequest]:
        """The recorded requests whose path starts with ``path_prefix`` (and ``method``;
        with ``payload_has``, only those whose JWS payload has that member)."""
        match = Match(path_prefix, method, payload_has)
        return [r for r in self.requests if match.matches(r.method, r.path, r.body)]

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._entries.clear()

    # ------------------------------------------------------------------ thread & loop

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # never let the thread die with an unhandled error
            if not self._ready.is_set():
                self._startup_error = exc
            else:
                _log.exception("FaultProxy event loop failed")
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(_quiet_exception_handler)
        self._stop_event = asyncio.Event()
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(self._certfile, self._keyfile)
        server_ctx.set_alpn_protocols(["http/1.1"])
        if self._upstream_ca is not None:
            client_ctx = ssl.create_default_context(cafile=str(self._upstream_ca))
        else:
            client_ctx = ssl.create_default_context()
        async with httpx.AsyncClient(
            verify=client_ctx, trust_env=False, timeout=_UPSTREAM_TIMEOUT, limits=self._limits
        ) as client:
            self._client = client
            server = await asyncio.start_server(
                self._on_connection, self._host, self._requested_port, ssl=server_ctx
            )
            try:
                self._port = int(server.sockets[0].getsockname()[1])
                self._ready.set()
                await self._stop_event.wait()
            finally:
                server.close()
                tasks = list(self._conn_tasks)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await server.wait_closed()
                self._client = None

    # ------------------------------------------------------------------ connections

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conn_tasks.add(task)
        self._connections += 1
        try:
            await self._serve(reader, writer, self._connections)
        except asyncio.CancelledError:
            pass  # the proxy is stopping
        except _Aborted:
            pass
        except Exception:  # one connection's failure never kills the server
            _log.debug("FaultProxy connection failed", exc_info=True)
        finally:
            self._conn_tasks.discard(task)
            if not writer.transport.is_closing():
                writer.transport.abort()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn_id: int
    ) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request = await self._read_request(conn, reader)
            if request is None:
                return
            head, body = request
            await self._handle(conn, writer, conn_id, head, body)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                await self._close(writer)
                return
            conn.start_next_cycle()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[h11.Request, bytes] | None:
        head: h11.Request | None = None
        chunks: list[bytes] = []
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                return None
            if event is h11.NEED_DATA:
                try:
                    data = await reader.read(_READ_SIZE)
                except (ConnectionError, ssl.SSLError, OSError):
                    return None
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return head, b"".join(chunks)
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None

    async def _handle(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        conn_id: int,
        head: h11.Request,
        body: bytes,
    ) -> None:
        method = head.method.decode("ascii")
        target = head.target.decode("ascii")
        path = urllib.parse.urlsplit(target).path or "/"
        headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers)
        with self._lock:
            fault = self._pick_fault(method, path, body)
            if fault is None and self.request_hook is not None:
                fault = self.request_hook(method, path, body)
            if fault is None and method == "GET" and self._is_renewal_info(path):
                fault = self._ari_answer
            entry = _Entry(
                method=method,
                path=path,
                arrival=time.monotonic(),
                wall=dt.datetime.now(dt.UTC),
                fault=fault,
                connection=conn_id,
                headers=headers,
                body=body,
            )
            self._entries.append(entry)

        if isinstance(fault, Reset):
            self._reset(writer)
            raise _Aborted
        if isinstance(fault, Respond):
            extra = [(k, v) for k, v in fault.headers.items()]
            if fault.retry_after is not None:
                extra.insert(0, ("Retry-After", fault.retry_after))
            if fault.body is not None:
                extra.insert(0, ("Content-Type", fault.content_type))
            await self._send_local(
                conn,
                writer,
                entry,
                fault.status,
                fault.problem_type,
                fault.detail,
                extra,
                body=fault.body,
                replay_nonce=fault.replay_nonce,
            )
            return
        if isinstance(fault, BadNonce):
            await self._send_local(conn, writer, entry, 400, BAD_NONCE, fault.detail, [])
            return
        if isinstance(fault, AriAnswer):
            await self._send_renewal_info(conn, writer, entry, fault)
            return
        if isinstance(fault, Stall):
            await asyncio.sleep(fault.seconds)
        if isinstance(fault, Hold):
            await self._hold(fault)

        upstream = await self._forward(head, target, body)
        if method == "GET" and path == self._directory_path:
            upstream = self._with_renewal_info(upstream, entry)
        if isinstance(fault, Rewrite):
            upstream = _with_headers(upstream, fault.headers)
            if fault.edit is not None:
                upstream = _rewritten(upstream, fault.edit)
        if isinstance(fault, Truncate):
            await self._send_truncated(conn, writer, entry, head.method, upstream)
        elif isinstance(fault, SlowBody):
            await self._send(conn, writer, entry, head.method, upstream, fault.bytes_per_second)
        else:
            await self._send(conn, writer, entry, head.method, upstream, None)

    async def _hold(self, fault: Hold) -> None:
        """Wait for ``fault.release`` (a thread's event: polled), the timeout or the stop."""
        stop = self._stop_event
        deadline = time.monotonic() + fault.timeout
        while not fault.release.is_set() and time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                return
            await asyncio.sleep(0.01)

    def _pick_fault(self, method: str, path: str, body: bytes) -> Fault | None:
        for rule in self._rules:
            if rule.exhausted or not rule.match.matches(method, path, body):
                continue
            if rule.remaining is not None:
                rule.remaining -= 1
            rule.hits += 1
            return rule.fault
        return None

    # ------------------------------------------------------------------ upstream

    async def _forward(self, head: h11.Request, target: str, body: bytes) -> _Upstream:
        client = self._client
        assert client is not None
        headers = [(k, v) for k, v in head.headers if k.lower() not in _HOP_BY_HOP]
        request = httpx.Request(
            head.method.decode("ascii"),
            self._upstream_base + target,
            headers=headers,  # keeps the client's Host
            content=body,
            extensions={"timeout": httpx.Timeout(_UPSTREAM_TIMEOUT).as_dict()},
        )
        try:
            response = await client.send(request, stream=True)
            try:
                raw = b"".join([chunk async for chunk in response.aiter_raw()])
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            _log.debug("FaultProxy upstream failed: %r", exc)
            status = 504 if isinstance(exc, httpx.TimeoutException) else 502
            return _Upstream(status, [(b"Content-Type", b"text/plain")], repr(exc).encode())
        return _Upstream(response.status_code, list(response.headers.raw), raw)

    async def _fresh_nonce(self) -> str | None:
        """A fresh ``Replay-Nonce`` from the upstream's ``newNonce`` (``None`` on failure)."""
        client = self._client
        assert client is not None
        try:
            if self._nonce_path is None:
                response = await client.get(self._upstream_base + self._directory_path)
                directory = response.json()
                nonce_url = directory["newNonce"]
                self._nonce_path = urllib.parse.urlsplit(nonce_url).path
            response = await client.head(self._upstream_base + self._nonce_path)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            _log.debug("FaultProxy could not fetch a nonce: %r", exc)
            return None
        nonce: str | None = response.headers.get("Replay-Nonce")
        return nonce

    # ------------------------------------------------------------------ ARI emulation

    def _is_renewal_info(self, path: str) -> bool:
        """Whether ``path`` is under the emulated ``renewalInfo`` (call under the lock)."""
        return self._ari_path is not None and path.startswith(self._ari_path + "/")

    def _with_renewal_info(self, upstream: _Upstream, entry: _Entry) -> _Upstream:
        """The upstream's directory answer with ``renewalInfo`` added, when emulating ARI."""
        with self._lock:
            ari_path = self._ari_path
        if ari_path is None or upstream.status != 200:
            return upstream
        if any(k.lower() == b"content-encoding" for k, _ in upstream.headers):
            _log.warning("FaultProxy: a compressed directory is forwarded without renewalInfo")
            return upstream
        try:
            directory = json.loads(upstream.body)
        except ValueError:
            return upstream
        if not isinstance(directory, dict):
            return upstream
        directory["renewalInfo"] = f"https://{self._host_of(entry)}{ari_path}"
        return _Upstream(upstream.status, upstream.headers, json.dumps(directory).encode())

    async def _send_renewal_info(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, entry: _Entry, answer: AriAnswer
    ) -> None:
        """RFC 9773 §4.2: a RenewalInfo object; ``400 malformed`` for a bad certID."""
        certid = entry.path.rsplit("/", 1)[-1]
        parts = certid.split(".")
        if len(parts) != 2 or not all(p and _is_base64url(p) for p in parts):
            await self._send_local(
                conn,
                writer,
                entry,
                400,
                MALFORMED,
                f"{certid!r} is not a certID (RFC 9773 §4.1)",
                [],
                replay_nonce=False,
            )
            return
        extra = [("Content-Type", "application/json")]
        if answer.retry_after is not None:
            extra.append(("Retry-After", answer.retry_after))
        body = json.dumps(answer.document(entry.wall)).encode()
        await self._send_local(
            conn, writer, entry, 200, None, "", extra, body=body, replay_nonce=False
        )

    # ------------------------------------------------------------------ downstream

    async def _send_local(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        entry: _Entry,
        status: int,
        problem_type: str | None,
        detail: str,
        extra: list[tuple[str, str]],
        *,
        body: bytes | None = None,
        replay_nonce: bool = True,
    ) -> None:
        headers: list[tuple[str, str]] = [("Cache-Control", "no-store")]
        # A given ``body`` is sent as it is (its Content-Type comes in ``extra``).
        if body is None and problem_type is not None:
            problem = {"type": problem_type, "detail": detail, "status": status}
            body = json.dumps(problem).encode()
            headers.append(("Content-Type", "application/problem+json"))
        elif body is None and detail:
            body = detail.encode()
            headers.append(("Content-Type", "text/plain; charset=utf-8"))
        elif body is None:
            body = b""
        nonce = await self._fresh_nonce() if replay_nonce else None
        if nonce is not None:
            headers.append(("Replay-Nonce", nonce))
        headers.append(
            ("Link", f'<https://{self._host_of(entry)}{self._directory_path}>;rel="index"')
        )
        overridden = {k.lower() for k, _ in extra}
        headers = [(k, v) for k, v in headers if k.lower() not in overridden] + extra
        upstream = _Upstream(status, [(k.encode(), v.encode()) for k, v in headers], body)
        await self._send(conn, writer, entry, entry.method.encode("ascii"), upstream, None)

    def _host_of(self, entry: _Entry) -> str:
        for k, v in entry.headers:
            if k.lower() == "host":
                return v
        return f"{self._host}:{self._port}"

    @staticmethod
    def _response_head(method: bytes, upstream: _Upstream, content_length: int) -> h11.Response:
        headers = [(k, v) for k, v in upstream.headers if k.lower() not in _HOP_BY_HOP]
        no_body = method == b"HEAD" or upstream.status in (204, 304)
        if method == b"HEAD":
            for k, v in upstream.headers:
                if k.lower() == b"content-length":
                    headers.append((b"Content-Length", v))
        elif not no_body:
            headers.append((b"Content-Length", str(content_length).encode()))
        return h11.Response(status_code=upstream.status, headers=headers)

    async def _send(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        entry: _Entry,
        method: bytes,
        upstream: _Upstream,
        bytes_per_second: float | None,
    ) -> None:
        # The record is updated before the bytes that complete the response are written, so
        # a client that has its answer always finds the request recorded as answered.
        body = b"" if method == b"HEAD" or upstream.status in (204, 304) else upstream.body
        head = self._response_head(method, upstream, len(body))
        final = conn.send(head) or b""
        with self._lock:
            entry.status = upstream.status
            entry.response_headers = tuple(
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers
            )
            entry.response_body = body
        if body and bytes_per_second is not None and bytes_per_second > 0:
            writer.write(final)
            await writer.drain()
            size = max(1, int(bytes_per_second / 10))
            pieces = [body[i : i + size] for i in range(0, len(body), size)]
            for piece in pieces[:-1]:
                writer.write(conn.send(h11.Data(data=piece)) or b"")
                await writer.drain()
                await asyncio.sleep(len(piece) / bytes_per_second)
            final = conn.send(h11.Data(data=pieces[-1])) or b""
        elif body:
            final += conn.send(h11.Data(data=body)) or b""
        final += conn.send(h11.EndOfMessage()) or b""
        with self._lock:
            entry.responded = time.monotonic()
        writer.write(final)
        await writer.drain()

    async def _send_truncated(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        entry: _Entry,
        method: bytes,
        upstream: _Upstream,
    ) -> None:
        body = upstream.body
        promised = len(body) if len(body) >= 2 else len(body) + 64
        sent = body[: len(body) // 2]
        response = self._response_head(method, upstream, promised)
        if method == b"HEAD" or upstream.status in (204, 304):
            # No body is allowed: promise one anyway, bypassing h11's framing rules.
            headers = [(k, v) for k, v in response.headers if k.lower() != b"content-length"]
            response = h11.Response(
                status_code=upstream.status,
                headers=[*headers, (b"Content-Length", str(promised).encode())],
            )
            data = _raw_head(response)
        else:
            data = (conn.send(response) or b"") + (conn.send(h11.Data(data=sent)) or b"")
        with self._lock:
            entry.status = upstream.status
        writer.write(data)
        await self._close(writer)
        raise _Aborted

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    @staticmethod
    async def _close(writer: asyncio.StreamWriter) -> None:
        """Flush what was written and close gracefully (bounded wait)."""
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 5.0)


def _quiet_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Log failed handshakes and dropped connections (clients misbehave on purpose) at debug."""
    exc = context.get("exception")
    if isinstance(exc, (ssl.SSLError, ConnectionError)):
        _log.debug("FaultProxy: %s: %r", context.get("message"), exc)
    else:
        loop.default_exception_handler(context)


def _rfc3339(moment: dt.datetime) -> str:
    """``moment`` in UTC as RFC 3339 with a ``Z`` (whole seconds)."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_BASE64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _is_base64url(text: str) -> bool:
    return set(text) <= _BASE64URL


def _with_headers(upstream: _Upstream, headers: dict[str, str]) -> _Upstream:
    """``upstream`` with ``headers`` set (replacing any of the same name)."""
    if not headers:
        return upstream
    replaced = {k.lower().encode("latin-1") for k in headers}
    kept = [(k, v) for k, v in upstream.headers if k.lower() not in replaced]
    added = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    return _Upstream(upstream.status, kept + added, upstream.body)


def _rewritten(upstream: _Upstream, edit: Callable[[Any], Any]) -> _Upstream:
    """``upstream`` with its JSON body replaced by ``edit(body)`` (a 2xx JSON answer only)."""
    if not 200 <= upstream.status < 300:
        return upstream
    if any(k.lower() == b"content-encoding" for k, _ in upstream.headers):
        _log.warning("FaultProxy: a compressed answer is forwarded without its rewrite")
        return upstream
    try:
        document = json.loads(upstream.body)
    except ValueError:
        return upstream
    return _Upstream(upstream.status, upstream.headers, json.dumps(edit(document)).encode())


def _raw_head(response: h11.Response) -> bytes:
    """Serialize a response head without h11's body-framing checks."""
    lines = [f"HTTP/1.1 {response.status_code} {response.reason.decode('latin-1')}".encode()]
    lines += [k + b": " + v for k, v in response.headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def make_proxy(
    pebble: PebbleServer, *, port: int = 0, upstream_connections: int | None = None
) -> FaultProxy:
    """A (not yet started) proxy in front of ``pebble``, with Pebble's TLS certificate."""
    return FaultProxy(
        pebble.directory_url,
        certfile=pebble.tls_cert_path,
        keyfile=pebble.tls_key_path,
        upstream_ca=pebble.ca_bundle,
        port=port,
        upstream_connections=upstream_connections,
    )
