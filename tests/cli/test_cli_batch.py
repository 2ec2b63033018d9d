"""``issue --from-file`` (parallel, with progress), ``renew``, ``revoke`` and ``status``.

One batch of ten certificates is issued once for the module; the tests that change the
state directory work on a copy of it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    CLI,
    NEW_ORDER,
    ca_args,
    check_certificate,
    clean_environment,
    cli_env,
    http01_args,
    mode,
    one_json,
    run_cli,
    run_main,
    run_many,
    run_on_terminal,
    serial_of,
    stored_serial,
)

from acmecerts.cli import main
from acmecerts.cli._state import State

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)

BATCH = [(f"batch{i}.example.test", f"www.batch{i}.example.test") for i in range(10)]


def write_list(path: Path, certificates: list[tuple[str, ...]]) -> Path:
    lines = ["# certificates for the batch test", ""]
    lines += [" ".join(names) + f"   # number {i}" for i, names in enumerate(certificates)]
    path.write_text("\n".join(lines) + "\n")
    return path


class Batch:
    """The module's batch: its state directory, export directory and the first run."""

    def __init__(self, root: Path, result: subprocess.CompletedProcess[str]) -> None:
        self.root = root
        self.state = root / "state"
        self.out = root / "out"
        self.result = result

    def copy(self, tmp_path: Path, directory_url: str) -> tuple[Path, Path]:
        """A private copy of the state and of the exported files, whose records name the copy.

        A test that renews or revokes works on it, so the module's batch stays as issued
        for the other tests, whatever order they run in.
        """
        state, out = tmp_path / "state", tmp_path / "out"
        shutil.copytree(self.state, state, symlinks=True)
        shutil.copytree(self.out, out, symlinks=True)

        async def repoint() -> None:
            copied = State(state, directory_url)
            for record in await copied.list_records():
                if record.out is not None and Path(record.out).parent == self.out:
                    moved = dataclasses.replace(record, out=str(out / Path(record.out).name))
                    await copied.save_record(moved)

        anyio.run(repoint)
        return state, out


@pytest.fixture(scope="module")
def batch(pebble: PebbleServer, tmp_path_factory: pytest.TempPathFactory) -> Batch:
    root = tmp_path_factory.mktemp("cli-batch")
    file = write_list(root / "certificates.txt", BATCH)
    result = run_cli(
        "issue",
        "--from-file",
        str(file),
        "--out",
        str(root / "out"),
        "--concurrency",
        "4",
        *ca_args(pebble, root / "state"),
        *http01_args(pebble),
        env=cli_env(root),
        timeout=80,
    )
    return Batch(root, result)


def test_from_file_issues_every_certificate_in_parallel(pebble: PebbleServer, batch: Batch) -> None:
    result = batch.result
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    # Not a terminal: plain time-stamped lines, one per change of each certificate.
    for names in BATCH:
        name = names[0]
        states = [
            line.split(f" {name}: ", 1)[1].split(":")[0] for line in lines if f" {name}: " in line
        ]
        assert states == ["ordering", "validating", "finalizing", "done"], (name, lines)
        check_certificate(batch.out / name, set(names), pebble.root_pem())
        assert mode(batch.out / name / "privkey.pem") == 0o600
        # stored in the state directory (the manager's FileStorage) as well
        assert stored_serial(batch.state, pebble.directory_url, name) == serial_of(batch.out / name)
    assert re.match(r"\d\d:\d\d:\d\d batch\d\.example\.test: ordering", lines[0])
    assert lines[-1] == "Issued 10 certificates: 10 issued"
    # No ANSI escape sequences when stdout is not a terminal.
    assert "\x1b[" not in result.stdout


def test_status_json_lists_the_certificates_and_the_budget(
    pebble: PebbleServer, batch: Batch
) -> None:
    result = run_cli("status", "--json", *ca_args(pebble, batch.state), env=cli_env(batch.root))

    assert result.returncode == 0, result.stderr
    document = one_json(result)
    assert document["directory"] == pebble.directory_url
    assert document["state_dir"] == str(batch.state)
    assert document["account"]["url"].startswith("https://127.0.0.1:")
    certificates = {c["name"]: c for c in document["certificates"]}
    assert set(certificates) == {names[0] for names in BATCH}
    now = _dt.datetime.now(_dt.UTC)
    for names in BATCH:
        cert = certificates[names[0]]
        assert cert["names"] == list(names)
        assert cert["status"] == "valid"
        assert cert["serial"] == serial_of(batch.out / names[0])
        not_before = _dt.datetime.fromisoformat(cert["not_before"])
        not_after = _dt.datetime.fromisoformat(cert["not_after"])
        renewal = _dt.datetime.fromisoformat(cert["renewal_at"])
        assert not_before <= now < renewal < not_after
        # status without --ari: a third of the lifetime before expiry, half of it under 10
        # days (Pebble picked the profile at random: 90 d, 45 d or 160 h)
        part = 2 if not_after - not_before < _dt.timedelta(days=10) else 3
        assert abs(renewal - (not_after - (not_after - not_before) / part)) < _dt.timedelta(
            seconds=1
        )
        assert cert["renewal_source"] == "fallback"
        assert cert["until"] is None
        assert cert["files"]["fullchain"] == str(batch.out / names[0] / "fullchain.pem")
    assert document["rate_limits"] == {"model": "no-limits", "budget": []}


def test_renew_revoke_and_renew_again(
    pebble: PebbleServer,
    batch: Batch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    state, out = batch.copy(tmp_path, pebble.directory_url)
    env = cli_env(tmp_path)
    common = [*ca_args(pebble, state), *http01_args(pebble)]
    serials = {names[0]: serial_of(out / names[0]) for names in BATCH}

    # Nothing is due: nothing is ordered, and the files are written again where they were.
    seen = len(pebble.requests_seen())
    first = run_main(capsys, "renew", "--json", *common)  # in-process: faster
    assert first.returncode == 0, first.stderr
    document = one_json(first)
    assert document["counts"] == {"current": 10}
    assert NEW_ORDER not in pebble.requests_seen()[seen:]

    # Revoke one by name and one by the path of its exported files (at once).
    ca = ca_args(pebble, state)
    by_name, by_path = run_many(
        [
            ["revoke", "batch1.example.test", "--reason", "keyCompromise", *ca],
            ["revoke", str(out / "batch2.example.test" / "cert.pem"), "--json", *ca],
        ],
        envs=[env, env],
    )
    assert by_name.returncode == 0, by_name.stderr
    assert "Certificate revoked" in by_name.stdout
    assert serials["batch1.example.test"] in by_name.stdout
    assert by_path.returncode == 0, by_path.stderr
    revoked = one_json(by_path)
    assert revoked["serial"] == serials["batch2.example.test"]
    assert revoked["stored_name"] == "batch2.example.test"
    assert revoked["reason"] == "unspecified"

    # renew: exactly the revoked ones are renewed (new serials, files rewritten).
    second = run_cli("renew", "--json", *common, env=env)
    assert second.returncode == 0, second.stderr
    statuses = {c["name"]: c["status"] for c in one_json(second)["certificates"]}
    renewed = {n for n, s in statuses.items() if s == "renewed"}
    assert renewed == {"batch1.example.test", "batch2.example.test"}
    for name in renewed:
        assert serial_of(out / name) != serials[name]
        assert stored_serial(state, pebble.directory_url, name) == serial_of(out / name)

    # --force renews a certificate that is not due.
    forced = run_main(capsys, "renew", "batch3.example.test", "--force", *common)
    assert forced.returncode == 0, forced.stderr
    assert "Checked 1 certificate: 1 renewed" in forced.stdout
    assert serial_of(out / "batch3.example.test") != serials["batch3.example.test"]


def test_renew_of_an_unknown_name_is_bad_input(
    pebble: PebbleServer, batch: Batch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = len(pebble.requests_seen())
    code = main(["renew", "nope.example.test", *ca_args(pebble, batch.state)])  # in-process
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("acmecerts: error: no certificate named nope.example.test")
    assert len(captured.err.splitlines()) == 1
    assert len(pebble.requests_seen()) == seen


def test_the_progress_display_on_a_terminal(pebble: PebbleServer, tmp_path: Path) -> None:
    certificates = [(f"tty{i}.example.test",) for i in range(4)]
    file = write_list(tmp_path / "list.txt", certificates)
    env = cli_env(tmp_path, COLUMNS="120", LINES="40", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    returncode, raw, text = run_on_terminal(
        [
            *CLI,
            "issue",
            "--from-file",
            str(file),
            "--concurrency",
            "2",
            *ca_args(pebble, tmp_path / "state"),
            *http01_args(pebble),
        ],
        env,
    )

    assert returncode == 0, text
    assert "\x1b[" in raw  # a live display: the cursor moves and colours change
    for (name,) in certificates:
        # each finished certificate stays on the screen with its state
        assert re.search(rf"{re.escape(name)}\s+done: expires", text), text
    # the live lines show the stages in between, and a tally
    assert re.search(r"tty\d\.example\.test\s+(ordering|validating|finalizing)", text), text
    assert "Issuing: 4/4 finished" in text
    assert "Issued 4 certificates: 4 issued" in text
