"""Helpers shared by the CLI tests (``tests/cli/``) and the others that run the command
(``tests/transport/``, ``tests/examples/``, ``tests/project/``, ``tests/integration/``);
no tests of its own.

The CLI runs as a real subprocess (``python -m acmecerts.cli``) against the session
Pebble, with a clean environment: no ``ACMECERTS_*`` variables and an empty
``XDG_CONFIG_HOME``, so nothing from the machine leaks in.
"""

from __future__ import annotations

import functools
import json
import os
import pty
import re
import select
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from waits import finish

from acmecerts.cli import main
from acmecerts.protocol.keys import AccountKey
from acmecerts.storage import FileStorage, KeyLayout, load_account_url

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

REPO = Path(__file__).resolve().parents[1]
CLI = (sys.executable, "-m", "acmecerts.cli")
NEW_ACCOUNT = ("POST", "/sign-me-up")
NEW_ORDER = ("POST", "/order-plz")


def cli_env(tmp_path: Path | None = None, **extra: str) -> dict[str, str]:
    """The test's environment without ACMECERTS_* settings, plus ``extra``.

    ``ACMECERTS_AGREE_TOS=1``: Pebble publishes terms of service, and an account is created
    only after agreeing to them (the tests of that remove it).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACMECERTS_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg-config") if tmp_path else "/nonexistent"
    env["ACMECERTS_AGREE_TOS"] = "1"
    env.update(extra)
    return env


def without_root() -> list[str]:
    """A command prefix that runs a process without root's power over file modes.

    As root (the test machines), ``setpriv`` to ``nobody`` (util-linux, on every Debian
    system: its absence fails the test rather than skipping what it shows); as anyone
    else, nothing.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to test file permissions as root"
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    unreachable = _unreachable_as_nobody(tuple(prefix))
    if unreachable:
        pytest.skip(
            "nobody (uid 65534) cannot run this checkout's Python, so the CLI cannot be run "
            f"without root here: {unreachable} (a checkout or interpreter under a directory "
            "that others may not enter, such as a 0700 `mktemp -d`)"
        )
    return prefix


@functools.cache
def _unreachable_as_nobody(prefix: tuple[str, ...]) -> str:
    """Why ``prefix`` cannot run ``import acmecerts`` with this interpreter, or ``""``."""
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import acmecerts"],
        cwd="/",
        env=unmeasured(dict(os.environ)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode == 0:
        return ""
    lines = probe.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {probe.returncode}"


def unmeasured(env: dict[str, str]) -> dict[str, str]:
    """``env`` without coverage's variables, for a child run by :func:`without_root`.

    scripts/test.sh measures the children of the suite, but nobody could not write the
    data of its run: coverage would warn on the stderr the test reads.
    """
    return {k: v for k, v in env.items() if not k.startswith("COVERAGE_PROCESS_")}


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        cwd=REPO,
        env=env if env is not None else cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in this process (the same ``main()`` the console script calls).

    Faster than a subprocess (no interpreter start, no imports); used for the variations
    of a scenario whose first run is a real process. The caller cleans the environment
    (see :func:`clean_environment`).
    """
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["acmecerts", *args], code, captured.out, captured.err)


def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """For in-process runs: no ACMECERTS_* settings and no config file from the machine.

    Except ``ACMECERTS_AGREE_TOS=1`` (see :func:`cli_env`).
    """
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    for variable in [v for v in os.environ if v.startswith("ACMECERTS_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("ACMECERTS_AGREE_TOS", "1")


def run_many(
    commands: Sequence[Sequence[str]], *, envs: Sequence[dict[str, str]] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """Run several CLI commands at once (they must not bind the same port)."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for i, args in enumerate(commands):
            procs.append(
                subprocess.Popen(
                    [*CLI, *args],
                    cwd=REPO,
                    env=envs[i] if envs is not None else cli_env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        results = []
        for proc, args in zip(procs, commands, strict=True):
            out, err = finish(proc, timeout=60, waiting_for=f"acmecerts {' '.join(args)}")
            results.append(subprocess.CompletedProcess([*CLI, *args], proc.returncode, out, err))
        return results
    finally:
        for proc in procs:  # a failed one must not leave the others running, or their pipes
            with proc:
                if proc.poll() is None:
                    proc.kill()


def free_port(*, not_: int | None = None) -> int:
    """A free loopback port, other than ``not_``."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port != not_:
            return port


def ca_args(pebble: PebbleServer, state: Path, *, directory: str | None = None) -> list[str]:
    """``--directory``, ``--ca-bundle`` and ``--state-dir`` for the session Pebble."""
    return [
        "--directory",
        directory or pebble.directory_url,
        "--ca-bundle",
        str(pebble.ca_bundle),
        "--state-dir",
        str(state),
    ]


def http01_args(pebble: PebbleServer, port: int | None = None) -> list[str]:
    return ["--http-01-listen", f"127.0.0.1:{pebble.http_port if port is None else port}"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("acmecerts: error: ")
    return lines[0]


def one_json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON object a ``--json`` run printed."""
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    document: dict[str, Any] = json.loads(lines[0])
    return document


def check_certificate(out: Path, names: set[str], root_pem: str) -> x509.Certificate:
    """The files in ``out`` make a valid chain to Pebble's root for ``names``."""
    (leaf,) = x509.load_pem_x509_certificates((out / "cert.pem").read_bytes())
    intermediates = x509.load_pem_x509_certificates((out / "chain.pem").read_bytes())
    fullchain = x509.load_pem_x509_certificates((out / "fullchain.pem").read_bytes())
    assert fullchain == [leaf, *intermediates]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == names
    key = serialization.load_pem_private_key((out / "privkey.pem").read_bytes(), password=None)
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert key.public_key().public_bytes(*spki) == leaf.public_key().public_bytes(*spki)
    root = x509.load_pem_x509_certificate(root_pem.encode())
    for child, parent in zip([leaf, *intermediates], [*intermediates, root], strict=True):
        child.verify_directly_issued_by(parent)
    return leaf


def serial_of(out: Path) -> str:
    (leaf,) = x509.load_pem_x509_certificates((out / "cert.pem").read_bytes())
    return format(leaf.serial_number, "x")


# -- reading the state directory with the library ---------------------------------------------


def stored_account(state: Path, directory_url: str) -> tuple[AccountKey | None, str | None]:
    """The account key and URL the state directory holds (read with the library)."""

    async def read() -> tuple[AccountKey | None, str | None]:
        storage = FileStorage(state)
        layout = KeyLayout(directory_url)
        value = await storage.load(layout.account_key())
        key = AccountKey.from_pem(value.data) if value is not None else None
        url = await load_account_url(storage, layout)
        return key, url

    return anyio.run(read)


def stored_serial(state: Path, directory_url: str, name: str) -> str | None:
    """The serial of the certificate ``name`` the manager stored, if any."""

    async def read() -> str | None:
        storage = FileStorage(state)
        value = await storage.load(KeyLayout(directory_url).certificate(name).record)
        if value is None:
            return None
        serial = json.loads(value.data)["serial"]
        assert isinstance(serial, str)
        return serial

    return anyio.run(read)


#: ANSI escape sequences (cursor moves, colours) that a terminal display writes.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_on_terminal(
    args: Sequence[str],
    env: dict[str, str],
    *,
    timeout: float = 80,
    watch: Callable[[str], None] | None = None,
) -> tuple[int, str, str]:
    """Run ``args`` (from the repository) on a pseudo-terminal until it ends or ``timeout``.

    ``watch`` is called with the output so far, escapes removed, after each read (a test
    acts while the CLI runs). Returns the exit code (negative: killed at the timeout),
    the raw output and the output without escape sequences.
    """
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        list(args), cwd=REPO, env=env, stdin=secondary, stdout=secondary, stderr=secondary
    )
    os.close(secondary)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # EIO: the other side is closed
                    break
                if not chunk:
                    break
                chunks.append(chunk)
                if watch is not None:
                    watch(ANSI_ESCAPE.sub("", b"".join(chunks).decode("utf-8", "replace")))
            elif proc.poll() is not None:
                break
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(primary)
    raw = b"".join(chunks).decode("utf-8", "replace")
    return proc.returncode, raw, ANSI_ESCAPE.sub("", raw)
