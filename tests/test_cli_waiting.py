"""Nothing silent: ``-v`` logs every step of every certificate, and every wait with what
it waits for; on a terminal the live display names the request it waits on. The real
CLI, against the session Pebble 2.10 (through the fault proxy where the CA is slow)."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_cli_support import CLI, REPO, ca_args, cli_env, http01_args

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
