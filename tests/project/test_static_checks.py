"""The static checks CI holds the code to: ``mypy --strict`` and ``ruff`` (with the S rules)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_mypy_strict_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "acmecerts"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_check_and_format_are_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    paths = ["acmecerts", "tests", "bench", "examples"]
    check = subprocess.run([ruff, "check", *paths], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-4000:]
    fmt = subprocess.run(
        [ruff, "format", "--check", *paths], cwd=ROOT, capture_output=True, text=True
    )
    assert fmt.returncode == 0, fmt.stdout[-4000:]
