"""The manager's scheduler: when each certificate needs work, and who goes first.

* :class:`Scheduler`: a heap of every managed certificate by its explicit next instant
  (:func:`~acmecerts.manager._entry.due_at`), planned again only for the certificates that
  changed, and the loop that starts the due ones (highest priority first), at most
  :data:`MAX_LOADS` stored states being read at a time.
* :class:`BudgetGate`: priority reserves the rate-limit budget: a certificate on its way
  to an order waits while certificates of higher priority would take what it needs.
* :func:`plan_renewal`: the renewal instant, from ARI (RFC 9773) or the lifetime fraction
  (:func:`~acmecerts.protocol.ari.fallback_renewal_time`).
"""

from __future__ import annotations

import asyncio
import collections
import datetime as _dt
import heapq
import itertools
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Clock, SystemClock, VirtualClock, _running_loop
from acmecerts.client import AcmeClient
from acmecerts.errors import AcmeCertsError, ErrorKind, RateLimitDeferred
from acmecerts.manager._entry import AT_ONCE, Entry, current, parked, queue_time
from acmecerts.manager._held import HeldCertificate, ari_cert_id
from acmecerts.manager._ledger import RateLimitLedger
from acmecerts.manager._retention import RetiredCertificates
from acmecerts.protocol.ari import (
    RenewalInfoResult,
    ReplacementReason,
    choose_renewal_time,
    fallback_renewal_time,
    replacement_requested,
)
from acmecerts.ratelimit import IssuanceRequest
from acmecerts.retry import AttemptSchedule

log = logging.getLogger("acmecerts.manager")

#: The longest timed sleep of the scheduler (guards against wall-clock jumps).
MAX_SCHEDULER_SLEEP = 3600.0
#: Seconds until renewalInfo is asked again after it failed for a reason the CA may lift
#: (jittered by ±10 %; a later ``Retry-After`` wins).
ARI_RETRY_ON_ERROR = 3600.0
#: At most this many stored certificates are read at once by the background scheduler.
MAX_LOADS = 32
#: Tasks that share the ARI re-checks due in one scheduling tick.
RECHECK_LANES = 8
#: ARI re-checks are asked on a grid of this many seconds (the CA's ``Retry-After``
#: rounded up to it): the re-checks of a fleet share their scheduler ticks (at
#: 10,000 certificates, ~28 a minute instead of one tick each).
RECHECK_GRID = 60.0

_Item = tuple[_dt.datetime, int, Entry]


class Scheduler:
    """Every managed certificate's next instant, in a heap, and the loop that acts on it.

    Args:
        entries: The manager's certificates by name (read here, never changed).
        schedule: The attempt schedule (when a failed certificate tries again).
        clock: Where "now" comes from, and how to sleep.
        stored: Whether the manager has a store (each certificate's stored state is read
            before its first work, :data:`MAX_LOADS` at a time).
    """

    def __init__(
        self, entries: dict[str, Entry], *, schedule: AttemptSchedule, clock: Clock, stored: bool
    ) -> None:
        self._entries = entries
        self._schedule = schedule
        self._clock = clock
        self._stored = stored
        #: The schedule: a heap of ``(due, token, entry)``; an item is valid while the
        #: entry is managed and its ``queued`` is the item's token (lazy deletion).
        self._queue: list[_Item] = []
        self._tokens = itertools.count()
        #: Entries changed since the last scheduling tick (their due time is recomputed).
        self._dirty: set[Entry] = set()
        #: Entries whose stored state waits to be read by the scheduler, and those being read.
        self._to_load: collections.deque[Entry] = collections.deque()
        self.loading: set[Entry] = set()
        self._wake = anyio.Event()
        #: While the loop sleeps until a due instant: that instant (a change due no
        #: sooner needs no wake-up, the tick at that instant plans it).
        self._sleeping_until: _dt.datetime | None = None
        #: The asyncio future a timed sleep awaits (resolved by a wake-up), if any.
        self._alarm: asyncio.Future[None] | None = None

    async def run(
        self,
        task_group: anyio.abc.TaskGroup,
        work: Callable[[Entry], Coroutine[Any, Any, None]],
        retired: RetiredCertificates | None,
        recheck_only: Callable[[Entry], bool] | None = None,
    ) -> None:
        """Start ``work`` for each certificate when it is due, and purge retired ones.

        The certificates whose work is only an ARI re-check (``recheck_only``) share at
        most :data:`RECHECK_LANES` tasks per tick (:meth:`_lane`): one request each,
        in priority order, without a task of their own (a fleet at rest re-checks
        every certificate four times a day).
        """
        while True:
            self._wake = anyio.Event()
            now = self._clock.now()
            due_now, next_due = self.plan_tick(now)
            rechecks: collections.deque[Entry] = collections.deque()
            for entry in due_now:
                if recheck_only is not None and recheck_only(entry):
                    rechecks.append(entry)
                else:
                    task_group.start_soon(work, entry)
            for _ in range(min(len(rechecks), RECHECK_LANES)):
                task_group.start_soon(self._lane, rechecks, work)
            if retired is not None:
                purge_at = retired.tick(task_group, now, self.wake_up)
                if purge_at is not None and (next_due is None or purge_at < next_due):
                    next_due = purge_at
            if next_due is None:
                # nothing is scheduled: sleep until something changes (manage, a flight
                # ends); a timed sleep here would move a fake clock under running work
                await self._wake.wait()
                continue
            delay = min(MAX_SCHEDULER_SLEEP, (next_due - now).total_seconds())
            self._sleeping_until = now + _dt.timedelta(seconds=max(0.0, delay))
            try:
                await self._sleep_or_wake(delay)
            finally:
                self._sleeping_until = None

    async def _lane(
        self,
        rechecks: collections.deque[Entry],
        work: Callable[[Entry], Coroutine[Any, Any, None]],
    ) -> None:
        """Run ``work`` for the re-checks of one tick, one after the other.

        An entry planned again since the tick (it changed: a new spec, a cancel, a
        flight) or no longer managed is left to the scheduler; ``work`` handles its own
        errors, so one certificate's failure does not end the lane.
        """
        while rechecks:
            entry = rechecks.popleft()
            if (
                entry.queued is None
                and entry.flight is None
                and entry not in self._dirty
                and self._entries.get(entry.spec.name) is entry
            ):
                await work(entry)

    def changed(self, entry: Entry, *, wake: bool = True) -> None:
        """``entry`` may need work at another time: the scheduler recomputes it.

        While the loop sleeps until a due instant, an entry due no sooner than that
        instant does not wake it: the tick at that instant plans it (a certificate at
        rest, its renewalInfo asked again, is planned without a tick of its own).
        """
        self._dirty.add(entry)
        if wake and not self._due_after_sleep(entry):
            self.wake_up()

    def _due_after_sleep(self, entry: Entry) -> bool:
        """Whether the loop sleeps until an instant no later than ``entry``'s due time."""
        until = self._sleeping_until
        if until is None or entry.flight is not None or entry.certificate is None:
            return False
        if self._to_load:
            return False  # a load slot may have come free: the next waiting read starts
        if self._entries.get(entry.spec.name) is not entry:
            return False
        when = queue_time(entry, self._schedule, self._clock.now())
        return when is not None and when is not AT_ONCE and when >= until

    def wake_up(self) -> None:
        """Look at the queue again now."""
        self._wake.set()
        alarm = self._alarm
        if alarm is not None and not alarm.done():
            alarm.set_result(None)

    def _enqueue(self, entry: Entry, now: _dt.datetime) -> None:
        managed = self._entries.get(entry.spec.name) is entry
        when = queue_time(entry, self._schedule, now) if managed else None
        if when is None:
            entry.queued = None
            return
        token = next(self._tokens)
        entry.queued = token
        heapq.heappush(self._queue, (when, token, entry))

    def _valid(self, item: _Item) -> bool:
        _, token, entry = item
        return entry.queued == token and self._entries.get(entry.spec.name) is entry

    def plan_tick(self, now: _dt.datetime) -> tuple[list[Entry], _dt.datetime | None]:
        """One scheduling decision: the entries to start now (in order), the next due time.

        Only the entries changed since the last tick are looked at again; the others wait
        in a heap by due time. Entries in flight are dropped from the queue (they are
        planned again when their flight ends). Due entries start highest priority first,
        then earliest due (new certificates last), then in declaration order.
        """
        self._plan_changes(now)
        queue = self._queue
        due: list[tuple[tuple[int, bool, _dt.datetime, int], Entry]] = []
        while queue and queue[0][0] <= now:
            item = heapq.heappop(queue)
            entry = item[2]
            if not self._valid(item):
                continue
            entry.queued = None
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

    def _next_due(self) -> _dt.datetime | None:
        """The earliest due time of a queued entry that is not in flight."""
        queue = self._queue
        while queue and (not self._valid(queue[0]) or queue[0][2].flight is not None):
            item = heapq.heappop(queue)
            if self._valid(item):
                item[2].queued = None  # in flight: planned again when the flight ends
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

    async def _sleep_or_wake(self, seconds: float) -> None:
        wake = self._wake
        if wake.is_set():
            await anyio.lowlevel.checkpoint()
            return
        loop = _running_loop() if type(self._clock) in _LOOP_CLOCKS else None
        if loop is not None:
            # asyncio, and a clock that sleeps on the loop's own timer: a future that the
            # timer or a wake-up resolves; no task and no cancel scope per tick (the most
            # frequent wait of a fleet at rest). Cancelling the task cancels the future:
            # the wait ends at once.
            alarm: asyncio.Future[None] = loop.create_future()
            timer = loop.call_at(loop.time() + max(0.0, seconds), _ring, alarm)
            self._alarm = alarm
            try:
                await alarm
            finally:
                self._alarm = None
                timer.cancel()
            return
        async with anyio.create_task_group() as tg:

            async def sleeper() -> None:
                await self._clock.sleep(max(0.0, seconds))
                wake.set()

            tg.start_soon(sleeper)
            await wake.wait()
            tg.cancel_scope.cancel()


#: Clocks whose ``sleep`` is ``anyio.sleep``: a wait on them is a timeout on the loop.
_LOOP_CLOCKS = (SystemClock, VirtualClock)


def _ring(alarm: asyncio.Future[None]) -> None:
    """The scheduler's timer: end its sleep (unless a wake-up or cancellation did)."""
    if not alarm.done():
        alarm.set_result(None)


class BudgetGate:
    """Priority reserves quota: an entry waits while higher-priority ones would spend first.

    Entries on their way to an order that have not passed the gate yet (loading, waiting
    for a slot, asking the owner) are *contending* (:meth:`enter` / :meth:`leave`).
    """

    def __init__(self, client: AcmeClient, *, clock: Clock, stored: bool) -> None:
        self._client = client
        self._clock = clock
        self._stored = stored
        self._contending: set[Entry] = set()
        self._contention = anyio.Event()
        #: The last instant handed out per deferring bucket (limit, scope key).
        self._queued: dict[tuple[str, str | None], _dt.datetime] = {}

    def deferred_until(self, error: RateLimitDeferred) -> _dt.datetime | None:
        """When an entry the ledger deferred tries again: the ledger's instant or, when
        others were deferred on the same bucket (limit and scope) to it or later, one
        token after the last of them.

        Without the queue, every certificate deferred on one bucket woke at the same
        instant; one got the token and the others were deferred again: n deferred
        certificates made n²/2 attempts, each building a key and CSR and writing the
        store (found by the fleet simulation, issue #26).
        """
        at = error.retry_after
        ledger = self._client.ledger
        if at is None or error.limit is None or not isinstance(ledger, RateLimitLedger):
            return at
        limit = next((x for x in ledger.model if x.name == error.limit), None)
        if limit is None:
            return at
        key = (error.limit, error.scope_key)
        last = self._queued.get(key)
        if last is not None and last >= at:
            at = last + limit.interval
        self._queued[key] = at
        return at

    async def ledger_deferral(self, entry: Entry) -> RateLimitDeferred | None:
        """What the ledger would refuse ``entry``'s next order with now; nothing spent.

        Asked before the store's lock: an order the ledger refuses costs no lock, no
        store read, no key, CSR or order intent (the fleet simulation found ~700 of
        ~2,300 attempts refused only after all that, issue #26). ``None`` (go on) when
        the ledger is not a :class:`RateLimitLedger` or the account is not known yet;
        the ledger's reservation before ``newOrder`` still decides and spends.
        """
        client = self._client
        ledger = client.ledger
        if not isinstance(ledger, RateLimitLedger) or client.account_url is None:
            return None
        held = entry.certificate if entry.certificate is not None and not entry.stale else None
        return await ledger.deferral(
            entry.spec.identifiers,
            account=client.account_url,
            renewal_of=held.identifiers if held is not None else None,
            replaces=held is not None and replaces_id(entry) is not None,
        )

    def enter(self, entry: Entry) -> None:
        """``entry`` is on its way to an order."""
        self._contending.add(entry)

    def leave(self, entry: Entry) -> None:
        """``entry`` passed the gate or gave up: those waiting behind it look again."""
        if entry in self._contending:
            self._contending.discard(entry)
            self._contention.set()

    def _needs_order(self, entry: Entry) -> bool:
        """Whether ``entry`` (its stored state read) is on its way to an order now."""
        if entry.cancelled is not None or parked(entry):
            return False
        if self._stored and not entry.loaded:
            return False
        return not current(entry, self._clock.now())

    async def turn(self, entry: Entry) -> _dt.datetime | None:
        """``None`` to go on now, else when ``entry``'s turn comes.

        Without a ledger, or with no certificate of higher priority on its way to an
        order (loading, waiting for a slot, in an attempt), it answers at once. Else it
        waits until their stored state is read (they may be current and need nothing),
        and plans them and ``entry`` with the ledger (:meth:`RateLimitLedger.plan`,
        highest priority first, as if none of them had spent yet): if ``entry`` fits
        even then, it goes on; if it would fit only later, it waits for one of them to
        finish and looks again; once none is left, the ledger's own reservation decides.
        A deferral says the instant ``entry`` fits behind them.
        """
        client = self._client
        ledger = client.ledger
        # only our ledger plans; with another LedgerLike its own preflight decides alone
        if not isinstance(ledger, RateLimitLedger) or not self._needs_order(entry):
            return None
        priority = entry.spec.priority
        while True:
            higher = [e for e in self._contending if e.spec.priority > priority]
            if not higher:
                return None
            if all(not self._stored or e.loaded for e in higher):
                ahead = [e for e in higher if self._needs_order(e)]
                if not ahead:
                    return None
                account = client.account_url or await client.account_url_or_register()
                requests = [issuance_request(e) for e in (*ahead, entry)]
                planned = await ledger.plan(requests, account=account)
                mine = next(p for p in planned if p.request is requests[-1])
                if mine.at is None or mine.at <= self._clock.now():
                    return None  # it fits even if every one of them spends first
            if self._contention.is_set():  # every waiter shares one event until it fires
                self._contention = anyio.Event()
            await self._contention.wait()


def issuance_request(entry: Entry) -> IssuanceRequest:
    """``entry``'s next order as the ledger's planner sees it."""
    held = entry.certificate
    return IssuanceRequest(
        entry.spec.identifiers,
        expires_at=held.not_after if held is not None else None,
        renewal_of=held.identifiers if held is not None else None,
        replaces=held is not None and replaces_id(entry) is not None,
        priority=entry.spec.priority,
        name=entry.spec.name,
    )


def replaces_id(entry: Entry) -> str | None:
    """The ARI certID of the current certificate, when the CA supports ARI."""
    if entry.certificate is None or entry.ari_recheck_at is None:
        return None
    try:
        return ari_cert_id(entry.certificate)
    except AcmeCertsError:
        return None


async def plan_renewal(
    entry: Entry,
    client: AcmeClient,
    *,
    fraction: float | None,
    clock: Clock,
    rng: random.Random,
    observe: Callable[[AcmeCertsError | None], None] | None = None,
) -> ReplacementReason | None:
    """Set ``renew_at``: from ARI when the CA has it, else at the lifetime fraction.

    RFC 9773 §4.2: a uniformly random instant in the suggested window, re-checked at
    the CA's ``Retry-After`` (bounded to 1 min..6 h, six hours by default). Without
    ``renewalInfo`` (or when asking fails) the certificate is renewed when ``fraction`` of
    its lifetime remains; ``None`` is a third, or half under 10 days of lifetime
    (``fallback_renewal_time``).

    When the CA asks for the certificate to be replaced at once (its window moved into
    the past: :func:`~acmecerts.protocol.ari.replacement_requested`), ``renew_at`` is
    now, and the reason is returned the first time it is seen for this certificate
    (``None`` otherwise). The request holds for the certificate until it is replaced:
    a later answer whose window still started in the past keeps it due now.

    When asking fails for a reason the CA may lift (5xx, no connection, a rate limit)
    and the CA already named a window for this certificate, that window's instant stays
    and the re-check comes again after :data:`ARI_RETRY_ON_ERROR` (or the CA's
    ``Retry-After``): an outage of the CA is no reason to renew early. ``observe`` is
    told the outcome of the request (``None``: answered; else the error).
    """
    certificate = entry.certificate
    assert certificate is not None
    kept = entry.renew_at if _same_held(entry.ari_answer, certificate) else None
    if certificate.not_after > certificate.not_before:
        entry.renew_at = fallback_renewal_time(
            certificate.not_before, certificate.not_after, fraction=fraction
        )
    else:  # no lifetime to take a fraction of (no CA issues such a thing): at expiry
        entry.renew_at = certificate.not_after
    entry.ari_recheck_at = None
    try:
        directory = await client.directory()
        if directory.renewal_info is None:
            return None
        result = await client.renewal_info(cert_id=ari_cert_id(certificate))
    except AcmeCertsError as exc:
        if observe is not None:
            observe(exc)
        if kept is not None and exc.kind is not ErrorKind.PERMANENT:
            entry.renew_at = kept
            again = clock.now() + _dt.timedelta(seconds=ARI_RETRY_ON_ERROR * rng.uniform(0.9, 1.1))
            entry.ari_recheck_at = on_recheck_grid(max(again, exc.retry_after or again))
            log.info("%s: renewalInfo failed (%s); asking again at %s", entry.spec.name, exc, again)
            return None
        log.info("%s: no ARI window (%s); renewing at %s", entry.spec.name, exc, entry.renew_at)
        return None
    if observe is not None:
        observe(None)
    if entry.certificate is not certificate:
        return None  # renewed while the CA answered: the answer is about the old one
    now = clock.now()
    previous = entry.ari_answer if _same_certificate(entry.ari_answer, result) else None
    reason = replacement_requested(
        result.info, now=now, previous=previous.info if previous is not None else None
    )
    announced = previous is not None and entry.ari_replacement is not None
    if reason is None and announced and result.window_start <= now:
        reason = entry.ari_replacement  # still asked for: stays due until replaced
    entry.ari_answer = result
    entry.ari_replacement = reason
    entry.renew_at = (
        now if reason is not None else choose_renewal_time(result.info, now=now, rng=rng)
    )
    entry.ari_recheck_at = on_recheck_grid(result.retry_after)
    return reason if reason is not None and not announced else None


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MICROSECOND = _dt.timedelta(microseconds=1)


def on_recheck_grid(instant: _dt.datetime) -> _dt.datetime:
    """``instant`` rounded up to the ARI re-check grid (:data:`RECHECK_GRID`), exactly."""
    grid = round(RECHECK_GRID * 1_000_000)
    micros = (instant - _EPOCH) // _MICROSECOND
    return _EPOCH + _dt.timedelta(microseconds=-(-micros // grid) * grid)


def _same_held(
    answer: RenewalInfoResult | None, certificate: HeldCertificate | IssuedCertificate
) -> bool:
    """Whether ``answer`` is the CA's answer about ``certificate`` (a held one)."""
    if answer is None:
        return False
    try:
        return answer.cert_id == ari_cert_id(certificate)
    except AcmeCertsError:
        return False


def _same_certificate(a: RenewalInfoResult | None, b: RenewalInfoResult) -> bool:
    return a is not None and a.cert_id == b.cert_id
