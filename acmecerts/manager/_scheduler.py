"""The manager's scheduler: the loop that carries out the fleet core's ticks.

* :class:`Scheduler`: asks the fleet core (:class:`~acmecerts.manager._core.FleetCore`,
  its due-queue :class:`~acmecerts.manager._due.DueQueue`) what is due at each tick,
  starts that work (ARI re-checks in a few lanes), and sleeps until the next instant or
  a wake-up.
* :class:`BudgetGate`: priority reserves the rate-limit budget: a certificate on its way
  to an order waits while certificates of higher priority would take what it needs.
* :func:`plan_renewal`: the renewal instant, from ARI (RFC 9773) or the lifetime fraction
  (:func:`~acmecerts.protocol.ari.fallback_renewal_time`), asked of the CA here and
  recorded by the core.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as _dt
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from acmecerts._time import Clock, SystemClock, VirtualClock, _running_loop
from acmecerts.client import AcmeClient
from acmecerts.errors import AcmeCertsError, ErrorKind, RateLimitDeferred
from acmecerts.manager._core import RECHECK_GRID, FleetCore, on_recheck_grid
from acmecerts.manager._due import MAX_LOADS
from acmecerts.manager._entry import Entry, current, parked
from acmecerts.manager._held import ari_cert_id
from acmecerts.manager._ledger import RateLimitLedger
from acmecerts.manager._retention import RetiredCertificates
from acmecerts.protocol.ari import ReplacementReason
from acmecerts.ratelimit import IssuanceRequest

__all__ = [
    "ARI_RETRY_ON_ERROR",
    "MAX_LOADS",
    "MAX_SCHEDULER_SLEEP",
    "RECHECK_GRID",
    "RECHECK_LANES",
    "BudgetGate",
    "Scheduler",
    "issuance_request",
    "on_recheck_grid",
    "plan_renewal",
    "replaces_id",
]

log = logging.getLogger("acmecerts.manager")

#: The longest timed sleep of the scheduler (guards against wall-clock jumps).
MAX_SCHEDULER_SLEEP = 3600.0
#: Seconds until renewalInfo is asked again after it failed for a reason the CA may lift
#: (jittered by ±10 %; a later ``Retry-After`` wins).
ARI_RETRY_ON_ERROR = 3600.0
#: Tasks that share the ARI re-checks due in one scheduling tick.
RECHECK_LANES = 8


class Scheduler:
    """The loop that carries out the fleet core's ticks: start the due work, sleep, wake.

    Args:
        core: The fleet core (every certificate and its next instant, in its due-queue).
        clock: Where "now" comes from, and how to sleep.
    """

    def __init__(self, core: FleetCore, *, clock: Clock) -> None:
        self._core = core
        self._clock = clock
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
            if self._core.due.idle(entry):
                await work(entry)

    def changed(self, entry: Entry, *, wake: bool = True) -> None:
        """``entry`` may need work at another time: the core plans it again.

        While the loop sleeps until a due instant, an entry due no sooner than that
        instant does not wake it: the tick at that instant plans it (a certificate at
        rest, its renewalInfo asked again, is planned without a tick of its own).
        """
        due = self._core.due
        due.changed(entry)
        if not wake:
            return
        until = self._sleeping_until
        if until is None or not due.no_sooner_than(entry, until, self._clock.now()):
            self.wake_up()

    def wake_up(self) -> None:
        """Look at the queue again now."""
        self._wake.set()
        alarm = self._alarm
        if alarm is not None and not alarm.done():
            alarm.set_result(None)

    def plan_tick(self, now: _dt.datetime) -> tuple[list[Entry], _dt.datetime | None]:
        """One scheduling decision: the core's tick at ``now`` (work to start, next due)."""
        tick = self._core.time_passed(now)
        return tick.start, tick.wake

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
    core: FleetCore,
    fraction: float | None,
    clock: Clock,
    rng: random.Random,
    observe: Callable[[AcmeCertsError | None], None] | None = None,
) -> ReplacementReason | None:
    """Plan ``entry``'s renewal: from ARI when the CA has it, else at the lifetime fraction.

    RFC 9773 §4.2: a uniformly random instant in the suggested window, re-checked at
    the CA's ``Retry-After`` (bounded to 1 min..6 h, six hours by default). Without
    ``renewalInfo`` (or when asking fails) the certificate is renewed when ``fraction`` of
    its lifetime remains; ``None`` is a third, or half under 10 days of lifetime
    (``fallback_renewal_time``). The core records each step
    (:meth:`FleetCore.renewal_planned`, :meth:`FleetCore.window_unknown`,
    :meth:`FleetCore.window_answered`).

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
    kept = core.renewal_planned(entry, fraction)
    try:
        directory = await client.directory()
        if directory.renewal_info is None:
            return None
        result = await client.renewal_info(cert_id=ari_cert_id(certificate))
    except AcmeCertsError as exc:
        if observe is not None:
            observe(exc)
        if kept is not None and exc.kind is not ErrorKind.PERMANENT:
            again = clock.now() + _dt.timedelta(seconds=ARI_RETRY_ON_ERROR * rng.uniform(0.9, 1.1))
            core.window_unknown(entry, kept, max(again, exc.retry_after or again))
            log.info("%s: renewalInfo failed (%s); asking again at %s", entry.spec.name, exc, again)
            return None
        log.info("%s: no ARI window (%s); renewing at %s", entry.spec.name, exc, entry.renew_at)
        return None
    if observe is not None:
        observe(None)
    return core.window_answered(entry, certificate, result, clock.now())
