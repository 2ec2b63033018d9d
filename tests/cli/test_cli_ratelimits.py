"""Rate limits: the CA's ``rateLimited`` + ``Retry-After`` and the ledger, seen from the CLI.

A fault-injecting proxy (``tests/faults/proxy.py``) in front of the session Pebble answers
the first ``newOrder`` with 429 ``rateLimited``. A ``Retry-After`` within ``--max-wait`` is
waited out with a countdown; a later one defers the certificate: exit code 3, the instant
printed, and kept in the state directory, so the next run does not ask the CA before it.
"""

from __future__ import annotations

import datetime as _dt
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import (
    ca_args,
    clean_environment,
    cli_env,
    http01_args,
    one_json,
    run_cli,
    run_main,
    run_many,
)

from tests.faults.proxy import RATE_LIMITED, FaultProxy, Match, Respond

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)

#: Let's Encrypt's wording for the duplicate-certificate limit: the ledger learns that it
#: binds this exact set of names (and not the account's other orders).
EXACT_SET = (
    "too many certificates (5) already issued for this exact set of identifiers in the last "
    "168h0m0s: see https://letsencrypt.org/docs/rate-limits/#new-certificates-per-exact-set-of-"
    "identifiers"
)


def limit_first_order(proxy: FaultProxy, retry_after: str) -> None:
    proxy.add_rule(
        Match("/order-plz", "POST"),
        Respond(429, RATE_LIMITED, detail=EXACT_SET, retry_after=retry_after),
        times=1,
    )


def test_a_short_wait_is_waited_out_with_a_countdown(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    limit_first_order(proxy, "4")
    started = time.monotonic()

    result = run_cli(
        "issue",
        "--out",
        str(tmp_path / "out"),
        *ca_args(pebble, tmp_path / "state", directory=proxy.directory_url),
        *http01_args(pebble),
        "cli-wait.example.test",
        env=cli_env(tmp_path),
    )

    assert result.returncode == 0, result.stderr
    assert "Certificate issued for cli-wait.example.test" in result.stdout
    # not a terminal, one certificate: the wait is one line on stderr
    assert re.fullmatch(
        r"acmecerts: cli-wait\.example\.test: rate limited by the CA: \ds "
        r"\(until \d\d:\d\d:\d\d UTC\)\n",
        result.stderr,
    ), result.stderr
    assert time.monotonic() - started >= 4
    assert [r.status for r in proxy.requests_to("/order-plz")] == [429, 201]


def test_a_long_wait_defers_exit_3_and_the_next_run_does_not_ask(
    pebble: PebbleServer,
    proxy: FaultProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    limit_first_order(proxy, "3600")
    names = ["cli-defer-a.example.test", "cli-defer-b.example.test"]
    (tmp_path / "list.txt").write_text("\n".join(names) + "\n")
    ca = ca_args(pebble, tmp_path / "state", directory=proxy.directory_url)
    args = ["issue", "--from-file", str(tmp_path / "list.txt"), "--json", *ca, *http01_args(pebble)]
    env = cli_env(tmp_path)

    first = run_cli(*args, env=env)

    assert first.returncode == 3, first.stderr
    document = one_json(first)
    assert document["status"] == "deferred"
    assert document["counts"] == {"issued": 1, "deferred": 1}
    statuses = {c["name"]: c for c in document["certificates"]}
    (deferred,) = [n for n in names if statuses[n]["status"] == "deferred"]
    (issued,) = [n for n in names if statuses[n]["status"] == "issued"]
    until = _dt.datetime.fromisoformat(statuses[deferred]["until"])
    expected = _dt.datetime.now(_dt.UTC) + _dt.timedelta(hours=1)
    assert abs(until - expected) < _dt.timedelta(seconds=30)
    assert "exact set of identifiers" in statuses[deferred]["error"]
    orders = len(proxy.requests_to("/order-plz"))
    assert orders == 2

    # The next run: the issued one is current, the deferred one still waits; not a
    # single newOrder reaches the CA before the instant it named.
    second = run_main(capsys, *args)  # in-process: faster

    assert second.returncode == 3, second.stderr
    again = {c["name"]: c for c in one_json(second)["certificates"]}
    assert again[issued]["status"] == "current"
    assert again[deferred]["status"] == "deferred"
    assert _dt.datetime.fromisoformat(again[deferred]["until"]) == until
    assert len(proxy.requests_to("/order-plz")) == orders

    # status shows the deferral and the budget the ledger learned from the CA; issuing
    # that one certificate alone defers it too (one line with the instant, exit code 3)
    status, human = run_many(
        [["status", "--json", *ca], ["issue", *ca, *http01_args(pebble), deferred]],
        envs=[env, env],
    )
    assert status.returncode == 0, status.stderr
    document = one_json(status)
    entries = {c["name"]: c for c in document["certificates"]}
    assert entries[deferred]["status"] == "deferred"
    assert _dt.datetime.fromisoformat(entries[deferred]["until"]) == until
    assert entries[issued]["status"] == "valid"
    (line,) = document["rate_limits"]["budget"]
    assert line["limit"] == "certificates_per_exact_identifier_set"
    assert line["scope"] == deferred
    assert line["remaining"] == 0
    assert abs(_dt.datetime.fromisoformat(line["next_slot"]) - until) < _dt.timedelta(seconds=2)

    assert human.returncode == 3
    assert human.stderr.startswith(
        f"acmecerts: deferred: {deferred} until {until:%Y-%m-%d %H:%M:%S} UTC: "
    )
    assert len(human.stderr.splitlines()) == 1
    assert "exact set of identifiers" in human.stderr
    assert human.stdout == ""
    assert len(proxy.requests_to("/order-plz")) == orders
