"""Waiting in tests: for a condition, with a generous limit that says what it waited for.

No test depends on how fast the machine is: a limit is there so that a broken test ends,
not to measure speed, and when it is hit the failure names the condition, not just
``TimeoutError``. (How long things take is checked with a fake clock, or by counting.)
"""

from __future__ import annotations

import contextlib
import subprocess
from typing import TYPE_CHECKING

import anyio
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator


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
        stdout, stderr = proc.communicate()
        pytest.fail(
            f"waited {timeout:g} s for {waiting_for}; it was still running (killed).\n"
            f"stdout: {stdout[-2000:]}\nstderr: {stderr[-4000:]}",
            pytrace=False,
        )
