"""``--profile`` and ``--preferred-profile`` against a real Pebble 2.10: a required profile
the CA lacks exits 2 with nothing ordered, a preferred one falls back to the CA's default,
and ``renew`` orders the profile the certificate was issued with."""

from __future__ import annotations

import datetime as dt
import json
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
    serial_of,
)
from cryptography import x509

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)


def lifetime(out: Path) -> dt.timedelta:
    (leaf,) = x509.load_pem_x509_certificates((out / "cert.pem").read_bytes())
    return leaf.not_valid_after_utc - leaf.not_valid_before_utc


def near(value: dt.timedelta, want: dt.timedelta) -> bool:
    return abs(value - want) <= dt.timedelta(minutes=1)


def record(state: Path, name: str) -> dict[str, object]:
    """The CLI's record of certificate ``name`` (``<ca>/accounts/default/cli/NAME.json``)."""
    (path,) = state.glob(f"*/accounts/default/cli/{name}.json")
    _header, body = path.read_text().split("\n", 1)  # the store's checksum line, then JSON
    document: dict[str, object] = json.loads(body)
    return document


def test_a_profile_the_ca_lacks_exits_2_and_orders_nothing(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = pebble.requests_seen().count(NEW_ORDER)
    result = run_main(
        capsys,
        "issue",
        "lacks.cli-profiles.example.test",
        *ca_args(pebble, tmp_path / "state"),
        *http01_args(pebble),
        "--profile",
        "longlived",
    )
    line = assert_one_line_error(result, 2)
    assert "'longlived'" in line
    assert "classic, shortlived, tlsserver" in line
    assert pebble.requests_seen().count(NEW_ORDER) == before


def test_profile_and_preferred_profile_together_exit_2(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_main(
        capsys,
        "issue",
        "both.cli-profiles.example.test",
        *ca_args(pebble, tmp_path / "state"),
        "--profile",
        "classic",
        "--preferred-profile",
        "tlsserver",
    )
    assert "--profile or --preferred-profile" in assert_one_line_error(result, 2)


def test_renew_orders_the_profile_the_certificate_was_issued_with(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    name = "renew.cli-profiles.example.test"
    result = run_main(
        capsys,
        "issue",
        name,
        *ca_args(pebble, state),
        *http01_args(pebble),
        "--out",
        str(out),
        "--profile",
        "shortlived",
    )
    assert result.returncode == 0, result.stderr
    assert near(lifetime(out), dt.timedelta(hours=160))
    first = serial_of(out)
    stored = record(state, name)
    assert (stored["profile"], stored["profile_required"]) == ("shortlived", True)
    # renew names no profile: the record's is ordered (an order without one gets a
    # random profile at Pebble, so three renewals all at 160 h are no accident)
    for _ in range(3):
        result = run_main(
            capsys, "renew", "--state-dir", str(state), *http01_args(pebble), "--force"
        )
        assert result.returncode == 0, result.stderr
        assert near(lifetime(out), dt.timedelta(hours=160))
    assert serial_of(out) != first


def test_a_preferred_profile_the_ca_lacks_falls_back_and_is_kept_preferred(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    name = "preferred.cli-profiles.example.test"
    before = pebble.requests_seen().count(NEW_ORDER)
    result = run_main(
        capsys,
        "issue",
        name,
        *ca_args(pebble, state),
        *http01_args(pebble),
        "--out",
        str(out),
        "--preferred-profile",
        "longlived",
    )
    assert result.returncode == 0, result.stderr
    assert pebble.requests_seen().count(NEW_ORDER) == before + 1
    assert "offers no profile 'longlived'" in result.stderr
    stored = record(state, name)
    assert (stored["profile"], stored["profile_required"]) == ("longlived", False)
    result = run_main(capsys, "renew", "--state-dir", str(state), *http01_args(pebble), "--force")
    assert result.returncode == 0, result.stderr  # still preferred: not refused


def test_a_preferred_profile_the_ca_offers_is_ordered(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    result = run_main(
        capsys,
        "issue",
        "offered.cli-profiles.example.test",
        *ca_args(pebble, tmp_path / "state"),
        *http01_args(pebble),
        "--out",
        str(out),
        "--preferred-profile",
        "tlsserver",
    )
    assert result.returncode == 0, result.stderr
    assert near(lifetime(out), dt.timedelta(days=45))
