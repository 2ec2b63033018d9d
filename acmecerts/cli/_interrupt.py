"""Ctrl-C in the CLI: clean up once, within a bound; a second Ctrl-C quits at once.

Every command runs its async work through :func:`run_interruptible` instead of
``anyio.run``. While it runs, SIGINT is handled here:

1. The first SIGINT cancels the work (an anyio cancel scope around it, so the
   cancellation reaches every task and cannot be lost the way a single
   ``Task.cancel()`` can). What the work does in ``finally`` and in shielded scopes still
   runs: the solvers remove their challenge responses, the client deactivates the
   authorizations still pending (its cleanup is bounded on its own), the state is saved,
   the connections close. Then the command reports ``interrupted`` and exits with 130.
2. Whatever the CA does, that cleanup gets :data:`INTERRUPT_GRACE` seconds. A CA that
   stops answering cannot keep the command alive longer: when the grace is over the
   process reports ``interrupted`` and exits with 130 on the spot.
3. A second SIGINT exits with 130 at once, the cleanup abandoned.

A process started with SIGINT ignored (a background job of a shell without job control,
``nohup``) keeps ignoring it, as its parent asked; so does one whose SIGINT handler is
not Python's default (the CLI called in-process by a program with a handler of its own).
Then the work runs as under ``anyio.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Final, NoReturn, TypeVar

import anyio

from ._common import EXIT_INTERRUPTED

__all__ = ["INTERRUPT_GRACE", "run_interruptible"]

T = TypeVar("T")

#: Seconds from the first Ctrl-C until the command exits, cleaned up or not. A cleanup
#: the CA answers takes a second or two; with a CA that stopped answering, this (and the
#: client's own 15 s bound on its cleanup) is what ends the command.
INTERRUPT_GRACE: Final = 15.0
#: Shows the cursor again (a live display hides it) before a forced exit.
_SHOW_CURSOR: Final = b"\x1b[?25h"


def run_interruptible(
    func: Callable[[], Awaitable[T]], *, json_mode: bool, grace: float = INTERRUPT_GRACE
) -> T:
    """``anyio.run(func)`` under the CLI's Ctrl-C rules (see the module docstring).

    Returns what ``func`` returned, also when a SIGINT came too late to stop it. Raises
    :class:`KeyboardInterrupt` when the work stopped because of a SIGINT (whatever else
    went wrong while it stopped); otherwise what ``func`` raised. After the grace, or at
    a second SIGINT, it does not return: the process exits with 130.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return anyio.run(func)
    guard = _Guard(json_mode=json_mode, grace=grace)
    previous = signal.signal(signal.SIGINT, guard.on_signal)
    try:
        return anyio.run(guard.run, func)
    except BaseException as exc:
        if guard.interrupted:
            raise KeyboardInterrupt from exc
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        guard.disarm()


class _Guard:
    """One run: the work's cancel scope, whether a SIGINT came, the grace timer."""

    def __init__(self, *, json_mode: bool, grace: float) -> None:
        self.json_mode = json_mode
        self.grace = grace
        self.interrupted = False
        self._scope: anyio.CancelScope | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: threading.Timer | None = None

    async def run(self, func: Callable[[], Awaitable[T]]) -> T:
        self._loop = asyncio.get_running_loop()
        with anyio.CancelScope() as scope:
            self._scope = scope
            if self.interrupted:  # the signal came while the event loop was starting
                scope.cancel()
            return await func()
        # only this scope's own cancellation gets here: the first SIGINT stopped the work
        raise _Stopped

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The SIGINT handler (Python runs it in the main thread, between two bytecodes)."""
        if self.interrupted:
            _exit_now(self.json_mode, "interrupted")
        self.interrupted = True
        self._timer = threading.Timer(self.grace, self._grace_over)
        self._timer.daemon = True
        self._timer.start()
        if sys.stderr.isatty():
            _write(2, b"\nacmecerts: cleaning up; press Ctrl-C again to quit at once\n")
        scope, loop = self._scope, self._loop
        if scope is not None and loop is not None:
            # Not from inside a signal handler: the event loop cancels at its next turn.
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to cancel
                loop.call_soon_threadsafe(scope.cancel)

    def _grace_over(self) -> None:
        _exit_now(self.json_mode, f"interrupted; cleanup did not finish within {self.grace:g} s")

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _write(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):  # a closed pipe must not stop the exit
        os.write(fd, data)


def _exit_now(json_mode: bool, message: str) -> NoReturn:
    """Report ``message`` like ``Report.error`` and end the process with 130 on the spot.

    Raw writes to the file descriptors: this runs in a signal handler or the timer's
    thread, while the main thread may hold the locks of ``sys.stdout``/``sys.stderr``.
    """
    if os.isatty(1):
        _write(1, _SHOW_CURSOR)
    _write(2, f"acmecerts: error: {message}\n".encode())
    if json_mode:
        document = {
            "status": "interrupted",
            "exit_code": EXIT_INTERRUPTED,
            "error": message,
            "problem": None,
        }
        _write(1, (json.dumps(document) + "\n").encode())
    os._exit(EXIT_INTERRUPTED)


class _Stopped(Exception):
    """The work stopped because of a SIGINT (the caller raises KeyboardInterrupt)."""
