"""Option values converted without pydantic (``acmecerts.cli._plain``) as typer converts them.

For every option and argument of every command, a set of values (what a command line, an
``ACMECERTS_*`` variable, a TOML file or a default gives): wherever :func:`plain_value`
converts one itself, typer's own conversion (its pydantic adapter) gives the same value of
the same type; typer's error for a value it refuses is kept (the value goes to typer).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import CLI, REPO, cli_env

from acmecerts.cli._app import cli_command
from acmecerts.cli._plain import NOT_PLAIN, plain_value

pytestmark = pytest.mark.timeout(120)

TEXTS = (
    *("", " ", "0", "1", "007", "12", "-3", "+4", "1.5", "0.25", "1e3", " 2 ", "1_000", "٣"),
    *("yes", "YES", " true ", "On", "no", "F", "n", "maybe", "text", "TEXT", "json", "Json"),
    *("/", "/nonexistent/x", "relative/p", "a,b", "ec256", "http-01", "~/x", "-"),
)
OTHERS: tuple[Any, ...] = (None, 0, 5, 1.5, 120.0, True, False, (), ("a.example", "b"), ["x"])


def every_param() -> list[tuple[str, Any, Any]]:
    """(command path, click context, parameter) of every command and group."""
    found: list[tuple[str, Any, Any]] = []

    def walk(command: Any, parent: Any, path: str) -> None:
        ctx = command.context_class(command, info_name=path.rpartition(" ")[2], parent=parent)
        found.extend((path, ctx, param) for param in command.get_params(ctx))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, ctx, f"{path} {name}")

    walk(cli_command(), None, "acmecerts")
    return found


def typer_value(param: Any, ctx: Any, value: Any) -> Any:
    """What typer itself makes of ``value`` (its exception if it refuses it)."""
    try:
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)
    except Exception as exc:
        return exc


def test_plain_values_are_typers_values(tmp_path: Path) -> None:
    unreadable = tmp_path / "unreadable"
    unreadable.write_text("x")
    unreadable.chmod(0)
    values = (*TEXTS, str(tmp_path), str(unreadable), *OTHERS)
    plain = 0
    for path, ctx, param in every_param():
        for value in values:
            ours = plain_value(param, ctx, value)
            if ours is NOT_PLAIN:
                continue
            plain += 1
            theirs = typer_value(param, ctx, value)
            where = f"{path} {param.name} {value!r}"
            assert not isinstance(theirs, Exception), f"{where}: typer refuses it: {theirs}"
            assert type(ours) is type(theirs), where
            assert ours == theirs, where
    # the check compared many values (strings, numbers, paths, choices, lists)
    assert plain > 1000


def test_values_typer_refuses_go_to_typer() -> None:
    params = {(path, param.name): (ctx, param) for path, ctx, param in every_param()}
    ctx, concurrency = params["acmecerts issue", "concurrency"]
    for refused in ("x", "-1.5", "1e400", ""):
        assert plain_value(concurrency, ctx, refused) is NOT_PLAIN
    ctx, log_format = params["acmecerts issue", "log_format"]
    assert plain_value(log_format, ctx, "xml") is NOT_PLAIN
    ctx, agree = params["acmecerts issue", "agree_tos"]
    assert plain_value(agree, ctx, "maybe") is NOT_PLAIN


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        cwd=REPO,
        env={**cli_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (
            ("--concurrency", "many"),
            {},
            "Invalid value for '--concurrency' (env var: 'ACMECERTS_CONCURRENCY'): Input should "
            "be a valid integer, unable to parse string as an integer (see --help)",
        ),
        (
            ("--log-format", "xml"),
            {},
            "Invalid value for '--log-format' (env var: 'ACMECERTS_LOG_FORMAT'): Value error, "
            "'xml' is not one of 'text', 'json'. (see --help)",
        ),
        (
            (),
            {"ACMECERTS_AGREE_TOS": "maybe"},
            "Invalid value for '--agree-tos' (env var: 'ACMECERTS_AGREE_TOS'): Input should be "
            "a valid boolean, unable to interpret input (see --help)",
        ),
    ],
    ids=["int", "choice", "bool from the environment"],
)
def test_a_refused_value_keeps_typers_message(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], line: str
) -> None:
    """The same line as before plain values (typer's, through pydantic)."""
    result = run_cli(
        "issue", "--state-dir", str(tmp_path / "state"), *args, "plain.example.test", **env
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"acmecerts: error: {line}"]


def test_an_issue_command_line_needs_no_pydantic(tmp_path: Path) -> None:
    """The options of a usual ``issue`` (given, from the environment, defaults) are plain."""
    code = (
        "import sys; import acmecerts.cli._issue as issue;"
        "issue.run_issue = lambda *a: print('pydantic' in sys.modules) or 0;"
        "from acmecerts.cli._app import main; sys.exit(main(sys.argv[1:]))"
    )
    names = tmp_path / "names.txt"
    names.write_text("a.example.test\n")
    result = subprocess.run(
        [
            *(sys.executable, "-c", code, "issue", "--from-file", str(names)),
            *("--directory", "https://127.0.0.1:14000/dir", "--state-dir", str(tmp_path / "s")),
            *("--out", str(tmp_path / "out"), "--http-01-listen", "127.0.0.1:5002"),
            *("--concurrency", "100", "--log-format", "json", "--max-wait", "30"),
        ],
        cwd=REPO,
        env={**cli_env(), "ACMECERTS_AGREE_TOS": "1", "PYTHONPATH": os.fspath(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"
