"""``acmecerts issue``: the real command, run as a subprocess against the session Pebble.

Exit codes: 0 issued, 1 the CA refused (its problem detail printed), 2 bad input (one
line on stderr, no traceback, and not a single request to the CA), 130 interrupted.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from acmecerts.cli._state import directory_slug
from acmecerts.protocol.keys import AccountKey

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

REPO = Path(__file__).resolve().parents[1]
NEW_ACCOUNT = ("POST", "/sign-me-up")
pytestmark = pytest.mark.timeout(30)


def cli_env(**extra: str) -> dict[str, str]:
    """The test's environment without ACMECERTS_* settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACMECERTS_")}
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acmecerts.cli", *args],
        cwd=REPO,
        env=env if env is not None else cli_env(),
        capture_output=True,
        text=True,
        timeout=25,
        check=False,
    )


def free_port(*, not_: int | None = None) -> int:
    """A free loopback port, other than ``not_``."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port != not_:
            return port


def unvalidated_port(pebble: PebbleServer) -> int:
    """A port where Pebble's validation never connects (it only uses ``http_port``)."""
    return free_port(not_=pebble.http_port)


def issue_args(
    pebble: PebbleServer, tmp_path: Path, *names: str, listen_port: int | None = None
) -> list[str]:
    port = pebble.http_port if listen_port is None else listen_port
    return [
        "issue",
        "--directory",
        pebble.directory_url,
        "--ca-bundle",
        str(pebble.ca_bundle),
        "--state-dir",
        str(tmp_path / "state"),
        "--out",
        str(tmp_path / "out"),
        "--http-01-listen",
        f"127.0.0.1:{port}",
        *names,
    ]


def account_dir(pebble: PebbleServer, tmp_path: Path) -> Path:
    return tmp_path / "state" / "accounts" / directory_slug(pebble.directory_url)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("acmecerts: error: ")
    return lines[0]


def check_certificate(out: Path, names: set[str], root_pem: str) -> x509.Certificate:
    (leaf,) = x509.load_pem_x509_certificates((out / "cert.pem").read_bytes())
    intermediates = x509.load_pem_x509_certificates((out / "chain.pem").read_bytes())
    fullchain = x509.load_pem_x509_certificates((out / "fullchain.pem").read_bytes())
    assert fullchain == [leaf, *intermediates]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == names
    key = serialization.load_pem_private_key((out / "privkey.pem").read_bytes(), password=None)
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert key.public_key().public_bytes(*spki) == leaf.public_key().public_bytes(*spki)
    root = x509.load_pem_x509_certificate(root_pem.encode())
    for child, parent in zip([leaf, *intermediates], [*intermediates, root], strict=True):
        child.verify_directly_issued_by(parent)
    return leaf


# -- success --------------------------------------------------------------------------------


def test_issue_writes_the_certificate_files_with_safe_modes(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    names = {"cli-files.example.test", "www.cli-files.example.test"}
    result = run_cli(*issue_args(pebble, tmp_path, *sorted(names)))

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "Certificate issued for" in result.stdout
    out = tmp_path / "out"
    check_certificate(out, names, pebble.root_pem())
    assert mode(out / "privkey.pem") == 0o600
    for public in ("cert.pem", "chain.pem", "fullchain.pem"):
        assert mode(out / public) == 0o644
        assert str(out / public) in result.stdout
    assert mode(out) == 0o700
    assert sorted(p.name for p in out.iterdir()) == [
        "cert.pem",
        "chain.pem",
        "fullchain.pem",
        "privkey.pem",
    ]  # no temporary files left behind
    accounts = account_dir(pebble, tmp_path)
    assert mode(accounts) == 0o700
    assert mode(accounts / "account.key") == 0o600
    AccountKey.from_pem((accounts / "account.key").read_bytes())
    stored = json.loads((accounts / "account.json").read_text())
    assert stored["directory"] == pebble.directory_url
    assert stored["url"].startswith(pebble.directory_url.removesuffix("/dir"))


def test_json_prints_exactly_one_object(pebble: PebbleServer, tmp_path: Path) -> None:
    result = run_cli(*issue_args(pebble, tmp_path, "cli-json.example.test"), "--json")

    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1
    document = json.loads(result.stdout)
    assert document["status"] == "issued"
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
    assert document["order_url"].startswith("https://127.0.0.1:")
    assert document["certificate_url"].startswith("https://127.0.0.1:")


def test_second_run_reuses_the_stored_account(pebble: PebbleServer, tmp_path: Path) -> None:
    args = issue_args(pebble, tmp_path, "cli-reuse.example.test")
    first = run_cli(*args, "--json")
    assert first.returncode == 0, first.stderr
    account_json = account_dir(pebble, tmp_path) / "account.json"
    key_before = (account_dir(pebble, tmp_path) / "account.key").read_bytes()
    url_before = json.loads(account_json.read_text())["url"]
    new_accounts_before = pebble.requests_seen().count(NEW_ACCOUNT)

    second = run_cli(*args, "--json")

    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["serial"] != json.loads(first.stdout)["serial"]
    assert json.loads(account_json.read_text())["url"] == url_before
    assert (account_dir(pebble, tmp_path) / "account.key").read_bytes() == key_before
    assert pebble.requests_seen().count(NEW_ACCOUNT) == new_accounts_before


def test_environment_variables_and_the_default_output_directory(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    env = cli_env(
        ACMECERTS_DIRECTORY=pebble.directory_url,
        ACMECERTS_CA_BUNDLE=str(pebble.ca_bundle),
        ACMECERTS_STATE_DIR=str(tmp_path / "state"),
    )
    result = run_cli(
        "issue",
        "--http-01-listen",
        f"127.0.0.1:{pebble.http_port}",
        "CLI-Env.Example.Test",
        env=env,
    )

    assert result.returncode == 0, result.stderr
    out = tmp_path / "state" / "certificates" / "cli-env.example.test"
    check_certificate(out, {"cli-env.example.test"}, pebble.root_pem())
    assert mode(out / "privkey.pem") == 0o600


def test_a_stale_account_url_is_registered_again(pebble: PebbleServer, tmp_path: Path) -> None:
    # The CA no longer knows the stored account (e.g. it was reset): the key registers again.
    accounts = account_dir(pebble, tmp_path)
    accounts.mkdir(parents=True)
    (accounts / "account.key").write_bytes(AccountKey.generate().to_pem())
    gone = pebble.directory_url.removesuffix("/dir") + "/my-account/does-not-exist"
    (accounts / "account.json").write_text(
        json.dumps({"directory": pebble.directory_url, "url": gone})
    )

    result = run_cli(*issue_args(pebble, tmp_path, "cli-stale.example.test"))

    assert result.returncode == 0, result.stderr
    assert "no longer exists" in result.stderr
    assert json.loads((accounts / "account.json").read_text())["url"] != gone


# -- bad input: exit 2, one line, nothing sent ----------------------------------------------


@pytest.mark.parametrize(
    ("extra", "names", "message"),
    [
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
        (["--email", "not-an-address"], ["ok.example.test"], "--email"),
        (["--directory", "http://127.0.0.1/dir"], ["ok.example.test"], "https://"),
        (["--no-such-option"], ["ok.example.test"], "--no-such-option"),
        ([], [], "NAME"),
    ],
)
def test_bad_input_exits_2_without_contacting_the_ca(
    pebble: PebbleServer, tmp_path: Path, extra: list[str], names: list[str], message: str
) -> None:
    requests_before = len(pebble.requests_seen())

    result = run_cli(*issue_args(pebble, tmp_path), *extra, *names)

    line = assert_one_line_error(result, 2)
    assert message in line
    assert result.stdout == ""
    assert len(pebble.requests_seen()) == requests_before
    assert not (tmp_path / "state").exists()


def test_bad_input_with_json_prints_an_invalid_input_object(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    result = run_cli(*issue_args(pebble, tmp_path, "*.wild.example.test"), "--json")

    line = assert_one_line_error(result, 2)
    document = json.loads(result.stdout)
    assert document["status"] == "invalid-input"
    assert document["problem"] is None
    assert document["error"] in line


def test_a_port_already_in_use_exits_2_without_contacting_the_ca(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    requests_before = len(pebble.requests_seen())
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli(*issue_args(pebble, tmp_path, "busy.example.test", listen_port=port))

    line = assert_one_line_error(result, 2)
    assert f"127.0.0.1:{port}" in line
    assert len(pebble.requests_seen()) == requests_before


@pytest.mark.parametrize(
    ("file", "content"),
    [
        ("account.key", b"-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"),
        ("account.json", b'{"directory": "truncated'),
    ],
)
def test_corrupt_stored_account_exits_2_naming_the_file_and_keeps_it(
    pebble: PebbleServer, tmp_path: Path, file: str, content: bytes
) -> None:
    accounts = account_dir(pebble, tmp_path)
    accounts.mkdir(parents=True)
    (accounts / "account.key").write_bytes(AccountKey.generate().to_pem())
    corrupt = accounts / file
    corrupt.write_bytes(content)
    requests_before = len(pebble.requests_seen())

    result = run_cli(*issue_args(pebble, tmp_path, "corrupt.example.test"))

    line = assert_one_line_error(result, 2)
    assert str(corrupt) in line
    assert corrupt.read_bytes() == content
    assert len(pebble.requests_seen()) == requests_before


# -- the CA refuses: exit 1 with its problem detail ------------------------------------------


def test_failed_validation_exits_1_with_the_problem_detail(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    # Pebble validates on pebble.http_port; answering on another port leaves it unanswered.
    args = issue_args(
        pebble, tmp_path, "refused.example.test", listen_port=unvalidated_port(pebble)
    )

    result = run_cli(*args, "--json")

    line = assert_one_line_error(result, 1)
    document = json.loads(result.stdout)
    assert document["status"] == "failed"
    problem = document["problem"]
    assert problem["type"] == "urn:ietf:params:acme:error:connection"
    assert problem["detail"]
    assert " ".join(problem["detail"].split()) in line
    assert "refused.example.test" in line
    assert not (tmp_path / "out" / "cert.pem").exists()
    # The account was created all the same, and is kept for the next run.
    assert (account_dir(pebble, tmp_path) / "account.json").exists()


def test_failed_validation_in_human_mode(pebble: PebbleServer, tmp_path: Path) -> None:
    args = issue_args(
        pebble, tmp_path, "refused2.example.test", listen_port=unvalidated_port(pebble)
    )

    result = run_cli(*args)

    line = assert_one_line_error(result, 1)
    assert "validation of refused2.example.test failed" in line
    assert result.stdout == ""


# -- interruption ---------------------------------------------------------------------------


def test_ctrl_c_exits_130_without_a_traceback(tmp_path: Path) -> None:
    # A "CA" that accepts the connection and never answers keeps the command waiting.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(20)
        port = silent.getsockname()[1]
        proc = subprocess.Popen(
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
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            connection, _ = silent.accept()
            with connection:
                proc.send_signal(signal.SIGINT)
                stdout, stderr = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines() == ["acmecerts: error: interrupted"]
    assert stdout == ""


def test_help_and_version(tmp_path: Path) -> None:
    help_result = run_cli("issue", "--help")
    assert help_result.returncode == 0
    for option in ("--directory", "--ca-bundle", "--http-01-listen", "--key-type", "--json"):
        assert option in help_result.stdout
    version = run_cli("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("acmecerts ")
