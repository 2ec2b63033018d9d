"""SIGINT and SIGTERM in the CLI: stop the work cleanly, within a bound; twice, at once.

Ctrl-C (SIGINT) and a service manager's stop (SIGTERM: ``systemctl stop``, ``docker
stop``, a pod eviction) are handled alike:

1. The first signal cancels the work in progress (see :mod:`acmecerts.cli._interrupt`):
   challenge responses are removed, pending authorizations deactivated, the state saved.
   The command then reports ``interrupted`` (SIGINT, exit 130) or ``terminated``
   (SIGTERM, exit 143). A signal that comes while no work runs (the command is still
   reading its options) stops the work as soon as it starts.
2. That clean-up has a budget: :data:`INTERRUPT_GRACE` seconds from the first signal
   (``ACMECERTS_INTERRUPT_GRACE`` sets another). When it is spent, the process reports
   what it can and exits on the spot, whatever the CA does: a CA that stops answering
   cannot keep the command alive.
3. A second SIGINT or SIGTERM exits at once (the code of that second signal).

How, and why this way: the signal handlers installed here do nothing themselves. Python
runs a handler only when the main thread executes bytecode, which a main thread blocked
in a C call may not do for a long time; and a handler that takes a lock (starting a
thread does) can deadlock with the code it interrupted. Instead the C-level handler
writes the signal number to a pipe (:func:`signal.set_wakeup_fd`), and a watchdog thread
that waits on that pipe does everything: it cancels the work (thread-safely, through
the event loop), keeps the clean-up's deadline, and ends the process with ``os._exit``.
Nothing depends on the main thread being responsive.

A signal that was ignored when the process started (SIGINT for a background job of a
shell without job control, ``nohup``) stays ignored, as the parent asked; a handler that
is not Python's default (the CLI called in-process by a program that has its own) is
left alone. With ``ACMECERTS_SIGNALS_READY=PATH``, the process appends one line to PATH
once its handlers are in place (``PID ready SIGINT SIGTERM``, naming the signals it
handles): tests and supervisors wait for it instead of guessing when a signal is safe
to send.

This module imports only the standard library: :func:`acmecerts.cli.main` arms it
before anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, NoReturn

from ._constants import ExitCode

__all__ = [
    "GRACE_ENV",
    "INTERRUPT_GRACE",
    "READY_ENV",
    "FinalWords",
    "Interrupted",
    "SignalGuard",
    "active_guard",
    "exit_code_for",
    "guard_signals",
    "json_requested",
]

#: Seconds from the first signal until the process exits, cleaned up or not. A clean-up
#: the CA answers takes a second or two; this is what ends a command whose CA stopped
#: answering. 15 s plus the interpreter's exit stays well within the 20 s promised.
INTERRUPT_GRACE: Final = 15.0
#: Environment variable with another clean-up budget, in seconds.
GRACE_ENV: Final = "ACMECERTS_INTERRUPT_GRACE"
#: Environment variable naming a file to append a line to once the handlers are in place.
READY_ENV: Final = "ACMECERTS_SIGNALS_READY"

#: What a forced exit adds to its report: lines for stderr, and members for the JSON
#: document (e.g. the certificates of a batch that had finished).
FinalWords = Callable[[], tuple[list[str], dict[str, Any]]]

_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
_NAMES: Final = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
#: The byte that stops the watchdog (signal numbers start at 1).
_STOP: Final = 0
#: Shows the cursor again (a live display hides it) before a forced exit.
_SHOW_CURSOR: Final = b"\x1b[?25h"


def exit_code_for(signum: int) -> int:
    """130 for SIGINT, 143 for SIGTERM (128 + the signal number)."""
    return ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED


def message_for(signum: int) -> str:
    """``interrupted`` (SIGINT) or ``terminated`` (SIGTERM): the error the command reports."""
    return _NAMES.get(signal.Signals(signum), "interrupted")


def json_requested(args: list[str]) -> bool:
    """Whether ``--json`` is asked for, on the command line or in ``ACMECERTS_JSON``."""
    value = os.environ.get("ACMECERTS_JSON", "").strip().lower()
    return "--json" in args or value in ("1", "true", "yes", "on")


class Interrupted(KeyboardInterrupt):
    """The work stopped because of a signal: ``exit_code`` 130 (SIGINT) or 143 (SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(message_for(signum))
        self.signum = signum
        self.exit_code = exit_code_for(signum)
        self.message = message_for(signum)


def _grace_from_env() -> float:
    """The clean-up budget of ``ACMECERTS_INTERRUPT_GRACE``, read by the library's one
    duration parser; a value it refuses is warned about and the default used."""
    text = os.environ.get(GRACE_ENV, "").strip()
    if not text:
        return INTERRUPT_GRACE  # the usual case imports nothing more: the guard comes first
    from acmecerts import InvalidInput, duration_seconds  # the library's one duration parser

    try:
        return duration_seconds(float(text), GRACE_ENV, positive=True)
    except (ValueError, InvalidInput):  # InvalidInput is a ValueError too
        _write(
            2,
            f"acmecerts: warning: {GRACE_ENV}={text!r} is not a positive number of "
            f"seconds; using {INTERRUPT_GRACE:g}\n".encode(),
        )
        return INTERRUPT_GRACE


class SignalGuard:
    """SIGINT and SIGTERM for one CLI run (see the module docstring).

    Args:
        json_mode: A forced exit prints the one JSON document of ``--json``.
        grace: The clean-up budget in seconds (default: ``ACMECERTS_INTERRUPT_GRACE``,
            else :data:`INTERRUPT_GRACE`).

    Raises:
        InvalidInput: ``grace`` is no positive, finite number of seconds.
    """

    def __init__(self, *, json_mode: bool, grace: float | None = None) -> None:
        self.json_mode = json_mode
        if grace is None:
            self.grace = _grace_from_env()
        else:
            from acmecerts import duration_seconds  # the library's one duration parser

            self.grace = duration_seconds(grace, "grace", positive=True)
        #: The first signal received (``None`` until one comes).
        self.signum: int | None = None
        #: Called by a forced exit for what the report should add (see :data:`FinalWords`).
        self.final_words: FinalWords | None = None
        self._lock = threading.Lock()
        self._cancel: Callable[[], None] | None = None
        self._previous: dict[int, Any] = {}
        self._previous_wakeup = -1
        self._pipe: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    # -- arming ---------------------------------------------------------------------------

    def arm(self) -> bool:
        """Install the handlers and start the watchdog; ``False`` if no signal is ours.

        Only in the main thread, and only for a signal whose handler is Python's default
        (SIGINT: :func:`signal.default_int_handler`; SIGTERM: ``SIG_DFL``).
        """
        if threading.current_thread() is not threading.main_thread():
            return False
        defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
        mine = [s for s in _SIGNALS if signal.getsignal(s) is defaults[s]]
        if not mine:
            return False
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # set_wakeup_fd needs it; a full pipe drops bytes
        self._pipe = (read_end, write_end)
        self._thread = threading.Thread(target=self._watch, name="acmecerts-signals", daemon=True)
        self._thread.start()
        self._previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        for signum in mine:
            self._previous[signum] = signal.signal(signum, _ignore_here)
        _announce_ready(mine)
        return True

    def disarm(self) -> None:
        """Put the previous handlers back and stop the watchdog."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        if self._pipe is None:
            return
        signal.set_wakeup_fd(self._previous_wakeup)
        read_end, write_end = self._pipe
        with contextlib.suppress(OSError):
            os.write(write_end, bytes([_STOP]))
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pipe = None
        for fd in (read_end, write_end):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the work -------------------------------------------------------------------------

    def attach(self, cancel: Callable[[], None]) -> None:
        """The work has started; ``cancel()`` (thread-safe) stops it at the first signal.

        A signal that came before is acted on now: ``cancel`` is called at once.
        """
        with self._lock:
            self._cancel = cancel
            pending = self.signum is not None
        if pending:
            cancel()

    def detach(self) -> None:
        """The work has ended (nothing left to cancel)."""
        with self._lock:
            self._cancel = None

    # -- the watchdog ---------------------------------------------------------------------

    def _watch(self) -> None:
        assert self._pipe is not None
        read_end = self._pipe[0]
        deadline: float | None = None
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ready, _, _ = select.select([read_end], [], [], timeout)
            except OSError:
                return  # the pipe was closed: disarmed
            if not ready:
                assert self.signum is not None
                self._exit(
                    self.signum,
                    f"{message_for(self.signum)}; clean-up did not finish within {self.grace:g} s",
                )
            try:
                data = os.read(read_end, 64)
            except OSError:
                return
            for number in data:
                if number == _STOP:
                    return
                if number not in _SIGNALS:
                    continue  # another handled signal (e.g. SIGALRM of a test's timeout)
                if self.signum is not None:  # the second one: no more waiting
                    self._exit(number, message_for(number))
                deadline = time.monotonic() + self.grace
                self._first(number)

    def _first(self, signum: int) -> None:
        with self._lock:
            self.signum = signum
            cancel = self._cancel
        if os.isatty(2):
            again = "Ctrl-C" if signum == signal.SIGINT else "the signal"
            _write(2, f"\nacmecerts: cleaning up; send {again} again to quit at once\n".encode())
        if cancel is not None:
            with contextlib.suppress(RuntimeError):  # the event loop just closed
                cancel()

    def _exit(self, signum: int, message: str) -> NoReturn:
        """Report ``message`` like ``Report.error`` and end the process on the spot.

        Raw writes to the file descriptors: the main thread may hold the locks of
        ``sys.stdout``/``sys.stderr``.
        """
        lines: list[str] = []
        extra: dict[str, Any] = {}
        if self.final_words is not None:
            with contextlib.suppress(Exception):  # the exit must happen whatever this does
                lines, extra = self.final_words()
        if os.isatty(1):
            _write(1, _SHOW_CURSOR)
        text = "".join(f"{line}\n" for line in lines)
        _write(2, f"{text}acmecerts: error: {message}\n".encode())
        if self.json_mode:
            document = {
                "status": "interrupted",
                "exit_code": exit_code_for(signum),
                "error": message,
                "problem": None,
                "counts": {},
                "certificates": [],
                **extra,
            }
            _write(1, (json.dumps(document) + "\n").encode())
        os._exit(exit_code_for(signum))


def _ignore_here(signum: int, frame: object) -> None:
    """The Python-level handler: nothing (the watchdog acts on the wake-up byte)."""


def _write(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):  # a closed pipe must not stop the exit
        while data:
            written = os.write(fd, data)
            data = data[written:]


def _announce_ready(signums: Sequence[int]) -> None:
    path = os.environ.get(READY_ENV)
    if not path:
        return
    names = " ".join(signal.Signals(s).name for s in signums)
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as file:
        file.write(f"{os.getpid()} ready {names}\n")


_active: SignalGuard | None = None


def active_guard() -> SignalGuard | None:
    """The guard armed for this run, if any."""
    return _active


@contextlib.contextmanager
def guard_signals(*, json_mode: bool, grace: float | None = None) -> Iterator[SignalGuard | None]:
    """Arm a :class:`SignalGuard` for the block (``None`` when none could be armed).

    Nested use keeps the outer guard.
    """
    global _active
    if _active is not None:
        yield _active
        return
    guard = SignalGuard(json_mode=json_mode, grace=grace)
    if not guard.arm():
        yield None
        return
    _active = guard
    try:
        yield guard
    finally:
        _active = None
        guard.disarm()
