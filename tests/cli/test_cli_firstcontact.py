"""First contact with a CA: ``--staging``, the terms of service, ``--webroot``, ``--out``.

* Terms of service: Pebble publishes ``meta.termsOfService``, so an account is created only
  after ``--agree-tos`` or a "y" at the terminal prompt (driven here on a real
  pseudo-terminal); without either, exit 2 and no ``newAccount`` (counted in Pebble's log,
  and the payloads read through the fault proxy). An account the state directory knows
  needs no agreement.
* ``--webroot DIR``: a real web server (``python -m http.server``) serves DIR where Pebble
  validates http-01; the challenge files are gone afterwards; ``renew`` uses the stored DIR.
* ``--out``: an unusable directory is exit 2 before any order (zero ``newOrder`` in
  Pebble's log) and is never stored; at ``renew`` a stored one that became unusable fails
  that certificate before ordering it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx
import pytest
from cli_support import (
    CLI,
    NEW_ACCOUNT,
    NEW_ORDER,
    REPO,
    assert_one_line_error,
    ca_args,
    check_certificate,
    clean_environment,
    cli_env,
    free_port,
    http01_args,
    one_json,
    run_cli,
    run_main,
    serial_of,
    stored_account,
)
from pebble_quirks import pebble_refuses_replaces_of

from acmecerts.cli._firstcontact import LETS_ENCRYPT_STAGING
from acmecerts.cli._state import State
from acmecerts.storage import KeyLayout
from tests.cli.no_reuse import deactivate_valid_authorizations
from tests.faults.proxy import FaultProxy

if TYPE_CHECKING:
    from collections.abc import Iterator

    from conftest import PebbleFactory

    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)


def no_agreement_env(tmp_path: Path) -> dict[str, str]:
    """The CLI tests' environment without ``ACMECERTS_AGREE_TOS``."""
    env = cli_env(tmp_path)
    del env["ACMECERTS_AGREE_TOS"]
    return env


def terms_of(pebble: PebbleServer) -> str:
    """The terms-of-service URL in Pebble's directory."""
    context = ssl.create_default_context(cafile=str(pebble.ca_bundle))
    directory = httpx.get(pebble.directory_url, verify=context, timeout=10).json()
    terms = directory["meta"]["termsOfService"]
    assert isinstance(terms, str)
    return terms


def count(pebble: PebbleServer, since: int, request: tuple[str, str]) -> int:
    return pebble.requests_seen()[since:].count(request)


# -- terms of service -------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["issue", "account-create"])
def test_without_agreement_and_no_terminal_nothing_is_created(
    pebble: PebbleServer, tmp_path: Path, command: str
) -> None:
    state = tmp_path / "state"
    args = (
        ["issue", *http01_args(pebble), "--out", str(tmp_path / "out"), "tos.example.test"]
        if command == "issue"
        else ["account", "create"]
    )
    seen = len(pebble.requests_seen())

    result = run_cli(*args, *ca_args(pebble, state), env=no_agreement_env(tmp_path))

    line = assert_one_line_error(result, 2)
    assert terms_of(pebble) in line
    assert "--agree-tos" in line
    assert count(pebble, seen, NEW_ACCOUNT) == 0
    assert count(pebble, seen, NEW_ORDER) == 0
    # only the directory was fetched (and a nonce pool is not even started)
    assert set(pebble.requests_seen()[seen:]) <= {("GET", "/dir")}
    assert stored_account(state, pebble.directory_url) == (None, None)  # no key kept either
    assert not (tmp_path / "out").exists()


def test_without_agreement_json_prints_one_object(pebble: PebbleServer, tmp_path: Path) -> None:
    result = run_cli(
        "account",
        "create",
        "--json",
        *ca_args(pebble, tmp_path / "state"),
        env=no_agreement_env(tmp_path),
    )

    assert result.returncode == 2
    document = one_json(result)
    assert document["status"] == "invalid-input"
    assert terms_of(pebble) in document["error"]


def test_agree_tos_sends_terms_agreed_true(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    result = run_cli(
        "account",
        "create",
        "--agree-tos",
        "--json",
        *ca_args(pebble, tmp_path / "state", directory=proxy.directory_url),
        env=no_agreement_env(tmp_path),
    )

    assert result.returncode == 0, result.stderr
    assert one_json(result)["status"] == "registered"
    (new_account,) = proxy.requests_to("/sign-me-up")
    assert new_account.payload["termsOfServiceAgreed"] is True
    assert new_account.status == 201


def test_agreement_from_the_config_file(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    monkeypatch.delenv("ACMECERTS_AGREE_TOS")
    config = tmp_path / "config.toml"
    config.write_text("[account.create]\nagree-tos = true\n")
    seen = len(pebble.requests_seen())

    result = run_main(
        capsys, "--config", str(config), "account", "create", *ca_args(pebble, tmp_path / "s")
    )

    assert result.returncode == 0, result.stderr
    assert count(pebble, seen, NEW_ACCOUNT) == 1


def test_renew_needs_agreement_to_create_an_account_too(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean_environment(tmp_path, monkeypatch)  # with ACMECERTS_AGREE_TOS=1
    state = tmp_path / "state"
    name = "renew.tos.example.test"
    issued = run_main(
        capsys,
        "issue",
        *http01_args(pebble),
        "--out",
        str(tmp_path / "out"),
        *ca_args(pebble, state),
        name,
    )
    assert issued.returncode == 0, issued.stderr
    # The account is gone from the state directory (its certificate's records stay).
    layout = KeyLayout(pebble.directory_url)
    (state / layout.account_key()).unlink()
    (state / layout.account_meta()).unlink()
    monkeypatch.delenv("ACMECERTS_AGREE_TOS")
    seen = len(pebble.requests_seen())

    result = run_main(capsys, "renew", "--force", *http01_args(pebble), *ca_args(pebble, state))

    line = assert_one_line_error(result, 2)
    assert terms_of(pebble) in line
    assert count(pebble, seen, NEW_ACCOUNT) == 0
    assert count(pebble, seen, NEW_ORDER) == 0
    assert stored_account(state, pebble.directory_url) == (None, None)


def test_a_registration_a_request_makes_is_refused_in_the_clis_words(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    """A stored key without its URL, and a command that creates no account (``revoke``):
    the registration its first signed request makes needs the agreement too
    (:class:`~acmecerts.TermsOfServiceNotAgreed`, said with the CLI's options)."""
    state, name = tmp_path / "state", "implicit.tos.example.test"
    issued = run_cli(
        "issue", *http01_args(pebble), "--out", str(tmp_path / "out"), *ca_args(pebble, state), name
    )
    assert issued.returncode == 0, issued.stderr
    (state / KeyLayout(pebble.directory_url).account_meta()).unlink()
    seen = len(pebble.requests_seen())

    result = run_cli("revoke", name, *ca_args(pebble, state), env=no_agreement_env(tmp_path))

    line = assert_one_line_error(result, 2)
    assert terms_of(pebble) in line
    assert "--agree-tos" in line
    assert count(pebble, seen, NEW_ACCOUNT) == 0
    assert count(pebble, seen, ("POST", "/revoke-cert")) == 0


def test_an_existing_account_needs_no_agreement(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    ca = ca_args(pebble, state, directory=proxy.directory_url)
    created = run_cli("account", "create", "--agree-tos", *ca, env=no_agreement_env(tmp_path))
    assert created.returncode == 0, created.stderr
    proxy.clear_requests()

    # The stored account URL: no newAccount at all.
    issued = run_cli(
        "issue",
        *http01_args(pebble),
        "--out",
        str(tmp_path / "out"),
        *ca,
        "known.tos.example.test",
        env=no_agreement_env(tmp_path),
    )
    assert issued.returncode == 0, issued.stderr
    assert proxy.requests_to("/sign-me-up") == []

    # The key stored without its URL: looked up (onlyReturnExisting creates nothing).
    (state / KeyLayout(proxy.directory_url).account_meta()).unlink()
    created_again = run_cli("account", "create", *ca, env=no_agreement_env(tmp_path))
    assert created_again.returncode == 0, created_again.stderr
    payloads = [r.payload for r in proxy.requests_to("/sign-me-up")]
    assert payloads == [{"onlyReturnExisting": True}]
    assert "Account exists" in created_again.stdout


# -- the prompt, on a real pseudo-terminal ---------------------------------------------------


def run_on_terminal(
    args: list[str], env: dict[str, str], answer: bytes, *, timeout: float = 60
) -> tuple[int, str, str]:
    """Run the CLI with stdin and stderr on a pseudo-terminal; answer its question.

    Returns the exit status, stdout (a pipe) and what the terminal showed.
    """
    master, slave = os.openpty()
    shown = b""
    try:
        proc = subprocess.Popen(
            [*CLI, *args], cwd=REPO, env=env, stdin=slave, stderr=slave, stdout=subprocess.PIPE
        )
        os.close(slave)
        slave = -1
        answered = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal (it exited)
                    chunk = b""
                if not chunk and proc.poll() is not None:
                    break
                shown += chunk
            if not answered and b"[y/N]" in shown:
                os.write(master, answer)
                answered = True
            if proc.poll() is not None and not ready:
                break
        stdout, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        assert answered, f"no question was asked; the terminal showed {shown!r}"
        return proc.returncode, stdout.decode(), shown.decode(errors="replace")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
        with contextlib.suppress(NameError):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_answering_no_at_the_prompt_creates_nothing(pebble: PebbleServer, tmp_path: Path) -> None:
    state = tmp_path / "state"
    seen = len(pebble.requests_seen())

    code, stdout, shown = run_on_terminal(
        ["account", "create", *ca_args(pebble, state)], no_agreement_env(tmp_path), b"n\n"
    )

    assert code == 2, shown
    assert terms_of(pebble) in shown
    assert "did not agree" in shown
    assert stdout == ""
    assert count(pebble, seen, NEW_ACCOUNT) == 0
    assert stored_account(state, pebble.directory_url) == (None, None)


def test_answering_yes_at_the_prompt_issues(pebble: PebbleServer, tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    seen = len(pebble.requests_seen())

    code, stdout, shown = run_on_terminal(
        [
            "issue",
            *http01_args(pebble),
            "--out",
            str(out),
            *ca_args(pebble, state),
            "prompt.tos.example.test",
        ],
        no_agreement_env(tmp_path),
        b"y\n",
    )

    assert code == 0, shown
    assert terms_of(pebble) in shown
    assert count(pebble, seen, NEW_ACCOUNT) == 1
    check_certificate(out, {"prompt.tos.example.test"}, pebble.root_pem())
    assert stored_account(state, pebble.directory_url)[1] is not None
    assert "Certificate issued" in stdout


# -- --staging ---------------------------------------------------------------------------------


def test_staging_is_lets_encrypts_staging_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clean_environment(tmp_path, monkeypatch)

    # status reads the state directory only: nothing is sent anywhere
    anyio.run(State(tmp_path / "s", LETS_ENCRYPT_STAGING).save_ca_settings, None)
    result = run_main(capsys, "status", "--staging", "--json", "--state-dir", str(tmp_path / "s"))

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["directory"] == LETS_ENCRYPT_STAGING


@pytest.mark.parametrize("where", ["flag", "environment"])
def test_staging_with_another_directory_is_exit_2(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    args = ["issue", "--staging", "--state-dir", str(tmp_path / "s"), "x.example.test"]
    if where == "flag":
        args += ["--directory", pebble.directory_url]
    else:
        monkeypatch.setenv("ACMECERTS_DIRECTORY", pebble.directory_url)
    seen = len(pebble.requests_seen())

    result = run_main(capsys, *args)

    line = assert_one_line_error(result, 2)
    assert "--staging" in line
    assert pebble.directory_url in line
    assert pebble.requests_seen()[seen:] == []
    assert not (tmp_path / "s").exists()


# -- --webroot ---------------------------------------------------------------------------------


@contextlib.contextmanager
def web_server(root: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m http.server`` serving ``root`` on 127.0.0.1:``port`` (its log in ``log``)."""
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "http.server",
                "--directory",
                str(root),
                "--bind",
                "127.0.0.1",
                str(port),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the web server did not start listening"
                time.sleep(0.05)
            yield proc
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def challenge_fetches(log: Path) -> int:
    return log.read_text().count("GET /.well-known/acme-challenge/")


@pytest.mark.timeout(120)
def test_webroot_issues_through_a_running_web_server_and_renew_uses_it(
    pebble_factory: PebbleFactory, tmp_path: Path
) -> None:
    # No authorization reuse: the renewal is validated again, through the same webroot.
    ca_server = pebble_factory(authz_reuse_percent=0)
    root, out, state, log = tmp_path / "www", tmp_path / "out", tmp_path / "state", tmp_path / "log"
    root.mkdir()
    names = {"webroot.example.test", "www.webroot.example.test"}
    env = cli_env(tmp_path)
    with web_server(root, ca_server.http_port, log):
        issued = run_cli(
            "issue",
            "--webroot",
            str(root),
            "--out",
            str(out),
            "--json",
            *ca_args(ca_server, state),
            *sorted(names),
            env=env,
        )
        assert issued.returncode == 0, issued.stderr
        assert one_json(issued)["certificates"][0]["status"] == "issued"
        check_certificate(out, names, ca_server.root_pem())
        assert challenge_fetches(log) >= 2  # Pebble fetched each name's file from the server
        # the challenge files were removed afterwards
        assert list((root / ".well-known" / "acme-challenge").iterdir()) == []
        first_serial = serial_of(out)

        # renew, without --webroot (nothing could listen on the port: the server has it),
        # validated for real (tests/cli/no_reuse.py: Pebble's 1 % reuse at PEBBLE_AUTHZREUSE=0)
        assert deactivate_valid_authorizations(ca_server, state) == 2
        fetched = challenge_fetches(log)
        renewed = run_cli(
            "renew", "--force", "--json", *ca_args(ca_server, state), env=env, timeout=90
        )
        assert renewed.returncode == 0, renewed.stderr
        assert one_json(renewed)["certificates"][0]["status"] == "renewed"
        assert challenge_fetches(log) >= fetched + 2
        assert serial_of(out) != first_serial
        assert list((root / ".well-known" / "acme-challenge").iterdir()) == []

    # The stored webroot is gone: renew fails the certificate before ordering it (exit 2).
    shutil.rmtree(root)
    seen = len(ca_server.requests_seen())
    refused = run_cli("renew", "--force", "--json", *ca_args(ca_server, state), env=env)
    assert refused.returncode == 2, refused.stderr
    (certificate,) = one_json(refused)["certificates"]
    assert certificate["status"] == "failed"
    assert "--webroot" in certificate["error"]
    assert "nothing was ordered" in certificate["error"]
    assert count(ca_server, seen, NEW_ORDER) == 0


@pytest.mark.parametrize(
    "case",
    ["missing", "a-file", "well-known-is-a-file", "with-dns-01", "with-listen"],
)
def test_bad_webroot_is_exit_2_before_anything_is_sent(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    root = tmp_path / "www"
    extra: list[str] = []
    if case == "a-file":
        root.write_text("not a directory")
    elif case != "missing":
        root.mkdir()
    if case == "well-known-is-a-file":
        (root / ".well-known").write_text("in the way")
    elif case == "with-dns-01":
        extra = ["--challenge", "dns-01"]
    elif case == "with-listen":
        extra = ["--http-01-listen", f"127.0.0.1:{free_port()}"]
    state = tmp_path / "state"
    seen = len(pebble.requests_seen())

    result = run_main(
        capsys,
        "issue",
        "--webroot",
        str(root),
        *extra,
        *ca_args(pebble, state),
        "bad-webroot.example.test",
    )

    line = assert_one_line_error(result, 2)
    assert "--webroot" in line
    assert pebble.requests_seen()[seen:] == []
    assert not state.exists()


# -- --out is checked before any order -------------------------------------------------------


@pytest.mark.parametrize("case", ["a-file", "under-a-file"])
def test_an_unusable_out_is_exit_2_before_any_order(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory")
    out = blocker if case == "a-file" else blocker / "certs" / "site"
    state = tmp_path / "state"
    seen = len(pebble.requests_seen())

    result = run_main(
        capsys,
        "issue",
        *http01_args(pebble),
        "--out",
        str(out),
        *ca_args(pebble, state),
        "bad-out.example.test",
    )

    line = assert_one_line_error(result, 2)
    assert str(out) in line
    assert count(pebble, seen, NEW_ORDER) == 0
    assert pebble.requests_seen()[seen:] == []  # nothing at all was sent
    assert not state.exists()  # and the bad path was not stored anywhere


def test_from_file_checks_every_out_directory_before_any_order(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    (out / "two.batch-out.example.test").write_text("a file where DIR/NAME should go")
    listing = tmp_path / "certs.txt"
    listing.write_text("one.batch-out.example.test\ntwo.batch-out.example.test\n")
    seen = len(pebble.requests_seen())

    result = run_main(
        capsys,
        "issue",
        *http01_args(pebble),
        "--from-file",
        str(listing),
        "--out",
        str(out),
        *ca_args(pebble, tmp_path / "state"),
    )

    line = assert_one_line_error(result, 2)
    assert str(out / "two.batch-out.example.test") in line
    assert count(pebble, seen, NEW_ORDER) == 0
    assert not (tmp_path / "state").exists()


def test_renew_fails_a_certificate_whose_out_became_unusable_without_ordering_it(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean_environment(tmp_path, monkeypatch)
    state = tmp_path / "state"
    good, bad = tmp_path / "good", tmp_path / "bad"
    for name, out in (("good.renew-out.example.test", good), ("bad.renew-out.example.test", bad)):
        issued = run_main(
            capsys, "issue", *http01_args(pebble), "--out", str(out), *ca_args(pebble, state), name
        )
        assert issued.returncode == 0, issued.stderr
    shutil.rmtree(bad)  # the exported set: four links, .live and the set's directory
    bad.write_text("the directory was replaced by a file")

    # Only the certificate with the unusable directory is due: nothing is ordered, exit 2.
    seen = len(pebble.requests_seen())
    only_bad = run_main(
        capsys, "renew", "--force", "--json", *ca_args(pebble, state), "bad.renew-out.example.test"
    )
    assert only_bad.returncode == 2, only_bad.stderr
    (refused,) = json.loads(only_bad.stdout)["certificates"]
    assert refused["status"] == "failed"
    assert str(bad) in refused["error"]
    assert "nothing was ordered" in refused["error"]
    assert pebble.requests_seen()[seen:] == []

    # Both: the good one is renewed (one order), the bad one fails unordered: exit 1.
    good_serial = serial_of(good)
    seen = len(pebble.requests_seen())
    both = run_main(
        capsys, "renew", "--force", "--json", *http01_args(pebble), *ca_args(pebble, state)
    )
    assert both.returncode == 1, both.stderr
    statuses = {c["name"]: c["status"] for c in json.loads(both.stdout)["certificates"]}
    assert statuses == {
        "good.renew-out.example.test": "renewed",
        "bad.renew-out.example.test": "failed",
    }
    # one order; two when Pebble cannot find the certificate the renewal's replaces names
    # (its serial-encoding bug, tests/pebble_quirks.py) and the client falls back
    extra = int(pebble_refuses_replaces_of(good_serial))
    assert count(pebble, seen, NEW_ORDER) == 1 + extra
    assert bad.read_text() == "the directory was replaced by a file"
