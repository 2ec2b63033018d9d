"""Where the challenge servers listen: one port, several addresses, and dual-stack ``::``.

Everything here binds and connects on loopback only. ``::`` (the default of the servers
and of the CLI) binds every address of the host, so its cases run in
tests/solvers/dualstack_child.py inside a fresh network namespace (``unshare --net``), whose one
interface is its own loopback; there, connections from ``127.0.0.1`` and from ``::1``
reach the one server. Loopback tests in this namespace list both loopbacks explicitly
(``host=["127.0.0.1", "::1"]``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from acmecerts.cli._args import ChallengeOptions
from acmecerts.cli._solvers import parse_listen, plan_challenge
from acmecerts.errors import InvalidInput
from acmecerts.protocol.challenges import key_authorization
from acmecerts.protocol.identifiers import parse_identifier
from acmecerts.solvers import ChallengeTask, Http01Server, ListenError, TlsAlpn01Server

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "dualstack_child.py"
CASES = ("cli-default", "library-default", "no-dual-stack", "with-ipv4", "tls-alpn-default")
LOOPBACKS = ["127.0.0.1", "::1"]
THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- "::" in a network namespace of its own ---------------------------------------------


def _run_in_fresh_netns(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in a new network namespace with its loopback up (as root, or mapped)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare(1) and ip(8) (util-linux, iproute2)")
    refused = ""
    for unshare in (["unshare", "--net"], ["unshare", "--net", "--map-root-user"]):
        proc = subprocess.run(
            [*unshare, "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *args],
            capture_output=True,
            text=True,
            timeout=90,
            cwd=ROOT,
            check=False,
        )
        if proc.returncode == 0:
            return proc
        if "unshare" not in proc.stderr:
            raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stderr}")
        refused = proc.stderr.strip()
    pytest.skip(f"no network namespace can be created here: {refused}")


@pytest.fixture(scope="module")
def netns_cases() -> dict[str, dict[str, Any]]:
    """The JSON line of every case of tests/solvers/dualstack_child.py, run in one fresh netns."""
    proc = _run_in_fresh_netns([sys.executable, str(CHILD), *CASES])
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {result["case"]: result for result in results}


def assert_answers_both_loopbacks(result: dict[str, Any]) -> None:
    for address in LOOPBACKS:
        answer = result["answers"][address]
        assert answer.get("status") == "HTTP/1.1 200 OK", (address, answer)
        assert answer["body"] == result["expected"], address


def test_the_cli_default_answers_ipv4_and_ipv6_on_one_dual_stack_socket(
    netns_cases: dict[str, dict[str, Any]],
) -> None:
    result = netns_cases["cli-default"]
    assert result["listen"] == "[::]:80"
    # One socket, IPv6, on "::", with IPV6_V6ONLY off: IPv4 clients arrive v4-mapped.
    assert result["sockets"] == [{"family": "AF_INET6", "address": "::", "v6only": 0}]
    assert_answers_both_loopbacks(result)


def test_the_library_default_is_dual_stack_too(netns_cases: dict[str, dict[str, Any]]) -> None:
    result = netns_cases["library-default"]
    assert result["sockets"] == [{"family": "AF_INET6", "address": "::", "v6only": 0}]
    assert_answers_both_loopbacks(result)
    tls = netns_cases["tls-alpn-default"]
    assert tls["sockets"] == [{"family": "AF_INET6", "address": "::", "v6only": 0}]


def test_without_dual_stack_sockets_two_sockets_answer(
    netns_cases: dict[str, dict[str, Any]],
) -> None:
    result = netns_cases["no-dual-stack"]
    assert result["sockets"] == [
        {"family": "AF_INET", "address": "0.0.0.0", "v6only": None},  # noqa: S104
        {"family": "AF_INET6", "address": "::", "v6only": 1},
    ]
    assert_answers_both_loopbacks(result)


def test_beside_an_ipv4_address_the_ipv6_any_address_is_ipv6_only(
    netns_cases: dict[str, dict[str, Any]],
) -> None:
    result = netns_cases["with-ipv4"]
    assert result["sockets"] == [
        {"family": "AF_INET6", "address": "::", "v6only": 1},
        {"family": "AF_INET", "address": "127.0.0.1", "v6only": None},
    ]
    assert_answers_both_loopbacks(result)


# -- several addresses, one port (loopback) ---------------------------------------------


TOKEN = "loopback-token_0123456789abcdefghijklmnopq"


def make_task(token: str = TOKEN) -> ChallengeTask:
    return ChallengeTask(
        type="http-01",
        identifier=parse_identifier("127.0.0.1"),
        token=token,
        key_authorization=key_authorization(token, THUMBPRINT),
        url="https://ca.test/chall/1",
    )


async def fetch(address: str, port: int, token: str) -> bytes:
    async with await anyio.connect_tcp(address, port) as stream:
        await stream.send(
            f"GET /.well-known/acme-challenge/{token} HTTP/1.1\r\n"
            "Host: t\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        with anyio.fail_after(5):
            while True:
                try:
                    data += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return data


@pytest.mark.anyio
@pytest.mark.parametrize("serving", ["callbacks", "streams"])
async def test_both_loopbacks_on_one_port(serving: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="acmecerts.solvers.http01")
    task = make_task()
    server = Http01Server(host=LOOPBACKS, port=0)
    server._streams_only = serving == "streams"
    assert (server.host, server.hosts) == ("127.0.0.1", ("127.0.0.1", "::1"))
    assert "host=['127.0.0.1', '::1']" in repr(server)
    async with server:
        await server.present(task)
        port = server.port
        for address in LOOPBACKS:
            answer = await fetch(address, port, task.token)
            assert answer.startswith(b"HTTP/1.1 200 ")
            assert answer.endswith(task.key_authorization.encode()), address
    messages = [r.getMessage() for r in caplog.records]
    assert f"http-01 server listening on 127.0.0.1:{port}, [::1]:{port}" in messages
    # Each answer is logged with the client and the listening address that answered it.
    answered = [m for m in messages if "answered a challenge request" in m]
    assert len(answered) == 2
    assert answered[0].startswith("http-01 server: answered a challenge request from 127.0.0.1:")
    assert answered[0].endswith(f" on 127.0.0.1:{port}")
    assert answered[1].startswith("http-01 server: answered a challenge request from [::1]:")
    assert answered[1].endswith(f" on [::1]:{port}")


@pytest.mark.anyio
async def test_an_unknown_token_is_not_logged_as_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="acmecerts.solvers.http01")
    async with Http01Server(host="::1", port=0) as server:
        answer = await fetch("::1", server.port, make_task().token)
    assert answer.startswith(b"HTTP/1.1 404 ")
    assert not [r for r in caplog.records if "answered" in r.getMessage()]


@contextlib.contextmanager
def _busy_ipv6_loopback_port() -> Iterator[int]:
    """A port listened on at ::1 (by another socket), and free at 127.0.0.1."""
    while True:
        with socket.socket(socket.AF_INET6) as busy:
            busy.bind(("::1", 0))
            busy.listen()
            port: int = busy.getsockname()[1]
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            yield port
            return


@pytest.mark.anyio
async def test_an_address_in_use_is_a_listen_error_and_nothing_stays_bound() -> None:
    with _busy_ipv6_loopback_port() as port:
        server = Http01Server(host=LOOPBACKS, port=port)
        with pytest.raises(ListenError) as caught:
            await server.start()
    assert (caught.value.host, caught.value.port) == ("::1", port)
    assert caught.value.errno is not None
    assert f"cannot listen on [::1]:{port}" in str(caught.value)
    assert not server.serving
    # 127.0.0.1 was bound first, and released when ::1 failed.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))


@pytest.mark.anyio
async def test_tls_alpn_01_listens_on_both_loopbacks_too() -> None:
    async with TlsAlpn01Server(host=LOOPBACKS, port=0) as server:
        for address in LOOPBACKS:
            async with await anyio.connect_tcp(address, server.port):
                pass  # accepted on the one port over either family


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ([], "at least one address"),
        (["127.0.0.1", " "], "not an address"),
        (["::1", "::1"], "twice"),
    ],
)
def test_bad_host_lists_are_refused(host: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        Http01Server(host=host)
    with pytest.raises(InvalidInput, match=message):
        TlsAlpn01Server(host=host)


# -- the CLI's default and hints never drop IPv4 ----------------------------------------


def test_the_cli_listens_dual_stack_by_default() -> None:
    options = ChallengeOptions()
    assert parse_listen(options.http_01_listen) == ("::", 80)
    assert parse_listen(options.tls_alpn_01_listen, "--tls-alpn-01-listen") == ("::", 443)
    assert parse_listen(":8080") == ("::", 8080)  # no host: every address, IPv4 included
    assert parse_listen("0.0.0.0:80") == ("0.0.0.0", 80)  # noqa: S104 - IPv4 only, if asked
    plan = plan_challenge(options, [parse_identifier("www.example.test")])
    assert isinstance(plan.solver, Http01Server)
    assert (plan.solver.hosts, plan.solver.port, plan.listen) == (("::",), 80, "[::]:80")


@pytest.mark.parametrize("value", ["::1:80", "80"])
def test_the_hints_name_an_address_that_keeps_ipv4(value: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_listen(value)
    assert "[::]:80 (every IPv4 and IPv6 address)" in str(caught.value) or (
        "[::]:80 is every IPv4 and IPv6 address" in str(caught.value)
    )
