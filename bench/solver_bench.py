"""CPU cost of answering http-01 validation requests with ``Http01Server``.

    python bench/solver_bench.py                      # 2,000 requests per variant, 3 rounds
    python bench/solver_bench.py --requests 5000 --concurrency 20 --rounds 5
    python bench/solver_bench.py --server responder   # bench/clients' minimal responder

The server runs in this process (``Http01Server`` on 127.0.0.1, a free port, 200 tokens
presented); the requests come from a child process (this same script with ``--client``), so
the CPU figure is the server's alone: ``time.process_time()`` of this process over the
round, divided by the requests answered. Two variants:

* ``new-connection``: one TCP connection per request, ``Connection: close``, as Pebble's
  VA (and Let's Encrypt's) validate: connect, one GET, read to EOF;
* ``keep-alive``: ``--concurrency`` connections, each sending its share of the requests
  one after the other.

Every answer is checked (status 200, body = the key authorization). Each variant is run
``--rounds`` times after a warm-up round; the median round is printed, with requests/s
(wall clock, so it depends on how busy the machine is, unlike the CPU figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

PREFIX = "/.well-known/acme-challenge/"
THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"


# --- the client (child process) -------------------------------------------------------------


def _request(token: str, index: int, *, close: bool) -> bytes:
    # Roughly what Go's net/http sends for the VA (Pebble, Boulder).
    return (
        f"GET {PREFIX}{token} HTTP/1.1\r\nHost: host{index}.example.com\r\n"
        "User-Agent: bench-va/1.0\r\nAccept: */*\r\nAccept-Encoding: gzip\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    ).encode()


def _check(answer: bytes, expected: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200 ") or body != expected:
        raise SystemExit(f"unexpected answer: {answer[:300]!r}")


async def _read_response(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """One response (head and body) and whether the server announced it closes."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    close = False
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            close = value.strip().lower() == b"close"
    return head + await reader.readexactly(length), close


async def _new_connections(port: int, tokens: list[str], jobs: list[int]) -> None:
    while jobs:
        index = jobs.pop()
        token = tokens[index % len(tokens)]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_request(token, index, close=True))
        answer = await reader.read()  # to EOF: the server closes
        writer.close()
        await writer.wait_closed()
        _check(answer, f"{token}.{THUMBPRINT}".encode())


async def _keep_alive(port: int, tokens: list[str], count: int, offset: int) -> None:
    """``count`` requests one after the other, on one connection as long as the server allows.

    A server may close a kept-alive connection (after ``Connection: close``, or, less
    politely, with a reset after answering): the client then reconnects, and resends the
    request that was not answered.
    """
    connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    n = 0
    while n < count:
        if connection is None:
            connection = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = connection
        index = offset + n
        token = tokens[index % len(tokens)]
        try:
            writer.write(_request(token, index, close=False))
            answer, close = await _read_response(reader)
        except (ConnectionError, asyncio.IncompleteReadError):
            writer.close()
            connection = None
            continue
        _check(answer, f"{token}.{THUMBPRINT}".encode())
        n += 1
        if close:
            writer.close()
            connection = None
    if connection is not None:
        connection[1].close()
        await connection[1].wait_closed()


async def _client_round(
    port: int, tokens: list[str], mode: str, requests: int, concurrency: int
) -> None:
    if mode == "new-connection":
        jobs = list(range(requests))
        await asyncio.gather(*(_new_connections(port, tokens, jobs) for _ in range(concurrency)))
    else:
        share, extra = divmod(requests, concurrency)
        counts = [share + (1 if i < extra else 0) for i in range(concurrency)]
        offsets = [sum(counts[:i]) for i in range(concurrency)]
        await asyncio.gather(
            *(_keep_alive(port, tokens, c, o) for c, o in zip(counts, offsets, strict=True) if c)
        )


def client_main(port: int) -> None:
    """Read ``{"mode", "requests", "concurrency", "tokens"}`` lines, run each, answer a line."""
    for line in sys.stdin:
        job: dict[str, Any] = json.loads(line)
        start = time.perf_counter()
        asyncio.run(
            _client_round(port, job["tokens"], job["mode"], job["requests"], job["concurrency"])
        )
        print(json.dumps({"wall": time.perf_counter() - start}), flush=True)


# --- the server (this process) --------------------------------------------------------------


async def _run_rounds(port: int, tokens: list[str], args: argparse.Namespace) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--client",
        str(port),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None
    assert child.stdout is not None

    async def one_round(mode: str, requests: int) -> tuple[float, float]:
        assert child.stdin is not None
        assert child.stdout is not None
        job = {
            "mode": mode,
            "requests": requests,
            "concurrency": args.concurrency,
            "tokens": tokens,
        }
        child.stdin.write(json.dumps(job).encode() + b"\n")
        await child.stdin.drain()
        cpu0 = time.process_time()
        line = await child.stdout.readline()
        cpu = time.process_time() - cpu0
        if not line:
            raise SystemExit("the client died (see its error above)")
        return cpu, json.loads(line)["wall"]

    try:
        for mode in ("new-connection", "keep-alive"):
            await one_round(mode, min(args.requests, 500))  # warm-up
            results = [await one_round(mode, args.requests) for _ in range(args.rounds)]
            cpus = sorted(cpu for cpu, _ in results)
            walls = sorted(wall for _, wall in results)
            cpu_us = statistics.median(cpus) / args.requests * 1e6
            rate = args.requests / statistics.median(walls)
            spread = f"{cpus[0] / args.requests * 1e6:.0f}-{cpus[-1] / args.requests * 1e6:.0f}"
            print(
                f"{mode:>15}: {cpu_us:7.0f} µs CPU per request (rounds {spread})"
                f"  {rate:8.0f} requests/s"
                + (f"  ({args.concurrency} connections)" if mode == "keep-alive" else ""),
                flush=True,
            )
    finally:
        child.stdin.close()
        await child.wait()


async def bench_http01_server(args: argparse.Namespace) -> None:
    from acmecerts.protocol.identifiers import parse_identifier
    from acmecerts.solvers import ChallengeTask, Http01Server

    tokens = [secrets.token_urlsafe(32) for _ in range(args.tokens)]
    async with Http01Server(host="127.0.0.1", port=0) as server:
        for i, token in enumerate(tokens):
            await server.present(
                ChallengeTask(
                    type="http-01",
                    identifier=parse_identifier(f"host{i}.example.com"),
                    token=token,
                    key_authorization=f"{token}.{THUMBPRINT}",
                    url=f"https://ca.test/chall/{i}",
                )
            )
        await _run_rounds(server.port, tokens, args)


async def bench_responder(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).parent / "clients"))
    from _common import ChallengeResponder  # type: ignore[import-not-found]

    tokens = [secrets.token_urlsafe(32) for _ in range(args.tokens)]
    responder = ChallengeResponder(0)
    responder.tokens.update({token: f"{token}.{THUMBPRINT}" for token in tokens})
    await responder.start()
    try:
        port = responder._server.sockets[0].getsockname()[1]
        await _run_rounds(port, tokens, args)
    finally:
        await responder.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument("--concurrency", type=int, default=10, help="requests in flight")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per variant")
    parser.add_argument("--tokens", type=int, default=200, help="tokens presented")
    parser.add_argument(
        "--server",
        choices=("http01", "responder"),
        default="http01",
        help="Http01Server, or bench/clients' minimal ChallengeResponder for comparison",
    )
    parser.add_argument("--client", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client is not None:
        client_main(args.client)
        return
    print(
        f"{args.server}: {args.requests} requests per round, {args.concurrency} in flight,"
        f" {args.tokens} tokens, median of {args.rounds} rounds (python {sys.version.split()[0]})",
        flush=True,
    )
    runner = bench_http01_server if args.server == "http01" else bench_responder
    asyncio.run(runner(args))


if __name__ == "__main__":
    main()
