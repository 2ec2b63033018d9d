"""The manager's work for one certificate, from its turn to its outcome.

One attempt: join or start the single flight for the certificate, pass the budget gate
(:class:`~acmecerts.manager._scheduler.BudgetGate`), take a concurrency slot, ask the
owner, take the store's lock, read what another process did meanwhile, order through the
client, and turn the outcome into the certificate's next instant (the attempt schedule,
or the error backoff for a failure on our side) and an event.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import assert_never

import anyio
import anyio.abc

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Clock
from acmecerts.errors import (
    AcmeCertsError,
    AcmeProblem,
    ErrorKind,
    InvalidInput,
    RateLimitDeferred,
    RateLimited,
    StorageError,
)
from acmecerts.manager._actions import (
    Action,
    PlanFirstCheck,
    Replan,
    Retire,
    SaveCertificate,
    SaveState,
)
from acmecerts.manager._core import Failure, FleetCore
from acmecerts.manager._entry import (
    Entry,
    current,
    due_at,
    for_name,
    parked,
    progress_mark,
)
from acmecerts.manager._events import (
    CertificateDeferred,
    CertificateEvent,
    CertificateFailed,
    CertificateObtained,
    CertificateObtaining,
    CertificateRateLimited,
    CertificateReplacesRefused,
)
from acmecerts.manager._outage import HELD_REASON, CaOutage
from acmecerts.manager._persist import CertificateStore
from acmecerts.manager._renewals import RenewalPlanner
from acmecerts.manager._scheduler import BudgetGate, Scheduler, replaces_id
from acmecerts.manager._spec import (
    CancelledResult,
    CertificateSpec,
    DeferredResult,
    FailedResult,
    IssuedResult,
    IssueResult,
)
from acmecerts.manager._stored import StoredEntries
from acmecerts.protocol.ari import replaces_refused
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.resources import Directory
from acmecerts.retry import AttemptSchedule

#: Called with ``(name, reason)`` whenever work for a certificate is cancelled.
CancellationHook = Callable[[str, str], Awaitable[None] | None]

_NO_LIMIT = contextlib.nullcontext()
_OWNER_GONE = "owner gone"

log = logging.getLogger("acmecerts.manager")


@dataclasses.dataclass(eq=False)
class Flight:
    """One in-flight attempt; others asking for the same certificate wait for it."""

    done: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    result: IssueResult | None = None
    scope: anyio.CancelScope | None = None
    #: What the core returned that waits for the store's lock to be released (a retirement).
    after_lock: list[Action] = dataclasses.field(default_factory=list)


class AttemptRunner:
    """The work for one certificate: single flight, budget gate, owner, lock, order, outcome.

    :class:`~acmecerts.manager.CertificateManager` holds one and hands it what it uses.

    Args:
        core: The fleet core: the certificates, changed by its transitions only.
        clock: Where "now" comes from.
        schedule: Spacing of attempts after the CA's failures.
        limiter: This manager's concurrency bound.
        global_limiter: A bound shared with other managers, if any.
        store: The certificate store (its lock, the certificate, the order intent);
            ``None`` for a manager without one.
        lock_lease: The lease of a certificate's lock in the store, seconds.
        stored: Reads and saves the entries' stored state.
        scheduler: Told when an entry changed (plans what comes next).
        gate: The budget gate (priority, the ledger's deferrals).
        outage: The CA's health gate (holds background work while the CA fails).
        renewals: Plans a certificate's renewal (its ARI re-check).
        client_issue: One call of the client for an order, with the order journal
            (``CertificateManager._client_issue``).
        directory: The CA's directory (to tell a refused ``replaces``).
        solver_set: The fingerprint of the manager's solvers now.
        cancelled: Publishes a cancellation and calls the cancellation hooks.
        publish: Sends a :class:`CertificateEvent` to the manager's subscribers.
    """

    def __init__(
        self,
        *,
        core: FleetCore,
        clock: Clock,
        schedule: AttemptSchedule,
        limiter: anyio.CapacityLimiter,
        global_limiter: anyio.CapacityLimiter | None,
        store: CertificateStore | None,
        lock_lease: float,
        stored: StoredEntries,
        scheduler: Scheduler,
        gate: BudgetGate,
        outage: CaOutage,
        renewals: RenewalPlanner,
        client_issue: Callable[
            [Entry, str | None, Sequence[Identifier] | None], Awaitable[IssuedCertificate]
        ],
        directory: Callable[[], Awaitable[Directory]],
        solver_set: Callable[[], str],
        cancelled: Callable[[str, str], Awaitable[None]],
        publish: Callable[[CertificateEvent], Awaitable[None]],
    ) -> None:
        self.core = core
        self.clock = clock
        self.schedule = schedule
        self.limiter = limiter
        self.global_limiter = global_limiter
        self.store = store
        self.lock_lease = lock_lease
        self.stored = stored
        self.scheduler = scheduler
        self.gate = gate
        self.outage = outage
        self.renewals = renewals
        self.client_issue = client_issue
        self.directory = directory
        self.solver_set = solver_set
        self.cancelled = cancelled
        self.publish = publish

    async def obtain(
        self, entry: Entry, *, renewal: bool = False, force: bool = False
    ) -> IssueResult:
        """Run (or join) the single flight for ``entry``."""
        if entry.cancelled is not None:
            return CancelledResult(entry.spec.name, entry.cancelled)
        flight = Flight()
        existing = self.core.attempt_started(entry, flight)
        if existing is not None:
            await existing.done.wait()
            assert existing.result is not None
            return for_name(existing.result, entry.spec.name)
        self.gate.enter(entry)
        result: IssueResult = CancelledResult(entry.spec.name, "interrupted")
        try:
            result = await self._attempt(entry, flight, renewal=renewal, force=force)
        finally:
            self.gate.leave(entry)
            flight.result = result
            replan = self.core.attempt_ended(entry, flight)
            flight.done.set()
            self.carry_out_now(replan)  # the scheduler plans what comes next (renewal, retry)
        return result

    async def carry_out(self, actions: Iterable[Action]) -> None:
        """Do what the core returned, in its order (see ``_actions.py``); decide nothing."""
        for action in actions:
            match action:
                case SaveCertificate(name, certificate):
                    assert self.store is not None
                    await self.store.save_certificate(name, certificate)
                case SaveState(entry):
                    await self.stored.save_state(entry)
                case PlanFirstCheck(entry):
                    await self.renewals.plan_obtained(entry)
                case Retire(name, identifiers):
                    await self.stored.retire(name, identifiers)
                case Replan():
                    self.carry_out_now((action,))
                case _:
                    assert_never(action)

    def carry_out_now(self, actions: Iterable[Action]) -> None:
        """Do what the core returned that needs no I/O (:class:`Replan`): at once, even in
        a ``finally`` while being cancelled."""
        for action in actions:
            assert isinstance(action, Replan), action
            self.scheduler.changed(action.entry)

    async def _owner_present(self, spec: CertificateSpec) -> bool | None:
        if spec.owner is None:
            return True
        try:
            return bool(await spec.owner())
        except Exception as exc:
            log.warning("%s: the owner guard failed (%r); not starting an order", spec.name, exc)
            return None

    async def _attempt(
        self, entry: Entry, flight: Flight, *, renewal: bool, force: bool = False
    ) -> IssueResult:
        try:
            return await self._attempt_once(entry, flight, renewal=renewal, force=force)
        except StorageError as exc:
            # the store failed (read, lock, write): ours to retry, on the error backoff
            name = entry.spec.name
            until = self._hiccup(entry, f"{type(exc).__name__}: {exc}")
            failed = CertificateFailed(name, self.clock.now(), error=exc, next_attempt_at=until)
            log.warning(
                "%s: storage failed (%s); next try at %s", name, exc, until, extra={"event": failed}
            )
            await self.publish(failed)
            return FailedResult(name, exc, until)

    async def _attempt_once(
        self, entry: Entry, flight: Flight, *, renewal: bool, force: bool = False
    ) -> IssueResult:
        spec = entry.spec
        name = spec.name
        generation = entry.generation
        await self.stored.load(entry)
        # a failure under other solvers (the manager's ``solvers`` changed) imposes no wait on these
        self.core.solvers_now(entry, self.solver_set())
        if parked(entry) and not force:
            assert entry.state.last_error is not None
            return FailedResult(name, InvalidInput(entry.state.last_error))
        now = self.clock.now()
        if not self.schedule.ready(entry.state, now) and entry.state.next_attempt_at is not None:
            return DeferredResult(name, entry.state.next_attempt_at, "backoff after a failure")
        # before taking a slot: an entry waiting here must not keep others from theirs
        fits_at = None if force else await self.gate.turn(entry)
        if fits_at is not None:
            deferred = RateLimitDeferred(
                "certificates of higher priority take the rate-limit budget until then",
                retry_after=fits_at,
                limit=None,
            )
            return await self._failed(entry, deferred)
        with anyio.CancelScope() as scope:
            flight.scope = scope
            if entry.cancelled is not None:
                scope.cancel()
            async with self.limiter, self.global_limiter or _NO_LIMIT:
                refused = await self._refused_by_ledger(entry)
                if refused is not None:
                    return refused
                if self.store is None:
                    result = await self._owned_issue(entry, flight, generation, renewal, force)
                else:
                    # the owner is asked under the lock: a deletion seen while another
                    # replica held it still stops this order
                    async with self.store.lock(name, lease=self.lock_lease):
                        result = await self._owned_issue(entry, flight, generation, renewal, force)
                # (outside the lock: a purge takes it)
                await self.carry_out(flight.after_lock)
                return result
        return CancelledResult(name, entry.cancelled or "cancelled")

    async def _refused_by_ledger(self, entry: Entry) -> IssueResult | None:
        """Defer ``entry`` now if the ledger would refuse its order (nothing spent).

        The same deferral as the ledger's refusal under the lock (state, event, next
        instant), before the lock, the store reads, the key, the CSR and the order
        intent. A stored order of an earlier attempt is resumed without a new order:
        that one goes on to the lock.
        """
        deferred = await self.gate.ledger_deferral(entry)
        if deferred is None:
            return None
        if self.store is not None:
            finished = self.stored.finished_order(entry)
            record = await self.store.load_order(entry.spec.name, finished=finished)
            if record is not None and set(record.identifiers) == entry.spec.identifier_set:
                return None
        return await self._failed(entry, deferred)

    async def _owned_issue(
        self, entry: Entry, flight: Flight, generation: int, renewal: bool, force: bool
    ) -> IssueResult:
        """Ask the owner, then issue (under the store's lock when there is a store)."""
        refused = await self._ask_owner(entry, flight)
        if refused is not None:
            return refused
        if entry.cancelled is not None or entry.generation != generation:
            return CancelledResult(entry.spec.name, entry.cancelled or "cancelled")
        return await self._issue(entry, flight, renewal=renewal, force=force)

    async def _ask_owner(self, entry: Entry, flight: Flight) -> IssueResult | None:
        """Ask the owner guard before an order: ``None`` to go on, else the outcome.

        Gone: the certificate is cancelled (nothing more is sent) and retired once the
        lock is released (``flight.after_lock``). Unknown (the guard raised): held on the
        error backoff, then asked again; never taken for "gone".
        """
        name = entry.spec.name
        owner = await self._owner_present(entry.spec)
        if owner is True:
            return None
        if owner is False:
            flight.after_lock.extend(self.core.owner_gone(entry, _OWNER_GONE))
            await self.cancelled(name, _OWNER_GONE)
            return CancelledResult(name, _OWNER_GONE)
        until = self._hiccup(entry, "the owner guard failed")
        reason = "the owner guard failed"
        await self.publish(CertificateDeferred(name, self.clock.now(), until=until, reason=reason))
        return DeferredResult(name, until, reason)

    async def _issue(
        self, entry: Entry, flight: Flight, *, renewal: bool, force: bool = False
    ) -> IssueResult:
        spec = entry.spec
        name = spec.name
        if self.store is not None:
            # under the store's lock: another process may have issued it meanwhile, or
            # failed with it (its attempt state says when to try again, or that the
            # input is invalid)
            await self.stored.load_locked(entry)
            if not force and current(entry, self.clock.now()):
                assert entry.certificate is not None
                return IssuedResult(name, self.core.handed_out.issued(entry.certificate))
            if not force and parked(entry):
                assert entry.state.last_error is not None
                return FailedResult(name, InvalidInput(entry.state.last_error))
            retry_at = entry.state.next_attempt_at
            if not force and retry_at is not None and retry_at > self.clock.now():
                return DeferredResult(name, retry_at, "another process's attempt failed")
            renewal = renewal or (entry.certificate is not None and not entry.stale)
        await self.publish(
            CertificateObtaining(
                name, self.clock.now(), renewal=renewal, attempt=entry.state.attempts + 1
            )
        )
        replaces = replaces_id(entry) if renewal else None
        renewal_of = (
            entry.certificate.identifiers if renewal and entry.certificate is not None else None
        )
        try:
            try:
                certificate = await self.client_issue(entry, replaces, renewal_of)
                self.outage.observe(None)
            except AcmeProblem as exc:
                if replaces is None or not await self._refused_replaces(exc):
                    raise
                # RFC 9773 §5: whatever the reason (already replaced, another account's
                # certificate, a certID the CA does not know), a renewal the CA will not
                # link to its predecessor is still a renewal: order it once without
                # ``replaces`` (not exempt from the CA's limits, the ledger counts it)
                log.warning(
                    "%s: the CA refused replaces=%s (%s); ordering without it", name, replaces, exc
                )
                await self.publish(
                    CertificateReplacesRefused(name, self.clock.now(), cert_id=replaces, error=exc)
                )
                if self.store is not None:
                    # the refused newOrder created no order: its intent must not send the
                    # next one looking for an unrecorded order
                    await self.store.delete_order(name)
                # a new order: the owner may have gone meanwhile, so ask before it again
                refused = await self._ask_owner(entry, flight)
                if refused is not None:
                    return refused
                certificate = await self.client_issue(entry, None, renewal_of)
                self.outage.observe(None)
        except StorageError:
            raise  # our store, not the CA: the error backoff (see _attempt), not the schedule
        except AcmeCertsError as exc:
            self.core.steady(entry)
            self.outage.observe(exc)  # the CA failing holds the others' work (work)
            return await self._failed(entry, exc)
        # saved before it counts as held (SaveCertificate says why), then its state and
        # its renewal
        await self.carry_out(self.core.obtained(entry, certificate))
        await self.carry_out(self.core.issued(entry, certificate))
        await self.publish(
            CertificateObtained(name, self.clock.now(), certificate=certificate, renewal=renewal)
        )
        return IssuedResult(name, certificate, renewed=renewal)

    def _hiccup(self, entry: Entry, reason: str) -> _dt.datetime:
        """Hold ``entry`` back after a failure on our side; returns the end of the hold.

        The n-th hiccup in a row waits the n-th step of :attr:`error_backoff` (5 s
        doubling to 5 min by default, jittered). Only progress (an attempt that reached
        an outcome, a successful read) resets the count (:meth:`FleetCore.steady`).
        """
        return self.core.hiccup(entry, reason, self.clock.now())

    async def _failed(self, entry: Entry, error: AcmeCertsError) -> IssueResult:
        """The core records the failure; the subscribers are told, then its actions done."""
        # the ledger's deferral: one token behind the others it deferred on its bucket
        deferred_until = (
            self.gate.deferred_until(error)
            if isinstance(error, RateLimitDeferred) and error.retry_after is not None
            else None
        )
        failure = self.core.attempt_failed(
            entry,
            error,
            now=self.clock.now(),
            solvers=self.solver_set(),
            deferred_until=deferred_until,
        )
        result = await self._tell_failure(entry, error, failure)
        await self.carry_out(failure.actions)
        return result

    async def _tell_failure(
        self, entry: Entry, error: AcmeCertsError, failure: Failure
    ) -> IssueResult:
        """Publish ``failure`` (and log it); returns the attempt's outcome."""
        name = entry.spec.name
        if failure.kind == "parked":
            log.warning("%s: invalid input, parked until its spec changes: %s", name, error)
            await self.publish(CertificateFailed(name, self.clock.now(), error=error))
            return FailedResult(name, error)
        if failure.kind == "held":
            # the ledger named no instant (a pause): held on our own backoff, never "now"
            assert failure.until is not None
            until = failure.until
            await self.publish(
                CertificateDeferred(name, self.clock.now(), until=until, reason=str(error))
            )
            return DeferredResult(name, until, str(error))
        next_at, attempts = entry.state.next_attempt_at, entry.state.attempts
        if error.kind is ErrorKind.RATE_LIMITED and next_at is not None:
            event: CertificateEvent
            if isinstance(error, RateLimited):
                event = CertificateRateLimited(
                    name, self.clock.now(), until=next_at, detail=error.detail
                )
            else:
                event = CertificateDeferred(
                    name, self.clock.now(), until=next_at, reason=str(error)
                )
            await self.publish(event)
            return DeferredResult(name, next_at, str(error))
        failed = CertificateFailed(
            name, self.clock.now(), error=error, next_attempt_at=next_at, attempt=attempts
        )
        log.warning(
            "%s: attempt failed (%s), next at %s", name, error, next_at, extra={"event": failed}
        )
        await self.publish(failed)
        return FailedResult(name, error, next_at)

    # -- what the scheduler starts (see _scheduler.py) -----------------------------------

    async def _refused_replaces(self, error: AcmeProblem) -> bool:
        """Whether ``error`` is the CA refusing a ``newOrder`` because of ``replaces``."""
        try:
            new_order_url = (await self.directory()).new_order
        except AcmeCertsError:
            return False
        return replaces_refused(error, new_order_url=new_order_url)

    async def background(self, entry: Entry) -> None:
        """The scheduler's task for ``entry``'s turn: load it if it is not yet, then
        :meth:`work`; a failure outside an attempt is held on the error backoff, and a
        turn that changed nothing never starts again at once."""
        before = progress_mark(entry)
        ended = False  # not cancelled (the manager stopping is no reason to hold)
        try:
            if self.core.loading(entry):
                self.gate.enter(entry)
                try:
                    await self.stored.load(entry)
                    self.core.steady(entry)
                finally:
                    self.core.load_ended(entry)
                    self.gate.leave(entry)
                due = due_at(entry, self.schedule, self.clock.now())
                if due is None or due > self.clock.now():
                    ended = True
                    return  # a stored certificate that is current: nothing to do yet
            await self.work(entry)
            ended = True
        except AcmeCertsError as exc:
            # reading the store (or the ARI re-check) failed outside an attempt
            until = self._hiccup(entry, f"{type(exc).__name__}: {exc}")
            log.warning("%s: %s; next try at %s", entry.spec.name, exc, until)
            ended = True
            await self.publish(
                CertificateFailed(
                    entry.spec.name, self.clock.now(), error=exc, next_attempt_at=until
                )
            )
        except Exception as exc:  # a bug (ours or a plugin's) must not stop the others
            until = self._hiccup(entry, f"unexpected error: {exc!r}")
            ended = True
            log.exception("%s: unexpected error; next try at %s", entry.spec.name, until)
        finally:
            if (
                ended
                and self.core.entries.get(entry.spec.name) is entry
                and entry.flight is None
                and progress_mark(entry) == before
            ):
                due = due_at(entry, self.schedule, self.clock.now())
                if due is not None and due <= self.clock.now():
                    # nothing moved and it would start again at once: never a hot loop
                    self._hiccup(entry, "no progress")
            self.scheduler.changed(entry)

    def recheck_only(self, entry: Entry) -> bool:
        """Whether ``entry``'s work now is only its ARI re-check (no order, no load)."""
        renew_at = entry.renew_at
        return (
            entry.certificate is not None
            and not entry.stale
            and entry.ari_recheck_at is not None
            and renew_at is not None
            and not self.core.loading(entry)
            and self.clock.now() < renew_at
        )

    async def work(self, entry: Entry) -> None:
        """Do what ``entry``'s turn asks: nothing while the CA is held (outage), only
        the ARI re-check when that alone is due, else an attempt (:meth:`obtain`)."""
        if entry.flight is not None:
            return
        held_until = await self.outage.admit(entry)
        if held_until is not None:
            # the CA is failing: no request, no store operation until it answers again
            self.core.ca_held(entry, held_until, HELD_REASON)
            return
        if self.recheck_only(entry):
            # only the ARI re-check is due: ask the CA again, no order
            await self.renewals.plan(entry)
            return
        renewal = entry.certificate is not None and not entry.stale
        await self.obtain(entry, renewal=renewal)
