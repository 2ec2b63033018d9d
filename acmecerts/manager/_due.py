"""The fleet core's due-queue: every managed certificate by its next instant.

:class:`DueQueue` is a heap of ``(due, token, entry)``, planned again only for the
entries that changed (:meth:`DueQueue.changed`), and the queue of stored states waiting
to be read (at most :data:`MAX_LOADS` at a time). It belongs to
:class:`~acmecerts.manager._core.FleetCore`; the scheduler asks it what is due and when
to wake. Pure: no I/O, no clock (``now`` comes in as an argument).
"""

from __future__ import annotations

import collections
import datetime as _dt
import heapq
import itertools

from acmecerts.manager._entry import AT_ONCE, Entry, queue_time
from acmecerts.retry import AttemptSchedule

#: At most this many stored certificates are read at once by the background scheduler.
MAX_LOADS = 32

_Item = tuple[_dt.datetime, int, Entry]


class DueQueue:
    """The next instant of every managed certificate, and the reads waiting their turn.

    Args:
        entries: The core's certificates by name (read here, never changed).
        schedule: The attempt schedule (when a failed certificate tries again).
        stored: Whether there is a store (a certificate's stored state is read before
            its first work, :data:`MAX_LOADS` at a time).
    """

    def __init__(
        self, entries: dict[str, Entry], *, schedule: AttemptSchedule, stored: bool
    ) -> None:
        self._entries = entries
        self._schedule = schedule
        self._stored = stored
        #: The heap; an item is valid while its entry is managed and its token is the
        #: entry's in ``_tokens`` (lazy deletion).
        self._queue: list[_Item] = []
        self._tokens: dict[Entry, int] = {}
        self._counter = itertools.count()
        #: Entries changed since the last tick (their due time is recomputed).
        self._dirty: set[Entry] = set()
        #: Entries whose stored state waits to be read, and those being read.
        self._to_load: collections.deque[Entry] = collections.deque()
        self.loading: set[Entry] = set()

    def changed(self, entry: Entry) -> None:
        """``entry`` may be due at another time: planned again at the next tick."""
        self._dirty.add(entry)

    def idle(self, entry: Entry) -> bool:
        """Whether ``entry`` is neither queued, nor changed since the last tick, nor in
        flight, and still managed (a re-check handed to a lane may go on)."""
        return (
            entry not in self._tokens
            and entry.flight is None
            and entry not in self._dirty
            and self._entries.get(entry.spec.name) is entry
        )

    def load_ended(self, entry: Entry) -> None:
        """``entry``'s stored state was read (or reading it failed): a slot is free."""
        self.loading.discard(entry)

    def no_sooner_than(self, entry: Entry, until: _dt.datetime, now: _dt.datetime) -> bool:
        """Whether ``entry`` is due no sooner than ``until`` (a tick then plans it)."""
        if entry.flight is not None or entry.certificate is None:
            return False
        if self._to_load:
            return False  # a load slot may have come free: the next waiting read starts
        if self._entries.get(entry.spec.name) is not entry:
            return False
        when = queue_time(entry, self._schedule, now)
        return when is not None and when is not AT_ONCE and when >= until

    def _enqueue(self, entry: Entry, now: _dt.datetime) -> None:
        managed = self._entries.get(entry.spec.name) is entry
        when = queue_time(entry, self._schedule, now) if managed else None
        if when is None:
            self._tokens.pop(entry, None)
            return
        token = next(self._counter)
        self._tokens[entry] = token
        heapq.heappush(self._queue, (when, token, entry))

    def _valid(self, item: _Item) -> bool:
        _, token, entry = item
        return self._tokens.get(entry) == token and self._entries.get(entry.spec.name) is entry

    def _unqueue(self, entry: Entry) -> None:
        self._tokens.pop(entry, None)

    def tick(self, now: _dt.datetime) -> tuple[list[Entry], _dt.datetime | None]:
        """The entries to start at ``now`` (in order), and the next due instant.

        Only the entries changed since the last tick are looked at again; the others wait
        in the heap by due time. Entries in flight are dropped from the queue (planned
        again when their flight ends). Due entries start highest priority first, then
        earliest due (new certificates last), then in declaration order; with a store,
        at most :data:`MAX_LOADS` whose state is unread are among them at a time.
        """
        self._plan_changes(now)
        queue = self._queue
        due: list[tuple[tuple[int, bool, _dt.datetime, int], Entry]] = []
        while queue and queue[0][0] <= now:
            item = heapq.heappop(queue)
            entry = item[2]
            if not self._valid(item):
                continue
            self._unqueue(entry)
            if entry.flight is None:
                key = (-entry.spec.priority, item[0] is AT_ONCE, item[0], entry.seq)
                due.append((key, entry))
        due.sort(key=lambda pair: pair[0])
        return self._with_loads([entry for _, entry in due]), self._next_due()

    def _plan_changes(self, now: _dt.datetime) -> None:
        """Queue every changed entry at its due time; rebuild a heap of mostly dead items."""
        dirty, self._dirty = self._dirty, set()
        for entry in sorted(dirty, key=lambda e: e.seq):
            self._enqueue(entry, now)
        if len(self._queue) > 2 * len(self._entries) + 1024:
            self._queue = [item for item in self._queue if self._valid(item)]
            heapq.heapify(self._queue)
        if len(self._tokens) > 2 * len(self._entries) + 1024:
            self._tokens = {
                e: t for e, t in self._tokens.items() if self._entries.get(e.spec.name) is e
            }

    def _next_due(self) -> _dt.datetime | None:
        """The earliest due time of a queued entry that is not in flight."""
        queue = self._queue
        while queue and (not self._valid(queue[0]) or queue[0][2].flight is not None):
            item = heapq.heappop(queue)
            if self._valid(item):
                self._unqueue(item[2])  # in flight: planned again when the flight ends
        return queue[0][0] if queue else None

    def _with_loads(self, due: list[Entry]) -> list[Entry]:
        """``due``, with at most :data:`MAX_LOADS` entries at a time whose state is unread.

        Reading a stored certificate is the first step of its work; the rest wait their
        turn in ``_to_load`` (a read ending wakes the scheduler), so a restart with
        many certificates does not start one task per certificate at once.
        """
        if not self._stored:
            return due
        ready = [entry for entry in due if entry.loaded]
        self._to_load.extend(entry for entry in due if not entry.loaded)
        while self._to_load and len(self.loading) < MAX_LOADS:
            entry = self._to_load.popleft()
            if self._entries.get(entry.spec.name) is entry and entry.flight is None:
                self.loading.add(entry)
                ready.append(entry)
        return ready
