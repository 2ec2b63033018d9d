"""One JSON shape for one certificate: ``issue``, ``renew`` and ``status`` print entries
with the same keys (``renewal_at``, ``files`` an object of paths), against Pebble 2.10."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cli_support import ca_args, clean_environment, http01_args, run_main

from acmecerts.cli._batch import CERTIFICATE_FIELDS

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)

NAME = "one-shape.example.test"


def entry(result: Any) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    (only,) = json.loads(result.stdout)["certificates"]
    assert isinstance(only, dict)
    return only


def test_issue_renew_and_status_print_one_shape(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    state, out = tmp_path / "state", tmp_path / "out"
    ca = ca_args(pebble, state)
    http = http01_args(pebble)
    issued = entry(run_main(capsys, "issue", "--json", *http, "--out", str(out), *ca, NAME))
    renewed = entry(run_main(capsys, "renew", "--json", "--force", *http, *ca, NAME))
    status = entry(run_main(capsys, "status", "--json", *ca))

    assert (issued["status"], renewed["status"], status["status"]) == ("issued", "renewed", "valid")
    assert set(issued) == set(renewed) == set(status) == set(CERTIFICATE_FIELDS)
    assert "next_renewal" not in status
    assert "deferred_until" not in status
    files = {kind: str(out / f"{kind}.pem") for kind in ("cert", "chain", "fullchain", "privkey")}
    assert issued["files"] == renewed["files"] == status["files"] == files
    assert status["serial"] == renewed["serial"]
    for document in (issued, renewed, status):
        assert document["renewal_at"] is not None
        assert document["key_type"] == status["key_type"]
