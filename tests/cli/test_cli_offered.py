"""``issue`` when the CA offers only challenge types the ``--challenge`` given does not answer.

The fault proxy strips http-01 from Pebble 2.10's authorizations (the CA offers only
tls-alpn-01). The run fails with exit 1 (an order was created: not bad input), naming the
offered type and the options that answer it; the stored attempt state is a retry with a
next instant, not parked; the next run contacts the CA again, and one with
``--challenge tls-alpn-01`` is issued at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    assert_one_line_error,
    ca_args,
    check_certificate,
    cli_env,
    http01_args,
    one_json,
    run_cli,
)

from acmecerts.retry import AttemptState
from acmecerts.storage import FileStorage, KeyLayout
from tests.faults.proxy import FaultProxy, Match, only_challenges

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)

NAME = "offered.cli.example.test"


def stored_attempt(state: Path, directory_url: str, name: str) -> AttemptState | None:
    """The attempt state the CLI stored for ``name`` (read with the library)."""

    async def read() -> AttemptState | None:
        value = await FileStorage(state).load(KeyLayout(directory_url).attempt_state(name))
        return None if value is None else AttemptState.from_json(json.loads(value.data))

    return anyio.run(read)


def test_the_offered_types_are_named_and_another_challenge_is_tried_at_once(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.add_rule(Match("/authZ/", "POST"), only_challenges("tls-alpn-01"), times=None)
    state = tmp_path / "state"
    common = [
        "issue",
        *ca_args(pebble, state, directory=proxy.directory_url),
        "--out",
        str(tmp_path / "out"),
    ]
    env = cli_env(tmp_path)

    first = run_cli(*common, *http01_args(pebble), NAME, env=env)

    line = assert_one_line_error(first, 1)  # an order was created: 1, not 2
    assert f"the CA offered tls-alpn-01 only for {NAME}" in line
    assert "this run answered http-01" in line
    assert "--challenge tls-alpn-01" in line
    assert len(proxy.requests_to("/order-plz", "POST")) == 1
    stored = stored_attempt(state, proxy.directory_url, NAME)
    assert stored is not None
    assert stored.parked is None  # retrying, not parked
    assert stored.next_attempt_at is not None
    assert stored.attempts == 1
    assert stored.last_error is not None
    assert stored.last_error.startswith("NoSolverForChallenges: the CA offered tls-alpn-01")

    # the same options again: the CA is asked again (nothing replayed from the state)
    again = run_cli(*common, *http01_args(pebble), "--json", NAME, env=env)
    assert again.returncode == 1, again.stderr
    document = one_json(again)
    assert document["status"] == "failed"
    assert "--challenge tls-alpn-01" in document["certificates"][0]["error"]
    assert len(proxy.requests_to("/order-plz", "POST")) == 2

    # another --challenge: issued at once
    tls = ["--challenge", "tls-alpn-01", "--tls-alpn-01-listen", f"127.0.0.1:{pebble.tls_port}"]
    second = run_cli(*common, *tls, "--json", NAME, env=env)

    assert second.returncode == 0, second.stderr
    assert one_json(second)["certificates"][0]["status"] == "issued"
    assert len(proxy.requests_to("/order-plz", "POST")) == 3
    check_certificate(tmp_path / "out", {NAME}, pebble.root_pem())
    assert stored_attempt(state, proxy.directory_url, NAME) is None  # the fresh state
