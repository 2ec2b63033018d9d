"""The CLI reference, generated from the installed ``acmecerts`` command.

As an mkdocs hook it replaces the line ``<!-- cli-reference -->`` in ``docs/cli.md`` with
one section per command (usage, arguments and options with their defaults and
environment variables, and the command's own ``--help`` text), so the site always
documents the command line as it is. The commands are read from the typer application
in ``acmecerts.cli._app``. Run it to see the Markdown::

    python docs/_hooks/cli_reference.py
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- cli-reference -->"
PROG = "acmecerts"


def _root_command() -> Any:
    """The click command behind ``acmecerts`` (typer's, or a plain click one)."""
    from acmecerts.cli import _app

    app = _app.app
    try:
        import typer.main

        if isinstance(app, typer.Typer):
            return typer.main.get_command(app)
    except ImportError:  # pragma: no cover - typer is in the cli extra
        pass
    return app


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
    """What ``acmecerts ... --help`` prints (plain text, 100 columns), run in-process."""
    from typer.testing import CliRunner

    from acmecerts.cli import _app

    env = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "FORCE_COLOR": None}
    result = CliRunner().invoke(_app.app, [*path, "--help"], env=env, prog_name=PROG)
    lines = [line.rstrip() for line in result.output.splitlines()]
    while lines and not lines[0]:
        del lines[0]
    return "\n".join(lines).rstrip()


def render() -> str:
    """The reference as Markdown."""
    root = _root_command()
    root_ctx = root.make_context(PROG, [], resilient_parsing=True)
    out: list[str] = []
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
                    f"| {_code(name)} | {_cell(getattr(param, 'help', '') or '')}{required} |"
                )
            out.append("")
        if options:
            out.append("| Option | Value | Default | Environment | Description |")
            out.append("|---|---|---|---|---|")
            for param in options:
                names = ", ".join(_code(o) for o in (*param.opts, *param.secondary_opts))
                metavar = "" if param.is_flag or getattr(param, "count", False) else param.metavar
                envvar = param.envvar
                if isinstance(envvar, (list, tuple)):
                    envvar = ", ".join(envvar)
                out.append(
                    f"| {names} | {_code(metavar or '')} | {_default(param)} "
                    f"| {_code(envvar or '')} | {_cell(param.help or '')} |"
                )
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
