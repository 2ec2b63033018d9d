"""The CLI reference, generated from the installed ``acmecerts`` command.

As an mkdocs hook it replaces the line ``<!-- cli-reference -->`` in ``docs/cli.md`` with
one section per command (usage, arguments and options with their defaults and
environment variables where they are not ``ACMECERTS_<OPTION>``, and the command's own
``--help`` text at 80 columns), so the site always
documents the command line as it is. The commands are read from the typer application
in ``acmecerts.cli._app``. Run it to see the Markdown::

    python docs/_hooks/cli_reference.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- cli-reference -->"
PROG = "acmecerts"


#: The width of the ``--help`` text shown on the page: a terminal's, and the page's column.
COLUMNS = 80


def _root_command() -> Any:
    """The click command that ``acmecerts`` runs."""
    from acmecerts.cli import _app

    return _app.cli_command()


def _walk(
    command: Any, path: tuple[str, ...], ctx: Any
) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """``(words after acmecerts, command, context)`` for the root and every subcommand."""
    yield path, command, ctx
    list_commands = getattr(command, "list_commands", None)
    if list_commands is None:
        return
    for name in list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is None or getattr(sub, "hidden", False):
            continue
        sub_ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
        yield from _walk(sub, (*path, name), sub_ctx)


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: object) -> str:
    return f"`{_cell(text)}`" if text not in (None, "") else ""


def _value(metavar: str) -> str:
    """A metavar as code; choices (``a|b``) one code span each, with no escaped pipe."""
    if "|" in metavar and not metavar.startswith("["):
        return " or ".join(f"`{choice}`" for choice in metavar.split("|"))
    return _code(metavar)


def _standard_env(param: Any) -> str:
    long = next((o for o in param.opts if o.startswith("--")), "")
    return "ACMECERTS_" + long.removeprefix("--").upper().replace("-", "_")


def _default(param: Any) -> str:
    if getattr(param, "count", False) or getattr(param, "is_flag", False):
        return ""
    default = param.default
    if default is None or default == () or default == []:
        return ""
    if callable(default):
        return "(computed)"
    return _code(default)


def _help_text(path: tuple[str, ...]) -> str:
    """What ``acmecerts ... --help`` prints in an 80-column terminal (plain text)."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "CLICOLOR_FORCE")}
    env.update(COLUMNS=str(COLUMNS), NO_COLOR="1", TERM="dumb")
    result = subprocess.run(  # noqa: S603 - our own command, its own words
        [sys.executable, "-m", "acmecerts.cli", *path, "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    while lines and not lines[0]:
        del lines[0]
    return "\n".join(lines).rstrip()


def render() -> str:
    """The reference as Markdown."""
    root = _root_command()
    root_ctx = root.make_context(PROG, [], resilient_parsing=True)
    out: list[str] = [
        "Every option can also be set in the environment as `ACMECERTS_<OPTION>` "
        "(`--state-dir`: `ACMECERTS_STATE_DIR`); the tables name the others.\n"
    ]
    for path, command, ctx in _walk(root, (), root_ctx):
        title = " ".join((PROG, *path))
        out.append(f"## `{title}`\n")
        summary = (command.help or "").strip()
        if summary:
            out.append(summary + "\n")
        usage = " ".join(command.collect_usage_pieces(ctx))
        out.append(f"```text\nUsage: {title} {usage}\n```\n")
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
        if arguments:
            out.append("| Argument | Description |\n|---|---|")
            for param in arguments:
                name = param.metavar or param.name.upper()
                required = " (required)" if param.required else ""
                out.append(
                    f"| {_value(name)} | {_cell(getattr(param, 'help', '') or '')}{required} |"
                )
            out.append("")
        if options:
            out.append("| Option | Description |")
            out.append("|---|---|")
            for param in options:
                names = ", ".join(_code(o) for o in (*param.opts, *param.secondary_opts))
                metavar = "" if param.is_flag or getattr(param, "count", False) else param.metavar
                if metavar:
                    names += f" {_value(metavar)}"
                notes = []
                default = _default(param)
                if default:
                    notes.append(f"Default: {default}.")
                envvar = param.envvar
                if isinstance(envvar, (list, tuple)):
                    envvar = ", ".join(envvar)
                if envvar and envvar != _standard_env(param):
                    notes.append(f"Environment: {_code(envvar)}.")
                out.append(f"| {names} | {' '.join([_cell(param.help or ''), *notes])} |")
            out.append("")
        help_text = _help_text(path)
        if help_text:
            out.append(f'??? note "`{title} --help`"\n')
            out.append("    ```text")
            out.extend(f"    {line}".rstrip() for line in help_text.splitlines())
            out.append("    ```\n")
    return "\n".join(out).rstrip() + "\n"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """mkdocs hook: fill in the reference on the CLI page."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())


if __name__ == "__main__":
    sys.stdout.write(render())
