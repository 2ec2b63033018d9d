"""SIGTERM (systemd stop, docker stop, a pod eviction) is handled like Ctrl-C.

The CLI runs as a real subprocess against the session Pebble, through the fault proxy
where the "CA" has to stop answering. Every test waits for the CLI's ready line
(``ACMECERTS_SIGNALS_READY``) before it sends a signal, so no signal can come before
the handlers are in place, and a CLI that would ignore the signal fails the test at
once instead of hanging it. Counts, not durations: the clean-up's requests are counted
at Pebble or the proxy; the only time limits are the ones the CLI promises (exit within
the clean-up budget, at once after a second signal), with generous margins.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest
from cli_support import CLI, REPO, ca_args, cli_env
from waits import finish, wait_ready

from acmecerts import InvalidInput
from acmecerts.cli._batch import CLEANED_UP
from acmecerts.cli._interrupt import run_interruptible
from acmecerts.cli._signals import (
    GRACE_ENV,
    INTERRUPT_GRACE,
    Interrupted,
    SignalGuard,
    guard_signals,
)
from tests.cli.test_cli_challenges import dns_args, hook_calls, wait_for
from tests.faults.proxy import FaultProxy, Match, Stall

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)

SLOW = "slow-sig.example.test"  # its dns hook takes 60 s to present (see test_cli_challenges)


def start(
    pebble: PebbleServer,
    tmp_path: Path,
    *args: str,
    directory: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """``acmecerts issue --challenge dns-01 ... ARGS``, its ready line in tmp_path/ready."""
    challenge, env = dns_args(pebble, tmp_path)
    env["ACMECERTS_SIGNALS_READY"] = str(tmp_path / "ready")
    env.update(extra_env or {})
    return subprocess.Popen(
        [
            *CLI,
            "issue",
            *challenge,
            *ca_args(pebble, tmp_path / "state", directory=directory),
            *args,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str], signum: int, *, timeout: float, what: str) -> tuple[str, str]:
    proc.send_signal(signum)
    return finish(proc, timeout=timeout, waiting_for=what)


def test_sigterm_during_validation_cleans_up_and_exits_143(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    log = tmp_path / "hook.log"
    seen = len(pebble.requests_seen())
    with start(pebble, tmp_path, SLOW) as proc:
        try:
            wait_ready(proc, tmp_path / "ready")
            wait_for(lambda: "present" in hook_calls(log), proc, "the dns hook to be called")
            stdout, stderr = stop(
                proc, signal.SIGTERM, timeout=40, what="the CLI to exit after SIGTERM"
            )
        finally:
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines() == ["acmecerts: error: terminated"]
    # the certificate it was working on, and that the clean-up ran
    assert stdout.splitlines() == [
        "Interrupted: 0 of 1 certificates finished",
        f"  not finished  {SLOW}",
        CLEANED_UP,
    ]
    # The challenge response was removed ...
    assert hook_calls(log) == ["present", "cleanup"]
    # ... and the pending authorization deactivated: after the POST that fetched it, a
    # POST-as-GET and the {"status": "deactivated"} POST.
    assert pebble.requests_seen()[seen:].count(("POST", "/authZ/")) == 3


@pytest.mark.parametrize(
    ("first", "second", "code"),
    [
        (signal.SIGTERM, signal.SIGTERM, 143),
        (signal.SIGINT, signal.SIGTERM, 143),
        (signal.SIGTERM, signal.SIGINT, 130),
    ],
    ids=["term-term", "int-term", "term-int"],
)
def test_a_second_signal_quits_at_once(
    pebble: PebbleServer,
    tmp_path: Path,
    proxy: FaultProxy,
    first: signal.Signals,
    second: signal.Signals,
    code: int,
) -> None:
    log = tmp_path / "hook.log"
    with start(pebble, tmp_path, "--json", SLOW, directory=proxy.directory_url) as proc:
        try:
            wait_ready(proc, tmp_path / "ready")
            wait_for(lambda: "present" in hook_calls(log), proc, "the dns hook to be called")
            proxy.add_rule(Match("/"), Stall(600), times=None)  # the CA stops answering
            proc.send_signal(first)
            wait_for(
                lambda: any(isinstance(r.fault, Stall) for r in proxy.requests),
                proc,
                "the clean-up's first request to the CA",
            )
            # Well below the clean-up budget: only the second signal can end it this soon.
            stdout, stderr = stop(
                proc, second, timeout=INTERRUPT_GRACE / 2, what="the exit after a second signal"
            )
        finally:
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == code, stderr
    message = "terminated" if second == signal.SIGTERM else "interrupted"
    assert stderr.splitlines()[-1] == f"acmecerts: error: {message}", stderr
    assert "Traceback" not in stderr
    document = json.loads(stdout)
    assert (document["status"], document["error"], document["problem"]) == (
        "interrupted",
        message,
        None,
    )
    assert document["exit_code"] == code
    assert hook_calls(log) == ["present", "cleanup"]


def test_a_ca_that_stops_answering_cannot_hold_the_exit_past_the_budget(
    pebble: PebbleServer, tmp_path: Path, proxy: FaultProxy
) -> None:
    log = tmp_path / "hook.log"
    budget = {"ACMECERTS_INTERRUPT_GRACE": "3"}  # the clean-up budget, injected
    with start(pebble, tmp_path, SLOW, directory=proxy.directory_url, extra_env=budget) as proc:
        try:
            wait_ready(proc, tmp_path / "ready")
            wait_for(lambda: "present" in hook_calls(log), proc, "the dns hook to be called")
            proxy.add_rule(Match("/"), Stall(600), times=None)
            proc.send_signal(signal.SIGTERM)
            # The stalled requests never come back; the budget ends the process.
            returncode = proc.wait(timeout=20)
            stdout, stderr = finish(proc, timeout=10, waiting_for="the CLI's output")
        finally:
            if proc.poll() is None:
                proc.kill()

    assert returncode == 143, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == (
        "acmecerts: error: terminated; clean-up did not finish within 3 s"
    ), stderr
    assert stdout == ""
    # The clean-up was tried: the challenge response removed, then the authorization
    # looked at (that request never came back).
    assert hook_calls(log) == ["present", "cleanup"]
    stalled = [r for r in proxy.requests_to("/authZ/") if isinstance(r.fault, Stall)]
    assert len(stalled) == 1


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_an_interrupted_batch_lists_the_certificates_that_finished(
    pebble: PebbleServer, tmp_path: Path, json_mode: bool
) -> None:
    done = f"done-{'json' if json_mode else 'text'}-sig.example.test"
    batch = tmp_path / "batch.txt"
    batch.write_text(f"{done}\n{SLOW}\n")
    out = tmp_path / "out"
    args = ["--from-file", str(batch), "--out", str(out)] + (["--json"] if json_mode else [])
    with start(pebble, tmp_path, *args) as proc:
        try:
            wait_ready(proc, tmp_path / "ready")
            wait_for(
                lambda: (
                    (out / done / "fullchain.pem").exists()
                    and "present" in hook_calls(tmp_path / "hook.log")
                ),
                proc,
                f"{done} to be issued while {SLOW} is presented",
            )
            stdout, stderr = stop(
                proc, signal.SIGTERM, timeout=40, what="the CLI to exit after SIGTERM"
            )
        finally:
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == "acmecerts: error: terminated", stderr
    if json_mode:
        document: dict[str, Any] = json.loads(stdout)  # exactly one JSON object
        assert document["status"] == "interrupted"
        assert document["error"] == "terminated"
        assert document["counts"] == {"issued": 1, "interrupted": 1}
        first, second = document["certificates"]
        assert (first["name"], first["status"]) == (done, "issued")
        assert first["files"]["fullchain"] == str(out / done / "fullchain.pem")
        assert (second["name"], second["status"], second["names"]) == (SLOW, "interrupted", [SLOW])
        assert set(second) == set(first)  # one shape for every entry
    else:
        assert "Interrupted: 1 of 2 certificates finished" in stdout
        lines = stdout.splitlines()
        assert f"  issued        {done} ({out / done / 'fullchain.pem'})" in lines
        assert f"  not finished  {SLOW}" in lines


def test_a_signal_before_the_work_starts_sends_nothing(
    pebble: PebbleServer, tmp_path: Path, proxy: FaultProxy
) -> None:
    # SIGTERM as soon as the handlers are in place: the CLI is still importing and
    # reading its options. It stops as soon as the work would start, before any request.
    with start(pebble, tmp_path, "--json", SLOW, directory=proxy.directory_url) as proc:
        try:
            wait_ready(proc, tmp_path / "ready")
            stdout, stderr = stop(
                proc, signal.SIGTERM, timeout=40, what="the CLI to exit after SIGTERM"
            )
        finally:
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == 143, stderr
    assert stderr.splitlines() == ["acmecerts: error: terminated"]
    document = json.loads(stdout)
    assert (document["status"], document["error"], document["exit_code"]) == (
        "interrupted",
        "terminated",
        143,
    )
    assert proxy.requests == []
    assert hook_calls(tmp_path / "hook.log") == []


def test_a_cli_started_with_sigint_ignored_says_so_and_still_stops_at_sigterm(
    tmp_path: Path,
) -> None:
    # What hung the Ctrl-C tests (issue #16): a background job of a shell without job
    # control starts with SIGINT ignored, its children too, and the CLI keeps it ignored.
    # Its ready line says which signals it handles, so a test knows instead of waiting.
    ready = tmp_path / "ready"
    env = cli_env(tmp_path, ACMECERTS_SIGNALS_READY=str(ready))
    command = ["bash", "-c", "trap '' INT; exec \"$@\"", "bash", *CLI, "--version"]
    with subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            wait_for(lambda: ready.exists() or proc.poll() is not None, proc, "the ready line")
            stdout, stderr = finish(proc, timeout=60, waiting_for="acmecerts --version")
        finally:
            if proc.poll() is None:
                proc.kill()
    (line,) = ready.read_text().splitlines()
    assert line == f"{proc.pid} ready SIGTERM", line
    assert proc.returncode == 0, stderr
    assert stdout.startswith("acmecerts ")


def test_a_forced_exit_still_lists_the_certificates_that_finished(
    pebble: PebbleServer, tmp_path: Path, proxy: FaultProxy
) -> None:
    # The clean-up hangs on a CA that stopped answering and a second signal ends it on the
    # spot: the one JSON object still says which certificate was issued.
    done = "done-forced-sig.example.test"
    batch = tmp_path / "batch.txt"
    batch.write_text(f"{done}\n{SLOW}\n")
    out = tmp_path / "out"
    args = ["--from-file", str(batch), "--out", str(out), "--json"]
    with start(pebble, tmp_path, *args, directory=proxy.directory_url) as proc:
        try:
            wait_ready(proc, tmp_path / "ready")
            wait_for(
                lambda: (
                    (out / done / "fullchain.pem").exists()
                    and "present" in hook_calls(tmp_path / "hook.log")
                ),
                proc,
                f"{done} to be issued while {SLOW} is presented",
            )
            proxy.add_rule(Match("/"), Stall(600), times=None)
            proc.send_signal(signal.SIGTERM)
            wait_for(
                lambda: any(isinstance(r.fault, Stall) for r in proxy.requests),
                proc,
                "the clean-up's first request to the CA",
            )
            stdout, stderr = stop(
                proc, signal.SIGTERM, timeout=INTERRUPT_GRACE / 2, what="the forced exit"
            )
        finally:
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert f"  issued        {done} ({out / done / 'fullchain.pem'})" in stderr.splitlines()
    assert f"  not finished  {SLOW}" in stderr.splitlines()
    document = json.loads(stdout)
    assert (document["status"], document["error"]) == ("interrupted", "terminated")
    assert document["counts"] == {"issued": 1, "interrupted": 1}
    assert [c["status"] for c in document["certificates"]] == ["issued", "interrupted"]


# -- in-process: the guard itself ---------------------------------------------------------


def test_sigterm_cancels_the_work_in_process_and_its_clean_up_runs() -> None:
    events: list[str] = []

    async def work() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await anyio.sleep(60)
            events.append("not cancelled")
        finally:
            events.append("clean-up")

    with guard_signals(json_mode=False, grace=600) as guard:  # never the exit here
        assert guard is not None, "the guard must hold SIGTERM before the test sends it"
        with pytest.raises(Interrupted) as raised:
            run_interruptible(work, json_mode=False)
    assert (raised.value.exit_code, raised.value.message) == (143, "terminated")
    assert events == ["clean-up"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back


def test_a_signal_before_the_work_stops_it_at_its_start() -> None:
    started: list[bool] = []

    async def work() -> None:
        await anyio.lowlevel.checkpoint()
        started.append(True)

    with guard_signals(json_mode=False, grace=600) as guard:  # never the exit here
        assert guard is not None
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 30
        while guard.signum is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the watchdog thread takes it
        assert guard.signum == signal.SIGINT
        with pytest.raises(Interrupted) as raised:
            run_interruptible(work, json_mode=False)
    assert raised.value.exit_code == 130
    assert started == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# -- the clean-up budget: the library's one duration parser --------------------------------


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-1", "0", "1e400", "soon", "15s"])
def test_a_budget_in_the_environment_that_is_no_duration_is_warned_about(
    text: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(GRACE_ENV, text)
    assert SignalGuard(json_mode=False).grace == INTERRUPT_GRACE == 15.0
    assert capfd.readouterr().err == (
        f"acmecerts: warning: {GRACE_ENV}={text!r} is not a positive number of seconds; using 15\n"
    )


@pytest.mark.parametrize(("text", "seconds"), [("3", 3.0), (" 0.25 ", 0.25), ("", 15.0)])
def test_a_budget_in_the_environment_is_taken(
    text: str, seconds: float, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(GRACE_ENV, text)
    assert SignalGuard(json_mode=False).grace == seconds
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("grace", [math.nan, math.inf, -1.0, 0, True, "15"])
def test_a_budget_given_in_code_that_is_no_duration_is_invalid_input(grace: object) -> None:
    with pytest.raises(InvalidInput, match=r"^grace must be a finite number of seconds > 0"):
        SignalGuard(json_mode=False, grace=grace)  # type: ignore[arg-type]
    assert SignalGuard(json_mode=False, grace=dt.timedelta(seconds=2)).grace == 2.0  # type: ignore[arg-type]
