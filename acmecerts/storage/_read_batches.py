"""FileStorage's reads of many callers in one worker job (one hop to a thread for them all).

A fleet's certificates read the store together (a manager starting, ``issue_many`` of
hundreds of names, a scheduler tick): each read was a hop to a worker thread and back,
and the hop, not the read, was most of its cost. :class:`ReadBatches` gathers the reads
asked for while a read job waits for a worker: a read joins the job that has not
started yet, or starts the next one. Each caller gets the values of its own keys, read
after it asked (the job reads every key when it starts), so a joined read is as fresh
as one of its own would have been.

A job gathers the reads of one thread's event loop only (a store may serve loops in
several threads; each waits on events of its own loop).

The job runs to its end even when the caller that started it is cancelled (a read takes
no lock and is soon over): the others that joined it still wait for its values; that
caller then raises its cancellation. A cancelled caller that joined stops waiting at
once; its values are dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import anyio
import anyio.lowlevel

from acmecerts.errors import StorageError
from acmecerts.storage._base import StoredValue
from acmecerts.storage._workers import run_sync

__all__ = ["ReadBatches"]

Found = StorageError | StoredValue | None
#: Reads every key given, each value or the StorageError of its key (in a worker thread).
ReadKeys = Callable[[Sequence[str]], list[Found]]


class _Batch:
    """One read job: the keys of every caller that joined it before it started."""

    __slots__ = ("done", "error", "found", "keys", "lock", "started")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.keys: list[str] = []
        self.started = False
        self.found: list[Found] = []
        self.error: BaseException | None = None
        self.done = anyio.Event()

    def join(self, keys: Sequence[str]) -> int | None:
        """Add ``keys``; their first index in the job's answer, ``None`` if it started."""
        with self.lock:
            if self.started:
                return None
            first = len(self.keys)
            self.keys.extend(keys)
            return first

    def run(self, read: ReadKeys) -> None:
        """Read every key that joined (in the worker thread; nothing joins after this)."""
        with self.lock:
            self.started = True
        self.found = read(self.keys)


class ReadBatches:
    """The reads of one store, gathered into worker jobs (see the module docstring).

    Args:
        read: Reads keys, each value or the StorageError of its key (blocking).
    """

    def __init__(self, read: ReadKeys) -> None:
        self._read = read
        # per thread (one event loop each): the job not started yet that reads may join
        self._waiting: dict[int, _Batch] = {}

    async def read(self, keys: Sequence[str]) -> list[Found]:
        """The values of ``keys`` (each ``None`` if absent, or the key's StorageError)."""
        thread = threading.get_ident()
        batch = self._waiting.get(thread)
        first = None if batch is None else batch.join(keys)
        if batch is None or first is None:
            batch = self._waiting[thread] = _Batch()
            first = batch.join(keys)
            assert first is not None
            try:
                with anyio.CancelScope(shield=True):  # the others wait for it too
                    await run_sync(batch.run, self._read)
            except BaseException as exc:
                batch.error = exc
                raise
            finally:
                if self._waiting.get(thread) is batch:
                    del self._waiting[thread]
                batch.done.set()
            await anyio.lowlevel.checkpoint_if_cancelled()  # cancelled meanwhile: raise now
        else:
            await batch.done.wait()
            if batch.error is not None:
                raise StorageError(f"reading the store failed: {batch.error}") from batch.error
        return batch.found[first : first + len(keys)]
