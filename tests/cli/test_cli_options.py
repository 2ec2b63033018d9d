"""The options several commands share are declared once (``acmecerts.cli._options``).

A group of options reaches a command as one dataclass; each option keeps one flag, one
environment variable and one help text in every command that has it.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer

from acmecerts.cli._app import app
from acmecerts.cli._args import AccountArgs, CommonArgs
from acmecerts.cli._groups import COMMON, shared

pytestmark = pytest.mark.timeout(30)


def _commands() -> dict[str, Any]:
    """Every command by its words (``account show``); duck-typed: typer may ship its own
    copy of click."""
    found: dict[str, Any] = {}
    for name, command in getattr(typer.main.get_command(app), "commands", {}).items():
        subcommands = getattr(command, "commands", None)
        if subcommands:
            found.update({f"{name} {n}": c for n, c in subcommands.items()})
        else:
            found[name] = command
    return found


def test_every_command_has_the_common_options_alike() -> None:
    """``--state-dir`` ... ``--config`` in every command, with the same flag and variable;
    only ``--directory`` has its own help in ``status`` and ``renew``."""
    names = set(COMMON.fields())
    seen: dict[str, set[tuple[Any, ...]]] = {name: set() for name in names}
    commands = _commands()
    assert sorted(commands) == [
        "account create",
        "account deactivate",
        "account dns-persist-records",
        "account rollover",
        "account show",
        "delete",
        "import certbot",
        "issue",
        "renew",
        "revoke",
        "status",
    ]
    for command in commands.values():
        params = {p.name: p for p in command.params if p.name in names}
        assert set(params) == names, command.name
        for name, param in params.items():
            assert param.param_type_name == "option"
            help_text = None if name == "directory" else param.help
            seen[name].add((tuple(param.opts), param.envvar, param.default, help_text))
    assert all(len(kinds) == 1 for kinds in seen.values()), seen


def test_a_command_gets_each_group_as_its_dataclass() -> None:
    got: list[Any] = []

    @shared()
    def command(*, account: AccountArgs, common: CommonArgs) -> None:
        got.extend((account, common))

    command(
        email=["a@example.com"],
        eab_kid=None,
        eab_hmac_key=None,
        agree_tos=True,
        directory="https://ca.example/dir",
        staging=False,
        ca_bundle=None,
        proxy=None,
        state_dir=None,
        rate_limits="none",
        timeout=10.0,
        json_output=True,
        verbose=2,
        log_format="json",
        config=None,
    )
    assert got == [
        AccountArgs(emails=("a@example.com",), agree_tos=True),
        CommonArgs(
            directory="https://ca.example/dir",
            rate_limits="none",
            timeout=10.0,
            json=True,
            verbose=2,
            log_format="json",
        ),
    ]


def test_replacing_an_option_the_command_does_not_take_is_refused() -> None:
    with pytest.raises(TypeError, match="no shared option"):

        @shared(directry=str)
        def command(*, common: CommonArgs) -> None:
            """Nothing."""
