"""Checking an export directory before anything is ordered (acmecerts/storage/export.py):
``export_dir_problem`` tries the directory for real and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from acmecerts.storage.export import export_dir_problem, unwritable_dir

pytestmark = pytest.mark.timeout(30)


def test_a_missing_directory_that_can_be_made_passes_and_is_not_left_behind(
    tmp_path: Path,
) -> None:
    out = tmp_path / "a" / "b" / "out"
    assert export_dir_problem(out) is None
    assert list(tmp_path.iterdir()) == []  # the trial directories are gone again
    (tmp_path / "kept").mkdir()
    assert export_dir_problem(tmp_path / "kept") is None
    assert list((tmp_path / "kept").iterdir()) == []  # no probe file left


def test_a_file_in_the_way_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert export_dir_problem(tmp_path / "file") == "it is a file, not a directory"
    reason = export_dir_problem(tmp_path / "file" / "out")
    assert reason == f"{tmp_path / 'file'} is a file, not a directory"
    assert unwritable_dir(tmp_path / "file" / "out") == reason


def test_a_directory_that_cannot_be_created_is_refused_even_for_root() -> None:
    # root passes every access(2) check, yet /proc takes no new directory
    reason = export_dir_problem(Path("/proc/acmecerts-export-probe"))
    assert reason is not None
    assert unwritable_dir(Path("/proc/acmecerts-export-probe")) is None  # only trying tells
