"""The CA asks to wait before the work starts (503 + ``Retry-After`` on newNonce or
newAccount): ``acmecerts issue`` waits within ``--max-wait`` with its countdown, else
defers (exit 3, the instant printed and kept in the state directory).

The CLI runs as a subprocess against the session Pebble behind the fault proxy, which
answers the first request of a kind with 503 and forwards everything else. Requests are
counted at the proxy; the only time checked is a lower bound (never sooner than the CA
said), which load cannot break.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    CLI,
    REPO,
    ca_args,
    check_certificate,
    cli_env,
    http01_args,
    run_cli,
)
from waits import finish

from acmecerts._time import whole_second
from acmecerts.cli._state import State
from acmecerts.manager import load_attempt_state
from tests.cli.test_cli_challenges import wait_for
from tests.faults.proxy import FaultProxy, Hold, Match, Respond

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)

BUSY = "urn:ietf:params:acme:error:serverInternal"


def issue(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path, name: str, *args: str
) -> tuple[int, str, str]:
    result = run_cli(
        "issue",
        *ca_args(pebble, tmp_path / "state", directory=proxy.directory_url),
        *http01_args(pebble),
        "--out",
        str(tmp_path / "out"),
        *args,
        name,
        env=cli_env(tmp_path),
        timeout=90,
    )
    return result.returncode, result.stdout, result.stderr


def statuses(proxy: FaultProxy, path: str) -> list[int | None]:
    return [r.status for r in proxy.requests_to(path)]


def test_a_busy_new_nonce_is_waited_for_then_the_certificate_issued(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    # A load balancer's 503, without a nonce, asking for 3 s: more than a request waits
    # inside the transport (2 s), so the command's own wait (with its countdown) takes it.
    proxy.add_rule(Match("/nonce-plz"), Respond(503, retry_after="3", replay_nonce=False), times=1)
    name = "busy-nonce.start-wait.example.test"

    code, stdout, stderr = issue(pebble, proxy, tmp_path, name)

    assert code == 0, stderr
    assert f"Certificate issued for {name}" in stdout
    check_certificate(tmp_path / "out", {name}, pebble.root_pem())
    # Exactly one retry, and not before the CA said.
    first, second = proxy.requests_to("/nonce-plz")
    assert (first.status, second.status) == (503, 200)
    assert second.arrival - first.arrival >= 3.0
    assert statuses(proxy, "/sign-me-up") == [201]
    # The countdown (one line on stderr: the output is not a terminal).
    assert f"acmecerts: {name}: the CA is busy (account set-up): " in stderr


def test_a_busy_new_account_with_an_http_date_is_waited_for(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    # The directory request is held until the test has set the newAccount answer, so
    # that its HTTP-date (whole seconds) lies well beyond the 2 s a request waits inside
    # the transport however long the CLI took to start.
    release = threading.Event()
    proxy.add_rule(Match("/dir"), Hold(release, timeout=60), times=1)
    name = "busy-account.start-wait.example.test"
    with subprocess.Popen(
        [
            *CLI,
            "issue",
            *ca_args(pebble, tmp_path / "state", directory=proxy.directory_url),
            *http01_args(pebble),
            "--out",
            str(tmp_path / "out"),
            "--json",
            name,
        ],
        cwd=REPO,
        env=cli_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            wait_for(lambda: bool(proxy.requests_to("/dir")), proc, "the directory request")
            at = _dt.datetime.now(_dt.UTC).replace(microsecond=0) + _dt.timedelta(seconds=8)
            proxy.add_rule(
                Match("/sign-me-up", "POST"),
                Respond(
                    503, BUSY, "busy", retry_after=email.utils.format_datetime(at, usegmt=True)
                ),
                times=1,
            )
            release.set()
            stdout, stderr = finish(proc, timeout=90, waiting_for="acmecerts issue")
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["certificates"][0]["status"] == "issued"
    first, second = proxy.requests_to("/sign-me-up")
    assert (first.status, second.status) == (503, 201)
    # Not before the CA said; and longer than the transport ever waits by itself (2 s):
    # the command's own wait.
    assert second.wall >= at
    assert second.arrival - first.arrival > 2.0
    assert statuses(proxy, "/order-plz") == [201]


def test_a_wait_past_max_wait_defers_with_exit_3_and_orders_nothing(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.add_rule(
        Match("/nonce-plz"), Respond(503, retry_after="600", replay_nonce=False), times=None
    )
    name = "deferred.start-wait.example.test"
    before = _dt.datetime.now(_dt.UTC)

    code, stdout, stderr = issue(pebble, proxy, tmp_path, name, "--json", "--max-wait", "5")

    assert code == 3, stderr
    document = json.loads(stdout)  # exactly one JSON object
    assert document["status"] == "deferred"
    until = _dt.datetime.fromisoformat(document["until"])
    assert before + _dt.timedelta(seconds=590) <= until <= before + _dt.timedelta(seconds=700)
    assert "--max-wait 5 s" in document["error"]
    assert stderr.startswith("acmecerts: deferred: account set-up: the CA asked to wait until")
    # One newNonce, refused; nothing else was sent, no account and no order.
    assert statuses(proxy, "/nonce-plz") == [503]
    assert proxy.requests_to("/sign-me-up") == []
    assert proxy.requests_to("/order-plz") == []

    # The instant is kept in the state directory, as for a deferred order.
    async def stored() -> tuple[object, object]:
        state = State(tmp_path / "state", proxy.directory_url)
        attempt = await load_attempt_state(state.storage, state.layout, name)
        return attempt, await state.load_record(name)

    attempt, record = anyio.run(stored)
    assert record is not None
    assert attempt is not None
    # (--json shows it to the second, rounded up)
    assert whole_second(attempt.next_attempt_at) == until  # type: ignore[attr-defined]
