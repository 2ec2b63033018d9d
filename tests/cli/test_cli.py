"""``acmecerts issue NAME...``: the real command, run as a subprocess against the session Pebble.

Exit codes: 0 issued (or current), 1 the CA refused (its problem detail printed), 2 bad
input (one line on stderr, no traceback, and not a single request to the CA), 130
interrupted. The state directory is the library's ``FileStorage`` (``KeyLayout``).
"""

from __future__ import annotations

import datetime as _dt
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    NEW_ACCOUNT,
    NEW_ORDER,
    REPO,
    assert_one_line_error,
    ca_args,
    check_certificate,
    clean_environment,
    cli_env,
    finish,
    free_port,
    http01_args,
    mode,
    one_json,
    run_cli,
    run_main,
    stored_account,
    stored_serial,
)
from waits import wait_ready

from acmecerts.cli import main
from acmecerts.cli._batch import CLEANED_UP
from acmecerts.cli._state import directory_slug
from acmecerts.protocol.keys import AccountKey
from acmecerts.storage import FileStorage, KeyLayout, save_account_url

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(60)


def issue_args(
    pebble: PebbleServer, tmp_path: Path, *names: str, listen_port: int | None = None
) -> list[str]:
    return [
        "issue",
        *ca_args(pebble, tmp_path / "state"),
        "--out",
        str(tmp_path / "out"),
        *http01_args(pebble, listen_port),
        *names,
    ]


def account_files(pebble: PebbleServer, tmp_path: Path) -> Path:
    """``<state>/<ca>/accounts/default``: where the account key and URL are stored."""
    return tmp_path / "state" / KeyLayout(pebble.directory_url).account_prefix


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)


def one_line(capsys: pytest.CaptureFixture[str], code: int, expected: int) -> str:
    """The one ``acmecerts: error:`` line of an in-process run (nothing on stdout)."""
    captured = capsys.readouterr()
    assert code == expected, captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("acmecerts: error: ")
    assert captured.out == ""
    return lines[0]


# -- success --------------------------------------------------------------------------------


def test_issue_writes_the_files_and_stores_the_certificate(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    names = {"cli-files.example.test", "www.cli-files.example.test"}
    result = run_cli(*issue_args(pebble, tmp_path, *sorted(names)))

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "Certificate issued for" in result.stdout
    out = tmp_path / "out"
    leaf = check_certificate(out, names, pebble.root_pem())
    assert mode(out / "privkey.pem") == 0o600
    for public in ("cert.pem", "chain.pem", "fullchain.pem"):
        assert mode(out / public) == 0o644
        assert str(out / public) in result.stdout
    assert mode(out) == 0o700
    assert sorted(p.name for p in out.iterdir()) == [
        ".live",
        ".v1",
        "cert.pem",
        "chain.pem",
        "fullchain.pem",
        "privkey.pem",
    ]  # no temporary files left behind: four symlinks into the set .live names
    # The state directory is the manager's FileStorage: the library reads what the CLI wrote.
    state = tmp_path / "state"
    key, url = stored_account(state, pebble.directory_url)
    assert key is not None
    assert url is not None
    assert url.startswith(pebble.directory_url.removesuffix("/dir"))
    assert mode(account_files(pebble, tmp_path) / "key.pem") == 0o600
    name = "cli-files.example.test"
    assert stored_serial(state, pebble.directory_url, name) == format(leaf.serial_number, "x")


def test_json_prints_exactly_one_object(pebble: PebbleServer, tmp_path: Path) -> None:
    result = run_cli(*issue_args(pebble, tmp_path, "cli-json.example.test"), "--json")

    assert result.returncode == 0, result.stderr
    top = one_json(result)
    # one certificate prints the batch's shape: a list of one
    assert (top["status"], top["exit_code"], top["error"]) == ("ok", 0, None)
    assert top["counts"] == {"issued": 1}
    (document,) = top["certificates"]
    assert document["status"] == "issued"
    assert document["name"] == "cli-json.example.test"
    assert document["names"] == ["cli-json.example.test"]
    out = tmp_path / "out"
    assert document["files"] == {
        "cert": str(out / "cert.pem"),
        "chain": str(out / "chain.pem"),
        "fullchain": str(out / "fullchain.pem"),
        "privkey": str(out / "privkey.pem"),
    }
    leaf = check_certificate(out, {"cli-json.example.test"}, pebble.root_pem())
    assert int(document["serial"], 16) == leaf.serial_number
    assert _dt.datetime.fromisoformat(document["not_after"]) == leaf.not_valid_after_utc
    assert _dt.datetime.fromisoformat(document["not_before"]) == leaf.not_valid_before_utc
    # Pebble 2.10's ARI window: a day either side of a third of the lifetime left (its
    # RenewalInfoSimple); the renewal is a random instant in it (RFC 9773 section 4.2)
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    renewal = _dt.datetime.fromisoformat(document["renewal_at"])
    expected = leaf.not_valid_after_utc - lifetime / 3
    assert abs(renewal - expected) <= _dt.timedelta(days=1, seconds=2)
    assert document["order_url"].startswith("https://127.0.0.1:")
    assert document["certificate_url"].startswith("https://127.0.0.1:")


def test_a_current_certificate_is_kept_and_force_orders_a_new_one(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*issue_args(pebble, tmp_path, "cli-reuse.example.test"), "--json"]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    key_before, url_before = stored_account(tmp_path / "state", pebble.directory_url)
    seen = pebble.requests_seen()

    # Not due for renewal: nothing is ordered, the stored certificate is written again.
    (tmp_path / "out" / "cert.pem").unlink()
    second = run_main(capsys, *args)  # in-process: faster

    assert second.returncode == 0, second.stderr
    (kept,) = one_json(second)["certificates"]
    (issued,) = one_json(first)["certificates"]
    assert kept["status"] == "current"
    assert kept["serial"] == issued["serial"]
    assert (tmp_path / "out" / "cert.pem").exists()
    new_requests = pebble.requests_seen()[len(seen) :]
    assert NEW_ORDER not in new_requests
    assert NEW_ACCOUNT not in new_requests

    third = run_cli(*args, "--force")

    assert third.returncode == 0, third.stderr
    assert one_json(third)["certificates"][0]["serial"] != issued["serial"]
    assert stored_account(tmp_path / "state", pebble.directory_url) == (key_before, url_before)
    assert pebble.requests_seen()[len(seen) :].count(NEW_ACCOUNT) == 0


def test_a_stale_account_url_is_registered_again(pebble: PebbleServer, tmp_path: Path) -> None:
    # The CA no longer knows the stored account (e.g. it was reset): the key registers again.
    key = AccountKey.generate()
    gone = pebble.directory_url.removesuffix("/dir") + "/my-account/does-not-exist"

    async def store() -> None:
        storage, layout = FileStorage(tmp_path / "state"), KeyLayout(pebble.directory_url)
        await storage.store(layout.account_key(), key.to_pem(), secret=True)
        await save_account_url(storage, layout, gone, account_key=key)

    anyio.run(store)

    result = run_cli(*issue_args(pebble, tmp_path, "cli-stale.example.test"))

    assert result.returncode == 0, result.stderr
    assert "no longer exists" in result.stderr
    stored_key, url = stored_account(tmp_path / "state", pebble.directory_url)
    assert stored_key == key
    assert url is not None
    assert url != gone


def test_a_first_cut_account_is_imported_with_settings_from_the_environment(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    # <state>/accounts/<slug>/account.key, as the first CLI wrote it
    legacy = tmp_path / "state" / "accounts" / directory_slug(pebble.directory_url)
    legacy.mkdir(parents=True)
    key = AccountKey.generate()
    (legacy / "account.key").write_bytes(key.to_pem())
    requests_before = len(pebble.requests_seen())
    env = cli_env(
        tmp_path,
        ACMECERTS_DIRECTORY=pebble.directory_url,
        ACMECERTS_CA_BUNDLE=str(pebble.ca_bundle),
        ACMECERTS_STATE_DIR=str(tmp_path / "state"),
        ACMECERTS_HTTP_01_LISTEN=f"127.0.0.1:{pebble.http_port}",
    )

    result = run_cli("issue", "CLI-Env.Example.Test", env=env)

    assert result.returncode == 0, result.stderr
    stored_key, url = stored_account(tmp_path / "state", pebble.directory_url)
    assert stored_key == key  # the same account key, now in the store
    assert url is not None
    assert pebble.requests_seen()[requests_before:].count(NEW_ACCOUNT) == 1
    assert (legacy / "account.key").read_bytes() == key.to_pem()  # left as it was
    # no --out: <state>/certificates/<first name>
    out = tmp_path / "state" / "certificates" / "cli-env.example.test"
    check_certificate(out, {"cli-env.example.test"}, pebble.root_pem())
    assert mode(out / "privkey.pem") == 0o600


# -- bad input: exit 2, one line, nothing sent ----------------------------------------------


BAD_INPUT = [
    ([], ["bad..name.example"], "empty label"),
    ([], ["good.example.test", "bad_name.example.test"], "bad_name.example.test"),
    ([], ["localhost"], "at least two labels"),
    ([], ["*.wild.example.test"], "wildcard"),
    (["--http-01-listen", "80"], ["ok.example.test"], "HOST:PORT"),
    (["--http-01-listen", "127.0.0.1:http"], ["ok.example.test"], "port"),
    (["--http-01-listen", "127.0.0.1:70000"], ["ok.example.test"], "port"),
    (["--http-01-listen", "::1:80"], ["ok.example.test"], "brackets"),
    (["--key-type", "dsa1024"], ["ok.example.test"], "unknown key type"),
    (["--ca-bundle", "/nonexistent/ca.pem"], ["ok.example.test"], "/nonexistent/ca.pem"),
    (["--timeout", "0"], ["ok.example.test"], "--timeout"),
    (["--max-wait", "-1"], ["ok.example.test"], "--max-wait"),
    (["--concurrency", "0"], ["ok.example.test"], "--concurrency"),
    (["--email", "not-an-address"], ["ok.example.test"], "--email"),
    (["--directory", "http://127.0.0.1/dir"], ["ok.example.test"], "https://"),
    (["--challenge", "dns-02"], ["ok.example.test"], "--challenge"),
    (["--challenge", "dns-01"], ["ok.example.test"], "--dns-hook"),
    (["--challenge", "dns-01", "--dns-hook", "/nonexistent/hook"], ["ok.example.test"], "hook"),
    (
        ["--challenge", "dns-01", "--dns-rfc2136-server", "127.0.0.1:53", "--dns-tsig-key", "k"],
        ["ok.example.test"],
        "--dns-tsig-secret",
    ),
    (["--challenge", "dns-01", "--dns-hook", "true"], ["127.0.0.1"], "IP address"),
    (["--eab-kid", "kid-1"], ["ok.example.test"], "--eab-hmac-key"),
    (["--from-file", "/nonexistent/list.txt"], [], "/nonexistent/list.txt"),
    (["--from-file", "/dev/null"], ["ok.example.test"], "not both"),
    (["--no-such-option"], ["ok.example.test"], "--no-such-option"),
    ([], [], "NAME"),
]


@pytest.mark.parametrize(("extra", "names", "message"), BAD_INPUT)
def test_bad_input_exits_2_without_contacting_the_ca(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    names: list[str],
    message: str,
) -> None:
    # In-process (the same main() as the console script) to keep the suite fast; the
    # subprocess test below shows the process behaves the same.
    requests_before = len(pebble.requests_seen())

    code = main([*issue_args(pebble, tmp_path), *extra, *names])

    assert message in one_line(capsys, code, 2)
    assert len(pebble.requests_seen()) == requests_before
    assert not (tmp_path / "state").exists()


def test_bad_input_in_a_process_with_json(pebble: PebbleServer, tmp_path: Path) -> None:
    requests_before = len(pebble.requests_seen())
    result = run_cli(*issue_args(pebble, tmp_path, "*.wild.example.test"), "--json")

    line = assert_one_line_error(result, 2)
    assert "wildcard" in line
    document = one_json(result)
    assert document["status"] == "invalid-input"
    assert document["exit_code"] == 2
    assert document["problem"] is None
    assert document["error"] in line
    assert document["certificates"] == []  # the same shape as every issue result
    assert len(pebble.requests_seen()) == requests_before
    assert not (tmp_path / "state").exists()


def test_a_port_already_in_use_exits_2_without_contacting_the_ca(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    requests_before = len(pebble.requests_seen())
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(issue_args(pebble, tmp_path, "busy.example.test", listen_port=port))

    line = one_line(capsys, code, 2)
    assert f"127.0.0.1:{port}" in line
    assert len(pebble.requests_seen()) == requests_before
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("file", "content"),
    [
        ("key.pem", b"-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"),
        ("account.json", b'{"directory": "truncated'),
    ],
)
def test_corrupt_stored_account_exits_2_naming_the_file_and_keeps_it(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    file: str,
    content: bytes,
) -> None:
    # Written without FileStorage's integrity header: the store reports the file corrupt.
    accounts = account_files(pebble, tmp_path)
    accounts.mkdir(parents=True)
    corrupt = accounts / file
    corrupt.write_bytes(content)
    requests_before = len(pebble.requests_seen())

    code = main(issue_args(pebble, tmp_path, "corrupt.example.test"))

    line = one_line(capsys, code, 2)
    assert str(corrupt) in line
    assert corrupt.read_bytes() == content
    assert len(pebble.requests_seen()) == requests_before


# -- the CA refuses: exit 1 with its problem detail ------------------------------------------


def test_failed_validation_exits_1_with_the_problem_detail(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    # Pebble validates on pebble.http_port; answering on another port leaves it unanswered.
    port = free_port(not_=pebble.http_port)
    args = issue_args(pebble, tmp_path, "refused.example.test", listen_port=port)

    result = run_cli(*args, "--json")

    line = assert_one_line_error(result, 1)
    top = one_json(result)
    assert (top["status"], top["exit_code"], top["error"]) == ("failed", 1, None)
    (document,) = top["certificates"]
    assert document["status"] == "failed"
    assert document["error"] in line
    problem = document["problem"]
    assert problem["type"] == "urn:ietf:params:acme:error:connection"
    assert problem["detail"]
    assert " ".join(problem["detail"].split()) in line
    assert "refused.example.test" in line
    assert not (tmp_path / "out" / "cert.pem").exists()
    # The account was created all the same, and is kept for the next run.
    assert stored_account(tmp_path / "state", pebble.directory_url)[1] is not None

    # The certificate is remembered: once the problem is fixed, `renew` issues it, at once
    # (no backoff holds a person back).
    fixed = run_cli("renew", "--json", *ca_args(pebble, tmp_path / "state"), *http01_args(pebble))
    assert fixed.returncode == 0, fixed.stderr
    (renewed,) = one_json(fixed)["certificates"]
    assert renewed["name"] == "refused.example.test"
    assert renewed["status"] == "issued"
    check_certificate(tmp_path / "out", {"refused.example.test"}, pebble.root_pem())


def test_failed_validation_in_human_mode(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port(not_=pebble.http_port)
    args = issue_args(pebble, tmp_path, "refused2.example.test", listen_port=port)
    result = run_main(capsys, *args)  # in-process: faster

    line = assert_one_line_error(result, 1)
    assert "validation of refused2.example.test failed" in line
    assert result.stdout == ""


# -- interruption ---------------------------------------------------------------------------


def test_ctrl_c_exits_130_without_a_traceback(tmp_path: Path) -> None:
    # A "CA" that accepts the connection and never answers keeps the command waiting.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(60)
        port = silent.getsockname()[1]
        with subprocess.Popen(
            [
                sys.executable,
                "-m",
                "acmecerts.cli",
                "issue",
                "--directory",
                f"https://127.0.0.1:{port}/dir",
                "--state-dir",
                str(tmp_path / "state"),
                "--http-01-listen",
                f"127.0.0.1:{free_port()}",
                "interrupted.example.test",
            ],
            cwd=REPO,
            env=cli_env(tmp_path, ACMECERTS_SIGNALS_READY=str(tmp_path / "ready")),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            try:
                # SIGINT handled (not ignored since start), the handlers in place
                wait_ready(proc, tmp_path / "ready")
                try:
                    connection, _ = silent.accept()
                except TimeoutError:
                    proc.kill()
                    pytest.fail(
                        f"the CLI did not connect to the CA within 60 s: {proc.communicate()}"
                    )
                with connection:
                    proc.send_signal(signal.SIGINT)
                    stdout, stderr = finish(
                        proc, timeout=30, waiting_for="the CLI to exit after SIGINT"
                    )
            finally:
                if proc.poll() is None:
                    proc.kill()

    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines() == ["acmecerts: error: interrupted"]
    assert stdout.splitlines() == [
        "Interrupted: 0 of 1 certificates finished",
        "  not finished  interrupted.example.test",
        CLEANED_UP,
    ]


def test_help_documents_the_commands_and_the_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    for command in ("issue", "renew", "revoke", "status", "account"):
        assert command in top
    assert main(["issue", "--help"]) == 0
    issue_help = " ".join(capsys.readouterr().out.split())
    for option in (
        "--directory",
        "--challenge",
        "--from-file",
        "--max-wait",
        "--concurrency",
        "--eab-kid",
        "--json",
    ):
        assert option in issue_help
    for code in ("0 ok", "1 failed", "2 bad input", "3 deferred", "130 interrupted"):
        assert code in issue_help
    assert main(["account", "--help"]) == 0
    account_help = capsys.readouterr().out
    for action in ("show", "create", "rollover", "deactivate"):
        assert action in account_help


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("acmecerts ")
