"""The ``acmecerts`` command line: the typer app, its entry point and the exit codes.

Commands: ``issue`` (one certificate, or one per line of ``--from-file``, in parallel),
``renew``, ``revoke``, ``delete``, ``status`` and ``account show|create|rollover|deactivate``. Each
validates all of its input before anything is sent to the CA or written, so bad input
costs nothing (exit 2, one line); every command has ``--json`` (exactly one JSON object on
stdout, whatever happens). The commands are defined in ``_commands``, their options in
``_options`` (each declared once) and the groups of shared ones in ``_groups``; the work
itself is in ``_issue``, ``_renew``, ``_revoke``, ``_delete``, ``_status`` and ``_account``
(shared parts in ``_batch``, ``_ca`` and ``_report``).

Options come from the command line, ``ACMECERTS_*`` environment variables and a TOML file,
in that order of precedence (see :mod:`acmecerts.cli._config`).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final

import typer

from acmecerts import __version__
from acmecerts.errors import InvalidInput

from . import _commands as commands
from ._config import config_default_map, find_config_path, load_config
from ._constants import ExitCode
from ._options import Config, env
from ._plain import NOT_PLAIN, plain_value

# Only typer, the standard library and light modules at the top: ``acmecerts --version``
# and ``--help`` must not import the library (tests/cli/test_cli_start.py). Each command
# imports what it runs inside its function.

__all__ = ["app", "main"]

EXIT_CODES: Final = (
    f"Exit codes: {ExitCode.OK} ok (issued, or nothing was due); {ExitCode.FAILED} failed "
    "(the CA's problem detail is printed, or an order gave no certificate; status --check: "
    "a certificate failed the check); "
    f"{ExitCode.INPUT} bad input or unusable state (one line on stderr, nothing sent to the "
    f"CA); {ExitCode.DEFERRED} deferred by rate limits, or "
    "the CA asked to wait longer than --max-wait (the instant is printed and kept in the state "
    f"directory); {ExitCode.INTERRUPTED} interrupted (Ctrl-C, SIGINT) and "
    f"{ExitCode.TERMINATED} terminated (SIGTERM: systemctl stop, docker stop): challenge "
    "responses are removed and pending authorizations deactivated first, for 15 s at most "
    "(ACMECERTS_INTERRUPT_GRACE), finished certificates are listed; a second signal quits "
    "at once."
)
CONFIG_HELP: Final = (
    "Every option can also be set as an ACMECERTS_* environment variable (ACMECERTS_STATE_DIR "
    "for --state-dir) or in the TOML file (key state-dir); precedence: flag, environment, "
    "file, default."
)
_EPILOG: Final = f"{EXIT_CODES}\n\n{CONFIG_HELP}"


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"acmecerts {__version__}\n")
        raise typer.Exit(ExitCode.OK)


app = typer.Typer(
    name="acmecerts",
    help="Get TLS certificates from an ACME CA (RFC 8555).",
    epilog=_EPILOG,
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)
account_app = typer.Typer(
    name="account",
    help="Show, create, roll over or deactivate the ACME account; print its dns-persist-01 "
    "records.",
    epilog=_EPILOG,
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(account_app, name="account")
import_app = typer.Typer(
    name="import",
    help="Import certificates from another ACME client (certbot).",
    epilog=_EPILOG,
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(import_app, name="import")


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
    config: Config = None,
) -> None:
    """Get TLS certificates from an ACME CA (RFC 8555)."""


_COMMANDS: Final[tuple[tuple[typer.Typer, str, Callable[..., None]], ...]] = (
    (app, "issue", commands.issue_command),
    (app, "renew", commands.renew_command),
    (app, "revoke", commands.revoke_command),
    (app, "delete", commands.delete_command),
    (app, "status", commands.status_command),
    (account_app, "show", commands.account_show),
    (account_app, "create", commands.account_create),
    (account_app, "rollover", commands.account_rollover),
    (account_app, "deactivate", commands.account_deactivate),
    (account_app, "dns-persist-records", commands.account_dns_persist_records),
    (import_app, "certbot", commands.import_certbot),
)
for _group, _name, _command in _COMMANDS:
    _group.command(_name, epilog=_EPILOG)(_command)


# -- entry point ------------------------------------------------------------------------------


def _usage_error(exc: Exception) -> tuple[int, str] | None:
    """``(exit code, message)`` of a click/typer usage error, else ``None``.

    Duck-typed: typer ships its own copy of click in some versions and uses click in
    others, so there is no one class to catch.
    """
    format_message = getattr(exc, "format_message", None)
    exit_code = getattr(exc, "exit_code", None)
    if not callable(format_message) or not isinstance(exit_code, int):
        return None
    message = str(format_message()) or "missing command"  # no arguments: help was shown
    if exit_code == ExitCode.INPUT:  # click's UsageError and its subclasses
        message += " (see --help)"
    return exit_code, message


#: What the ``--json`` error object of a command carries besides ``status``, ``exit_code``,
#: ``error`` and ``problem``, so that a usage error prints the command's one shape too.
_JSON_SHAPES: Final[dict[str, dict[str, Any]]] = {
    "issue": {"counts": {}, "certificates": []},
    "renew": {"counts": {}, "certificates": []},
    "delete": {"certificates": []},
}


def _json_base(args: Sequence[str]) -> dict[str, Any] | None:
    """The extra fields of the command named in ``args`` (the first word not an option)."""
    words = iter(args)
    for word in words:
        if word == "--config":
            next(words, None)
        elif not word.startswith("-"):
            return _JSON_SHAPES.get(word)
    return None


def _unconverted(command: Any, parent: Any = None, name: str = "acmecerts") -> None:
    """Let typer convert an option's value only when it is not plain (:mod:`._plain`).

    Recent typer converts every value through pydantic, imported and set up the first time
    (about 0.1 s here): even the ``None`` of an option that was not given, such as the
    ``--help`` and ``--config`` of a group on the way to ``acmecerts COMMAND --help``, and
    the string of a string option. Values whose conversion gives them as they are (or a
    ``Path``, an ``int`` of digits, a choice) are converted by :func:`._plain.plain_value`
    instead, for the options of every group and command; the callbacks run as before, and
    anything else (a value typer refuses, a required option missing) goes to typer.
    """
    ctx = command.context_class(command, info_name=name, parent=parent, **command.context_settings)
    for param in command.get_params(ctx):
        param.process_value = functools.partial(_plain_or_typer, param, param.process_value)
    for sub_name, sub in getattr(command, "commands", {}).items():
        _unconverted(sub, ctx, sub_name)


def _plain_or_typer(param: Any, process: Any, ctx: Any, value: Any) -> Any:
    converted = plain_value(param, ctx, value)
    if converted is NOT_PLAIN or (param.required and param.value_is_missing(converted)):
        return process(ctx, value)
    return converted if param.callback is None else param.callback(ctx, param, converted)


def _plain_types(command: Any) -> None:
    """Show each option's value as its metavar in ``--help``, never as a type tag.

    Recent typer adds a column of type tags (``<bool>`` for a flag, ``<list[str]>`` for an
    argument that already shows its metavar); they say nothing a reader can use. A flag and
    an argument get no value column, an option its metavar (or click's, ``TEXT``).
    """
    for param in getattr(command, "params", ()):
        if hasattr(param, "display_type_rich"):
            param.display_type_rich = functools.partial(_value_label, param)
    get_help_option = getattr(command, "get_help_option", None)
    if get_help_option is not None:  # --help is made per context, not kept in params
        command.get_help_option = functools.partial(_plain_help_option, get_help_option)
    for sub in getattr(command, "commands", {}).values():
        _plain_types(sub)


def _plain_help_option(get_help_option: Any, ctx: Any) -> Any:
    option = get_help_option(ctx)
    if option is not None and hasattr(option, "display_type_rich"):
        option.display_type_rich = functools.partial(_value_label, option)
    return option


def _value_label(param: Any, ctx: Any) -> str | None:
    if param.param_type_name == "argument" or getattr(param, "is_flag", False):
        return None
    if getattr(param, "count", False):
        return None
    if param.metavar is not None:
        return str(param.metavar)
    tag = type(param).display_type_rich(param, ctx)  # typer's own, e.g. "<int>"
    return None if tag is None else str(tag).strip("<>").upper()


def cli_command() -> Any:
    """The click command that :func:`main` runs (the docs' CLI reference reads it too)."""
    command = typer.main.get_command(app)
    _unconverted(command)
    _plain_types(command)
    return command


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``acmecerts`` command line; return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    json_env = os.environ.get(env("json"), "").strip().lower()
    json_mode = "--json" in args or json_env in ("1", "true", "yes", "on")
    command = cli_command()
    try:
        path, _ = find_config_path(args)
        default_map: dict[str, Any] | None = None
        if path is not None:
            default_map = config_default_map(command, load_config(path), path)
    except InvalidInput as exc:
        from ._report import Report

        report = Report(json_mode=json_mode, json_base=_json_base(args))
        return report.error(ExitCode.INPUT, str(exc))
    try:
        result = command.main(
            args=args, prog_name="acmecerts", standalone_mode=False, default_map=default_map
        )
    except KeyboardInterrupt as exc:  # a signal before or after the work (_signals.Interrupted)
        from ._report import Report

        code, message = getattr(exc, "exit_code", ExitCode.INTERRUPTED), str(exc) or "interrupted"
        return Report(json_mode=json_mode, json_base=_json_base(args)).error(code, message)
    except typer.Abort:
        from ._report import Report

        return Report(json_mode=json_mode, json_base=_json_base(args)).error(
            ExitCode.INTERRUPTED, "interrupted"
        )
    except Exception as exc:
        usage = _usage_error(exc)
        if usage is None:
            raise
        code, message = usage
        from ._report import Report

        # Usage errors in one line, like every other input error.
        return Report(json_mode=json_mode, json_base=_json_base(args)).error(code, message)
    return result if isinstance(result, int) else ExitCode.OK
