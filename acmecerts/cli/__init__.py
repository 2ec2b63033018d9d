"""The ``acmecerts`` command line: ``issue``, ``renew``, ``revoke``, ``status``, ``account``.

Needs the ``cli`` extra (``pip install 'acmecerts[cli]'``: typer and rich). The state
directory is a :class:`~acmecerts.storage.FileStorage` that programs using the library
can share (see :mod:`acmecerts.cli._state`); ``acmecerts --help`` documents the exit codes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    SIGINT and SIGTERM are taken over first, before the heavy imports (see
    :mod:`acmecerts.cli._signals`): a signal that comes at any moment of the run stops it
    cleanly. Without ``argv`` the process is the command, and the garbage collector is told
    so (see :mod:`acmecerts.cli._gc`).
    """
    from acmecerts.cli import _gc

    if argv is None:
        _gc.run_as_program()  # before any other import: they all run without collections
        _without_httpx_command_line()
    from acmecerts.cli._signals import guard_signals, json_requested

    args = list(sys.argv[1:] if argv is None else argv)
    with guard_signals(json_mode=json_requested(args)):
        try:
            from acmecerts.cli._app import main as app_main
        except ImportError as exc:  # the optional dependencies are missing
            if exc.name not in ("typer", "rich", "click"):
                raise
            sys.stderr.write(
                f"acmecerts: error: the command line needs {exc.name}: "
                "pip install 'acmecerts[cli]'\n"
            )
            return 2
        try:
            return app_main(args)
        finally:
            _gc.before_exit()


def _without_httpx_command_line() -> None:
    """Keep httpx from importing its own command line (``httpx._main``) in this process.

    ``import httpx`` imports ``httpx._main`` (the ``httpx`` command: click, pygments,
    rich's progress bars and syntax highlighting) whenever click is installed, and falls
    back to a stub when that import fails. The ``acmecerts`` process never runs the
    ``httpx`` command, and those imports were ~7 % of an ``issue``'s import time (about
    0.05 s of CPU); marking the module as absent makes httpx take its fallback. Only
    when the CLI is the program (as :func:`_gc.run_as_program`): a process that calls
    :func:`main` in-process may use httpx's command line itself.
    """
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
