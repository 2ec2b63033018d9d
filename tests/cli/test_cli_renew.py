"""``acmecerts renew`` as cron runs it (every CA, unusable state, ``-q``, ``--random-delay``)
and the hooks (``--pre-hook``, ``--post-hook``, ``--deploy-hook``), against real Pebble.

Two CAs: the session Pebble, and the same Pebble behind the fault proxy (another
directory URL, so another CA directory in the state directory with its own account).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    CLI,
    NEW_ORDER,
    REPO,
    ca_args,
    check_certificate,
    clean_environment,
    cli_env,
    http01_args,
    one_json,
    run_cli,
    run_main,
    serial_of,
    stored_serial,
    unmeasured,
    without_root,
)
from pebble_quirks import pebble_refuses_replaces_of
from waits import within

from acmecerts.cli import _app, _renew
from acmecerts.cli._hooks import HOOK_VARIABLES, run_hook
from acmecerts.storage import FileStorage, KeyLayout
from tests.faults.proxy import FaultProxy, told

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # Pebble is trusted by --ca-bundle only


class Sleeps:
    """The random delay's seam: the fraction it draws and the sleeps it asks for."""

    def __init__(self, fraction: float, proxy: FaultProxy | None = None) -> None:
        self.fraction = fraction
        self.calls: list[float] = []
        self.proxy = proxy
        #: Requests the proxy had seen when the sleep was asked for.
        self.requests_before: list[int] = []

    def random(self) -> float:
        return self.fraction

    def sleep(self, seconds: float) -> None:
        self.calls.append(seconds)
        if self.proxy is not None:
            self.requests_before.append(len(self.proxy.requests))


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    recorder = Sleeps(0.25)
    monkeypatch.setattr(_renew, "random_fraction", recorder.random)
    monkeypatch.setattr(_renew, "sleep", recorder.sleep)
    return recorder


def issue(
    capsys: pytest.CaptureFixture[str],
    pebble: PebbleServer,
    state: Path,
    name: str,
    *extra: str,
    directory: str | None = None,
) -> subprocess.CompletedProcess[str]:
    result = run_main(
        capsys,
        "issue",
        name,
        "--json",
        *ca_args(pebble, state, directory=directory),
        *http01_args(pebble),
        *extra,
    )
    assert result.returncode == 0, result.stderr
    return result


def renew(
    capsys: pytest.CaptureFixture[str], pebble: PebbleServer, state: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``acmecerts renew`` with only the state directory and where http-01 is answered."""
    return run_main(capsys, "renew", "--state-dir", str(state), *http01_args(pebble), *extra)


def orders_through(proxy: FaultProxy) -> int:
    return len(proxy.requests_to("/order-plz", "POST"))


def orders_told(proxy: FaultProxy) -> str:
    """The new-order requests the proxy saw, with their answers: what a failed count needs."""
    return told(proxy.requests_to("/order-plz", "POST"))


# -- every CA -----------------------------------------------------------------------------------


def test_renew_without_directory_renews_at_every_ca_and_directory_narrows(
    pebble: PebbleServer,
    proxy: FaultProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    sleeps: Sleeps,
) -> None:
    state = tmp_path / "state"
    issue(capsys, pebble, state, "renew-a.example.test", "--out", str(tmp_path / "a"))
    issue(
        capsys,
        pebble,
        state,
        "renew-b.example.test",
        "--out",
        str(tmp_path / "b"),
        directory=proxy.directory_url,
    )
    serials = {n: serial_of(tmp_path / n) for n in ("a", "b")}
    before = orders_through(proxy)

    # No --directory, no --ca-bundle: each certificate at its own CA, with the stored bundle.
    both = renew(capsys, pebble, state, "--force", "--json")

    assert both.returncode == 0, both.stderr
    document = one_json(both)
    found = {c["name"]: (c["status"], c["directory"]) for c in document["certificates"]}
    assert found == {
        "renew-a.example.test": ("renewed", pebble.directory_url),
        "renew-b.example.test": ("renewed", proxy.directory_url),
    }
    # b's order went to the second CA: one, two when Pebble cannot find the certificate
    # its replaces names (its serial-encoding bug, tests/pebble_quirks.py) and the client
    # falls back to an order without it
    refused = int(pebble_refuses_replaces_of(serials["b"]))
    assert orders_through(proxy) == before + 1 + refused, f"{orders_told(proxy)}\n{both.stderr}"
    for n in ("a", "b"):
        assert serial_of(tmp_path / n) != serials[n]
    serials = {n: serial_of(tmp_path / n) for n in ("a", "b")}
    # the certificates are stored in their own CA's directory
    assert stored_serial(state, proxy.directory_url, "renew-b.example.test") == serials["b"]
    assert stored_serial(state, pebble.directory_url, "renew-b.example.test") is None

    # --directory narrows to that CA (its stored --ca-bundle still used).
    only_b = renew(capsys, pebble, state, "--force", "--json", "--directory", proxy.directory_url)

    assert only_b.returncode == 0, only_b.stderr
    (cert,) = one_json(only_b)["certificates"]
    assert (cert["name"], cert["status"]) == ("renew-b.example.test", "renewed")
    refused += pebble_refuses_replaces_of(serials["b"])
    assert orders_through(proxy) == before + 2 + refused, f"{orders_told(proxy)}\n{only_b.stderr}"
    assert serial_of(tmp_path / "a") == serials["a"]
    assert serial_of(tmp_path / "b") != serials["b"]
    assert sleeps.calls == []  # no --random-delay: no sleep at all


def test_a_ca_that_cannot_be_reached_does_not_stop_the_renewals_at_the_others(
    pebble: PebbleServer,
    proxy: FaultProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = tmp_path / "state"
    issue(capsys, pebble, state, "renew-up.example.test", "--out", str(tmp_path / "up"))
    issue(
        capsys,
        pebble,
        state,
        "renew-down.example.test",
        "--out",
        str(tmp_path / "down"),
        directory=proxy.directory_url,
    )
    down, second_ca = serial_of(tmp_path / "down"), proxy.directory_url
    proxy.stop()  # the second CA stops answering

    result = renew(capsys, pebble, state, "--force", "--json", "--max-wait", "0")

    assert result.returncode == 1
    found = {c["name"]: c for c in one_json(result)["certificates"]}
    assert found["renew-up.example.test"]["status"] == "renewed"
    failed = found["renew-down.example.test"]
    assert failed["status"] == "failed"
    assert second_ca in failed["error"]
    assert serial_of(tmp_path / "down") == down  # kept as it was


def test_state_written_before_the_settings_file_is_renewed_and_an_unknown_ca_is_named(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    issue(capsys, pebble, state, "renew-legacy.example.test", "--out", str(tmp_path / "out"))
    layout = KeyLayout(pebble.directory_url)
    settings = f"{layout.ca}/cli-settings.json"

    async def forget(*keys: str) -> None:
        async with FileStorage(state) as storage:
            for key in keys:
                assert await storage.delete(key)

    anyio.run(forget, settings)  # as an older acmecerts left it: the URL is in account.json
    old = renew(capsys, pebble, state, "--force", "--ca-bundle", str(pebble.ca_bundle))

    assert old.returncode == 0, old.stderr
    assert "1 renewed" in old.stdout
    assert (state / settings).is_file()  # written again: the next run needs no flags

    anyio.run(forget, settings, layout.account_meta())
    unknown = renew(capsys, pebble, state, "--force")

    assert unknown.returncode == 2, unknown.stderr
    (line,) = unknown.stderr.splitlines()
    assert "cannot tell which CA" in line
    assert str(state / layout.ca) in line
    assert "--directory" in line


# -- unusable state -----------------------------------------------------------------------------


def _loop(path: Path) -> Path:
    path.symlink_to(path)
    return path


@pytest.mark.parametrize(
    ("variant", "says"),
    [
        ("missing", "does not exist"),
        ("file", "is not a directory"),
        ("empty", "holds no acmecerts state"),
        ("only-exports", "holds no acmecerts state"),
        ("unreadable", "cannot read state directory"),
        ("first-cut", "holds only accounts of the first acmecerts"),
    ],
)
def test_an_unusable_state_directory_exits_2_naming_it(
    variant: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], sleeps: Sleeps
) -> None:
    state = tmp_path / "state"
    if variant == "file":
        state.write_text("not a directory\n")
    elif variant == "empty":
        state.mkdir()
    elif variant == "only-exports":
        (state / "certificates" / "example.com").mkdir(parents=True)
    elif variant == "unreadable":
        _loop(state)  # ELOOP: unreadable even for root (which ignores file modes)
    elif variant == "first-cut":  # the first CLI's layout: an account, no certificates
        (state / "accounts" / "acme-v02.api.letsencrypt.org_directory").mkdir(parents=True)

    result = run_main(capsys, "renew", "--state-dir", str(state), "--random-delay", "60")

    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("acmecerts: error: ")
    assert says in line
    assert str(state) in line
    assert sleeps.calls == []  # failed before the random delay: nothing was waited for

    as_json = run_main(capsys, "renew", "--json", "--quiet", "--state-dir", str(state))
    assert as_json.returncode == 2
    assert one_json(as_json)["status"] == "invalid-input"


def test_a_state_directory_without_read_permission_exits_2(tmp_path: Path) -> None:
    # root reads any directory whatever its mode: then the CLI runs as nobody (setpriv)
    as_nobody = without_root()
    base = Path(tempfile.mkdtemp(prefix="acmecerts-perm-", dir="/tmp"))
    try:
        base.chmod(0o755)  # nobody may reach it, not read what is inside the state
        state = base / "state"
        (state / "some-ca" / "accounts").mkdir(parents=True)
        state.chmod(0)
        env = cli_env(None, HOME=str(base), XDG_CONFIG_HOME=str(base / "config"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        result = subprocess.run(
            [*as_nobody, *CLI, "renew", "--state-dir", str(state)],
            cwd=base,
            env=unmeasured(env),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        (base / "state").chmod(0o700)
        shutil.rmtree(base)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("acmecerts: error: ")
    assert str(state) in line
    assert "not readable" in line


def test_directory_naming_a_ca_without_state_exits_2_and_accounts_alone_are_nothing_to_do(
    pebble: PebbleServer,
    proxy: FaultProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = tmp_path / "state"
    created = run_main(capsys, "account", "create", *ca_args(pebble, state))
    assert created.returncode == 0, created.stderr

    # A typo'd (or other) --directory in a cron line: an error, not "nothing to do".
    typo = run_main(capsys, "renew", "--state-dir", str(state), "--directory", proxy.directory_url)

    assert typo.returncode == 2
    (line,) = typo.stderr.splitlines()
    assert f"no state for {proxy.directory_url} in {state}" in line
    assert pebble.directory_url in line  # the CAs it does have are listed

    # An account and no certificate: nothing to do (exit 0); -q prints nothing at all.
    nothing = run_main(capsys, "renew", "--state-dir", str(state))
    assert nothing.returncode == 0, nothing.stderr
    assert "No certificates" in nothing.stdout
    quiet = run_main(capsys, "renew", "-q", "--state-dir", str(state))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


# -- quiet and the random delay -----------------------------------------------------------------


def test_quiet_prints_nothing_when_nothing_is_due_and_the_renewal_when_one_is(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    issue(capsys, pebble, state, "renew-quiet.example.test", "--out", str(tmp_path / "out"))

    loud = renew(capsys, pebble, state)
    assert loud.returncode == 0, loud.stderr
    assert "1 not due" in loud.stdout
    quiet = renew(capsys, pebble, state, "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")

    renewed = renew(capsys, pebble, state, "--quiet", "--force")
    assert renewed.returncode == 0, renewed.stderr
    assert "Checked 1 certificate: 1 renewed" in renewed.stdout


def test_random_delay_is_drawn_and_slept_before_contacting_any_ca(
    pebble: PebbleServer,
    proxy: FaultProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Sleeps(0.25, proxy)
    monkeypatch.setattr(_renew, "random_fraction", recorder.random)
    monkeypatch.setattr(_renew, "sleep", recorder.sleep)
    state = tmp_path / "state"
    issue(capsys, pebble, state, "renew-delay.example.test", directory=proxy.directory_url)
    proxy.clear_requests()

    result = renew(capsys, pebble, state, "--json", "--random-delay", "40")

    assert result.returncode == 0, result.stderr
    assert recorder.calls == [10.0]  # 40 s x the drawn 0.25, slept once
    assert recorder.requests_before == [0]  # before the CA saw anything ...
    assert len(proxy.requests) > 0  # ... and the CA was asked afterwards
    assert one_json(result)["random_delay"] == 10.0

    bad = renew(capsys, pebble, state, "--random-delay", "-1")
    assert bad.returncode == 2
    assert "--random-delay" in bad.stderr
    assert recorder.calls == [10.0]


# -- hooks --------------------------------------------------------------------------------------


def read_env(path: Path) -> dict[str, str]:
    """``KEY=value`` lines as ``env -0`` would not need: the values here have no newlines."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


def pebble_orders(pebble: PebbleServer) -> int:
    return pebble.requests_seen().count(NEW_ORDER)


@pytest.mark.timeout(150)
def test_hooks_run_in_order_with_the_certificate_in_the_environment_and_are_stored(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out, log = tmp_path / "state", tmp_path / "out", tmp_path / "hooks.log"
    env_file, at_pre = tmp_path / "deploy.env", tmp_path / "orders-at-pre"
    pre = f"echo pre >> {log}; grep -c 'POST /order-plz' {pebble.log_path} > {at_pre} || true"
    deploy = (
        f'echo "deploy $ACMECERTS_HOOK_CERT_NAME" >> {log}; env > {env_file}; '
        f'cp "$ACMECERTS_HOOK_CERT_PATH" {tmp_path / "seen-cert.pem"}'
    )
    post = f"echo post >> {log}"
    hooks = ["--pre-hook", pre, "--post-hook", post, "--deploy-hook", deploy]
    orders = pebble_orders(pebble)

    # A real process, as cron runs it; the hooks' output goes to stderr, never stdout.
    first = run_cli(
        "issue",
        "renew-hooks.example.test",
        "www.renew-hooks.example.test",
        "--json",
        "--out",
        str(out),
        *hooks,
        *ca_args(pebble, state),
        *http01_args(pebble),
        env=cli_env(tmp_path),
    )

    assert first.returncode == 0, first.stderr
    whole = one_json(first)
    (issued,) = whole["certificates"]
    assert log.read_text().splitlines() == ["pre", "deploy renew-hooks.example.test", "post"]
    assert int(at_pre.read_text()) == orders  # the pre-hook ran before the order
    assert pebble_orders(pebble) == orders + 1
    env = read_env(env_file)
    assert env["RENEWED_LINEAGE"] == str(out)
    assert env["RENEWED_DOMAINS"] == "renew-hooks.example.test www.renew-hooks.example.test"
    assert env["ACMECERTS_HOOK_DOMAINS"] == env["RENEWED_DOMAINS"]
    assert env["ACMECERTS_HOOK_CERT_NAME"] == "renew-hooks.example.test"
    assert env["ACMECERTS_HOOK_EVENT"] == "issued"
    assert env["ACMECERTS_HOOK_CERT_DIR"] == str(out)
    for variable, file in [
        ("ACMECERTS_HOOK_CERT_PATH", "cert.pem"),
        ("ACMECERTS_HOOK_KEY_PATH", "privkey.pem"),
        ("ACMECERTS_HOOK_CHAIN_PATH", "chain.pem"),
        ("ACMECERTS_HOOK_FULLCHAIN_PATH", "fullchain.pem"),
    ]:
        assert env[variable] == str(out / file)
    assert env["ACMECERTS_HOOK_SERIAL"] == issued["serial"]
    assert env["ACMECERTS_HOOK_NOT_AFTER"] == issued["not_after"]
    assert env["ACMECERTS_HOOK_CA_DIRECTORY"] == pebble.directory_url
    # the files were in place when the deploy-hook ran
    assert (tmp_path / "seen-cert.pem").read_bytes() == (out / "cert.pem").read_bytes()
    assert [h["hook"] for h in whole["hooks"]] == ["pre", "post"]
    assert issued["deploy_hook"]["ok"] is True

    # Nothing due: no hook at all.
    idle = renew(capsys, pebble, state)
    assert idle.returncode == 0, idle.stderr
    assert len(log.read_text().splitlines()) == 3

    # The stored hooks run on a later renew without any hook flag.
    again = renew(capsys, pebble, state, "--force")
    assert again.returncode == 0, again.stderr
    assert log.read_text().splitlines()[3:] == [
        "pre",
        "deploy renew-hooks.example.test",
        "post",
    ]
    assert read_env(env_file)["ACMECERTS_HOOK_EVENT"] == "renewed"
    assert read_env(env_file)["ACMECERTS_HOOK_SERIAL"] == serial_of(out)

    # A hook given on renew replaces the stored one for that run only.
    override = renew(capsys, pebble, state, "--force", "--deploy-hook", f"echo other >> {log}")
    assert override.returncode == 0, override.stderr
    assert log.read_text().splitlines()[6:] == ["pre", "other", "post"]
    stored = renew(capsys, pebble, state, "--force")
    assert stored.returncode == 0, stored.stderr
    assert log.read_text().splitlines()[9:] == ["pre", "deploy renew-hooks.example.test", "post"]


def test_a_failing_deploy_hook_exits_1_and_loses_nothing(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out, log = tmp_path / "state", tmp_path / "out", tmp_path / "post.log"
    failing = "echo to-stdout; echo 'reload failed: no such unit' >&2; exit 3"
    args = ["--out", str(out), "--deploy-hook", failing, "--post-hook", f"echo post >> {log}"]

    result = run_main(
        capsys,
        "issue",
        "renew-fail.example.test",
        "--json",
        *args,
        *ca_args(pebble, state),
        *http01_args(pebble),
    )

    assert result.returncode == 1
    whole = one_json(result)  # the hook's stdout went to stderr: one JSON object
    assert (whole["status"], whole["exit_code"]) == ("failed", 1)
    (document,) = whole["certificates"]
    assert document["status"] == "issued"
    hook = document["deploy_hook"]
    assert (hook["ok"], hook["exit_status"]) == (False, 3)
    assert hook["stderr_tail"] == "reload failed: no such unit"
    assert "to-stdout" in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("acmecerts: error:")]
    assert "deploy-hook for renew-fail.example.test" in line
    assert "exited with status 3" in line
    assert "reload failed: no such unit" in line
    assert failing in line
    assert log.read_text() == "post\n"  # the post-hook runs after a failure too
    # nothing is lost: stored and exported
    check_certificate(out, {"renew-fail.example.test"}, pebble.root_pem())
    serial = serial_of(out)
    assert stored_serial(state, pebble.directory_url, "renew-fail.example.test") == serial

    # The next renew does not order again because the hook failed.
    orders = pebble_orders(pebble)
    after = renew(capsys, pebble, state)
    assert after.returncode == 0, after.stderr
    assert pebble_orders(pebble) == orders
    assert serial_of(out) == serial
    assert log.read_text() == "post\n"

    # A forced renewal runs the stored (failing) hook again: renewed, exit 1, said so.
    forced = renew(capsys, pebble, state, "--force")
    assert forced.returncode == 1
    assert "1 renewed" in forced.stdout
    assert "1 hook failed (see stderr)" in forced.stdout
    assert "deploy-hook for renew-fail.example.test" in forced.stderr
    assert serial_of(out) != serial
    assert log.read_text() == "post\npost\n"


# -- the hook runner on its own -----------------------------------------------------------------


@pytest.mark.anyio
async def test_run_hook_reports_not_executable_not_found_and_a_timeout(tmp_path: Path) -> None:
    script = tmp_path / "deploy.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)

    not_executable = await run_hook("deploy", str(script), env={}, time_limit=30)
    assert not_executable.exit_status == 126
    assert "(not executable)" in not_executable.describe()
    missing = await run_hook("pre", str(tmp_path / "nope"), env={}, time_limit=30)
    assert missing.exit_status == 127
    assert "(not found)" in missing.describe()

    # A hook that outlives its bound is killed with what it started (its process group).
    pid_file = tmp_path / "background.pid"
    slow = await run_hook("post", f"sleep 30 & echo $! > {pid_file}; wait", env={}, time_limit=0.5)
    assert not slow.ok
    assert slow.exit_status is None
    assert slow.error is not None
    assert "timed out after 0.5 s" in slow.error
    assert "post-hook" in slow.describe()
    background = anyio.Path(f"/proc/{int(pid_file.read_text())}/status")

    async def alive() -> bool:  # gone, or a zombie until it is reaped: killed
        try:
            return "\nState:\tZ" not in await background.read_text()
        except FileNotFoundError:
            return False

    with within(10, "the hook's background process to be killed with it"):
        while await alive():  # noqa: ASYNC110 - another process's state: nothing to await
            await anyio.sleep(0.05)

    ok = await run_hook("pre", 'test "$X" = 1', env={"X": "1"}, time_limit=30)
    assert ok.ok


def test_no_hook_variable_is_an_option_variable() -> None:
    import typer.main

    root = typer.main.get_command(_app.app)
    envvars: set[str] = set()

    def walk(command: object) -> None:
        for param in getattr(command, "params", []):
            names = param.envvar if isinstance(param.envvar, list) else [param.envvar]
            envvars.update(n for n in names if n)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(root)
    assert "ACMECERTS_DEPLOY_HOOK" in envvars  # the walk sees the options
    assert envvars.isdisjoint(HOOK_VARIABLES)


def test_the_stored_record_keeps_the_hooks(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    issue(capsys, pebble, state, "renew-record.example.test", "--deploy-hook", "true")
    layout = KeyLayout(pebble.directory_url)

    async def record() -> dict[str, object]:
        async with FileStorage(state) as storage:
            value = await storage.load(f"{layout.account_prefix}cli/renew-record.example.test.json")
            assert value is not None
            document: dict[str, object] = json.loads(value.data)
            return document

    assert anyio.run(record)["deploy_hook"] == "true"
    # an empty command removes the stored one
    issue(capsys, pebble, state, "renew-record.example.test", "--deploy-hook", "")
    assert anyio.run(record)["deploy_hook"] is None


def test_a_pre_hook_may_free_the_challenge_port_before_issue_binds_it(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A web server holds the http-01 port until the pre-hook stops it (as certbot users do
    # with `--pre-hook "systemctl stop nginx" --post-hook "systemctl start nginx"`).
    stop, stopped = tmp_path / "stop", tmp_path / "stopped"
    server = (
        "import pathlib, socket, sys, time\n"
        "s = socket.socket()\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"  # as web servers do
        f"s.bind(('127.0.0.1', {pebble.http_port}))\n"
        "s.listen()\n"
        "print('listening', flush=True)\n"
        f"while not pathlib.Path({str(stop)!r}).exists(): time.sleep(0.02)\n"
        "s.close()\n"
        f"pathlib.Path({str(stopped)!r}).touch()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", server], stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "listening\n"
        pre = f"touch {stop}; while [ ! -e {stopped} ]; do sleep 0.02; done"
        try:
            result = run_main(
                capsys,
                "issue",
                "renew-port.example.test",
                "--pre-hook",
                pre,
                "--hook-timeout",
                "30",
                *ca_args(pebble, tmp_path / "state"),
                *http01_args(pebble),
            )
        finally:
            stop.touch()
            holder.wait(timeout=30)
            holder.stdout.close()
    assert result.returncode == 0, result.stderr
    assert "Certificate issued" in result.stdout


# -- status, at every CA as renew -----------------------------------------------------------------


def test_status_shows_every_ca_and_directory_narrows(
    pebble: PebbleServer,
    proxy: FaultProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = tmp_path / "state"
    issue(capsys, pebble, state, "status-a.example.test", "--out", str(tmp_path / "a"))
    issue(
        capsys,
        pebble,
        state,
        "status-b.example.test",
        "--out",
        str(tmp_path / "b"),
        directory=proxy.directory_url,
    )
    requests = len(proxy.requests)

    # no --directory: every CA of the state directory, each certificate naming its CA
    both = run_main(capsys, "status", "--json", "--state-dir", str(state))

    assert both.returncode == 0, both.stderr
    document = one_json(both)
    found = {c["name"]: (c["directory"], c["status"]) for c in document["certificates"]}
    assert found == {
        "status-a.example.test": (pebble.directory_url, "valid"),
        "status-b.example.test": (proxy.directory_url, "valid"),
    }
    assert sorted(ca["directory"] for ca in document["cas"]) == sorted(
        [pebble.directory_url, proxy.directory_url]
    )
    assert all(ca["account"]["url"] for ca in document["cas"])
    assert (document["directory"], document["errors"]) == (None, [])
    human = run_main(capsys, "status", "--state-dir", str(state))
    assert human.returncode == 0, human.stderr
    for text in (pebble.directory_url, proxy.directory_url, "status-a", "status-b"):
        assert text in human.stdout
    assert len(proxy.requests) == requests  # status sends nothing

    # --directory narrows to that CA: one certificate, the CA's account and budget on top
    only_b = run_main(
        capsys, "status", "--json", "--state-dir", str(state), "--directory", proxy.directory_url
    )
    assert only_b.returncode == 0, only_b.stderr
    document = one_json(only_b)
    assert [c["name"] for c in document["certificates"]] == ["status-b.example.test"]
    assert document["directory"] == proxy.directory_url
    assert document["rate_limits"]["model"] is not None

    # the same exit-2 rules as renew: a CA without state, a missing state directory
    unknown = run_main(
        capsys, "status", "--state-dir", str(state), "--directory", "https://ca.invalid/dir"
    )
    assert unknown.returncode == 2
    (line,) = unknown.stderr.splitlines()
    assert "no state for https://ca.invalid/dir" in line
    assert pebble.directory_url in line
    missing = run_main(capsys, "status", "--json", "--state-dir", str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert str(tmp_path / "nope") in one_json(missing)["error"]
