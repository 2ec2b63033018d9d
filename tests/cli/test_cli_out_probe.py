"""``--out`` is tried, not guessed: a directory that cannot be created is exit 2 before any
order, even for ``root`` (whom every permission bit lets through), and a probe that works
leaves nothing behind."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import (
    NEW_ORDER,
    assert_one_line_error,
    ca_args,
    clean_environment,
    http01_args,
    run_main,
)

from acmecerts.cli._firstcontact import check_out_dir
from acmecerts.errors import InvalidInput

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)


def count(pebble: PebbleServer, since: int, request: tuple[str, str]) -> int:
    return pebble.requests_seen()[since:].count(request)


@pytest.mark.parametrize("out", ["/proc/x", "/proc/acmecerts/deeper"])
def test_an_out_that_cannot_be_created_is_exit_2_and_no_order(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    out: str,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    state = tmp_path / "state"
    seen = len(pebble.requests_seen())

    result = run_main(
        capsys, "issue", *http01_args(pebble), "--out", out, *ca_args(pebble, state), "proc.test"
    )

    line = assert_one_line_error(result, 2)
    assert out in line
    assert count(pebble, seen, NEW_ORDER) == 0
    assert pebble.requests_seen()[seen:] == []  # nothing at all was sent
    assert not state.exists()


def test_a_probe_that_works_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "out"
    check_out_dir(out)
    assert list(tmp_path.iterdir()) == []  # the directories it made were removed again

    existing = tmp_path / "existing"
    existing.mkdir()
    check_out_dir(existing)
    assert list(existing.iterdir()) == []  # the probe file is gone too


def test_the_probe_names_what_failed() -> None:
    with pytest.raises(InvalidInput, match=r"--out /proc/x is unusable: .*No such file"):
        check_out_dir(Path("/proc/x"))


def test_instants_are_shown_to_the_second_rounded_up() -> None:
    import datetime as dt

    from acmecerts._time import show_instant, whole_second
    from acmecerts.cli._report import iso, when

    exact = dt.datetime(2026, 12, 2, 1, 2, 3, tzinfo=dt.UTC)
    later = exact.replace(microsecond=1)
    assert whole_second(later) == exact + dt.timedelta(seconds=1)  # never shown earlier
    assert whole_second(exact) == exact
    assert iso(later) == "2026-12-02T01:02:04+00:00"
    assert when(later) == show_instant(later) == "2026-12-02 01:02:04 UTC"
    east = dt.timezone(dt.timedelta(hours=2))
    assert iso(exact.astimezone(east)) == "2026-12-02T01:02:03+00:00"  # always UTC
