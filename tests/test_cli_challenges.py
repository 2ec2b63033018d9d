"""``issue --challenge tls-alpn-01|dns-01``, and Ctrl-C in the middle of a validation.

dns-01 goes through ``--dns-hook``: a small program that calls pebble-challtestsrv's
``/set-txt`` and ``/clear-txt`` (the DNS server Pebble's validation asks), with the
propagation check pointed at that server.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_cli_support import (
    CLI,
    REPO,
    ca_args,
    check_certificate,
    cli_env,
    free_port,
    one_json,
    run_cli,
)

if TYPE_CHECKING:
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
    assert one_json(result)["status"] == "issued"
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


def test_ctrl_c_during_validation_cleans_up_and_exits_130(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    args, env = dns_args(pebble, tmp_path)
    log = tmp_path / "hook.log"
    seen = len(pebble.requests_seen())
    proc = subprocess.Popen(
        [*CLI, "issue", *args, *ca_args(pebble, tmp_path / "state"), "slow.cli-dns.example.test"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and "present" in log.read_text()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the hook was never called"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 130, stderr
    assert stderr.splitlines() == ["acmecerts: error: interrupted"]
    assert stdout == ""
    # The solver cleaned up (the hook ran again with "cleanup") ...
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["present", "cleanup"]
    # ... and the pending authorization was looked at and deactivated: after the one
    # POST that fetched it, two more (POST-as-GET, then {"status": "deactivated"}).
    authz_posts = pebble.requests_seen()[seen:].count(("POST", "/authZ/"))
    assert authz_posts == 3
