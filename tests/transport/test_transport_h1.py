"""The HTTP/1.1 keep-alive pool (``Http11Pool``), against Pebble and scripted servers.

Keep-alive, the connection bound and TLS run against the real Pebble. Answers a CA
should never send (a chunked body, a close-delimited body, a malformed status line, a
body too large, silence, a connection closed while idle) come from a small asyncio
server on loopback that writes scripted bytes: these are the pool's parser and error
paths.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Awaitable, Callable

import httpx
import pytest
from cryptography import x509

from acmecerts.errors import AcmeProblem, BadServerResponse, ConnectError, ErrorKind
from acmecerts.testing import PebbleServer
from acmecerts.transport import AcmeTransport, Http11Pool, ResponseTooLarge

pytestmark = pytest.mark.anyio

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


class ScriptedServer:
    """A plain-HTTP loopback server running ``script`` for every connection."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/x"

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """Read one request head (and its body, if it has a Content-Length)."""
        head = await reader.readuntil(b"\r\n\r\n")
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                await reader.readexactly(int(line.split(b":", 1)[1]))
        self.requests += 1
        return head

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self.script(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def _pool(**kwargs: object) -> Http11Pool:
    return Http11Pool(ssl_context=ssl.create_default_context(), **kwargs)  # type: ignore[arg-type]


async def _get(pool: Http11Pool, url: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=pool, timeout=5.0) as client:
        return await client.get(url)


# -- against Pebble ----------------------------------------------------------------------


async def test_requests_reuse_one_kept_alive_tls_connection(pebble: PebbleServer) -> None:
    ctx = ssl.create_default_context(cafile=str(pebble.ca_bundle))
    pool = Http11Pool(ssl_context=ctx)
    async with httpx.AsyncClient(transport=pool) as client:
        for _ in range(5):
            answer = await client.get(pebble.directory_url)
            assert answer.status_code == 200
            assert "newOrder" in answer.json()
            assert answer.http_version == "HTTP/1.1"
        assert pool.connections_opened == 1
        assert pool.open_connections == 1
    assert pool.open_connections == 0


async def test_concurrent_requests_stay_within_max_connections(pebble: PebbleServer) -> None:
    ctx = ssl.create_default_context(cafile=str(pebble.ca_bundle))
    pool = Http11Pool(ssl_context=ctx, max_connections=3)
    seen: list[int] = []
    async with httpx.AsyncClient(transport=pool) as client:

        async def one() -> int:
            answer = await client.head(pebble.directory_url.replace("/dir", "/nonce-plz"))
            seen.append(pool.open_connections)
            return answer.status_code

        statuses = await asyncio.gather(*(one() for _ in range(30)))
    assert set(statuses) == {200}
    assert max(seen) <= 3
    assert pool.connections_opened <= 3


async def test_acme_transport_uses_the_pool_by_default(pebble: PebbleServer) -> None:
    async with AcmeTransport(pebble.directory_url, ca_bundle=pebble.ca_bundle) as transport:
        for _ in range(3):
            await transport.new_nonce()
        pool = transport._pool
        assert isinstance(pool, Http11Pool)
        assert pool.connections_opened == 1
        assert transport.request_count == 4  # the directory and three HEAD newNonce


async def test_tls_verification_failure_is_a_connect_error(pebble: PebbleServer) -> None:
    pool = _pool()  # the system store does not trust Pebble's test CA
    with pytest.raises(httpx.ConnectError):
        await _get(pool, pebble.directory_url)


async def test_an_untrusted_ca_is_a_permanent_connect_error_built_whole(
    pebble: PebbleServer,
) -> None:
    async with AcmeTransport(pebble.directory_url) as transport:  # Pebble's CA not trusted
        with pytest.raises(ConnectError, match="TLS certificate verification") as raised:
            await transport.directory()
    error = raised.value
    assert (error.kind, error.reached_ca, error.unknown_host) == (
        ErrorKind.PERMANENT,
        False,
        None,
    )
    assert "kind" in vars(error)  # given to the constructor, not the class's TRANSIENT
    assert transport.request_count == 1  # permanent: not retried


async def test_a_404_problem_names_the_request_it_answered(pebble: PebbleServer) -> None:
    """Pebble answers a renewalInfo GET for a serial it never issued with a 404 problem
    whose detail does not name the URL: the message says which request it was."""
    intermediate = x509.load_pem_x509_certificate(pebble.intermediate_pem().encode())
    key_id = intermediate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    cert_id = f"{_b64(key_id.value.digest)}.{_b64(bytes([1, 2, 3]))}"
    async with AcmeTransport(pebble.directory_url, ca_bundle=pebble.ca_bundle) as transport:
        directory = await transport.directory()
        url = f"{directory.renewal_info}/{cert_id}"
        with pytest.raises(AcmeProblem) as raised:
            await transport.get(url)
    problem = raised.value
    assert (problem.status_code, problem.request) == (404, f"GET {url}")
    assert str(problem).endswith(f" (GET {url})")
    assert url not in problem.detail


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# -- scripted answers --------------------------------------------------------------------


async def test_server_closing_an_idle_connection_is_retried_once_on_a_new_one() -> None:
    async def answer_once_then_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        writer.write(OK)  # no "Connection: close": the client keeps it
        await writer.drain()
        # close without a word before the next request; reading stops here

    server = ScriptedServer(answer_once_then_close)
    async with server:
        pool = _pool()
        async with httpx.AsyncClient(transport=pool, timeout=5) as client:
            assert (await client.get(server.url)).text == "ok"
            await asyncio.sleep(0.05)
            assert (await client.post(server.url, content=b"{}")).text == "ok"
    assert server.requests == 2  # never sent twice to a server that got it
    assert server.connections == 2


async def test_answer_cut_off_midway_is_an_error_not_a_retry() -> None:
    async def half_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            if server.requests == 1:
                writer.write(OK)
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
                await writer.drain()
                return

    server = ScriptedServer(half_answer)
    async with server:
        pool = _pool()
        async with httpx.AsyncClient(transport=pool, timeout=5) as client:
            await client.get(server.url)
            with pytest.raises(httpx.RemoteProtocolError, match="closed the connection mid-answer"):
                await client.get(server.url)
    assert server.requests == 2


async def test_a_connection_closed_before_any_answer_says_so() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)  # and close without a word

    server = ScriptedServer(hang_up)
    async with server:
        with pytest.raises(httpx.RemoteProtocolError, match="without answering"):
            await _get(_pool(), server.url)


async def test_chunked_and_close_delimited_bodies() -> None:
    async def odd_framing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\n\r\n"
        )
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        await writer.drain()

    server = ScriptedServer(odd_framing)
    async with server:
        pool = _pool()
        async with httpx.AsyncClient(transport=pool, timeout=5) as client:
            assert (await client.get(server.url)).content == b"abcdefg"
            assert (await client.get(server.url)).content == b"until the end"
            assert pool.open_connections == 0  # "Connection: close" was honoured


async def test_malformed_status_line_is_a_protocol_error() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 two hundred\r\n\r\n")
        await writer.drain()

    server = ScriptedServer(garbage)
    async with server:
        with pytest.raises(httpx.RemoteProtocolError):
            await _get(_pool(), server.url)


async def test_body_larger_than_max_body_is_refused() -> None:
    async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000)
        await writer.drain()

    server = ScriptedServer(big)
    async with server:
        pool = _pool(max_body=4096)
        with pytest.raises(ResponseTooLarge):
            await _get(pool, server.url)
        assert pool.open_connections == 0


async def test_silence_is_a_read_timeout_but_a_slow_trickle_is_not() -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        if server.requests == 1:
            await asyncio.sleep(10)  # never answers
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n")
        for byte in b"tricks":
            await asyncio.sleep(0.1)  # 0.6 s in all, each gap under the 0.3 s timeout
            writer.write(bytes([byte]))
            await writer.drain()

    server = ScriptedServer(slow)
    async with server:
        loop = asyncio.get_running_loop()
        async with httpx.AsyncClient(transport=_pool(), timeout=0.3) as client:
            started = loop.time()
            with pytest.raises(httpx.ReadTimeout):
                await client.get(server.url)
            assert 0.25 < loop.time() - started < 2.0
            assert (await client.get(server.url)).content == b"tricks"


async def test_waiting_for_a_connection_has_the_pool_timeout() -> None:
    release = asyncio.Event()

    async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        await release.wait()
        writer.write(OK)
        await writer.drain()

    server = ScriptedServer(held)
    async with server:
        pool = _pool(max_connections=1)
        timeout = httpx.Timeout(5.0, pool=0.2)
        async with httpx.AsyncClient(transport=pool, timeout=timeout) as client:
            first = asyncio.ensure_future(client.get(server.url))
            await asyncio.sleep(0.1)
            with pytest.raises(httpx.PoolTimeout):
                await client.get(server.url)
            release.set()
            assert (await first).text == "ok"


async def test_cancelled_request_drops_its_connection() -> None:
    async def forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            if server.requests == 1:
                await asyncio.sleep(10)
                return
            writer.write(OK)
            await writer.drain()

    server = ScriptedServer(forever)
    async with server:
        pool = _pool(max_connections=1)
        async with httpx.AsyncClient(transport=pool, timeout=5) as client:
            pending = asyncio.ensure_future(client.get(server.url))
            await asyncio.sleep(0.1)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
            # the slot is free again, and the answer can never be mixed up with the next
            assert (await client.get(server.url)).text == "ok"
    assert server.connections == 2


async def test_refused_connection_is_a_connect_error() -> None:
    async with ScriptedServer(lambda r, w: asyncio.sleep(0)) as server:
        url = server.url
    with pytest.raises(httpx.ConnectError):
        await _get(_pool(), url)


async def test_closed_pool_refuses_requests() -> None:
    pool = _pool()
    await pool.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await pool.handle_async_request(httpx.Request("GET", "http://127.0.0.1:9/"))


async def test_acme_transport_maps_an_oversized_answer_to_bad_server_response(
    pebble: PebbleServer,
) -> None:
    async with AcmeTransport(pebble.directory_url, ca_bundle=pebble.ca_bundle) as transport:
        assert transport._pool is not None
        transport._pool.max_body = 100  # the directory is larger
        with pytest.raises(BadServerResponse, match="larger than"):
            await transport.directory()


async def test_a_header_h11_refuses_is_a_local_protocol_error_and_nothing_is_sent() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(OK)
        await writer.drain()

    server = ScriptedServer(answer)
    async with server:
        pool = _pool()
        request = httpx.Request("GET", server.url, headers={"X-Bad": "line\r\nInjected: yes"})
        with pytest.raises(httpx.LocalProtocolError):
            await pool.handle_async_request(request)
        await pool.aclose()
    assert server.requests == 0
