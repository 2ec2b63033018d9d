"""The http-01 solvers: the built-in server and the webroot writer (RFC 8555 §8.3).

``Http01Server`` has two ways of serving a connection: under asyncio, event-loop callbacks
(an ``asyncio.Protocol`` per connection, no task); elsewhere (trio), a task per connection
over anyio streams. The server tests run against both (``serving`` parameter): the streams
way is forced under asyncio with the private ``_streams_only`` switch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import stat
from typing import TYPE_CHECKING, Any

import anyio
import h11
import httpx
import pytest
from waits import within

from acmecerts.errors import BadServerResponse, InvalidInput, UnsupportedChallenge
from acmecerts.protocol.challenges import key_authorization
from acmecerts.protocol.identifiers import parse_identifier
from acmecerts.solvers import (
    ChallengeTask,
    Http01Server,
    Http01Webroot,
    ListenError,
    Solver,
    WebrootError,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from anyio.abc import SocketStream

THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
#: How long a slow client keeps trickling header lines in (far beyond the server's timeout).
TRICKLE_SECONDS = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_task(
    name: str = "example.com", *, token: str | None = None, type: str = "http-01"
) -> ChallengeTask:
    token = token if token is not None else secrets.token_urlsafe(32)
    keyauth = f"{token}.{THUMBPRINT}"
    return ChallengeTask(
        type=type,
        identifier=parse_identifier(name),
        token=token,
        key_authorization=keyauth,
        url=f"https://ca.test/chall/{token[:8]}",
    )


def challenge_path(task: ChallengeTask) -> str:
    return f"/.well-known/acme-challenge/{task.token}"


@pytest.fixture(params=["callbacks", "streams"])
def serving(request: pytest.FixtureRequest) -> str:
    """How the server serves a connection: asyncio callbacks, or a task over anyio streams."""
    return str(request.param)


@pytest.fixture
def new_server(serving: str) -> Callable[..., Http01Server]:
    """Make an ``Http01Server`` on 127.0.0.1 (a free port) that serves the ``serving`` way."""

    def new(**options: Any) -> Http01Server:
        options = {"host": "127.0.0.1", "port": 0, **options}
        solver = Http01Server(**options)
        solver._streams_only = serving == "streams"
        return solver

    return new


@pytest.fixture
async def server(new_server: Callable[..., Http01Server]) -> AsyncIterator[Http01Server]:
    async with new_server() as solver:
        yield solver


def client_for(solver: Http01Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{solver.port}", trust_env=False)


async def exchange(
    stream: SocketStream, conn: h11.Connection, request: h11.Request
) -> tuple[h11.Response, bytes]:
    """Send one request with an h11 client connection and read the whole response."""
    await stream.send(conn.send(request) + conn.send(h11.EndOfMessage()))
    response: h11.Response | None = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive())
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert response is not None
            return response, body
        else:
            raise AssertionError(f"unexpected {event!r}")


async def read_until_eof(stream: SocketStream) -> bytes:
    data = b""
    while True:
        try:
            data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return data


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def get(target: str, *headers: tuple[str, str]) -> h11.Request:
    return h11.Request(method="GET", target=target, headers=[("Host", "example.com"), *headers])


# --- serving ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_serves_the_key_authorization_for_a_presented_token(server: Http01Server) -> None:
    task = make_task()
    await server.present(task)
    async with client_for(server) as client:
        response = await client.get(challenge_path(task), headers={"Host": "example.com"})
        head = await client.head(challenge_path(task))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.text == task.key_authorization
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len(task.key_authorization))


@pytest.mark.anyio
async def test_the_body_is_exactly_the_protocol_key_authorization(server: Http01Server) -> None:
    token = secrets.token_urlsafe(32)
    task = ChallengeTask(
        type="http-01",
        identifier=parse_identifier("192.0.2.7"),
        token=token,
        key_authorization=key_authorization(token, THUMBPRINT),
        url="https://ca.test/chall/1",
    )
    await server.present(task)
    async with client_for(server) as client:
        response = await client.get(challenge_path(task))
    assert response.content == f"{token}.{THUMBPRINT}".encode()


@pytest.mark.anyio
async def test_404_after_cleanup_for_unknown_tokens_and_other_paths(
    server: Http01Server,
) -> None:
    task = make_task()
    await server.present(task)
    await server.cleanup(task)
    await server.cleanup(task)  # idempotent
    async with client_for(server) as client:
        gone = await client.get(challenge_path(task))
        unknown = await client.get(challenge_path(make_task()))
        others = [
            await client.get(path)
            for path in ("/", "/.well-known/acme-challenge/", "/.well-known/other/x", "/../x")
        ]
    assert gone.status_code == 404
    assert unknown.status_code == 404
    assert [r.status_code for r in others] == [404, 404, 404, 404]


@pytest.mark.anyio
async def test_other_methods_on_the_challenge_path_are_not_allowed(server: Http01Server) -> None:
    task = make_task()
    await server.present(task)
    async with client_for(server) as client:
        post = await client.post(challenge_path(task), content=b"x" * 100)
        delete = await client.delete(challenge_path(task))
        still = await client.get(challenge_path(task))
    assert post.status_code == 405
    assert post.headers["allow"] == "GET, HEAD"
    assert delete.status_code == 405
    assert still.text == task.key_authorization


@pytest.mark.anyio
async def test_query_strings_and_absolute_form_targets_are_understood(
    server: Http01Server,
) -> None:
    task = make_task()
    await server.present(task)
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        conn = h11.Connection(h11.CLIENT)
        with_query = await exchange(stream, conn, get(challenge_path(task) + "?x=1"))
        conn.start_next_cycle()
        absolute = await exchange(stream, conn, get(f"http://example.com{challenge_path(task)}"))
    assert with_query[0].status_code == 200
    assert with_query[1] == task.key_authorization.encode()
    assert absolute[0].status_code == 200


@pytest.mark.anyio
async def test_cleanup_without_present_is_fine(server: Http01Server, tmp_path: Path) -> None:
    await server.cleanup(make_task())
    await server.cleanup(make_task(token="../../etc/passwd"))
    webroot = Http01Webroot(tmp_path)
    await webroot.cleanup(make_task())
    await webroot.cleanup(make_task(token="../../etc/passwd"))
    assert files_under(tmp_path) == []


@pytest.mark.anyio
async def test_many_orders_at_once(server: Http01Server) -> None:
    tasks = [make_task(f"host{i}.example.com") for i in range(200)]
    results: dict[str, tuple[int, str]] = {}

    async def present_and_fetch(client: httpx.AsyncClient, task: ChallengeTask) -> None:
        await server.present(task)
        response = await client.get(challenge_path(task))
        results[task.token] = (response.status_code, response.text)

    # Ten clients of twenty requests each: 200 requests in flight on 200 connections
    # (one client's pool would be the bottleneck, not the server).
    with within(60, "200 challenge responses fetched at once on 200 connections"):
        async with contextlib.AsyncExitStack() as stack, anyio.create_task_group() as tg:
            clients = [await stack.enter_async_context(client_for(server)) for _ in range(10)]
            for i, task in enumerate(tasks):
                tg.start_soon(present_and_fetch, clients[i % 10], task)
    assert results == {t.token: (200, t.key_authorization) for t in tasks}

    async with anyio.create_task_group() as tg:
        for task in tasks:
            tg.start_soon(server.cleanup, task)
    assert "tokens=0" in repr(server)


@pytest.mark.anyio
async def test_a_token_shared_by_two_orders_stays_until_both_cleaned_up(
    server: Http01Server,
) -> None:
    first = make_task()
    second = make_task(token=first.token)  # the CA reused one pending authorization
    await server.present(first)
    await server.present(second)
    async with client_for(server) as client:
        await server.cleanup(first)
        assert (await client.get(challenge_path(first))).status_code == 200
        await server.cleanup(second)
        assert (await client.get(challenge_path(first))).status_code == 404


@pytest.mark.anyio
async def test_keep_alive_serves_several_requests_on_one_connection(
    server: Http01Server,
) -> None:
    tasks = [make_task() for _ in range(3)]
    for task in tasks:
        await server.present(task)
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        conn = h11.Connection(h11.CLIENT)
        for task in [*tasks, tasks[0]]:
            response, body = await exchange(stream, conn, get(challenge_path(task)))
            assert response.status_code == 200
            assert body == task.key_authorization.encode()
            assert conn.our_state is h11.DONE
            conn.start_next_cycle()
        # Pipelined: two requests in one write, two answers in order.
        a, b = tasks[1], tasks[2]
        await stream.send(
            b"".join(
                f"GET {challenge_path(t)} HTTP/1.1\r\nHost: example.com\r\n\r\n".encode()
                for t in (a, b)
            )
        )
        received = b""
        with anyio.fail_after(2):
            while received.count(b"HTTP/1.1 200") < 2 or not received.endswith(
                b.key_authorization.encode()
            ):
                received += await stream.receive()
        assert received.index(a.key_authorization.encode()) < received.index(
            b.key_authorization.encode()
        )


@pytest.mark.anyio
async def test_connection_close_and_http_1_0_are_honoured(server: Http01Server) -> None:
    task = make_task()
    await server.present(task)
    for request in (
        f"GET {challenge_path(task)} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
        f"GET {challenge_path(task)} HTTP/1.0\r\n\r\n",
    ):
        async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
            await stream.send(request.encode())
            with anyio.fail_after(2):
                answer = await read_until_eof(stream)
        assert answer.startswith(b"HTTP/1.1 200")
        assert answer.endswith(task.key_authorization.encode())


# --- misbehaving clients -----------------------------------------------------------------


@pytest.mark.anyio
async def test_garbage_gets_400_and_the_connection_closed(server: Http01Server) -> None:
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        await stream.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n")
        with anyio.fail_after(2):
            answer = await read_until_eof(stream)
    assert answer.startswith(b"HTTP/1.1 400")


@pytest.mark.anyio
async def test_oversized_requests_are_refused(server: Http01Server) -> None:
    task = make_task()
    await server.present(task)
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        big_header = f"X-Big: {'a' * 20000}\r\n"
        await stream.send(
            f"GET {challenge_path(task)} HTTP/1.1\r\nHost: a\r\n{big_header}\r\n".encode()
        )
        with anyio.fail_after(2):
            head = await read_until_eof(stream)
    assert head.startswith(b"HTTP/1.1 431")
    async with client_for(server) as client:
        big_body = await client.request("GET", challenge_path(task), content=b"x" * 100_000)
        fine = await client.get(challenge_path(task))
    assert big_body.status_code == 413
    assert fine.status_code == 200


@pytest.mark.anyio
async def test_stalled_and_garbage_clients_do_not_block_a_good_request(
    server: Http01Server,
) -> None:
    task = make_task()
    await server.present(task)
    async with (
        await anyio.connect_tcp("127.0.0.1", server.port) as silent,
        await anyio.connect_tcp("127.0.0.1", server.port) as half,
        await anyio.connect_tcp("127.0.0.1", server.port) as junk,
    ):
        await half.send(b"GET /.well-known/acme-chall")  # ...and then nothing
        await junk.send(os.urandom(4096))
        with anyio.fail_after(1):
            async with client_for(server) as client:
                response = await client.get(challenge_path(task))
        assert silent is not None
    assert response.text == task.key_authorization


@pytest.mark.anyio
async def test_a_stalled_request_times_out_with_408(
    new_server: Callable[..., Http01Server],
) -> None:
    async with new_server(timeout=0.2) as server:
        async with await anyio.connect_tcp("127.0.0.1", server.port) as half:
            await half.send(b"GET / HTTP/1.1\r\nHost: a\r\n")
            with anyio.fail_after(2):
                answer = await read_until_eof(half)
        assert answer.startswith(b"HTTP/1.1 408")
        async with await anyio.connect_tcp("127.0.0.1", server.port) as idle:
            with anyio.fail_after(2):
                assert await read_until_eof(idle) == b""  # idle: closed silently


@pytest.mark.anyio
async def test_a_request_after_a_client_vanished_mid_request_still_works(
    server: Http01Server,
) -> None:
    task = make_task()
    await server.present(task)
    raw = socket.create_connection(("127.0.0.1", server.port))
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    raw.sendall(b"GET /x HTTP/1.1\r\n")
    raw.close()  # reset
    async with client_for(server) as client:
        assert (await client.get(challenge_path(task))).status_code == 200


@pytest.mark.anyio
async def test_a_request_in_many_small_writes_is_answered(server: Http01Server) -> None:
    task = make_task()
    await server.present(task)
    request = f"GET {challenge_path(task)} HTTP/1.1\r\nHost: a.example\r\n\r\n".encode()
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        for i in range(0, len(request), 3):  # TCP_NODELAY: one segment per write
            await stream.send(request[i : i + 3])
            await anyio.sleep(0.001)
        conn = h11.Connection(h11.CLIENT)
        conn.send(h11.Request(method="GET", target="/", headers=[("Host", "a")]))
        conn.send(h11.EndOfMessage())  # the client side of the state machine only
        received = b""
        with anyio.fail_after(2):
            while not received.endswith(task.key_authorization.encode()):
                received += await stream.receive()
    assert received.startswith(b"HTTP/1.1 200 ")


@pytest.mark.anyio
async def test_pipelined_requests_of_every_kind_are_answered_in_order(
    server: Http01Server,
) -> None:
    a, b = make_task(), make_task()
    await server.present(a)
    await server.present(b)
    requests = [
        ("GET", challenge_path(a), 200, a.key_authorization.encode()),
        ("HEAD", challenge_path(b), 200, b""),
        ("GET", "/nothing-here", 404, b"not found\n"),
        ("DELETE", challenge_path(a), 405, b"method not allowed\n"),
        ("GET", challenge_path(b), 200, b.key_authorization.encode()),
    ]
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        # All in one write, then the client's end of sending: every request is still
        # answered, then the server closes.
        await stream.send(
            b"".join(
                f"{method} {target} HTTP/1.1\r\nHost: a\r\n\r\n".encode()
                for method, target, _, _ in requests
            )
        )
        await stream.send_eof()
        with anyio.fail_after(2):
            received = await read_until_eof(stream)
    conn = h11.Connection(h11.CLIENT)
    conn.receive_data(received)
    conn.receive_data(b"")
    for method, target, status, body in requests:
        conn.send(h11.Request(method=method, target=target, headers=[("Host", "a")]))
        conn.send(h11.EndOfMessage())
        response = conn.next_event()
        assert isinstance(response, h11.Response)
        assert response.status_code == status, (method, target)
        data = b""
        while not isinstance(event := conn.next_event(), h11.EndOfMessage):
            assert isinstance(event, h11.Data)
            data += event.data
        assert data == body, (method, target)
        conn.start_next_cycle()
    assert isinstance(conn.next_event(), h11.ConnectionClosed)


@pytest.mark.anyio
async def test_the_head_size_limit_holds_however_the_head_arrives(server: Http01Server) -> None:
    task = make_task()
    await server.present(task)
    request = f"GET {challenge_path(task)} HTTP/1.1\r\nHost: a\r\n"
    big = f"X-Big: {'a' * 9000}\r\n"  # more than max_request_size (8192)
    fair = f"X-Fair: {'a' * 6000}\r\n"
    # The oversize head in one write, and in small pieces.
    for chunk in (len(request) + len(big) + 2, 512):
        async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
            data = f"{request}{big}\r\n".encode()
            with contextlib.suppress(anyio.BrokenResourceError):
                for i in range(0, len(data), chunk):
                    await stream.send(data[i : i + chunk])
            with anyio.fail_after(2):
                answer = await read_until_eof(stream)
        assert answer.startswith(b"HTTP/1.1 431"), chunk
        assert task.key_authorization.encode() not in answer
    # A long but acceptable head is answered.
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        await stream.send(f"{request}{fair}Connection: close\r\n\r\n".encode())
        with anyio.fail_after(2):
            answer = await read_until_eof(stream)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(task.key_authorization.encode())


@pytest.mark.anyio
async def test_a_kept_alive_connection_is_closed_when_idle_too_long(
    new_server: Callable[..., Http01Server],
) -> None:
    task = make_task()
    async with new_server(timeout=0.3) as server:
        await server.present(task)
        async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
            conn = h11.Connection(h11.CLIENT)
            for _ in range(2):  # the deadline starts again after each answer
                await anyio.sleep(0.2)
                response, body = await exchange(stream, conn, get(challenge_path(task)))
                assert response.status_code == 200
                assert body == task.key_authorization.encode()
                conn.start_next_cycle()
            started = anyio.current_time()
            with anyio.fail_after(2):
                assert await read_until_eof(stream) == b""  # closed without a 408
            assert 0.2 < anyio.current_time() - started < 1.5


@pytest.mark.anyio
async def test_a_slowloris_client_is_cut_off_at_the_deadline(
    new_server: Callable[..., Http01Server],
) -> None:
    """Trickling bytes does not extend the deadline: the request must be complete in time."""
    answer = b""

    async def read(stream: SocketStream) -> None:
        nonlocal answer
        answer = await read_until_eof(stream)

    async with (
        new_server(timeout=0.3) as server,
        await anyio.connect_tcp("127.0.0.1", server.port) as stream,
    ):
        started = anyio.current_time()
        with within(60, "the server to answer a request that trickles in"):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read, stream)
                await stream.send(b"GET / HTTP/1.1\r\n")
                # One header line every 50 ms, until the server answers (or for 20 s: a
                # timeout per line instead of per request would keep it waiting so long).
                while not answer and anyio.current_time() - started < TRICKLE_SECONDS:
                    await anyio.sleep(0.05)
                    with contextlib.suppress(anyio.BrokenResourceError):
                        await stream.send(b"X-Slow: 1\r\n")
        elapsed = anyio.current_time() - started
    assert answer.startswith(b"HTTP/1.1 408")
    assert elapsed < TRICKLE_SECONDS / 2  # the 0.3 s timeout, not the trickle, ended it


@pytest.mark.anyio
async def test_the_last_answer_on_a_connection_says_it_closes(server: Http01Server) -> None:
    task = make_task()
    await server.present(task)
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        conn = h11.Connection(h11.CLIENT)
        for n in range(1, 101):
            response, _ = await exchange(stream, conn, get(challenge_path(task)))
            assert response.status_code == 200
            closing = (b"connection", b"close") in response.headers
            assert closing == (n == 100), n
            if not closing:
                conn.start_next_cycle()
        assert conn.our_state is h11.MUST_CLOSE
        with anyio.fail_after(2):
            assert await read_until_eof(stream) == b""


@pytest.mark.anyio
async def test_a_client_waiting_for_100_continue_is_answered_at_once(
    server: Http01Server,
) -> None:
    task = make_task()
    await server.present(task)
    async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
        await stream.send(
            f"GET {challenge_path(task)} HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
            "Expect: 100-continue\r\n\r\n".encode()
        )
        with anyio.fail_after(2):
            answer = await read_until_eof(stream)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(task.key_authorization.encode())


@pytest.mark.anyio
async def test_hostile_clients_are_logged_quietly(
    server: Http01Server, caplog: pytest.LogCaptureFixture
) -> None:
    """Resets, garbage and broken pipes end a connection; nothing is logged above debug."""
    task = make_task()
    await server.present(task)
    caplog.set_level(logging.DEBUG)
    for payload in (os.urandom(3000), b"GET / HTTP/1.1\r\n", get_raw(task) * 20):
        raw = socket.create_connection(("127.0.0.1", server.port))
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        raw.sendall(payload)
        await anyio.sleep(0.02)
        raw.close()  # reset, maybe before the answers were read
    async with client_for(server) as client:
        assert (await client.get(challenge_path(task))).status_code == 200
    await anyio.sleep(0.05)
    loud = [r for r in caplog.records if r.levelno > logging.INFO]
    assert loud == []


def get_raw(task: ChallengeTask) -> bytes:
    return f"GET {challenge_path(task)} HTTP/1.1\r\nHost: a\r\n\r\n".encode()


# --- lifecycle ---------------------------------------------------------------------------


async def assert_port_closed(port: int) -> None:
    with pytest.raises(OSError, match="connection attempts failed"):
        await anyio.connect_tcp("127.0.0.1", port)


@pytest.mark.anyio
async def test_the_port_is_closed_after_the_block(
    new_server: Callable[..., Http01Server],
) -> None:
    async with new_server() as server:
        assert server.serving
        port = server.port
        assert port != 0
        assert server.host == "127.0.0.1"
        kept_open = await anyio.connect_tcp("127.0.0.1", port)
    async with kept_open:
        with anyio.fail_after(2):
            assert await read_until_eof(kept_open) == b""  # open connections are closed too
    assert not server.serving
    await assert_port_closed(port)


@pytest.mark.anyio
async def test_aclose_closes_every_connection_whatever_its_state(
    new_server: Callable[..., Http01Server],
) -> None:
    task = make_task()
    server = new_server()
    await server.present(task)
    tasks_before = asyncio.all_tasks()
    idle = await anyio.connect_tcp("127.0.0.1", server.port)
    half = await anyio.connect_tcp("127.0.0.1", server.port)
    kept = await anyio.connect_tcp("127.0.0.1", server.port)
    try:
        await half.send(b"GET / HTTP/1.1\r\nHost: a\r\n")
        response, _ = await exchange(kept, h11.Connection(h11.CLIENT), get(challenge_path(task)))
        assert response.status_code == 200
        with anyio.fail_after(2):
            await server.aclose()
        for stream in (idle, half, kept):
            with anyio.fail_after(2):
                assert await read_until_eof(stream) == b""
    finally:
        for stream in (idle, half, kept):
            await stream.aclose()
    assert not server.serving
    await assert_port_closed(server.port)
    await anyio.sleep(0.01)
    assert asyncio.all_tasks() <= tasks_before  # nothing left running


@pytest.mark.anyio
async def test_under_asyncio_connections_are_served_without_a_task_each(
    server: Http01Server, serving: str
) -> None:
    task = make_task()
    await server.present(task)
    before = len(asyncio.all_tasks())
    streams = [await anyio.connect_tcp("127.0.0.1", server.port) for _ in range(5)]
    try:
        for stream in streams:
            await stream.send(b"GET / HTTP/1.1\r\n")
        await anyio.sleep(0.1)
        during = len(asyncio.all_tasks())
        async with client_for(server) as client:
            assert (await client.get(challenge_path(task))).status_code == 200
    finally:
        for stream in streams:
            await stream.aclose()
    if serving == "callbacks":
        assert during == before
    else:
        assert during >= before + 5


@pytest.mark.anyio
async def test_the_connection_limit_holds_both_ways(
    new_server: Callable[..., Http01Server],
) -> None:
    task = make_task()
    async with new_server(max_connections=2) as server:
        await server.present(task)
        first = await anyio.connect_tcp("127.0.0.1", server.port)
        second = await anyio.connect_tcp("127.0.0.1", server.port)
        try:
            await anyio.sleep(0.1)
            async with await anyio.connect_tcp("127.0.0.1", server.port) as third:
                await third.send(get_raw(task))
                with anyio.fail_after(2):
                    assert await read_until_eof(third) == b""
        finally:
            await first.aclose()
            await second.aclose()
        await anyio.sleep(0.1)
        async with client_for(server) as client:
            assert (await client.get(challenge_path(task))).text == task.key_authorization


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        return False
    return True


@pytest.mark.anyio
@pytest.mark.parametrize(
    "host",
    [
        # the only case that needs an IPv6 loopback on the machine
        pytest.param("::1", marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no ::1")),
        "localhost",  # every address localhost resolves to (127.0.0.1, and ::1 if present)
    ],
)
async def test_ipv6_and_both_loopbacks(new_server: Callable[..., Http01Server], host: str) -> None:
    task = make_task()
    async with new_server(host=host) as server:
        await server.present(task)
        addresses = {
            info[4][0]
            for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            if info[0] in (socket.AF_INET, socket.AF_INET6)
        }
        for address in addresses:
            async with await anyio.connect_tcp(address, server.port) as stream:
                await stream.send(get_raw(task)[:-2] + b"Connection: close\r\n\r\n")
                with anyio.fail_after(2):
                    answer = await read_until_eof(stream)
            assert answer.endswith(task.key_authorization.encode()), address


@pytest.mark.anyio
async def test_cancelling_the_block_stops_the_server(
    new_server: Callable[..., Http01Server],
) -> None:
    port = 0
    with anyio.move_on_after(0.1) as scope:
        async with new_server() as server:
            port = server.port
            await anyio.sleep(10)
    assert scope.cancelled_caught
    await assert_port_closed(port)


@pytest.mark.anyio
async def test_cleanup_works_in_a_cancelled_scope(server: Http01Server, tmp_path: Path) -> None:
    webroot = Http01Webroot(tmp_path)
    task = make_task()
    await server.present(task)
    await webroot.present(task)
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(1)  # cancelled, as in a finally block after cancellation
        finally:
            await server.cleanup(task)
            await webroot.cleanup(task)
    assert not webroot.path_for(task.token).exists()
    async with client_for(server) as client:
        assert (await client.get(challenge_path(task))).status_code == 404


@pytest.mark.anyio
async def test_an_error_in_the_block_propagates_unwrapped() -> None:
    with pytest.raises(KeyError):
        async with Http01Server(host="127.0.0.1", port=0):
            raise KeyError("boom")


@pytest.mark.anyio
async def test_present_starts_an_unstarted_server_once(
    new_server: Callable[..., Http01Server],
) -> None:
    server = new_server()
    assert not server.serving
    tasks = [make_task() for _ in range(20)]
    try:
        async with anyio.create_task_group() as tg:
            for task in tasks:
                tg.start_soon(server.present, task)
        assert server.serving
        async with client_for(server) as client:
            for task in tasks:
                assert (await client.get(challenge_path(task))).text == task.key_authorization
    finally:
        await server.aclose()
    await server.aclose()  # idempotent
    assert not server.serving
    await assert_port_closed(server.port)


@pytest.mark.anyio
async def test_start_and_aclose_by_hand_and_restart(
    new_server: Callable[..., Http01Server],
) -> None:
    server = new_server()
    task = make_task()
    await server.present(task)
    await server.start()  # already serving: no-op
    first_port = server.port
    await server.aclose()
    await assert_port_closed(first_port)
    await server.start()
    try:
        async with client_for(server) as client:
            response = await client.get(challenge_path(task))
        assert response.text == task.key_authorization  # tokens survive a restart
    finally:
        await server.aclose()


@pytest.mark.anyio
async def test_a_port_in_use_is_a_clear_listen_error(
    new_server: Callable[..., Http01Server],
) -> None:
    async with new_server() as first:
        second = new_server(port=first.port)
        with pytest.raises(ListenError, match=rf"cannot listen on 127\.0\.0\.1:{first.port}: "):
            async with second:
                pass
        with pytest.raises(InvalidInput, match="cannot listen"):
            await second.present(make_task())
        assert not second.serving


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(InvalidInput):
        Http01Server(port=70000)
    with pytest.raises(InvalidInput):
        Http01Server(timeout=0)


# --- what the solvers accept ----------------------------------------------------------------


@pytest.mark.anyio
async def test_wildcards_and_other_challenge_types_are_refused(tmp_path: Path) -> None:
    for solver in (Http01Server(host="127.0.0.1", port=0), Http01Webroot(tmp_path)):
        assert isinstance(solver, Solver)
        assert solver.challenge_type == "http-01"
        assert solver.supports(parse_identifier("example.com"))
        assert solver.supports(parse_identifier("2001:db8::1"))
        assert not solver.supports(parse_identifier("*.example.com"))
        with pytest.raises(UnsupportedChallenge, match="dns-01"):
            await solver.present(make_task("*.example.com"))
        with pytest.raises(UnsupportedChallenge):
            await solver.present(make_task(type="dns-01"))
    assert files_under(tmp_path) == []


@pytest.mark.anyio
async def test_a_hostile_token_is_refused_by_the_server() -> None:
    server = Http01Server(host="127.0.0.1", port=0)
    with pytest.raises(BadServerResponse):
        await server.present(make_task(token="../../etc/passwd"))
    assert not server.serving


# --- webroot -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_webroot_writes_the_challenge_file_and_removes_it(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    webroot = Http01Webroot(root)
    task = make_task()
    old_umask = os.umask(0o077)  # the files must still be readable by the web server
    try:
        await webroot.present(task)
    finally:
        os.umask(old_umask)
    path = root / ".well-known" / "acme-challenge" / task.token
    assert webroot.path_for(task.token) == path
    assert path.read_text() == task.key_authorization
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE((root / ".well-known").stat().st_mode) == 0o755
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert [p.name for p in path.parent.iterdir()] == [task.token]  # no temp file left

    await webroot.present(task)  # presenting again rewrites in place...
    await webroot.cleanup(task)
    assert path.exists()  # ...and needs its own cleanup
    await webroot.cleanup(task)
    assert not path.exists()
    await webroot.cleanup(task)  # idempotent, missing file is fine
    assert not path.exists()
    assert path.parent.is_dir()


@pytest.mark.anyio
async def test_webroot_keeps_a_shared_token_until_the_last_cleanup(tmp_path: Path) -> None:
    webroot = Http01Webroot(tmp_path)
    first = make_task("a.example.com")
    second = make_task("a.example.com", token=first.token)
    await webroot.present(first)
    await webroot.present(second)
    await webroot.cleanup(first)
    assert webroot.path_for(first.token).read_text() == first.key_authorization
    await webroot.cleanup(second)
    assert not webroot.path_for(first.token).exists()


@pytest.mark.anyio
async def test_webroot_refuses_a_hostile_token_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "srv" / "www"
    root.mkdir(parents=True)
    webroot = Http01Webroot(root)
    for token in ("../../etc/passwd", "../../../escape-me-0123456789", "a/b" * 8, ""):
        with pytest.raises(BadServerResponse):
            await webroot.present(make_task(token=token))
        await webroot.cleanup(make_task(token=token))
    assert files_under(tmp_path) == ["srv", "srv/www"]


@pytest.mark.anyio
async def test_webroot_must_exist(tmp_path: Path) -> None:
    webroot = Http01Webroot(tmp_path / "missing")
    with pytest.raises(WebrootError, match="does not exist"):
        await webroot.present(make_task())
    assert not (tmp_path / "missing").exists()
