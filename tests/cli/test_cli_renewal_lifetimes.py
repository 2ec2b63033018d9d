"""The CLI's renewal instant for Let's Encrypt's lifetimes, against a real Pebble 2.10.

``issue --json`` reports when the certificate will be renewed (``renewal_at``, the
manager's plan) and ``status --json`` when it is due (``renewal_at`` too). Without ARI both
say half the life for a ``shortlived`` (160-hour) certificate and two thirds of it for a
``classic`` (90-day) one. Pebble 2.10 serves ARI, so the CLI talks to it through the
fault proxy, which answers every ``renewalInfo`` GET with 404; ``status --ari`` once
the proxy lets Pebble's ``renewalInfo`` answer shows the CA's window instead.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

import pytest
from cli_support import ca_args, cli_env, http01_args, one_json, run_cli

from acmecerts.testing import PebbleServer
from tests.faults.proxy import AriAnswer, FaultProxy, Match, Respond

pytestmark = pytest.mark.timeout(90)

RENEWAL_INFO = "/draft-ietf-acme-ari-03/renewalInfo/"
SECOND = _dt.timedelta(seconds=1)


def instant(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text)


def part_of_life(document: dict[str, Any], part: float) -> _dt.datetime:
    not_before, not_after = instant(document["not_before"]), instant(document["not_after"])
    return not_before + (not_after - not_before) * part


def test_without_ari_issue_and_status_say_half_for_shortlived_two_thirds_for_classic(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.add_rule(
        Match(RENEWAL_INFO, "GET"),
        Respond(404, "urn:ietf:params:acme:error:malformed", "no renewal information"),
        times=None,
    )
    state = tmp_path / "state"
    ca = ca_args(pebble, state, directory=proxy.directory_url)
    issued = {}
    for profile in ("shortlived", "classic"):
        name = f"{profile}.cli-lifetimes.example.test"
        result = run_cli(
            "issue",
            *ca,
            "--out",
            str(tmp_path / profile),
            *http01_args(pebble),
            "--profile",
            profile,
            "--json",
            name,
            env=cli_env(tmp_path),
        )
        assert result.returncode == 0, result.stderr
        (document,) = one_json(result)["certificates"]
        issued[profile] = document
    short, classic = issued["shortlived"], issued["classic"]
    assert (
        instant(short["not_after"]) - instant(short["not_before"])
        == _dt.timedelta(hours=160) - SECOND
    )
    assert abs(instant(short["renewal_at"]) - part_of_life(short, 1 / 2)) <= SECOND
    assert abs(instant(classic["renewal_at"]) - part_of_life(classic, 2 / 3)) <= SECOND

    result = run_cli("status", "--json", *ca, env=cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in one_json(result)["certificates"]}
    for profile, part in (("shortlived", 1 / 2), ("classic", 2 / 3)):
        row = rows[f"{profile}.cli-lifetimes.example.test"]
        assert (row["status"], row["renewal_source"]) == ("valid", "fallback")
        assert abs(instant(row["renewal_at"]) - part_of_life(row, part)) <= SECOND, profile
    # the manager asked the CA for both windows and was refused (status did not ask)
    assert {r.status for r in proxy.requests_to(RENEWAL_INFO, "GET")} == {404}
    assert len(proxy.requests_to(RENEWAL_INFO, "GET")) == 2

    # status --ari while renewalInfo still fails: the fallback
    result = run_cli("status", "--json", "--ari", *ca, env=cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    row = {r["name"]: r for r in one_json(result)["certificates"]}[
        "shortlived.cli-lifetimes.example.test"
    ]
    assert row["renewal_source"] == "fallback"
    # ...and once Pebble's renewalInfo answers: its window (a third left, ±24 h) wins
    proxy.clear_rules()
    result = run_cli("status", "--json", "--ari", *ca, env=cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    row = {r["name"]: r for r in one_json(result)["certificates"]}[
        "shortlived.cli-lifetimes.example.test"
    ]
    assert row["renewal_source"] == "ari"
    start, end = (instant(t) for t in row["renewal_window"])
    assert start <= instant(row["renewal_at"]) <= end
    assert part_of_life(row, 1 / 2) < start  # later than the fallback would have said


def test_status_shows_the_cas_explanation_of_a_window_moved_into_the_past(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    ca = ca_args(pebble, state, directory=proxy.directory_url)
    name = "revoked-soon.cli-lifetimes.example.test"
    args = ["--out", str(tmp_path / "out"), *http01_args(pebble), "--json", name]
    result = run_cli("issue", *ca, *args, env=cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    # a mass revocation: the CA moves the window into the past and says why
    now = _dt.datetime.now(_dt.UTC)
    why = "https://ca.example/incident-2026-12"
    proxy.add_rule(
        Match(RENEWAL_INFO, "GET"),
        AriAnswer(now - _dt.timedelta(days=2), now - _dt.timedelta(days=1), explanation_url=why),
        times=None,
    )
    result = run_cli("status", "--ari", "--json", *ca, env=cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    (row,) = one_json(result)["certificates"]
    assert (row["status"], row["renewal_source"]) == ("due", "ari")
    assert row["renewal_explanation"] == why
    text = run_cli("status", "--ari", *ca, env=cli_env(tmp_path, COLUMNS="400"))
    assert text.returncode == 0, text.stderr
    assert f"the CA explains: {why}" in text.stdout
