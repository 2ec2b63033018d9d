"""The cyclic garbage collector when the CLI runs as the program.

A run of ``acmecerts issue`` imports ~0.3 million objects (httpx, cryptography, acme,
rich, the library) that live until the process exits, and then creates many short-lived
ones per certificate. Two costs follow, both measured on ``issue --from-file`` of 100
names: every full collection during the run walks all of the imported objects again
(~0.2 s of collections in a run), and the interpreter's own collections at exit walk
everything once more (~0.25 s between the last line written and the process's end).

:func:`gc.freeze` moves the objects that exist into a generation the collector never
walks. So, only when the CLI is the program (:func:`acmecerts.cli.main` called without
``argv``: the ``acmecerts`` command, ``python -m acmecerts``), the objects are frozen once
the command's modules are imported (:func:`settle`, before the async work) and again when
the command is done (:func:`before_exit`). Nothing else changes: files are written,
fsynced and closed, and ``atexit`` handlers run, as before. Called in-process (tests,
programs that embed the CLI), neither does anything: freezing would keep that process's
cyclic garbage for good.

The imports themselves are the third cost: the collector runs ~120 times while a
command's modules load (one full collection, ten of the middle generation), walking
objects that all stay alive, ~40 ms of CPU per run, more the more modules there are.
Imports make next to no cyclic garbage, so :func:`run_as_program` turns the collector
off until :func:`settle` has frozen what they made, and :func:`settle` turns it back on
for the command's work. A command always settles before its async work
(:func:`acmecerts.cli._interrupt.run_interruptible`); one that ends before it (``--help``,
bad input) exits with the collector off, having made little.
"""

from __future__ import annotations

import gc

__all__ = ["before_exit", "run_as_program", "settle"]

_program = False


def run_as_program() -> None:
    """This process is the ``acmecerts`` command: no collections until :func:`settle`.

    From now on :func:`settle` and :func:`before_exit` act.
    """
    global _program
    _program = True
    gc.disable()


def settle() -> None:
    """The command's modules are imported: the collector stops walking what exists now.

    As the program, the collector (off since :func:`run_as_program`) runs again from here.
    """
    if _program:
        gc.freeze()
        gc.enable()


def before_exit() -> None:
    """The command is done: the interpreter's collections at exit skip what exists now."""
    if _program:
        gc.freeze()
