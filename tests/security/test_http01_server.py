"""The http-01 server answers the tokens it holds, exactly, and nothing else.

``tests/solvers/test_solvers_http01.py`` covers the basics (404 for unknown tokens and other paths,
405 for other methods, 413/431 for large requests, 408 for slow ones); this file adds the
hostile cases: near-miss and traversal paths, no listing, no reflection of the request,
and the connection limit.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from acmecerts import ChallengeTask, Http01Server
from acmecerts.protocol.identifiers import parse_identifier

pytestmark = pytest.mark.anyio

THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
PREFIX = "/.well-known/acme-challenge/"


def make_task(token: str | None = None) -> ChallengeTask:
    token = token or secrets.token_urlsafe(32)
    return ChallengeTask(
        type="http-01",
        identifier=parse_identifier("example.com"),
        token=token,
        key_authorization=f"{token}.{THUMBPRINT}",
        url="https://ca.test/chall/1",
    )


@pytest.fixture
async def server() -> AsyncIterator[Http01Server]:
    async with Http01Server(host="127.0.0.1", port=0, timeout=2.0) as solver:
        yield solver


def get(target: str) -> bytes:
    """One raw ``GET target`` that asks the server to close the connection afterwards."""
    return f"GET {target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode()


async def raw_request(port: int, request: bytes) -> bytes:
    """Send raw bytes, return everything the server sends until it closes."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        data = b""
        with anyio.fail_after(5):
            while True:
                try:
                    data += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return data


async def test_only_the_exact_token_is_answered(server: Http01Server) -> None:
    task = make_task()
    await server.present(task)
    token = task.token
    near_misses = [
        PREFIX + token[:-1],
        PREFIX + token + "x",
        PREFIX + token + "/",
        PREFIX + token.swapcase(),
        PREFIX + "%" + f"{ord(token[0]):02X}" + token[1:],
        PREFIX + "../acme-challenge/" + token,
        PREFIX + "./" + token,
        "/.well-known/acme-challenge//" + token,
        "/.well-known//acme-challenge/" + token,
        "/.WELL-KNOWN/acme-challenge/" + token,
        "/x" + PREFIX + token,
        PREFIX + token + "%00",
        PREFIX + token + ";x",
    ]
    # raw requests: an HTTP client would normalise the dot segments away
    exact = await raw_request(server.port, get(PREFIX + token))
    assert exact.startswith(b"HTTP/1.1 200")
    assert exact.endswith(task.key_authorization.encode())
    for path in near_misses:
        answer = await raw_request(server.port, get(path))
        assert answer.startswith(b"HTTP/1.1 404"), path
        assert task.key_authorization.encode() not in answer, path
        assert token.encode() not in answer, path


async def test_nothing_is_listed_and_nothing_is_reflected(server: Http01Server) -> None:
    tasks = [make_task() for _ in range(3)]
    for task in tasks:
        await server.present(task)
    marker = "reflected-" + secrets.token_hex(4)
    paths = [
        "/",
        "/.well-known/",
        "/.well-known/acme-challenge",
        PREFIX,
        PREFIX + "*",
        PREFIX + "?list",
        f"/{marker}",
        f"{PREFIX}{marker}",
        f"{PREFIX}?{marker}",
    ]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
        answers = [await client.get(path, headers={"X-Echo": marker}) for path in paths]
        options = await client.request("OPTIONS", "*")
        trace = await client.request("TRACE", PREFIX + tasks[0].token)
    for answer in answers:
        assert answer.status_code == 404
        for task in tasks:
            assert task.token not in answer.text
        assert marker not in answer.text
        assert marker not in str(answer.headers)
    assert options.status_code == 404
    assert trace.status_code == 405
    assert "X-Echo" not in trace.text
    assert tasks[0].key_authorization not in trace.text


async def test_a_cleaned_up_token_is_gone_for_every_holder(server: Http01Server) -> None:
    task = make_task()
    await server.present(task)
    await server.cleanup(task)
    answer = await raw_request(server.port, get(PREFIX + task.token))
    assert answer.startswith(b"HTTP/1.1 404")
    assert task.key_authorization.encode() not in answer


async def test_the_connection_limit_holds() -> None:
    task = make_task()
    async with Http01Server(host="127.0.0.1", port=0, max_connections=2, timeout=5.0) as server:
        await server.present(task)
        first = await anyio.connect_tcp("127.0.0.1", server.port)
        second = await anyio.connect_tcp("127.0.0.1", server.port)
        try:
            await anyio.sleep(0.1)  # let the server accept both
            refused = await raw_request(server.port, get(PREFIX + task.token))
            assert refused == b""  # closed at once, nothing served
        finally:
            await first.aclose()
            await second.aclose()
        await anyio.sleep(0.1)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            served = await client.get(PREFIX + task.token)
        assert served.text == task.key_authorization


async def test_many_pipelined_requests_on_one_connection_are_bounded(
    server: Http01Server,
) -> None:
    """A client cannot keep one connection busy forever: 100 requests, then it is closed."""
    task = make_task()
    await server.present(task)
    one = f"GET {PREFIX}{task.token} HTTP/1.1\r\nHost: a\r\n\r\n".encode()
    answer = await raw_request(server.port, one * 150)
    assert answer.count(b"HTTP/1.1 200") == 100
