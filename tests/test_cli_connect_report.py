"""A connection that fails is reported at once: a warning naming the address and what
happens next (tried again, until the last attempt), long before the final error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_cli_support import CLI, REPO, cli_env, free_port

from acmecerts.retry import RequestRetry

pytestmark = pytest.mark.timeout(60)


def test_a_refused_ca_port_is_reported_at_once_then_given_up(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there: every connection is refused
    directory = f"https://127.0.0.1:{port}/dir"
    args = ["issue", "--directory", directory, "--state-dir", str(tmp_path / "state")]
    args += ["--http-01-listen", f"127.0.0.1:{free_port()}", "refused.example.test"]
    proc = subprocess.Popen(
        [*CLI, *args],
        cwd=REPO,
        env=cli_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    # the first failure is on stderr while the command is still trying
    assert proc.poll() is None, first
    assert first.startswith("acmecerts: warning: cannot connect to ")
    assert f"127.0.0.1:{port}" in first
    assert "trying again in" in first
    attempts = RequestRetry().max_attempts
    assert f"(attempt 2 of {attempts}; then it gives up)" in first
    _, rest = proc.communicate(timeout=45)
    lines = [first.rstrip("\n"), *rest.splitlines()]
    assert proc.returncode == 1
    warnings = [line for line in lines if line.startswith("acmecerts: warning:")]
    assert len(warnings) == attempts - 1  # one before each new attempt
    assert f"(attempt {attempts} of {attempts}; then it gives up)" in warnings[-1]
    assert lines[-1].startswith(f"acmecerts: error: cannot connect to {directory}")
