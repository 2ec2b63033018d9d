"""What every command shares in its output: one report, exit codes from errors, logging.

Exit codes: 0 ok; 1 failed (the CA's problem detail is printed); 2 bad input or unusable
state (one line on stderr, nothing sent); 3 deferred (rate limits, or a CA that asked to
wait longer than ``--max-wait``); 130 interrupted (SIGINT); 143 terminated (SIGTERM).
With ``--json`` exactly one JSON object goes to stdout, whatever happens.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from acmecerts.client import TermsOfServiceNotAgreed
from acmecerts.errors import (
    AcmeCertsError,
    AcmeProblem,
    ExternalAccountRequired,
    InvalidInput,
    RateLimitDeferred,
    StorageError,
)
from acmecerts.transport import trust_hint

from ._args import CommonArgs
from ._constants import STATUS_WORDS, ExitCode
from ._display import LiveView, NullView, PlainView, QuietView, View
from ._engine import Board, Deferred, problem_of
from ._firstcontact import terms_refused

__all__ = [
    "Report",
    "choose_view",
    "configure_logging",
    "first_error",
    "guarded",
    "interrupted_code",
    "iso",
    "log",
    "problem_json",
    "run_guarded",
    "status_word",
    "when",
]

log = logging.getLogger("acmecerts.cli")


# -- output ---------------------------------------------------------------------------------


class Report:
    """Writes results: one line on stderr for errors, rich text or JSON on stdout."""

    def __init__(
        self, *, json_mode: bool, json_base: dict[str, Any] | None = None, json_logs: bool = False
    ) -> None:
        self.json_mode = json_mode
        #: ``--log-format json``: the error line is a JSON log record too.
        self.json_logs = json_logs
        #: Fields every error object of this command carries too (``issue`` and ``renew``
        #: add an empty ``certificates`` list, so they always print one shape).
        self.json_base = dict(json_base or {})
        self.out = Console(soft_wrap=True, highlight=False)
        self.err = Console(stderr=True, soft_wrap=True, highlight=False)

    def json(self, document: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()

    def error_line(self, code: int, message: str) -> str:
        """Write the one ``acmecerts: error: ...`` line to stderr; return the message."""
        line = " ".join(message.split())
        label = "deferred" if code == ExitCode.DEFERRED else "error"
        if self.json_logs:
            log.log(logging.WARNING if code == ExitCode.DEFERRED else logging.ERROR, "%s", line)
            return line
        sys.stderr.write(f"acmecerts: {label}: {line}\n")
        sys.stderr.flush()
        return line

    def error(
        self,
        code: int,
        message: str,
        problem: AcmeProblem | None = None,
        **extra: Any,
    ) -> int:
        line = self.error_line(code, message)
        if self.json_mode:
            self.json(
                {
                    "status": status_word(code),
                    "exit_code": code,
                    "error": line,
                    "problem": problem_json(problem),
                    **self.json_base,
                    **extra,
                }
            )
        return code

    def rows(self, title: Text, rows: Sequence[tuple[str, str]]) -> None:
        self.out.print(title)
        for label, value in rows:
            line = Text(f"  {label:<10} ", style="dim")
            line.append(value)
            self.out.print(line)


def status_word(code: int) -> str:
    """The ``status`` of a ``--json`` object for an exit code."""
    return STATUS_WORDS.get(code, "failed")


def problem_json(problem: AcmeProblem | None) -> dict[str, Any] | None:
    if problem is None:
        return None
    return {"type": problem.type, "detail": problem.detail, "status": problem.status_code}


def _whole_second(instant: _dt.datetime) -> _dt.datetime:
    """``instant`` in UTC rounded **up** to the second: a "not before" is never shown
    earlier than it is (the library's messages round the same way)."""
    instant = instant.astimezone(_dt.UTC)
    if instant.microsecond:
        instant = instant.replace(microsecond=0) + _dt.timedelta(seconds=1)
    return instant


def iso(instant: _dt.datetime | None) -> str | None:
    """An instant in ``--json``: ISO 8601 in UTC, to the second (rounded up)."""
    return None if instant is None else _whole_second(instant).isoformat()


def when(instant: _dt.datetime) -> str:
    """An instant for people: ``2026-12-02 01:02:03 UTC`` (rounded up to the second)."""
    return f"{_whole_second(instant):%Y-%m-%d %H:%M:%S} UTC"


# -- logging --------------------------------------------------------------------------------


class _OneLineWarnings(logging.Handler):
    """Without ``-v``: warnings and errors as one line each, never a traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = " ".join(record.getMessage().split())
            sys.stderr.write(f"acmecerts: {record.levelname.lower()}: {message}\n")
        except Exception:  # logging must never break the command
            self.handleError(record)


_handler: logging.Handler | None = None


def configure_logging(verbose: int, console: Console, log_format: str = "text") -> None:
    """Send log records to stderr: one line each (``-v``: progress, ``-vv``: debug).

    ``log_format`` ``"json"``: every record is one JSON object
    (:class:`acmecerts.logging.JsonFormatter`), the manager's failed attempts included
    (warnings, with their certificate fields), and so is the command's error line.
    """
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    if log_format == "json":
        from acmecerts.logging import JsonFormatter

        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(JsonFormatter())
        level = (logging.DEBUG if verbose > 1 else logging.INFO) if verbose else logging.WARNING
        logging.getLogger("acmecerts").setLevel(level)
        logging.getLogger("acmecerts.manager").setLevel(level)
        logging.getLogger("httpx").setLevel(logging.INFO if verbose else logging.WARNING)
    elif verbose:
        if console.is_terminal:
            from rich.logging import RichHandler

            _handler = RichHandler(console=console, show_path=False, log_time_format="%H:%M:%S")
        else:  # a log file: one plain line per record, never wrapped
            _handler = logging.StreamHandler(sys.stderr)
            _handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
        level = logging.DEBUG if verbose > 1 else logging.INFO
        logging.getLogger("acmecerts").setLevel(level)
        logging.getLogger("acmecerts.manager").setLevel(logging.NOTSET)
        logging.getLogger("httpx").setLevel(logging.INFO)
    else:
        _handler = _OneLineWarnings()
        # The manager logs every failed attempt as a warning; the CLI reports it itself.
        logging.getLogger("acmecerts").setLevel(logging.WARNING)
        logging.getLogger("acmecerts.manager").setLevel(logging.ERROR)
    root.addHandler(_handler)
    root.setLevel(logging.WARNING)


# -- running a command ------------------------------------------------------------------------


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def first_error(exc: BaseException) -> BaseException:
    """The most telling error inside an exception group (task groups wrap errors)."""
    leaves = _leaves(exc)
    for wanted in (KeyboardInterrupt, AcmeCertsError):
        for leaf in leaves:
            if isinstance(leaf, wanted):
                return leaf
    return leaves[0] if leaves else exc


def interrupted_code(exc: KeyboardInterrupt) -> tuple[int, str]:
    """``(exit code, message)`` for a stop by a signal: 130 "interrupted" (SIGINT, also a
    plain :class:`KeyboardInterrupt`), 143 "terminated" (SIGTERM)."""
    return (
        getattr(exc, "exit_code", ExitCode.INTERRUPTED),
        getattr(exc, "message", "interrupted"),
    )


def guarded(report: Report, work: Callable[[], int]) -> int:
    """Run ``work``; map errors to one line and an exit code."""
    try:
        return work()
    except BaseException as raised:
        exc = first_error(raised)
        if isinstance(exc, KeyboardInterrupt):
            return report.error(*interrupted_code(exc))
        if isinstance(exc, TermsOfServiceNotAgreed):  # said with the CLI's options
            exc = terms_refused(exc.terms_of_service, exc.directory_url)
        if isinstance(exc, InvalidInput | StorageError | ExternalAccountRequired):
            return report.error(ExitCode.INPUT, str(exc))
        if isinstance(exc, Deferred):
            return report.error(
                ExitCode.DEFERRED, str(exc), problem_of(exc.error), until=iso(exc.until)
            )
        if isinstance(exc, RateLimitDeferred):
            until = iso(exc.retry_after)
            return report.error(ExitCode.DEFERRED, str(exc), until=until)
        if isinstance(exc, AcmeCertsError):
            return report.error(ExitCode.FAILED, str(exc), problem_of(exc))
        raise


def choose_view(report: Report, board: Board, *, single: bool, title: str = "") -> View:
    if report.json_mode:
        return NullView(board)
    if report.out.is_terminal:
        return LiveView(board, report.out, title=title)
    if single:
        return QuietView(board)
    return PlainView(board)


def run_guarded(
    common: CommonArgs, work: Callable[[Report], int], *, json_base: dict[str, Any] | None = None
) -> int:
    """Run a command's ``work`` with its report (``--json``, ``-v`` set up); map errors to
    one line and an exit code (:func:`guarded`)."""
    json_logs = common.log_format == "json"
    report = Report(json_mode=common.json, json_base=json_base, json_logs=json_logs)
    configure_logging(common.verbose, report.err, common.log_format)
    with trust_hint("give --ca-bundle FILE (the CA's root certificate) to trust a private CA"):
        return guarded(report, lambda: work(report))
