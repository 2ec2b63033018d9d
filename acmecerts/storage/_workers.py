"""FileStorage's worker threads: file I/O off the event loop, answered in batches.

FileStorage's own pool instead of ``anyio.to_thread.run_sync`` (measured: the hop was
the largest part of a cached load). A call costs one queue append and, when no worker
is idle, nothing more: a worker that finishes a job takes the next queued one without
sleeping, and the answers of every job finished meanwhile reach the event loop in one
wake-up (``run_sync_soon`` of the loop's anyio backend, so asyncio and trio alike).

A cancelled caller waits (shielded) for its job to end, as ``anyio.to_thread.run_sync``
does: a job not started yet is skipped, and a job that calls :func:`check_cancelled`
while it waits (for a directory lock) sees the cancellation and gives up.

On a :class:`~acmecerts._time.VirtualEventLoop` (simulated time) no thread is woken: the
job waits in its loop's port until the loop has nothing else to run, which is when the
loop would wait for a thread, and then runs on the loop's own thread
(``call_when_idle``); its outcome reaches the caller as a worker's does. The hand-off to
a thread and back was most of a store operation's CPU there (issue #26), and time stands
still during a job either way. A job that would have to wait for a lock (another
process's, or a thread's of this process: :func:`before_waiting`) is not waited for on
the loop: it goes to a worker thread as before, so a lock held by anything the loop
itself must run first cannot deadlock it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.lowlevel import RunVar

from acmecerts._time._virtual import VirtualEventLoop, watch_worker_threads

__all__ = ["MAX_WORKERS", "before_waiting", "check_cancelled", "in_worker", "run_sync"]

_T = TypeVar("_T")

#: The most threads the pool runs at once.
MAX_WORKERS = 16
# A worker with nothing to do for this long ends (a new one starts on demand).
_WORKER_IDLE = 10.0


def check_cancelled() -> None:
    """Raise the host task's cancellation inside a worker thread (no-op elsewhere)."""
    job: _Job | None = getattr(_local, "job", None)
    if job is not None:
        if job.cancelled:
            raise _Cancelled
        return
    with contextlib.suppress(RuntimeError):
        anyio.from_thread.check_cancelled()


def before_waiting() -> None:
    """Call in a job before it waits for a lock: a job on the event loop's thread stops.

    A job run on a virtual loop's own thread must not wait (the holder may need the
    loop); it raises here, before any change, and is run again in a worker thread. In a
    worker thread (or outside a job) this does nothing.
    """
    if getattr(_local, "inline", False):
        raise _Handoff


class _Cancelled(BaseException):
    """Raised in a worker by :func:`check_cancelled` when the job's caller was cancelled."""


class _Handoff(BaseException):
    """Raised by :func:`before_waiting` in a job run on the loop's thread."""


class _Job:
    """One call to run in a worker thread, and its outcome."""

    __slots__ = ("cancelled", "done", "error", "func", "port", "result")

    def __init__(self, func: Callable[[], Any], port: _Port) -> None:
        self.func = func
        self.port = port
        # the loop's backend, known to the port: no anyio.Event() (it looks it up each time)
        self.done: anyio.Event = port.backend.create_event()
        self.result: Any = None
        self.error: BaseException | None = None
        #: Set by the event loop when the caller is cancelled; read by the worker.
        self.cancelled = False


class _Port:
    """One event loop's door for finished jobs: wakes the loop once per batch."""

    __slots__ = (
        "_finished",
        "_inline",
        "_lock",
        "_scheduled",
        "_token",
        "backend",
        "pending",
        "virtual",
    )

    def __init__(self, token: Any) -> None:
        self._token = token
        loop = token.native_token
        #: The loop, if it runs on virtual time: its jobs then run on its thread.
        self.virtual: VirtualEventLoop | None = loop if isinstance(loop, VirtualEventLoop) else None
        # Jobs waiting for the virtual loop to be idle (only touched on its thread).
        self._inline: list[_Job] = []
        #: The loop's anyio backend class (its checkpoints and events, without a look-up).
        self.backend: Any = token.backend_class
        self._lock = threading.Lock()
        self._finished: list[_Job] = []
        self._scheduled = False
        #: Jobs handed to the pool whose outcome this loop has not taken yet.
        self.pending = 0

    def submitted(self) -> None:
        """A job of this loop's was handed to the pool (on the loop's thread)."""
        with self._lock:
            self.pending += 1

    def post(self, job: _Job) -> None:
        """Hand a finished job back (from a worker thread)."""
        with self._lock:
            self._finished.append(job)
            if self._scheduled:
                return  # the loop has a delivery pending that will take this one too
            self._scheduled = True
        try:
            self._token.backend_class.run_sync_soon(self._deliver, (), self._token.native_token)
        except Exception:  # the loop has ended: nobody waits for these answers
            with self._lock:
                self.pending -= len(self._finished)
                self._finished.clear()
                self._scheduled = False

    def defer(self, job: _Job) -> None:
        """Run ``job`` on the (virtual) loop's thread once it has nothing else to run."""
        if not self._inline:
            assert self.virtual is not None
            self.virtual.call_when_idle(self._run_inline)
        self._inline.append(job)

    def _run_inline(self) -> None:
        """Run the deferred jobs in order, as a worker would; answer each at once."""
        jobs, self._inline = self._inline, []
        for job in jobs:
            if job.cancelled:
                job.error = _Cancelled()
            else:
                _local.job, _local.inline = job, True
                try:
                    job.result = job.func()
                except _Handoff:  # it would wait for a lock: a worker waits instead
                    self.submitted()
                    _pool.submit(job)
                    continue
                except BaseException as exc:
                    job.error = exc
                finally:
                    _local.job, _local.inline = None, False
            job.done.set()

    def _deliver(self) -> None:
        with self._lock:
            finished, self._finished = self._finished, []
            self._scheduled = False
            self.pending -= len(finished)
        for job in finished:
            job.done.set()


class _Pool:
    """Up to ``MAX_WORKERS`` threads, started on demand, shared by every FileStorage."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[_Job] = collections.deque()
        self._idle: list[_Worker] = []
        self._workers = 0

    def submit(self, job: _Job) -> None:
        with self._lock:
            if self._idle:
                worker = self._idle.pop()
                worker.job = job
                worker.wake.release()
                return
            if self._workers >= MAX_WORKERS:
                self._queue.append(job)
                return
            self._workers += 1
        _Worker(self, job).start()

    def next_job(self, worker: _Worker) -> _Job | None:
        """The worker's next job; ``None`` when it should end (idle too long)."""
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            self._idle.append(worker)
        if worker.wake.acquire(timeout=_WORKER_IDLE):
            return worker.take()
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                self._workers -= 1
                return None
        worker.wake.acquire()  # handed a job just as it timed out
        return worker.take()

    def reset(self) -> None:
        """Forget the threads (in a child after ``fork``: they do not exist there)."""
        self._lock = threading.Lock()
        self._queue = collections.deque()
        self._idle = []
        self._workers = 0


class _Worker(threading.Thread):
    def __init__(self, pool: _Pool, job: _Job) -> None:
        super().__init__(name="acmecerts-storage", daemon=True)
        self._pool = pool
        self.job: _Job | None = job
        self.wake = threading.Lock()
        self.wake.acquire()

    def take(self) -> _Job | None:
        job, self.job = self.job, None
        return job

    def run(self) -> None:
        job = self.take()
        while job is not None:
            if job.cancelled:
                job.error = _Cancelled()
            else:
                _local.job = job
                try:
                    job.result = job.func()
                except BaseException as exc:
                    job.error = exc
                finally:
                    _local.job = None
            job.port.post(job)
            del job
            job = self._pool.next_job(self)


_local = threading.local()
_HAS_TOKEN = hasattr(anyio.lowlevel, "current_token")
_pool = _Pool()
_port_var: RunVar[_Port] = RunVar("acmecerts.storage._workers.port")
#: Each asyncio loop's port, for :func:`_loop_busy`.
_loop_ports: weakref.WeakKeyDictionary[Any, _Port] = weakref.WeakKeyDictionary()


def _loop_busy(loop: Any) -> bool:
    """Whether a job of ``loop``'s has an outcome still to reach it.

    A job counts from its submission until the loop took its outcome, not until its
    thread is idle again: while this is true a wake-up of the loop is on its way (the
    worker posts it when the job ends), so a virtual loop waits for its self-pipe and
    never for a thread that only has its own bookkeeping left. Per loop: a job left
    behind by another (ended) loop never holds this one's time.
    """
    port = _loop_ports.get(loop)
    return port is not None and port.pending > 0


# A VirtualClock's loop must not move its time while a store job runs (acmecerts._time).
watch_worker_threads(_loop_busy)
os.register_at_fork(after_in_child=_pool.reset)


async def in_worker(func: Callable[[], _T]) -> _T:
    """Run ``func`` in a pool thread; a cancelled caller waits for it (see check_cancelled).

    On a virtual loop, on the loop's own thread when it is idle (see the module docstring).
    """
    # On asyncio the running loop finds the port at once: anyio's own look-ups (the
    # backend, the RunVar) were a good part of a store operation's CPU on the loop.
    loop = asyncio._get_running_loop()
    port = None if loop is None else _loop_ports.get(loop)
    if port is None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        port = _port_var.get(None)
        if port is None:
            port = _Port(anyio.lowlevel.current_token())
            _port_var.set(port)
            with contextlib.suppress(TypeError):  # a loop without weak references
                _loop_ports[port._token.native_token] = port
    else:
        await port.backend.checkpoint_if_cancelled()
    job = _Job(func, port)
    if port.virtual is not None:
        port.defer(job)  # run by the loop itself when it would wait (see the docstring)
    else:
        port.submitted()
        _pool.submit(job)
    try:
        await job.done.wait()
    except BaseException:
        job.cancelled = True  # the worker's check_cancelled() now raises
        with anyio.CancelScope(shield=True):
            await job.done.wait()
        raise
    if job.error is not None:
        error, job.error = job.error, None
        raise error
    return job.result  # type: ignore[no-any-return]


def run_sync(func: Callable[..., _T], *args: Any) -> Awaitable[_T]:
    """Await ``func(*args)`` run in a worker thread (``anyio.to_thread`` if anyio < 4.11).

    Not a coroutine itself: the caller awaits :func:`in_worker`'s directly (one frame less).
    """
    call = functools.partial(func, *args)
    if _HAS_TOKEN:
        return in_worker(call)
    return anyio.to_thread.run_sync(call)  # anyio < 4.11: no current_token()
