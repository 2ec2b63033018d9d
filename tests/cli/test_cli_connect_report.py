"""A connection that fails is reported at once: a warning naming the address and what
happens next (tried again, until the last attempt), long before the final error."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import CLI, REPO, cli_env, free_port

from acmecerts.retry import RequestRetry

if TYPE_CHECKING:
    from conftest import ProxyFactory

    from acmecerts.testing import PebbleServer

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


def _start(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "issue", "--state-dir", str(tmp_path / "state"), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_an_unknown_host_says_so_in_one_line_without_retrying(tmp_path: Path) -> None:
    # ".invalid" never resolves (RFC 6761): DNS says the name does not exist
    directory = "https://ca.invalid/dir"
    args = ["--directory", directory, "--http-01-listen", f"127.0.0.1:{free_port()}"]
    proc = _start(tmp_path, *args, "unknown.example.test", env=cli_env(tmp_path))
    _, stderr = proc.communicate(timeout=45)
    assert proc.returncode == 1, stderr
    # one line, the error; not one warning per attempt: a name that does not exist is
    # not tried again
    assert stderr.splitlines() == [
        f"acmecerts: error: cannot connect to {directory}: unknown host ca.invalid"
    ]


def test_a_dead_proxy_is_named_at_once(
    pebble: PebbleServer, proxy_factory: ProxyFactory, tmp_path: Path
) -> None:
    proxy = proxy_factory()
    proxy.stop()  # its port now refuses every connection
    args = ["--directory", pebble.directory_url, "--ca-bundle", str(pebble.ca_bundle)]
    args += ["--proxy", proxy.url, "--http-01-listen", f"127.0.0.1:{free_port()}"]
    proc = _start(tmp_path, *args, "dead-proxy.example.test", env=cli_env(tmp_path))
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert proc.poll() is None, first  # reported while the command still tries
    named = f"cannot connect to the proxy {proxy.url}: connection refused"
    assert first.startswith(f"acmecerts: warning: {named} (requesting {pebble.directory_url})")
    _, rest = proc.communicate(timeout=45)
    lines = [first.rstrip("\n"), *rest.splitlines()]
    assert proc.returncode == 1
    attempts = RequestRetry().max_attempts
    # one line per attempt: a warning before each new one, then the error
    assert len(lines) == attempts
    assert all(named in line for line in lines)
    assert lines[-1].startswith(f"acmecerts: error: {named}")
