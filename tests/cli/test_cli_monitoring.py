"""Monitoring from the command line, against a real Pebble 2.10: ``status --check`` (its
exit code, ``--check-grace``, ``--at``, the ``check`` object of ``--json``) and
``--log-format json`` (each log line one JSON object with the certificate's fields).

A certificate cannot be made to age in a subprocess, and Pebble issues none already
expired: ``--at`` asks what the check says at a later instant, which is also what a person
planning ahead asks.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import ca_args, cli_env, free_port, http01_args, one_json, run_cli

from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)

NAME = "check.cli-monitoring.example.test"


def instant(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text)


def issue_shortlived(pebble: PebbleServer, tmp_path: Path) -> tuple[list[str], dict[str, Any]]:
    """Issue a ``shortlived`` (160-hour) certificate; the CA options and its entry."""
    ca = ca_args(pebble, tmp_path / "state")
    result = run_cli(
        "issue",
        *ca,
        "--out",
        str(tmp_path / "out"),
        *http01_args(pebble),
        "--profile",
        "shortlived",
        "--json",
        NAME,
        env=cli_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    (document,) = one_json(result)["certificates"]
    return ca, document


def status(tmp_path: Path, ca: list[str], *args: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("status", *ca, "--json", *args, env=cli_env(tmp_path))
    assert "Traceback" not in result.stderr
    return result.returncode, one_json(result)


def test_status_check_fails_an_overdue_or_expired_certificate_at_the_instant_asked(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    ca, issued = issue_shortlived(pebble, tmp_path)
    not_before, not_after = instant(issued["not_before"]), instant(issued["not_after"])
    renew_at = not_before + (not_after - not_before) / 2  # half the life, under 10 days

    # now: fresh, passes
    code, document = status(tmp_path, ca, "--check")
    assert code == 0
    check = document["check"]
    assert (check["ok"], check["checked"], check["failed"]) == (True, 1, [])
    assert check["grace_seconds"] == 86400  # the default, 1 day

    # 12 hours past its renewal instant: within the default grace, not with 6 hours
    late = (renew_at + _dt.timedelta(hours=12)).isoformat()
    code, document = status(tmp_path, ca, "--check", "--at", late)
    assert (code, document["check"]["ok"]) == (0, True)
    assert document["certificates"][0]["status"] == "due"
    code, document = status(tmp_path, ca, "--check", "--check-grace", "6h", "--at", late)
    assert code == 1
    (failed,) = document["check"]["failed"]
    assert (failed["name"], failed["reason"]) == (NAME, "overdue")
    assert failed["directory"] == pebble.directory_url
    assert abs(instant(failed["renew_by"]) - renew_at) <= _dt.timedelta(seconds=1)
    assert failed["not_after"] == issued["not_after"]
    assert "(grace 6h)" in failed["detail"]
    # the same without --check: status shows it and exits 0 (the check is what fails)
    code, document = status(tmp_path, ca, "--check-grace", "6h", "--at", late)
    assert (code, document["check"]) == (0, None)

    # a second after its expiry: expired, whatever the grace
    after = (not_after + _dt.timedelta(seconds=1)).isoformat()
    code, document = status(tmp_path, ca, "--check", "--check-grace", "30d", "--at", after)
    assert code == 1
    (failed,) = document["check"]["failed"]
    assert failed["reason"] == "expired"
    assert document["certificates"][0]["status"] == "expired"

    # without --json: the summary line comes first (what Nagios shows), then the table
    result = run_cli("status", *ca, "--check", "--at", after, env=cli_env(tmp_path))
    assert result.returncode == 1, result.stderr
    first, *rest = result.stdout.splitlines()
    assert first.startswith("CHECK FAILED: 1 of 1"), result.stdout
    assert f"{NAME} expired" in first
    assert any(NAME in line and "expired at" in line for line in rest)
    result = run_cli("status", *ca, "--check", env=cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("CHECK OK: 1 certificates pass"), result.stdout


def test_status_check_fails_a_revoked_certificate_until_it_is_replaced(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    ca, _ = issue_shortlived(pebble, tmp_path)
    revoked = run_cli("revoke", *ca, NAME, env=cli_env(tmp_path))
    assert revoked.returncode == 0, revoked.stderr
    code, document = status(tmp_path, ca, "--check")
    assert code == 1
    (failed,) = document["check"]["failed"]
    assert (failed["name"], failed["reason"]) == (NAME, "revoked")

    renewed = run_cli("renew", *ca, *http01_args(pebble), env=cli_env(tmp_path))
    assert renewed.returncode == 0, renewed.stderr
    code, document = status(tmp_path, ca, "--check")
    assert (code, document["check"]["ok"]) == (0, True)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--check-grace", "soon"], "--check-grace"),
        (["--check-grace", "-1h"], "--check-grace"),
        (["--at", "tomorrow"], "--at"),
    ],
)
def test_status_check_bad_input_is_exit_2(
    pebble: PebbleServer, tmp_path: Path, args: list[str], named: str
) -> None:
    ca = ca_args(pebble, tmp_path / "state")
    (tmp_path / "state").mkdir()
    result = run_cli("status", *ca, "--check", *args, env=cli_env(tmp_path))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert named in result.stderr


def test_log_format_json_writes_each_log_line_as_json_with_the_certificate_fields(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    # Pebble validates on pebble.http_port; answering on another port fails the attempt.
    name = "refused.cli-monitoring.example.test"
    port = free_port(not_=pebble.http_port)
    result = run_cli(
        "issue",
        *ca_args(pebble, tmp_path / "state"),
        "--out",
        str(tmp_path / "out"),
        *http01_args(pebble, port),
        "--log-format",
        "json",
        "-v",
        name,
        env=cli_env(tmp_path),
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert lines, "no log lines"
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert instant(record["time"]).tzinfo is not None
    (failed,) = [r for r in records if r["logger"].startswith("acmecerts.manager")]
    assert failed["level"] == "WARNING"
    assert failed["certificate"] == name
    assert failed["problem_type"] == "urn:ietf:params:acme:error:connection"
    assert failed["order_url"].startswith(pebble.directory_url.rsplit("/", 1)[0])
    assert failed["attempt"] == 1
    # the CLI tries again at its next run: the schedule's instant, in UTC
    assert instant(failed["next_at"]).utcoffset() == _dt.timedelta(0)
    # the command's own error line is a record too
    assert any(r["level"] == "ERROR" and name in r["message"] for r in records), records
