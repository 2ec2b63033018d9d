"""Nothing silent: ``-v`` logs every step of every certificate, and every wait with what
it waits for; on a terminal the live display names the request it waits on. The real
CLI, against the session Pebble 2.10 (through the fault proxy where the CA is slow)."""

from __future__ import annotations

import re
import subprocess
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import CLI, REPO, ca_args, cli_env, http01_args, run_on_terminal
from waits import finish

from tests.faults.proxy import FaultProxy, Hold, Match

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)

STEPS = ("account", "order", "authorization", "challenge", "finalize", "download")


def steps_of(stderr: str, name: str) -> list[str]:
    """The steps logged for certificate ``name``, in order (their first word)."""
    marker = f"acmecerts.cli.steps: {name}: "
    return [line.split(marker, 1)[1].split()[0] for line in stderr.splitlines() if marker in line]


def test_v_logs_every_step_of_every_certificate_once_in_order(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    names = [f"steps-{tag}-a.example.test", f"steps-{tag}-b.example.test"]
    batch = tmp_path / "batch.txt"
    batch.write_text("".join(f"{n}\n" for n in names))
    result = subprocess.run(
        [
            *CLI,
            "issue",
            "-v",
            "--from-file",
            str(batch),
            "--out",
            str(tmp_path / "out"),
            *http01_args(pebble),
            *ca_args(pebble, tmp_path / "state"),
        ],
        cwd=REPO,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in names:
        assert steps_of(result.stderr, name) == list(STEPS), result.stderr
    # the lines name what they are about: the account, the order, the URLs
    lines = [line for line in result.stderr.splitlines() if "acmecerts.cli.steps:" in line]
    assert re.search(r": account https://\S+", lines[0]), lines
    assert any(re.search(r": order https://\S+ \(pending, 1 authorization\)", x) for x in lines)
    assert any(f"for {names[0]} (http-01 presented)" in line for line in lines)


def read_until(proc: subprocess.Popen[str], wanted: str, seen: list[str]) -> str:
    """Read ``proc``'s stderr line by line (into ``seen``) up to a line containing
    ``wanted``; fail if the process ends first."""
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline()
        if not line:
            pytest.fail(f"the CLI ended without a line with {wanted!r}:\n{''.join(seen)}")
        seen.append(line)
        if wanted in line:
            return line


def test_v_names_the_request_the_ca_is_slow_to_answer_before_the_answer(
    pebble: PebbleServer, tmp_path: Path, proxy: FaultProxy
) -> None:
    name = f"slow-{uuid.uuid4().hex[:8]}.example.test"
    release = threading.Event()
    # the CA sits on the finalize request until the test lets it go (at most 30 s)
    proxy.add_rule(Match("/finalize-order/", "POST"), Hold(release, timeout=30))
    proc = subprocess.Popen(
        [
            *CLI,
            "issue",
            "-v",
            "--out",
            str(tmp_path / "out"),
            *http01_args(pebble),
            *ca_args(pebble, tmp_path / "state", directory=proxy.directory_url),
            name,
        ],
        cwd=REPO,
        env=cli_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:
        line = read_until(proc, "waiting for the CA to answer POST", seen)
        # said while the answer is still held: the request is named, with its time so far
        (held,) = proxy.requests_to("/finalize-order/", "POST")
        assert held.status is None
        assert re.search(
            r"acmecerts\.cli\.waits: waiting for the CA to answer POST "
            rf"{re.escape(proxy.url)}/finalize-order/\S+ \(1 s so far\)$",
            line.rstrip("\n"),
        ), line
        release.set()
        _, rest = finish(proc, timeout=60, waiting_for="the CLI to finish once answered")
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(seen) + rest
    steps = steps_of("".join(seen) + rest, name)
    assert steps == list(STEPS)
    # in order: the finalize step, the wait for its answer, then the download
    lines = [*seen, *rest.splitlines(keepends=True)]
    finalize = next(i for i, x in enumerate(lines) if f"{name}: finalize " in x)
    waiting = next(i for i, x in enumerate(lines) if "waiting for the CA to answer POST" in x)
    download = next(i for i, x in enumerate(lines) if f"{name}: download " in x)
    assert finalize < waiting < download
    # the waits the client chooses are logged with their reason: here the poll interval
    # before it asks about the order or an authorization again (the session Pebble sends
    # no Retry-After)
    assert any(
        re.search(
            r"waiting \d+\.\d s before asking about the (order|authorization) https://\S+ again "
            r"\(poll interval\)$",
            x.rstrip("\n"),
        )
        for x in lines
    ), "".join(lines)


def test_the_terminal_names_the_request_the_ca_is_slow_to_answer(
    pebble: PebbleServer, tmp_path: Path, proxy: FaultProxy
) -> None:
    name = f"tty-slow-{uuid.uuid4().hex[:8]}.example.test"
    release = threading.Event()
    proxy.add_rule(Match("/finalize-order/", "POST"), Hold(release, timeout=30))
    env = cli_env(tmp_path, COLUMNS="200", LINES="40", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    shown_while_held: list[bool] = []

    def watch(text: str) -> None:
        if not release.is_set() and re.search(
            r"waiting for the CA to answer POST \S+/finalize-order/\S+: \d+ s", text
        ):
            # on the screen while the answer is still held back
            (held,) = proxy.requests_to("/finalize-order/", "POST")
            shown_while_held.append(held.status is None)
            release.set()

    try:
        returncode, _, text = run_on_terminal(
            [
                *CLI,
                "issue",
                "--out",
                str(tmp_path / "out"),
                *http01_args(pebble),
                *ca_args(pebble, tmp_path / "state", directory=proxy.directory_url),
                name,
            ],
            env,
            timeout=90,
            watch=watch,
        )
    finally:
        release.set()
    assert shown_while_held == [True], text
    assert returncode == 0, text
    # once answered, the line is gone from the final screen: the certificate is issued
    assert re.search(rf"{re.escape(name)}\s+done: expires", text) or "Issued" in text, text
