"""Virtual time: an asyncio event loop whose clock jumps to the next event when idle.

:class:`VirtualClock` runs a whole program (client, transport, manager, store, an
in-process CA) in simulated time. How it works, and why this design:

* The event loop's own clock is virtual. :class:`VirtualEventLoop` is asyncio's selector
  loop whose ``time()`` returns a number the loop moves itself. Everything that waits
  (``anyio.sleep``, ``anyio.fail_after``, ``move_on_after``, cancel-scope deadlines,
  ``loop.call_later``) therefore waits in virtual time, not only what sleeps on a
  :class:`~acmecerts._time.Clock`: one clock for the whole stack.
* "Nothing can run" is known exactly, not guessed. asyncio's ``_run_once`` asks its
  selector to wait only when its ready queue is empty; it passes the time until the
  earliest timer as the timeout. The loop's selector is wrapped: it first polls the real
  selector without waiting (sockets, the self-pipe that threads wake the loop through);
  if nothing is there, and no worker thread is busy (see ``busy``), it moves virtual
  time forward by the whole timeout and returns: the earliest timer is then due. No
  extra task, no repeated ``sleep(0)``: one non-blocking ``select`` per jump.
* Threads. A worker thread (a file store's write, ``anyio.to_thread``) ends by waking
  the loop. While any is busy, time must not jump (a store write would otherwise take
  hours of simulated time, past an attempt's deadline). The loop asks every callable in
  ``busy`` (each returns whether work is in flight); ``anyio.to_thread``'s default
  limiter is always asked. While one says yes, time stands still and the selector
  really waits for the thread's wake-up (the self-pipe), at most :data:`_THREAD_POLL`
  at a time: the threads watched wake the loop when they finish, so the wait ends
  with the work, not with a timer. (A wait of a millisecond at a time made the loop
  spin through thousands of empty iterations per second of a store write.)
* Work done when idle. Before it waits or jumps, the loop first runs the callbacks
  handed to :meth:`VirtualEventLoop.call_when_idle` and, if there were any, returns at
  once (they made tasks ready). FileStorage's jobs come this way on a virtual loop: a
  job a thread would run while the loop waited for it runs on the loop's own thread
  instead, without the hand-off to a thread and back (``acmecerts.storage._workers``).
  Time cannot move during such a job: the loop is busy running it.
* No timer at all and nothing in flight means every task waits for something only
  another task could give: a deadlock. The selector then waits for real (a test's own
  timeout ends it), as a plain loop would.

The clock's instants are ``start + loop.time()`` (the loop's time begins at 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import math
import selectors
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from acmecerts._time._clock import aware_utc

__all__ = ["VirtualClock", "VirtualEventLoop", "watch_worker_threads"]

_T = TypeVar("_T")
#: The longest real wait, in seconds, while a worker thread is busy (time stands still).
#: A finished thread wakes the loop at once; this only bounds the wait for a ``busy``
#: check whose thread does not.
_THREAD_POLL = 0.05
#: While callbacks are ready (time stands still), the real selector is polled once per
#: this many loop iterations, not at every one: a syscall per iteration was a tenth of
#: a fleet's CPU at rest (issue #26). Whatever a poll would have found is found at the
#: latest by the poll before the next jump.
_READY_POLL_EVERY = 8


#: Checks every virtual loop asks besides its own ``busy`` (worker pools register here).
_WATCHED: list[Callable[[asyncio.AbstractEventLoop], bool]] = []


def watch_worker_threads(check: Callable[[asyncio.AbstractEventLoop], bool]) -> None:
    """Make every virtual loop ask ``check(loop)`` (is a worker thread busy for this
    loop?) before a jump.

    For thread pools of the library's own (FileStorage's); ``check`` must be cheap, safe
    to call from the event loop's thread, and true only while a wake-up of the loop is
    still to come (the thread wakes the loop when it finishes: the loop waits for it).
    """
    _WATCHED.append(check)


class _VirtualSelector(selectors.BaseSelector):
    """Wraps the loop's selector: an idle wait moves virtual time instead of blocking."""

    def __init__(self, real: selectors.BaseSelector, loop: VirtualEventLoop) -> None:
        self._real = real
        self._loop = loop
        self._busy_iterations = 0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self._loop
        if timeout == 0:
            # callbacks are ready: time cannot move, so only the real poll matters, and
            # it can wait a few iterations (a thread's result is read before any jump,
            # below); one real poll per :data:`_READY_POLL_EVERY` busy iterations
            self._busy_iterations += 1
            if self._busy_iterations < _READY_POLL_EVERY:
                return []
            self._busy_iterations = 0
            if loop._idle:
                loop._run_idle()  # never left waiting behind tasks that stay ready
            return self._real.select(0)
        self._busy_iterations = 0
        if loop._idle:
            # work a thread would do while the loop waits: done now, on this thread; the
            # tasks it made ready run in this iteration (asyncio runs ``_ready`` next)
            loop._run_idle()
            return []
        # Ask the threads first, then poll: a worker hands its result to the loop (the
        # self-pipe) before it counts as idle, so "idle" seen here means its wake-up is
        # already in the pipe. Polled first, a result posted between the poll and the
        # question was missed, and time jumped to the next timer with it unread.
        busy = loop._threads_busy()
        ready = self._real.select(0)
        if ready:
            return ready
        if busy:
            wait = _THREAD_POLL if timeout is None else min(timeout, _THREAD_POLL)
            return self._real.select(wait)
        if timeout is None:
            # Nothing scheduled and nothing in flight: only the outside world can help.
            return self._real.select(None)
        loop.jumps += 1
        loop._now += timeout
        return []

    def close(self) -> None:
        self._real.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop on virtual time (see the module docstring).

    ``busy`` are callables asked before each jump: while any returns true (a worker
    thread is working for the program), time does not move. ``anyio.to_thread`` and
    :class:`~acmecerts.storage.FileStorage`'s own pool are always watched.
    """

    def __init__(self, busy: Iterable[Callable[[], bool]] = ()) -> None:
        super().__init__()
        self._now = 0.0
        #: How many times the loop moved its time forward because nothing could run.
        self.jumps = 0
        self.busy: list[Callable[[], bool]] = list(busy)
        self._selector = _VirtualSelector(self._selector, self)  # type: ignore[has-type]
        # A timer "due" within this much of now runs now (asyncio's own rule): virtual
        # time is exact, so only float rounding is left.
        self._clock_resolution = 1e-6
        #: anyio's default thread limiter of this loop, once known (asked every select).
        self._limiter: Any = None
        self._idle: list[Callable[[], object]] = []

    def call_when_idle(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` (once, on the loop's thread) before the loop next waits.

        That is when no callback is ready: before a jump in time, a wait for a worker
        thread's wake-up, or a wait for the outside world; also at the latest every
        :data:`_READY_POLL_EVERY` iterations while callbacks stay ready. The loop then
        returns to its ready callbacks without waiting (time does not move), so what
        ``callback`` made ready runs next.
        """
        self._idle.append(callback)

    def _run_idle(self) -> None:
        callbacks, self._idle = self._idle, []
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # as asyncio reports a failed callback
                self.call_exception_handler(
                    {"message": f"idle callback {callback!r} failed", "exception": exc}
                )

    def time(self) -> float:
        """The loop's virtual time in seconds (0 when the loop was made)."""
        return self._now

    def _threads_busy(self) -> bool:
        limiter = self._limiter
        if limiter is None:
            # no anyio context (a RuntimeError): no anyio threads either. The limiter
            # is one object per loop (a RunVar), so it is looked up once.
            with contextlib.suppress(RuntimeError, LookupError):
                limiter = self._limiter = anyio.to_thread.current_default_thread_limiter()
        if limiter is not None and limiter.borrowed_tokens:
            return True
        for check in self.busy:
            if check():
                return True
        return any(check(self) for check in _WATCHED)


class VirtualClock:
    """A :class:`~acmecerts._time.Clock` on virtual time: it jumps when nothing can run.

    Run the program with :meth:`run`; inside it, ``now()`` is ``start`` plus the virtual
    seconds gone by, and ``sleep()`` is ``anyio.sleep`` (virtual, like every other wait
    of the program: deadlines, ``fail_after``, polling). A run of 30 simulated days
    takes as long as its work, not its waiting::

        clock = VirtualClock(datetime(2027, 1, 1, tzinfo=UTC))

        async def main() -> None:
            await clock.sleep(30 * 86400)
            assert clock.now() == datetime(2027, 1, 31, tzinfo=UTC)

        clock.run(main)

    Args:
        start: The instant the run begins at (timezone-aware).
        busy: Callables telling whether a worker thread of the program is working
            (time then stands still); ``anyio.to_thread`` and
            :class:`~acmecerts.storage.FileStorage`'s own pool are always watched.

    asyncio only (the loop is asyncio's). Outside :meth:`run`, ``now()`` answers the
    instant the last run reached (``start`` before any).
    """

    def __init__(self, start: _dt.datetime, *, busy: Iterable[Callable[[], bool]] = ()) -> None:
        self.start = aware_utc(start, "start")
        self._busy = list(busy)
        self._loop: VirtualEventLoop | None = None
        self._offset = 0.0
        # now() of the last time asked (time stands still between jumps: asked again
        # and again at one instant, it is computed once)
        self._at = 0.0
        self._now = self.start

    @property
    def jumps(self) -> int:
        """How many times the current (or last) run jumped forward in time."""
        return 0 if self._loop is None else self._loop.jumps

    def _seconds(self) -> float:
        loop = self._loop
        if loop is None:
            return self._offset
        return self._offset + loop.time()

    def now(self) -> _dt.datetime:
        """The current virtual instant, timezone-aware UTC."""
        seconds = self._seconds()
        if seconds != self._at:
            self._at, self._now = seconds, self.start + _dt.timedelta(seconds=seconds)
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of virtual time (non-positive: a checkpoint)."""
        await anyio.sleep(max(0.0, seconds) if math.isfinite(seconds) else math.inf)

    def make_loop(self) -> VirtualEventLoop:
        """A new virtual loop that continues this clock's time (for ``loop_factory``)."""
        if self._loop is not None:
            self._offset += self._loop.time()
        self._loop = VirtualEventLoop(self._busy)
        return self._loop

    def run(self, func: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """Run ``func(*args)`` with anyio on a virtual loop of this clock; its result."""
        return anyio.run(
            func, *args, backend="asyncio", backend_options={"loop_factory": self.make_loop}
        )

    def __repr__(self) -> str:
        return f"VirtualClock({self.now().isoformat()})"
