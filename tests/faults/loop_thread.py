"""A test server whose asyncio event loop runs in a background thread.

:class:`LoopThreadServer` holds what the fault servers share (``start()`` returns once
the server listens, ``stop()`` ends the loop and joins the thread, a ``with`` block does
both, and calls into the loop from the test's thread); a subclass only writes
:meth:`LoopThreadServer._serve`: listen, call ``self._ready.set()``, wait for ``stop``,
clean up.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["LoopThreadServer"]


class LoopThreadServer(abc.ABC):
    """The thread, the loop and their life cycle of a loopback test server."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> None:
        """Listen (in a background thread); returns once the port is bound."""
        name = type(self).__name__
        if self._thread is not None:
            raise RuntimeError(f"{name} already started")
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise RuntimeError(f"{name} failed to start") from self._error

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop (the subclass's clean-up runs in it) and join the thread."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"{type(self).__name__} thread did not stop")
        self._thread = self._loop = self._stop = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @abc.abstractmethod
    async def _serve(self, stop: asyncio.Event) -> None:
        """Listen, set ``self._ready``, wait for ``stop``, then clean up."""

    # -- calls into the loop from the test's thread -------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            raise RuntimeError(f"{type(self).__name__} is not running")
        return loop

    def _await_in_loop(self, action: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run the coroutine ``action()`` in the loop and wait for it (10 s at most)."""
        asyncio.run_coroutine_threadsafe(action(), self._running_loop()).result(timeout=10)

    def _run_in_loop(self, action: Callable[[], None]) -> None:
        """Run ``action()`` in the loop's thread and wait for it (10 s at most)."""
        done = threading.Event()

        def run() -> None:
            try:
                action()
            finally:
                done.set()

        self._running_loop().call_soon_threadsafe(run)
        if not done.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not answer")

    # -- the thread ---------------------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # never let the thread die silently
            if not self._ready.is_set():
                self._error = exc
        finally:
            self._ready.set()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await self._serve(self._stop)
