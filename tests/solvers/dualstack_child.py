"""Listeners on ``::`` probed from both loopbacks (run as a script, not collected).

    unshare --net sh -c 'ip link set lo up && exec python tests/solvers/dualstack_child.py'

Binding ``::`` binds every address of the host, so tests/solvers/test_solvers_bind.py runs this
only inside a fresh network namespace, whose one interface is its own loopback: nothing
is reachable from outside, whatever is bound. Each case starts a server, connects to it
from ``127.0.0.1`` and from ``::1``, and prints one JSON line: the sockets bound (family,
address, ``IPV6_V6ONLY``) and, per loopback, the answer's first line and body. The test
asserts on them.

Cases: ``cli-default`` (the server ``acmecerts issue`` builds from its default options,
on port 80), ``library-default`` (``Http01Server()`` on a free port),
``no-dual-stack`` (the same where the system refuses dual-stack sockets, simulated),
``tls-alpn-default`` (``TlsAlpn01Server()``, sockets only), ``with-ipv4`` (``["::",
"127.0.0.1"]``: ``::`` binds IPv6 only, beside the IPv4 address).
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from typing import Any

import anyio
import anyio.abc

from acmecerts.cli._args import ChallengeOptions
from acmecerts.cli._solvers import plan_challenge
from acmecerts.protocol.challenges import key_authorization
from acmecerts.protocol.identifiers import parse_identifier
from acmecerts.solvers import ChallengeTask, Http01Server, TlsAlpn01Server
from acmecerts.solvers._listener import _ListeningServer

TOKEN = "dual-stack_token-0123456789abcdefghijklmno"
THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"


def sockets(server: _ListeningServer) -> list[dict[str, Any]]:
    running = server._running
    assert running is not None
    found = []
    for listener in running.listener.listeners:
        assert isinstance(listener, anyio.abc.SocketListener)
        sock = listener.extra(anyio.abc.SocketAttribute.raw_socket)  # noqa: S610
        v6only = (
            sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
            if sock.family == socket.AF_INET6
            else None
        )
        found.append(
            {"family": sock.family.name, "address": sock.getsockname()[0], "v6only": v6only}
        )
    return found


async def fetch(address: str, port: int) -> dict[str, str]:
    request = (
        f"GET /.well-known/acme-challenge/{TOKEN} HTTP/1.1\r\n"
        "Host: test\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        with anyio.fail_after(5):
            async with await anyio.connect_tcp(address, port) as stream:
                await stream.send(request)
                answer = b""
                while True:
                    try:
                        answer += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
    except OSError as exc:
        return {"error": str(exc)}
    head, _, body = answer.partition(b"\r\n\r\n")
    return {"status": head.split(b"\r\n")[0].decode(), "body": body.decode()}


async def probe_http(server: Http01Server) -> dict[str, Any]:
    task = ChallengeTask(
        type="http-01",
        identifier=parse_identifier("127.0.0.1"),
        token=TOKEN,
        key_authorization=key_authorization(TOKEN, THUMBPRINT),
        url="https://ca.test/chall/1",
    )
    async with server:
        await server.present(task)
        answers = {address: await fetch(address, server.port) for address in ("127.0.0.1", "::1")}
        return {"sockets": sockets(server), "answers": answers, "expected": task.key_authorization}


async def case(name: str) -> dict[str, Any]:
    if name == "cli-default":
        plan = plan_challenge(ChallengeOptions(), [parse_identifier("127.0.0.1")])
        assert isinstance(plan.solver, Http01Server)
        return {"listen": plan.listen, **await probe_http(plan.solver)}
    if name == "library-default":
        return await probe_http(Http01Server(port=0))
    if name == "no-dual-stack":
        real = socket.has_dualstack_ipv6
        socket.has_dualstack_ipv6 = lambda: False  # a system that refuses dual-stack sockets
        try:
            return await probe_http(Http01Server(port=0))
        finally:
            socket.has_dualstack_ipv6 = real
    if name == "with-ipv4":
        return await probe_http(Http01Server(host=["::", "127.0.0.1"], port=0))
    if name == "tls-alpn-default":
        async with TlsAlpn01Server(port=0) as tls:
            return {"sockets": sockets(tls)}
    raise SystemExit(f"unknown case {name!r}")


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    for name in sys.argv[1:]:
        print(json.dumps({"case": name, **anyio.run(case, name)}), flush=True)


if __name__ == "__main__":
    main()
