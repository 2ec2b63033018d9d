"""Configuration precedence: command-line flag > ``ACMECERTS_*`` variable > TOML file > default.

``acmecerts status --json`` shows the directory and state directory it uses, without
contacting the CA, so the precedence can be watched directly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import anyio
import pytest
from cli_support import CLI, REPO, cli_env, one_json, run_many, unmeasured, without_root

from acmecerts.cli import main
from acmecerts.cli._state import State

pytestmark = pytest.mark.timeout(60)

FILE_CA = "https://file.example.test/dir"
ENV_CA = "https://env.example.test/dir"
FLAG_CA = "https://flag.example.test/dir"


def seed_cas(state: Path, *directories: str) -> None:
    """State for each CA in ``state`` (its settings file only): status shows a CA it has
    state for, and nothing else is there."""

    async def seed() -> None:
        for directory in directories:
            await State(state, directory).save_ca_settings(None)

    anyio.run(seed)


def test_flag_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    seed_cas(tmp_path / "file-state", FILE_CA, ENV_CA, FLAG_CA)
    before = sorted(p.name for p in (tmp_path / "file-state").iterdir())
    # The default file: $XDG_CONFIG_HOME/acmecerts/config.toml, found without --config.
    config = tmp_path / "xdg-config" / "acmecerts" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'directory = "{FILE_CA}"\n'
        f'state-dir = "{tmp_path / "file-state"}"\n'
        'rate-limits = "none"\n'
        "\n"
        "[status]  # only for `acmecerts status`\n"
        'rate_limits = "letsencrypt"\n'
        "\n"
        "[issue]\n"
        "concurrency = 3\n"
    )
    file_only = cli_env(tmp_path)
    with_env = cli_env(tmp_path, ACMECERTS_DIRECTORY=ENV_CA)

    from_file, from_env, from_flag = run_many(
        [["status", "--json"], ["status", "--json"], ["status", "--json", "--directory", FLAG_CA]],
        envs=[file_only, with_env, with_env],
    )

    for result in (from_file, from_env, from_flag):
        assert result.returncode == 0, result.stderr
    assert one_json(from_file)["directory"] == FILE_CA
    assert one_json(from_file)["state_dir"] == str(tmp_path / "file-state")
    assert one_json(from_file)["rate_limits"]["model"] == "lets-encrypt"  # the [status] table
    assert one_json(from_env)["directory"] == ENV_CA
    assert one_json(from_env)["state_dir"] == str(tmp_path / "file-state")
    assert one_json(from_flag)["directory"] == FLAG_CA
    # status reads the state directory, it writes nothing there
    assert sorted(p.name for p in (tmp_path / "file-state").iterdir()) == before


def test_defaults_apply_to_what_nothing_sets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in [v for v in os.environ if v.startswith("ACMECERTS_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    (tmp_path / "empty.toml").write_text("# nothing set here\n")

    # in-process; --config names a file that sets nothing (the XDG default is not read)
    empty = ["--config", str(tmp_path / "empty.toml")]
    # root keeps the state in /var/lib/acmecerts (status never creates it); others under
    # HOME: there is nothing there, which status says (exit 2, naming the directory)
    assert main(["status", "--json", *empty]) == 2
    document = json.loads(capsys.readouterr().out)
    home = tmp_path / "home/.local/share/acmecerts"
    default_state = "/var/lib/acmecerts" if os.geteuid() == 0 else str(home)
    assert f"state directory {default_state} does not exist" in document["error"]

    # The CA's state: its directory URL and the rate limits' default (auto: Let's Encrypt's
    # for its production directory).
    production = "https://acme-v02.api.letsencrypt.org/directory"
    seed_cas(tmp_path / "s", production)
    assert main(["status", "--json", *empty, "--state-dir", str(tmp_path / "s")]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["directory"] == production
    assert document["rate_limits"]["model"] == "lets-encrypt"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('directry = "https://x.example/dir"\n', "unknown setting 'directry'"),
        ('[issue]\nforce = "yes"\nnot-an-option = 1\n', "unknown setting 'issue.not-an-option'"),
        ("[sign]\nforce = true\n", "unknown command table [sign]"),
        ("directory = \n", "not valid TOML"),
        ('[issue]\nconcurrency = "many"\n', "issue.concurrency must be an integer, not 'many'"),
        ("email = 3\n", ": email must be a string or a list of strings"),
        ('json = "yes"\n', "json must be true or false"),
    ],
)
def test_a_bad_config_file_is_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    content: str,
    message: str,
) -> None:
    for variable in [v for v in os.environ if v.startswith("ACMECERTS_")]:
        monkeypatch.delenv(variable)
    config = tmp_path / "config.toml"
    config.write_text(content)

    code = main(["--config", str(config), "issue", "--state-dir", str(tmp_path / "s"), "x.test"])

    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert message in lines[0]
    assert str(config) in lines[0]
    assert not (tmp_path / "s").exists()


def test_a_missing_config_file_named_explicitly_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["status", "--config", str(tmp_path / "nope.toml")])
    assert code == 2
    assert f"cannot read config file {tmp_path / 'nope.toml'}" in capsys.readouterr().err


def test_an_unreadable_default_config_path_counts_as_absent(tmp_path: Path) -> None:
    """``HOME=/root`` under another user: ``~/.config`` cannot even be looked at.

    The default file counts as absent (the command runs); the same path given with
    ``--config`` is one line and exit 2. Never a traceback.
    """
    base = Path(tempfile.mkdtemp(prefix="acmecerts-home-", dir="/tmp"))
    try:
        home = base / "home"
        config = home / ".config" / "acmecerts" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text('directory = "https://home.example.test/dir"\n')
        base.chmod(0o755)
        home.chmod(0o700)  # as /root is: another user cannot search it
        env = cli_env(None, HOME=str(home))
        del env["XDG_CONFIG_HOME"]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        prefix = without_root()
        if not prefix:
            home.chmod(0)  # not root: take the permission away from ourselves

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*prefix, *CLI, *args],
                cwd=base,
                env=unmeasured(env),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        version = run("--version")
        bad_input = run("issue", "--key-type", "dsa", "a.example")
        explicit = run("--config", str(config), "--version")
    finally:
        home.chmod(0o700)
        shutil.rmtree(base)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("acmecerts ")
    # the command ran past the configuration, to its own input check
    assert bad_input.returncode == 2, bad_input.stderr
    (line,) = bad_input.stderr.splitlines()
    assert line.startswith("acmecerts: error: ")
    assert "dsa" in line
    assert explicit.returncode == 2, explicit.stderr
    (line,) = explicit.stderr.splitlines()
    assert line.startswith("acmecerts: error: cannot read config file ")
    assert str(config) in line
