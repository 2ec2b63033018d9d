"""The cron line, the systemd units and the container recipe in examples/ops/, as far as
this machine can run them.

``docs/cli.md`` shows these files as they are (``--8<--``), so what is checked here is what
a reader copies:

* the systemd service and timer pass ``systemd-analyze verify`` (which refuses a bad
  calendar, an unknown setting or an ExecStart that is not executable), and the service's
  ExecStart, run with its ``Environment=``, renews a stored certificate that is due and
  prints nothing when none is;
* the cron line has a valid schedule, an absolute command path (cron's PATH is short) and a
  random delay, and its command, run by ``/bin/sh`` in cron's environment, does the same;
* the container recipe copies files that exist, installs an extra that exists, keeps the
  state in its volume, and its ENTRYPOINT + CMD with its ENV renew the volume's
  certificates. There is no Docker daemon here, so the image itself is not built.

The CA comes from what ``issue`` stored; the tests add only what a drop-in would: where
Pebble's HTTPS CA is (``ACMECERTS_CA_BUNDLE``) and where http-01 is answered.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import REPO, ca_args, cli_env, http01_args, run_cli, stored_serial

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)

OPS = REPO / "examples" / "ops"
SERVICE = OPS / "acmecerts-renew.service"
TIMER = OPS / "acmecerts-renew.timer"
CRON = OPS / "acmecerts.cron"
CONTAINERFILE = OPS / "Containerfile"
INSTALLED = "/usr/local/bin/acmecerts"
NAME = "ops.example.com"


def acmecerts_executable() -> str:
    """The ``acmecerts`` console script of the Python running the tests."""
    beside = Path(sys.executable).with_name("acmecerts")
    found = str(beside) if beside.exists() else shutil.which("acmecerts")
    assert found, "the acmecerts console script is not installed (pip install -e '.[cli]')"
    return found


def unit_settings(path: Path) -> dict[str, list[str]]:
    """``Key=value`` settings of a unit file (every value of a repeated key, in order)."""
    settings: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def issued_state(pebble: PebbleServer, tmp_path: Path) -> Path:
    """A state directory holding one certificate issued by the CLI from Pebble."""
    state = tmp_path / "state"
    result = run_cli(
        "issue",
        *ca_args(pebble, state),
        *http01_args(pebble),
        "--agree-tos",
        "--out",
        str(tmp_path / "out"),
        NAME,
        env=cli_env(tmp_path),
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    return state


def drop_in(pebble: PebbleServer, tmp_path: Path, **settings: str) -> dict[str, str]:
    """The environment a drop-in gives the recipe on this machine: Pebble's HTTPS CA and port."""
    env = cli_env(tmp_path)
    env["ACMECERTS_CA_BUNDLE"] = str(pebble.ca_bundle)
    env["ACMECERTS_HTTP_01_LISTEN"] = f"127.0.0.1:{pebble.http_port}"
    env.update(settings)
    return env


def renewed(state: Path, pebble: PebbleServer, before: str | None) -> bool:
    after = stored_serial(state, pebble.directory_url, NAME)
    assert after is not None
    return after != before


# -- systemd ----------------------------------------------------------------------------------


def test_the_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    verify = shutil.which("systemd-analyze")
    assert verify, "systemd-analyze is missing (scripts/test.sh installs systemd)"
    for unit in (SERVICE, TIMER):
        text = unit.read_text().replace(INSTALLED, acmecerts_executable())
        (tmp_path / unit.name).write_text(text)
    result = subprocess.run(
        [verify, "verify", "--man=no", str(tmp_path / SERVICE.name), str(tmp_path / TIMER.name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "acmecerts-renew" not in result.stderr, result.stderr  # no warning about our units


def test_a_broken_unit_fails_verification(tmp_path: Path) -> None:
    """The check above can fail: a calendar systemd cannot parse is refused."""
    verify = shutil.which("systemd-analyze")
    assert verify
    broken = re.sub(r"OnCalendar=.*", "OnCalendar=twice daily", TIMER.read_text())
    (tmp_path / TIMER.name).write_text(broken)
    (tmp_path / SERVICE.name).write_text(
        SERVICE.read_text().replace(INSTALLED, acmecerts_executable())
    )
    result = subprocess.run(
        [verify, "verify", "--man=no", str(tmp_path / TIMER.name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0


def test_the_timer_spreads_runs_and_catches_up() -> None:
    timer = unit_settings(TIMER)
    assert timer["OnCalendar"], "no schedule"
    assert timer["RandomizedDelaySec"], "a fleet would reach the CA at the same instant"
    assert timer["Persistent"] == ["true"]
    service = unit_settings(SERVICE)
    assert service["Type"] == ["oneshot"]
    # longer than the CLI's clean-up bound after SIGTERM, so systemd does not SIGKILL it
    assert float(service["TimeoutStopSec"][0]) > 20


def test_the_service_command_renews_what_is_due_and_is_quiet_otherwise(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    state = issued_state(pebble, tmp_path)
    before = stored_serial(state, pebble.directory_url, NAME)
    service = unit_settings(SERVICE)
    (exec_start,) = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0] == INSTALLED
    argv[0] = acmecerts_executable()
    environment = dict(item.split("=", 1) for item in service["Environment"])
    assert environment["ACMECERTS_STATE_DIR"] == "/var/lib/acmecerts"
    assert service["StateDirectory"] == ["acmecerts"]  # systemd's /var/lib/acmecerts
    environment["ACMECERTS_STATE_DIR"] = str(state)

    nothing_due = subprocess.run(
        argv,
        env=drop_in(pebble, tmp_path, **environment),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert nothing_due.returncode == 0, nothing_due.stderr
    assert nothing_due.stdout == ""
    assert nothing_due.stderr == ""
    assert not renewed(state, pebble, before)

    forced = subprocess.run(
        argv,
        env=drop_in(pebble, tmp_path, **environment, ACMECERTS_FORCE="1"),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert forced.returncode == 0, forced.stderr
    assert "1 renewed" in forced.stdout  # something renewed: it says so
    assert renewed(state, pebble, before)


# -- cron -------------------------------------------------------------------------------------

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("dow", 0, 7))


def valid_cron_field(field: str, low: int, high: int) -> bool:
    """A cron schedule field: ``*``, numbers, ranges, lists and ``/step``, within bounds."""
    for part in field.split(","):
        base, _, step = part.partition("/")
        if step and not step.isdigit():
            return False
        if base == "*":
            continue
        start, _, end = base.partition("-")
        numbers = [start, end] if end else [start]
        if not all(n.isdigit() and low <= int(n) <= high for n in numbers):
            return False
    return True


def cron_entry() -> tuple[dict[str, str], list[str], str, str]:
    """The variables, the schedule, the user and the command of the cron.d file."""
    variables: dict[str, str] = {}
    entries = []
    for raw in CRON.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if re.match(r"^[A-Z_]+=", line):
            key, _, value = line.partition("=")
            variables[key] = value
            continue
        entries.append(line.split(None, 6))
    (entry,) = entries
    assert len(entry) == 7, "cron.d lines are: minute hour day month weekday user command"
    return variables, entry[:5], entry[5], entry[6]


def test_the_cron_line_is_well_formed() -> None:
    variables, schedule, user, command = cron_entry()
    for field, (what, low, high) in zip(schedule, _FIELDS, strict=True):
        assert valid_cron_field(field, low, high), f"bad {what} field {field!r}"
    assert not valid_cron_field("61", 0, 59)  # the check itself can fail
    assert user == "root"
    argv = shlex.split(command)
    assert argv[0] == INSTALLED, "cron's PATH is short: name the command by its full path"
    assert argv[1] == "renew"
    assert "--quiet" in argv, "cron mails whatever a job prints"
    assert int(argv[argv.index("--random-delay") + 1]) > 0
    assert variables["SHELL"] == "/bin/sh"


def test_the_cron_command_renews_in_crons_environment(pebble: PebbleServer, tmp_path: Path) -> None:
    state = issued_state(pebble, tmp_path)
    before = stored_serial(state, pebble.directory_url, NAME)
    variables, _, _, command = cron_entry()
    argv = shlex.split(command)
    argv[0] = acmecerts_executable()
    argv[argv.index("--random-delay") + 1] = "0"  # the test does not wait up to an hour
    # cron's environment: its own variables, HOME and LOGNAME, nothing else of ours; as
    # root, the state would be /var/lib/acmecerts, so a test run names its own
    env = {
        **variables,
        "HOME": str(tmp_path / "home"),
        "LOGNAME": "root",
        "XDG_CONFIG_HOME": str(tmp_path / "no-config"),
        "ACMECERTS_STATE_DIR": str(state),
    }
    env.update({k: v for k, v in drop_in(pebble, tmp_path).items() if k.startswith("ACMECERTS_")})
    quiet = subprocess.run(
        ["/bin/sh", "-c", shlex.join(argv)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout + quiet.stderr == ""  # nothing due: cron mails nothing
    assert not renewed(state, pebble, before)
    forced = subprocess.run(
        ["/bin/sh", "-c", shlex.join([*argv, "--force"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert forced.returncode == 0, forced.stderr
    assert renewed(state, pebble, before)


# -- the container ----------------------------------------------------------------------------


def instructions() -> list[tuple[str, str]]:
    """The Containerfile's instructions (continuation lines joined), in order."""
    joined: list[str] = []
    pending = ""
    for raw in CONTAINERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    result = []
    for line in joined:
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def test_the_container_recipe_is_consistent_with_the_checkout() -> None:
    steps = instructions()
    keywords = [k for k, _ in steps]
    assert keywords[0] == "FROM"
    base = steps[0][1]
    version = re.search(r"python:(\d+)\.(\d+)", base)
    assert version, base
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    minimum = re.search(r"(\d+)\.(\d+)", requires["requires-python"])
    assert minimum
    assert tuple(map(int, version.groups())) >= tuple(map(int, minimum.groups()))
    for keyword, rest in steps:
        if keyword == "COPY":
            *sources, _target = rest.split()
            for source in sources:
                assert (REPO / source).exists(), f"COPY {source}: not in the checkout"
        if keyword == "RUN" and "pip install" in rest:
            extras = re.findall(r"\[([a-z,-]+)\]", rest)
            assert extras, "install the cli extra"
            declared = requires["optional-dependencies"]
            for extra in ",".join(extras).split(","):
                assert extra in declared, f"no extra {extra!r} in pyproject.toml"
    env = dict(rest.split("=", 1) for k, rest in steps if k == "ENV")
    volumes = [rest for k, rest in steps if k == "VOLUME"]
    assert env["ACMECERTS_STATE_DIR"] in volumes, "the state must live in the volume"
    assert ("STOPSIGNAL", "SIGTERM") in steps
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored  # a checkout's virtualenv is not copied into the image


def test_the_container_command_renews_the_volume(pebble: PebbleServer, tmp_path: Path) -> None:
    state = issued_state(pebble, tmp_path)
    before = stored_serial(state, pebble.directory_url, NAME)
    steps = instructions()
    entrypoint = json.loads(next(rest for k, rest in steps if k == "ENTRYPOINT"))
    command = json.loads(next(rest for k, rest in steps if k == "CMD"))
    assert entrypoint == ["acmecerts"]
    image_env = dict(rest.split("=", 1) for k, rest in steps if k == "ENV")
    env = drop_in(pebble, tmp_path, **image_env)
    env["ACMECERTS_STATE_DIR"] = str(state)  # the volume, mounted here
    argv = [acmecerts_executable(), *command]
    quiet = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90, check=False)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == ""
    forced = subprocess.run(
        [*argv, "--force"], env=env, capture_output=True, text=True, timeout=90, check=False
    )
    assert forced.returncode == 0, forced.stderr
    assert renewed(state, pebble, before)
