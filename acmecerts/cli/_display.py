"""Showing progress: a live rich display on a terminal, plain log lines otherwise.

* :class:`LiveView` (stdout is a terminal): one line per certificate in progress, with
  its stage (queued, waiting for budget with a countdown, ordering, validating,
  finalizing) and a tally; each certificate that finishes (done, current, failed,
  deferred until ...) is printed above the live area and stays on the screen.
* :class:`PlainView` (stdout is a file or a pipe): one time-stamped line per change.
* :class:`QuietView`: nothing but waits, on stderr (one certificate, not a terminal).
* :class:`NullView`: nothing (``--json``).
"""

from __future__ import annotations

import datetime as _dt
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.text import Text

from ._engine import Board, Row, Stage

# rich.live, rich.spinner and rich.table are imported by LiveView only: a run whose output
# is not a terminal (a log, a pipe, a service) never draws them (~10 ms of imports).

__all__ = ["LiveView", "NullView", "PlainView", "QuietView", "View", "describe"]

_STYLE = {
    Stage.QUEUED: "dim",
    Stage.WAITING: "yellow",
    Stage.ORDERING: "cyan",
    Stage.VALIDATING: "cyan",
    Stage.FINALIZING: "cyan",
    Stage.DONE: "green",
    Stage.CURRENT: "green",
    Stage.FAILED: "red",
    Stage.DEFERRED: "yellow",
    Stage.CANCELLED: "yellow",
}
_ORDER = {
    Stage.FINALIZING: 0,
    Stage.VALIDATING: 1,
    Stage.ORDERING: 2,
    Stage.WAITING: 3,
    Stage.QUEUED: 4,
}


def _clock(instant: _dt.datetime) -> str:
    local = instant.astimezone(_dt.UTC)
    if local.date() == _dt.datetime.now(_dt.UTC).date():
        return f"{local:%H:%M:%S} UTC"
    return f"{local:%Y-%m-%d %H:%M:%S} UTC"


def describe(row: Row) -> str:
    """The stage of ``row`` in words (``waiting for budget: 42s (until 12:00:03 UTC)``)."""
    stage = row.stage
    if stage is Stage.WAITING:
        what = row.detail or "waiting"
        if row.until is None:
            return what
        return f"{what}: {remaining(row.until)} (until {_clock(row.until)})"
    if stage is Stage.DEFERRED:
        text = f"deferred until {_clock(row.until)}" if row.until is not None else "deferred"
        return f"{text}: {row.detail}" if row.detail else text
    if stage is Stage.FAILED:
        return f"failed: {row.detail}" if row.detail else "failed"
    if stage is Stage.ORDERING and row.detail:
        return f"ordering ({row.detail})"
    if stage is Stage.CURRENT:
        return f"not due ({row.detail})" if row.detail else "not due"
    if stage is Stage.DONE and row.detail:
        return f"{'renewed' if row.renewal else 'done'}: {row.detail}"
    return stage.value


class View:
    """Shows a :class:`Board`; use as a context manager around the work."""

    def __init__(self, board: Board) -> None:
        self.board = board
        board.on_change = self.changed

    def changed(self, row: Row) -> None:
        """Called by the board for every change."""

    def open(self) -> None:
        """Start showing (when the block is entered)."""

    def close(self) -> None:
        """Stop showing (when the block is left, also by an error)."""

    def __enter__(self) -> View:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class NullView(View):
    """Shows nothing (``--json``)."""


class QuietView(View):
    """Only waits, one line each on stderr (a single certificate, output not a terminal)."""

    def changed(self, row: Row) -> None:
        if row.stage is Stage.WAITING:
            sys.stderr.write(f"acmecerts: {row.name}: {describe(row)}\n")
            sys.stderr.flush()


class PlainView(View):
    """One time-stamped line per change, for logs and pipes."""

    def __init__(self, board: Board, stream: TextIO | None = None) -> None:
        super().__init__(board)
        self.stream = stream or sys.stdout
        self._lock = threading.Lock()

    def changed(self, row: Row) -> None:
        if row.stage is Stage.QUEUED:
            return
        stamp = f"{_dt.datetime.now(_dt.UTC):%H:%M:%S}"
        line = " ".join(f"{stamp} {row.name}: {describe(row)}".split())
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()


class LiveView(View):
    """A live display of the certificates in progress (stdout is a terminal)."""

    #: Redraw at once for a change, unless the last redraw is more recent than this.
    _MIN_REDRAW = 0.05

    def __init__(self, board: Board, console: Console, *, title: str = "") -> None:
        super().__init__(board)
        self.console = console
        self.title = title
        #: What the CLI waits for right now (the CA's answer to a request), if anything.
        self.waiting: Callable[[], str | None] | None = None
        from rich.live import Live
        from rich.spinner import Spinner

        self._live = Live(
            console=console,
            get_renderable=self._render,
            refresh_per_second=8,
            transient=True,
            redirect_stderr=True,
            redirect_stdout=True,
        )
        self._last_redraw = 0.0
        self._spinner = Spinner("dots", style="cyan")

    def open(self) -> None:
        self._live.__enter__()

    def close(self) -> None:
        self._live.__exit__(None, None, None)

    def changed(self, row: Row) -> None:
        if row.stage.final:
            line = Text(row.name, style="bold")
            line.append(f"  {describe(row)}", style=_STYLE[row.stage])
            self.console.print(line, soft_wrap=True)
        now = time.monotonic()
        if now - self._last_redraw >= self._MIN_REDRAW:
            self._last_redraw = now
            self._live.refresh()

    def _render(self) -> RenderableType:
        rows = self.board.rows.values()
        active = sorted(
            (r for r in rows if not r.stage.final),
            key=lambda r: (_ORDER.get(r.stage, 9), r.name),
        )
        room = max(3, self.console.size.height - 3)
        from rich.table import Table

        table = Table.grid(padding=(0, 1))
        table.add_column(width=1)
        table.add_column(no_wrap=True, overflow="ellipsis", max_width=48)
        table.add_column(no_wrap=True, overflow="ellipsis")
        for row in active[:room]:
            busy = row.stage in (Stage.ORDERING, Stage.VALIDATING, Stage.FINALIZING)
            marker: RenderableType = self._spinner if busy else Text(" ")
            table.add_row(marker, Text(row.name), Text(describe(row), style=_STYLE[row.stage]))
        if len(active) > room:
            table.add_row(Text(" "), Text(f"... and {len(active) - room} more", style="dim"), "")
        waiting = self.waiting() if self.waiting is not None else None
        if waiting is None:
            return Group(table, self._tally())
        return Group(table, Text(waiting, style="yellow", overflow="ellipsis"), self._tally())

    def _tally(self) -> Text:
        counts: dict[str, int] = {}
        for row in self.board.rows.values():
            key = {
                Stage.DONE: "issued",
                Stage.CURRENT: "current",
                Stage.FAILED: "failed",
                Stage.DEFERRED: "deferred",
                Stage.CANCELLED: "cancelled",
                Stage.QUEUED: "queued",
                Stage.WAITING: "waiting",
            }.get(row.stage, "in progress")
            counts[key] = counts.get(key, 0) + 1
        total = len(self.board.rows)
        finished = sum(1 for r in self.board.rows.values() if r.stage.final)
        text = Text(f"{self.title}{finished}/{total} finished", style="bold")
        for key in ("issued", "current", "in progress", "waiting", "queued", "failed", "deferred"):
            if counts.get(key):
                text.append(f"  {key} {counts[key]}", style="dim")
        return text


def remaining(until: _dt.datetime | None) -> str:
    """``"1m 05s"``: the time left until ``until`` (a countdown)."""
    if until is None:
        return ""
    seconds = max(0, math.ceil((until - _dt.datetime.now(_dt.UTC)).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"
