"""Waiting in tests: for a condition, with a generous limit that says what it waited for.

No test depends on how fast the machine is: a limit is there so that a broken test ends,
not to measure speed, and when it is hit the failure names the condition, not just
``TimeoutError``. (How long things take is checked with a fake clock, or by counting.)
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from typing import TYPE_CHECKING

import anyio
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@contextlib.contextmanager
def within(seconds: float, what: str) -> Iterator[None]:
    """Like ``anyio.fail_after(seconds)``; past the limit the test fails naming ``what``."""
    with anyio.move_on_after(seconds) as scope:
        yield
    if scope.cancelled_caught:
        pytest.fail(f"waited {seconds:g} s for {what}; it did not happen", pytrace=False)


def finish(proc: subprocess.Popen[str], *, timeout: float, waiting_for: str) -> tuple[str, str]:
    """``proc.communicate()``: its output once it exits, within ``timeout`` seconds.

    Past the limit the process is killed, its pipes are read to the end and closed, and the
    test fails saying what it waited for and what the process printed (a pipe left open
    would fail a later test with a ResourceWarning instead).
    """
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            stdout, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            # a process it started still holds the pipes open: read no further
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait(timeout=10)
            stdout, stderr = "", "(the pipes stayed open: a child process holds them)"
        pytest.fail(
            f"waited {timeout:g} s for {waiting_for}; it was still running (killed).\n"
            f"stdout: {stdout[-2000:]}\nstderr: {stderr[-4000:]}",
            pytrace=False,
        )


def wait_ready(
    proc: subprocess.Popen[str],
    ready_file: Path,
    *,
    handles: tuple[str, ...] = ("SIGINT", "SIGTERM"),
    timeout: float = 60,
) -> None:
    """Wait until the CLI ``proc`` has its signal handlers in place (its line in
    ``ready_file``: it ran with ``ACMECERTS_SIGNALS_READY=ready_file``), and check that it
    handles ``handles``.

    A signal sent before that line may come while Python is still starting; a CLI that
    does not handle SIGINT (started with SIGINT ignored, as a background job of a shell
    without job control is) would wait for nothing: the test fails at once saying so.
    """
    deadline = time.monotonic() + timeout
    while True:
        text = ready_file.read_text() if ready_file.exists() else ""
        mine = [line.split() for line in text.splitlines() if line.startswith(f"{proc.pid} ")]
        if mine:
            handled = set(mine[0][2:])
            missing = [name for name in handles if name not in handled]
            if missing:
                proc.kill()
                proc.communicate(timeout=10)
                pytest.fail(
                    f"the CLI does not handle {', '.join(missing)} (it handles "
                    f"{' '.join(sorted(handled)) or 'nothing'}): was the test run started "
                    "with the signal ignored?",
                    pytrace=False,
                )
            return
        if proc.poll() is not None:
            stdout, stderr = proc.communicate(timeout=10)
            pytest.fail(
                f"the CLI ended before its signal handlers were ready: {stdout}{stderr}",
                pytrace=False,
            )
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for the CLI's ready line", pytrace=False)
        time.sleep(0.05)
