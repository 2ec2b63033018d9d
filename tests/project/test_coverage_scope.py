"""What scripts/test.sh holds to the coverage floor: a whole-suite run only.

tests/conftest.py writes ``whole`` or ``part`` to ``$ACMECERTS_COVERAGE_SCOPE`` when the
session ends; scripts/test.sh checks ``fail_under`` after ``whole`` alone. These tests run
pytest in a child (collection only: the answer depends on what was selected, not on what
passed) and read what it wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def scope_of(tmp_path: Path, *args: str) -> str:
    """The scope a ``pytest --collect-only`` with ``args`` reports."""
    scope_file = tmp_path / "scope"
    # the child is not measured (it would double its time under scripts/test.sh's coverage)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env["ACMECERTS_COVERAGE_SCOPE"] = str(scope_file)
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-3000:]
    return scope_file.read_text(encoding="utf-8").strip()


@pytest.mark.timeout(480)
def test_the_whole_suite_is_held_to_the_floor_as_ci_runs_it(tmp_path: Path) -> None:
    # .ci/run passes -p no:cacheprovider: still every test of testpaths
    assert scope_of(tmp_path, "-p", "no:cacheprovider") == "whole"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "args",
    [
        ("tests/project/test_coverage_scope.py",),
        (
            "-k",
            "scope",
        ),
        (
            "-m",
            "slow",
        ),
        (
            "--deselect",
            "tests/project/test_coverage_scope.py",
        ),
    ],
    ids=["a path", "-k", "-m", "--deselect"],
)
def test_a_part_of_the_suite_is_not(tmp_path: Path, args: tuple[str, ...]) -> None:
    assert scope_of(tmp_path, *args) == "part"


def test_the_floor_is_a_real_figure() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    floor = config["tool"]["coverage"]["report"]["fail_under"]
    assert 80 <= floor < 100
    assert "coverage run -m pytest" in (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
