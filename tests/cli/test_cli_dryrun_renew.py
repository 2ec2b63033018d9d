"""``renew --dry-run`` against real Pebble 2.10: the whole renewal, nothing kept.

The CA is the fault proxy in front of the session Pebble (it records the JWS payloads:
``replaces`` is seen there). "Another CA" is a second Pebble behind its own proxy, made
the dry-run directory of the first by the mapping ``issue --dry-run`` uses too (Let's
Encrypt production -> staging), patched for the test: the CLI runs in this process.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cli_support import clean_environment, one_json, run_main, stored_serial
from pebble_quirks import REFUSAL_DETAIL, pebble_refuses_replaces_of

from tests.faults.proxy import FaultProxy, make_proxy, told

if TYPE_CHECKING:
    from conftest import PebbleFactory

    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(180)

NEW_ORDER, FINALIZE = "/order-plz", "/finalize-order/"


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # Pebble is trusted by --ca-bundle only


def _tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file and directory under ``root``: mode, size and content (bytes)."""
    found: dict[str, tuple[int, int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        found[str(path.relative_to(root))] = (info.st_mode, info.st_size, content)
    return found


def _issue(
    capsys: pytest.CaptureFixture[str],
    pebble: PebbleServer,
    directory: str,
    state: Path,
    *args: str,
) -> None:
    issued = run_main(
        capsys,
        "issue",
        "--json",
        "--profile",
        "classic",
        *("--directory", directory, "--ca-bundle", str(pebble.ca_bundle)),
        *("--state-dir", str(state), "--http-01-listen", f"127.0.0.1:{pebble.http_port}"),
        *args,
    )
    assert issued.returncode == 0, issued.stderr


def _orders(proxy: FaultProxy, since: int) -> list[dict[str, object]]:
    """The newOrder payloads the proxy saw after its first ``since`` requests."""
    seen = proxy.requests[since:]
    return [r.payload for r in seen if r.method == "POST" and r.path.startswith(NEW_ORDER)]


def _name(order: Any) -> str:
    """The one name a newOrder payload asks for."""
    (identifier,) = order["identifiers"]
    name = identifier["value"]
    assert isinstance(name, str)
    return name


def _finalized(proxy: FaultProxy, since: int) -> int:
    return sum(1 for r in proxy.requests[since:] if r.path.startswith(FINALIZE))


def test_renew_dry_run_at_the_same_ca_keeps_nothing_and_sends_no_replaces(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out, hook_log = tmp_path / "state", tmp_path / "out", tmp_path / "hooks.log"
    one, two = "one.dryrenew.example.test", "two.dryrenew.example.test"
    deploy = ("--deploy-hook", f"echo deploy >> {hook_log}")
    _issue(capsys, pebble, proxy.directory_url, state, one, "--out", str(out), *deploy)
    _issue(capsys, pebble, proxy.directory_url, state, two)
    hook_log.unlink()
    before = (_tree(state), _tree(out))
    # no --directory, no --ca-bundle: the CA and its bundle stored with the certificates
    only_state = ("--state-dir", str(state), "--json")

    # Nothing due (just issued): nothing is ordered, both are listed as not due.
    mark = len(proxy.requests)
    idle = run_main(capsys, "renew", "--dry-run", *only_state)
    assert idle.returncode == 0, idle.stderr
    assert f"dry run at {proxy.directory_url} itself" in idle.stderr
    document = one_json(idle)
    assert document["dry_run"] is True
    assert [(c["name"], c["status"], c["dry_run"]) for c in document["certificates"]] == [
        (one, "current", True),
        (two, "current", True),
    ]
    assert _orders(proxy, mark) == []

    # --force: the whole renewal of both, at the CA, without replaces; nothing kept.
    mark = len(proxy.requests)
    dry = run_main(capsys, "renew", "--dry-run", "--force", *only_state)
    assert dry.returncode == 0, dry.stderr
    assert "nothing is saved, exported or journaled" in dry.stderr
    entries = one_json(dry)["certificates"]
    assert [(c["name"], c["status"]) for c in entries] == [(one, "renewed"), (two, "renewed")]
    assert all(c["dry_run"] is True and c["files"] is None for c in entries)
    assert all(c["serial"] for c in entries)
    orders = _orders(proxy, mark)
    assert len(orders) == 2
    assert all("replaces" not in order for order in orders)
    assert _finalized(proxy, mark) == 2
    assert (_tree(state), _tree(out)) == before  # state, journal, ledger, files: the same
    assert not hook_log.exists()  # no deploy-hook in a dry run

    # The real renewal after it: with replaces (the CA knows the ARI certIDs), accepted
    # (the dry run did not use them up: Pebble refuses a second replacement), and kept.
    # The certificates it replaces: the ones issued (the dry run stored nothing).
    serials = {n: stored_serial(state, proxy.directory_url, n) or "" for n in (one, two)}
    assert all(serials.values()), serials
    mark = len(proxy.requests)
    real = run_main(capsys, "renew", "--force", *only_state)
    assert real.returncode == 0, real.stderr
    assert [c["status"] for c in one_json(real)["certificates"]] == ["renewed", "renewed"]
    assert "dry_run" not in one_json(real)["certificates"][0]
    # One order each, with replaces: accepted, none sent again. Except for a certificate
    # whose serial Pebble cannot find (its serial-encoding bug, tests/pebble_quirks.py):
    # its replaces is refused with Pebble's 500, and the client orders once more without.
    refused = sorted(n for n, serial in serials.items() if pebble_refuses_replaces_of(serial))
    sent = [r for r in proxy.requests[mark:] if r.method == "POST" and r.path.startswith(NEW_ORDER)]
    answers = told(sent)
    assert len(sent) == 2 + len(refused), answers
    with_replaces = {_name(r.payload): r for r in sent if "replaces" in r.payload}
    assert sorted(with_replaces) == [one, two], answers
    assert sorted(n for n, r in with_replaces.items() if r.status != 201) == refused, answers
    for name in refused:
        assert with_replaces[name].status == 500, answers
        assert REFUSAL_DETAIL.encode() in with_replaces[name].response_body, answers
    without = [r for r in sent if "replaces" not in r.payload]
    assert sorted(_name(r.payload) for r in without) == refused, answers
    assert all(r.status == 201 for r in without), answers
    assert (_tree(state), _tree(out)) != before
    assert hook_log.read_text() == "deploy\n"


def test_renew_dry_run_at_another_ca_goes_there_only(
    pebble: PebbleServer,
    proxy: FaultProxy,
    pebble_factory: PebbleFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from acmecerts.cli import _dryrun

    staging_pebble = pebble_factory()
    with make_proxy(staging_pebble) as staging:
        monkeypatch.setitem(_dryrun._STAGING, proxy.directory_url, staging.directory_url)
        state = tmp_path / "state"
        kept, chosen = "kept.dryother.example.test", "chosen.dryother.example.test"
        _issue(capsys, pebble, proxy.directory_url, state, kept)
        _issue(capsys, pebble, proxy.directory_url, state, chosen)
        before = _tree(state)
        mark = len(proxy.requests)

        dry = run_main(
            capsys,
            "renew",
            "--dry-run",
            "--json",
            *("--cert-name", chosen),  # named: rehearsed although not due
            *("--state-dir", str(state)),
            # the other Pebble has its own TLS root (Let's Encrypt's two share theirs)
            *("--ca-bundle", str(staging_pebble.ca_bundle)),
            # the other Pebble validates at its own port (options given replace the stored)
            *("--http-01-listen", f"127.0.0.1:{staging_pebble.http_port}"),
        )
        assert dry.returncode == 0, (dry.stdout, dry.stderr)
        assert f"dry run at the CA's staging directory {staging.directory_url}" in dry.stderr
        (entry,) = one_json(dry)["certificates"]
        assert (entry["name"], entry["status"], entry["dry_run"]) == (chosen, "renewed", True)
        assert entry["directory"] == staging.directory_url
        assert proxy.requests[mark:] == []  # the certificate's own CA saw nothing
        orders = _orders(staging, 0)
        assert len(orders) == 1
        assert "replaces" not in orders[0]  # its serial belongs to another CA
        assert _finalized(staging, 0) == 1
        assert staging.requests_to("/sign-me-up", "POST")  # an account there, kept nowhere
        assert _tree(state) == before
