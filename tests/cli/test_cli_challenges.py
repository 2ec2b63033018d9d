"""``issue --challenge tls-alpn-01|dns-01``, and Ctrl-C in the middle of a validation.

dns-01 goes through ``--dns-hook``: a small program that calls pebble-challtestsrv's
``/set-txt`` and ``/clear-txt`` (the DNS server Pebble's validation asks), with the
propagation check pointed at that server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import (
    CLI,
    REPO,
    ca_args,
    check_certificate,
    cli_env,
    finish,
    free_port,
    one_json,
    run_cli,
)
from waits import wait_ready

from acmecerts.cli._batch import CERTIFICATE_FIELDS, CLEANED_UP
from acmecerts.cli._interrupt import INTERRUPT_GRACE
from tests.faults.proxy import FaultProxy, Match, Stall

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)

HOOK = """\
#!{python}
import json, os, sys, time, urllib.request

action, name, value = sys.argv[1:4]
with open(os.environ["HOOK_LOG"], "a") as log:
    log.write(f"{{action}} {{name}} {{value}}\\n")
if action == "present" and name.startswith("_acme-challenge.slow"):
    time.sleep(60)  # keeps the validation going until the test presses Ctrl-C
path, body = (
    ("/set-txt", {{"host": name + ".", "value": value}})
    if action == "present"
    else ("/clear-txt", {{"host": name + "."}})
)
request = urllib.request.Request(
    os.environ["CHALLTESTSRV_URL"] + path, data=json.dumps(body).encode(), method="POST"
)
urllib.request.urlopen(request, timeout=10).close()
"""


def dns_hook(tmp_path: Path) -> Path:
    hook = tmp_path / "dns-hook.py"
    hook.write_text(HOOK.format(python=sys.executable))
    hook.chmod(0o755)
    return hook


def dns_args(pebble: PebbleServer, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    assert pebble.challtestsrv_url is not None
    args = [
        "--challenge",
        "dns-01",
        "--dns-hook",
        str(dns_hook(tmp_path)),
        "--dns-propagation-nameserver",
        f"127.0.0.1:{pebble.dns_port}",
        "--dns-propagation-timeout",
        "20",
    ]
    env = cli_env(
        tmp_path, CHALLTESTSRV_URL=pebble.challtestsrv_url, HOOK_LOG=str(tmp_path / "hook.log")
    )
    return args, env


def test_tls_alpn_01(pebble: PebbleServer, tmp_path: Path) -> None:
    result = run_cli(
        "issue",
        "--challenge",
        "tls-alpn-01",
        "--tls-alpn-01-listen",
        f"127.0.0.1:{pebble.tls_port}",
        # http-01 would fail: nothing answers where Pebble validates it
        "--http-01-listen",
        f"127.0.0.1:{free_port(not_=pebble.http_port)}",
        "--out",
        str(tmp_path / "out"),
        "--json",
        *ca_args(pebble, tmp_path / "state"),
        "cli-alpn.example.test",
        "www.cli-alpn.example.test",
        env=cli_env(tmp_path),
    )

    assert result.returncode == 0, result.stderr
    assert one_json(result)["certificates"][0]["status"] == "issued"
    check_certificate(
        tmp_path / "out",
        {"cli-alpn.example.test", "www.cli-alpn.example.test"},
        pebble.root_pem(),
    )


def test_dns_01_with_a_hook_and_a_wildcard(pebble: PebbleServer, tmp_path: Path) -> None:
    args, env = dns_args(pebble, tmp_path)
    names = ["cli-dns.example.test", "*.cli-dns.example.test"]

    result = run_cli(
        "issue",
        *args,
        "--out",
        str(tmp_path / "out"),
        *ca_args(pebble, tmp_path / "state"),
        *names,
        env=env,
    )

    assert result.returncode == 0, result.stderr
    assert "Certificate issued for" in result.stdout
    check_certificate(tmp_path / "out", set(names), pebble.root_pem())
    calls = (tmp_path / "hook.log").read_text().splitlines()
    record = "_acme-challenge.cli-dns.example.test"
    # one value each for the name and its wildcard, both removed afterwards
    assert sorted(c.split()[0] for c in calls) == ["cleanup", "cleanup", "present", "present"]
    assert {c.split()[1] for c in calls} == {record}
    presented = {c.split()[2] for c in calls if c.startswith("present")}
    cleaned = {c.split()[2] for c in calls if c.startswith("cleanup")}
    assert presented == cleaned
    assert len(presented) == 2


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str], what: str) -> None:
    """Wait (60 s at most) until ``condition()``; fail at once if ``proc`` ends first."""
    deadline = time.monotonic() + 60
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the CLI ended before {what}: {proc.communicate()}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"waited 60 s for {what}", pytrace=False)
        time.sleep(0.1)


def hook_calls(log: Path) -> list[str]:
    """The actions the dns hook was called with so far (``present``, ``cleanup``)."""
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def start_slow_issue(
    pebble: PebbleServer, tmp_path: Path, *, directory: str | None = None, json_mode: bool = False
) -> subprocess.Popen[str]:
    """``acmecerts issue`` whose dns hook takes 60 s to present (the test presses Ctrl-C)."""
    args, env = dns_args(pebble, tmp_path)
    env["ACMECERTS_SIGNALS_READY"] = str(tmp_path / "ready")
    if json_mode:
        args.append("--json")
    return subprocess.Popen(
        [
            *CLI,
            "issue",
            *args,
            *ca_args(pebble, tmp_path / "state", directory=directory),
            "slow.cli-dns.example.test",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_ctrl_c_during_validation_cleans_up_and_exits_130(
    pebble: PebbleServer, tmp_path: Path, json_mode: bool
) -> None:
    # Ctrl-C while the hook still presents: the challenge is not answered yet, so the
    # authorization is deactivated before Pebble validates it (Pebble 2.4 deadlocks when
    # one is deactivated while its validation is in flight; see docs/contributing.md).
    log = tmp_path / "hook.log"
    seen = len(pebble.requests_seen())
    with start_slow_issue(pebble, tmp_path, json_mode=json_mode) as proc:
        try:
            wait_ready(proc, tmp_path / "ready")
            wait_for(lambda: "present" in hook_calls(log), proc, "the dns hook to be called")
            proc.send_signal(signal.SIGINT)
            stdout, stderr = finish(proc, timeout=40, waiting_for="the CLI to exit after SIGINT")
        finally:
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == 130, stderr
    assert stderr.splitlines() == ["acmecerts: error: interrupted"]
    name = "slow.cli-dns.example.test"
    if json_mode:  # the certificate it was working on, interrupted, in the one JSON shape
        document = one_json_line(stdout)
        assert isinstance(document, dict)
        assert (document["status"], document["exit_code"]) == ("interrupted", 130)
        assert document["counts"] == {"interrupted": 1}
        (entry,) = document["certificates"]
        assert (entry["name"], entry["status"], entry["names"]) == (name, "interrupted", [name])
        assert set(entry) == set(CERTIFICATE_FIELDS)
    else:  # which certificate did not finish, and that the clean-up ran
        assert stdout.splitlines() == [
            "Interrupted: 0 of 1 certificates finished",
            f"  not finished  {name}",
            CLEANED_UP,
        ]
    # The solver cleaned up (the hook ran again with "cleanup") ...
    assert hook_calls(log) == ["present", "cleanup"]
    # ... and the pending authorization was looked at and deactivated: after the one
    # POST that fetched it, two more (POST-as-GET, then {"status": "deactivated"}).
    authz_posts = pebble.requests_seen()[seen:].count(("POST", "/authZ/"))
    assert authz_posts == 3


@pytest.fixture
def stalling_proxy(pebble: PebbleServer) -> Iterator[FaultProxy]:
    """The session Pebble behind a fault proxy (the test makes the "CA" stop answering)."""
    with FaultProxy(
        pebble.directory_url,
        certfile=pebble.tls_cert_path,
        keyfile=pebble.tls_key_path,
        upstream_ca=pebble.ca_bundle,
    ) as proxy:
        yield proxy


def test_ctrl_c_ends_the_cli_within_its_grace_when_the_ca_stops_answering(
    pebble: PebbleServer, tmp_path: Path, stalling_proxy: FaultProxy
) -> None:
    log = tmp_path / "hook.log"
    with start_slow_issue(pebble, tmp_path, directory=stalling_proxy.directory_url) as proc:
        try:
            wait_ready(proc, tmp_path / "ready")
            wait_for(lambda: "present" in hook_calls(log), proc, "the dns hook to be called")
            # From now on the CA accepts requests and never answers them.
            stalling_proxy.add_rule(Match("/"), Stall(600), times=None)
            proc.send_signal(signal.SIGINT)
            # One Ctrl-C ends the CLI within 20 s whatever the CA does (its grace is 15 s).
            stdout, stderr = finish(
                proc, timeout=20, waiting_for="the CLI to exit after SIGINT (its grace is 15 s)"
            )
        finally:
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    # Either the client's own clean-up bound or the CLI's grace ended it: both are 15 s,
    # the grace counted from the signal and the bound from when the cancellation reached
    # the flow, so the grace usually ends it first, but a loaded machine may let the bound
    # win by a few milliseconds. Each says so in its own words.
    name = "slow.cli-dns.example.test"
    last = stderr.splitlines()[-1]
    if stdout:  # the bound: the stalled requests given up, the usual summary
        assert stdout.splitlines() == [
            "Interrupted: 0 of 1 certificates finished",
            f"  not finished  {name}",
            CLEANED_UP,
        ]
        assert last == "acmecerts: error: interrupted", stderr
    else:  # the grace: an exit on the spot, the list on stderr
        assert f"  not finished  {name}" in stderr.splitlines()
        within = f"clean-up did not finish within {INTERRUPT_GRACE:g} s"
        assert last == f"acmecerts: error: interrupted; {within}", stderr
    # The challenge response was removed before the CA was asked anything.
    assert hook_calls(log) == ["present", "cleanup"]
    # The deactivation was tried (the POST-as-GET of the authorization never came back).
    stalled = [r for r in stalling_proxy.requests_to("/authZ/") if isinstance(r.fault, Stall)]
    assert stalled


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_a_second_ctrl_c_quits_at_once(
    pebble: PebbleServer, tmp_path: Path, stalling_proxy: FaultProxy, json_mode: bool
) -> None:
    log = tmp_path / "hook.log"
    directory = stalling_proxy.directory_url
    with start_slow_issue(pebble, tmp_path, directory=directory, json_mode=json_mode) as proc:
        try:
            wait_ready(proc, tmp_path / "ready")
            wait_for(lambda: "present" in hook_calls(log), proc, "the dns hook to be called")
            stalling_proxy.add_rule(Match("/"), Stall(600), times=None)
            proc.send_signal(signal.SIGINT)
            # The cleanup is under way (the challenge response is gone) and waits for the
            # CA, which never answers: the second Ctrl-C does not wait for it.
            wait_for(
                lambda: any(isinstance(r.fault, Stall) for r in stalling_proxy.requests),
                proc,
                "the cleanup's first request to the CA",
            )
            proc.send_signal(signal.SIGINT)
            # Well below the 15 s grace: only the second signal can end it this soon.
            stdout, stderr = finish(
                proc,
                timeout=INTERRUPT_GRACE / 2,
                waiting_for="the CLI to exit after a second SIGINT",
            )
        finally:
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "acmecerts: error: interrupted", stderr
    assert "Traceback" not in stderr
    if json_mode:  # exactly one JSON object, whatever happens
        document = one_json_line(stdout)
        assert isinstance(document, dict)
        assert {k: document[k] for k in ("status", "exit_code", "error", "problem")} == {
            "status": "interrupted",
            "exit_code": 130,
            "error": "interrupted",
            "problem": None,
        }
    else:
        assert stdout == ""
    assert hook_calls(log) == ["present", "cleanup"]


def one_json_line(stdout: str) -> object:
    (line,) = stdout.splitlines()
    return json.loads(line)
