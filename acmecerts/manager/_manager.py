"""``CertificateManager``: many certificates, issued in parallel and kept renewed.

The manager owns an anyio task group. Inside it a scheduler looks at every managed
certificate and starts work when it is due: a first issuance, a renewal (ARI window or a
third of the lifetime left), or the next attempt after a failure (the attempt schedule).
Work runs with bounded concurrency and is single-flight per certificate name and per
exact identifier set. Every attempt runs in its own cancel scope, so ``cancel()`` /
``unmanage()`` stop in-flight work at once: the client deactivates the pending
authorizations and removes challenge responses in its shielded cleanup, and when the
call returns nothing more is sent for that certificate.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as _dt
import heapq
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import anyio
import anyio.abc
from cryptography import x509

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Clock, as_seconds
from acmecerts.client import AcmeClient, IssuanceEvent, OrderCreated, OrderRequested
from acmecerts.errors import (
    AcmeCertsError,
    AlreadyReplaced,
    ErrorKind,
    InvalidInput,
    RateLimitDeferred,
    RateLimited,
    StorageError,
)
from acmecerts.manager._events import (
    CertificateCancelled,
    CertificateDeferred,
    CertificateEvent,
    CertificateFailed,
    CertificateLoaded,
    CertificateObtained,
    CertificateObtaining,
    CertificateRateLimited,
    EventBus,
    Subscriber,
)
from acmecerts.manager._persist import CertificateStore, HeldCertificate, OrderRecord, hold
from acmecerts.manager._retention import DEFAULT_RETENTION, RetiredCertificates, retention_seconds
from acmecerts.manager._spec import (
    CancelledResult,
    CertificateSpec,
    CertificateState,
    CertificateStatus,
    DeferredResult,
    FailedResult,
    IssuedResult,
    IssueResult,
    OwnerGuard,
)
from acmecerts.protocol.ari import cert_id, choose_renewal_time
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import KeyType, PrivateKey, load_private_key, private_key_pem
from acmecerts.ratelimit import IssuanceRequest
from acmecerts.retry import AttemptSchedule, AttemptState
from acmecerts.solvers._base import Solver
from acmecerts.storage import KeyLayout, Storage

__all__ = ["CancellationHook", "CertificateManager"]

log = logging.getLogger("acmecerts.manager")

#: Called with ``(name, reason)`` whenever work for a certificate is cancelled.
CancellationHook = Callable[[str, str], Awaitable[None] | None]

_NO_LIMIT = contextlib.nullcontext()
#: The longest timed sleep of the scheduler (guards against wall-clock jumps).
_MAX_SCHEDULER_SLEEP = 3600.0
_OWNER_GONE = "owner gone"
#: At most this many stored certificates are read at once by the background scheduler.
_MAX_LOADS = 32
#: The queue time of work due at once (a new certificate): before any other instant.
_AT_ONCE = _dt.datetime.min.replace(tzinfo=_dt.UTC)
#: Held certificates handed out recently, as :class:`IssuedCertificate` objects.
_MAX_HANDED_OUT = 256
#: Recording a retirement may take this long (seconds), even while being cancelled.
_RETIRE_TIMEOUT = 30.0


@dataclasses.dataclass(eq=False)
class _Flight:
    """One in-flight attempt; others asking for the same certificate wait for it."""

    done: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    result: IssueResult | None = None
    scope: anyio.CancelScope | None = None


@dataclasses.dataclass(eq=False, slots=True)
class _Entry:
    spec: CertificateSpec
    #: The current certificate, held compactly (see :class:`HeldCertificate`).
    certificate: HeldCertificate | IssuedCertificate | None = None
    state: AttemptState = dataclasses.field(default_factory=AttemptState)
    renew_at: _dt.datetime | None = None
    #: ARI: when to ask the CA again for the renewal window.
    ari_recheck_at: _dt.datetime | None = None
    #: The certificate's identifiers changed: issue again even though one is valid.
    stale: bool = False
    cancelled: str | None = None
    flight: _Flight | None = None
    #: Bumped on every cancel, so work started before a cancel never starts an order.
    generation: int = 0
    #: Whether stored state (certificate, attempt state) was read.
    loaded: bool = False
    #: Position in the manager's declaration order (the schedule's last tie-breaker).
    seq: int = 0
    #: The token of this entry's valid item in the schedule queue (``None``: not queued).
    queued: int | None = None
    #: Failures of our own side in a row (owner check, storage, no progress): each one
    #: holds the certificate back on the manager's ``error_backoff``.
    hiccups: int = 0
    #: No work before this instant (the current hiccup's backoff), ``None``: no hold.
    hold_until: _dt.datetime | None = None
    #: Why the last hiccup happened, for people (``status()``).
    hold_reason: str | None = None
    #: The spec changed: ``state`` was reset here and is newer than the stored one.
    state_changed: bool = False


class CertificateManager:
    """Keeps many certificates issued and renewed, in parallel, and cancellable.

    Args:
        client: The ACME client (one account on one CA) used for all orders.
        solvers: Challenge solvers, in order of preference.
        concurrency: At most this many attempts run at once.
        schedule: Spacing of attempts after a failure (default: Let's Encrypt's).
        renewal_fraction: Without ARI, renew when this fraction of the lifetime remains.
        clock: Time source (default: the client's).
        rng: Source of randomness for ARI window choice and jitter.
        storage: Where certificates, attempt state and orders in flight are kept. With a
            store shared by several processes (or replicas), issuance of a certificate is
            single-flight across all of them (the store's lock) and a certificate one of
            them issued is used by the others; an order in flight when a process died is
            resumed instead of ordered again.
        layout: Key names in ``storage`` (default: per the client's directory URL).
        limiter: A ``CapacityLimiter`` shared with other managers (one per CA): an attempt
            needs a slot of both, so ``concurrency`` bounds each CA and ``limiter`` all.
        lock_lease: The lease of a certificate's lock in ``storage`` (renewed while held):
            how long a process that died keeps others from resuming its work.
        error_backoff: Spacing of retries after a failure on our side (the owner guard
            raised, the store failed, work made no progress): default exponential from
            5 s doubling to 5 min, jittered ±20 %. The CA's ``Retry-After``, the attempt
            schedule and the ledger still win when they say later.
        retention: With ``storage``: how long a certificate that is no longer managed
            (``unmanage()``, or its owner is gone) stays in the store, seconds or a
            ``timedelta``; 7 days by default, Let's Encrypt's window for 5 certificates
            per exact identifier set. Managed again within it, by the same name or
            another with exactly the same identifiers, the certificate is taken back
            without a new order; after it, certificate, key and state are deleted. ``0``
            deletes them at once, ``None`` keeps them forever (still taken back).

    Every managed certificate always has an explicit next instant (see
    :meth:`status`): its renewal, its next attempt, the end of a hold, or none at all
    when it is parked (its input is invalid: it waits until its spec changes),
    cancelled, or its schedule is exhausted. Nothing is ever retried "now" in a loop.

    Use it as an async context manager; while inside, it issues and renews in the
    background. :meth:`issue_many` also works outside (no background work then).
    """

    def __init__(
        self,
        client: AcmeClient,
        *,
        solvers: Sequence[Solver],
        concurrency: int = 16,
        schedule: AttemptSchedule | None = None,
        renewal_fraction: float = 1 / 3,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        storage: Storage | None = None,
        layout: KeyLayout | None = None,
        limiter: anyio.CapacityLimiter | None = None,
        lock_lease: float | _dt.timedelta = 120.0,
        error_backoff: AttemptSchedule | None = None,
        retention: float | _dt.timedelta | None = DEFAULT_RETENTION,
    ) -> None:
        if not solvers:
            raise InvalidInput("the manager needs at least one solver")
        if concurrency < 1:
            raise InvalidInput("concurrency must be at least 1")
        if not 0 < renewal_fraction < 1:
            raise InvalidInput("renewal_fraction must be between 0 and 1")
        #: Seconds a certificate no longer managed is kept (``None``: forever).
        self.retention = retention_seconds(retention)
        self.client = client
        self.solvers = list(solvers)
        self.schedule = schedule or AttemptSchedule()
        self.error_backoff = error_backoff or AttemptSchedule.exponential(
            base=5.0, multiplier=2.0, cap=300.0, jitter=0.2
        )
        self.renewal_fraction = renewal_fraction
        self.clock: Clock = clock or client.clock
        self._rng = rng or random.Random()
        #: Bounds this manager's attempts (``concurrency``); pass ``limiter`` to share one
        #: bound between the managers of several CAs (a global limit over per-CA ones).
        self._limiter = anyio.CapacityLimiter(concurrency)
        self._global_limiter = limiter
        self._entries: dict[str, _Entry] = {}
        #: The schedule: a heap of ``(due, token, entry)``; an item is valid while the
        #: entry is managed and its ``queued`` is the item's token (lazy deletion).
        self._queue: list[tuple[_dt.datetime, int, _Entry]] = []
        self._tokens = itertools.count()
        self._seqs = itertools.count()
        #: Entries changed since the last scheduling tick (their due time is recomputed).
        self._dirty: set[_Entry] = set()
        #: Entries whose stored state waits to be read by the scheduler, and those being read.
        self._to_load: collections.deque[_Entry] = collections.deque()
        self._loading: set[_Entry] = set()
        self._handed_out: collections.OrderedDict[HeldCertificate, IssuedCertificate] = (
            collections.OrderedDict()
        )
        self._flights_by_ids: dict[frozenset[Identifier], _Flight] = {}
        self._events = EventBus()
        #: Entries on their way to an order that have not passed the budget gate yet
        #: (loading, waiting for a slot, asking the owner); see :meth:`_budget_gate`.
        self._contending: set[_Entry] = set()
        self._contention = anyio.Event()
        self._cancellation_hooks: list[CancellationHook] = []
        self._task_group: anyio.abc.TaskGroup | None = None
        self._wake = anyio.Event()
        self._store: CertificateStore | None = None
        self._lock_lease = as_seconds(lock_lease)
        if not 0 < self._lock_lease < float("inf"):
            raise InvalidInput(
                f"lock_lease must be a positive number of seconds, not {lock_lease!r}"
            )
        if storage is not None:
            self._store = CertificateStore(
                storage, layout or KeyLayout(client.transport.directory_url)
            )
        #: Certificates no longer managed, kept for ``retention`` (see ``_retention.py``).
        self._retired: RetiredCertificates | None = None
        if self._store is not None:
            self._retired = RetiredCertificates(
                self._store,
                retention=self.retention,
                clock=self.clock,
                managed=self._is_managed,
                wanted=self._waits_for,
            )

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> CertificateManager:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._scheduler, self._task_group)
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        task_group = self._task_group
        assert task_group is not None
        task_group.cancel_scope.cancel()
        try:
            return await task_group.__aexit__(*exc_info)
        finally:
            self._task_group = None

    # -- subscriptions --------------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Receive every :class:`CertificateEvent`; returns an unsubscribe function."""
        return self._events.subscribe(subscriber)

    def on_cancel(self, hook: CancellationHook) -> None:
        """Call ``hook(name, reason)`` for each cancellation."""
        self._cancellation_hooks.append(hook)

    # -- declaring certificates -----------------------------------------------------------

    def manage(
        self,
        name: str | CertificateSpec,
        identifiers: Iterable[str | Identifier] | None = None,
        *,
        key_type: KeyType | str = KeyType.EC256,
        priority: int = 0,
        owner: OwnerGuard | None = None,
        profile: str | None = None,
        preferred_chain: str | None = None,
    ) -> CertificateSpec:
        """Declare a certificate to keep issued (idempotent).

        Changing the identifiers of a managed certificate issues it again. A certificate
        that was cancelled is managed again from scratch.
        """
        if isinstance(name, CertificateSpec):
            spec = name
        else:
            spec = CertificateSpec.of(
                name,
                identifiers,
                key_type=KeyType.parse(key_type),
                priority=priority,
                owner=owner,
                profile=profile,
                preferred_chain=preferred_chain,
            )
        entry = self._entries.get(spec.name)
        if entry is None or entry.cancelled is not None:
            # a replaced entry keeps its place in the declaration order, as in the dict
            seq = entry.seq if entry is not None else next(self._seqs)
            entry = self._entries[spec.name] = _Entry(spec, seq=seq)
        elif entry.spec != spec or entry.spec.owner is not spec.owner:
            if entry.spec.identifier_set != spec.identifier_set:
                entry.stale = True
            if entry.spec.fingerprint != spec.fingerprint:
                # another request: its own schedule (a wait the CA imposed still holds)
                entry.state = _after_spec_change(entry.state)
                entry.state_changed = True
                entry.hiccups, entry.hold_until, entry.hold_reason = 0, None, None
            entry.spec = spec
        self._changed(entry)
        return spec

    async def unmanage(self, name: str) -> None:
        """Stop managing ``name``: cancel in-flight work and forget its timers.

        With a store, its certificate, key and state are kept for ``retention`` and then
        deleted; managed again before that, it is taken back without a new order.
        """
        entry = self._entries.get(name)
        await self.cancel(name, reason="unmanaged")
        self._entries.pop(name, None)
        await self._retire(name, entry)

    async def cancel(self, name: str, *, reason: str = "cancelled") -> None:
        """Cancel in-flight and future work for ``name``.

        The attempt's cancel scope is cancelled; the client deactivates its pending
        authorizations and cleans up challenge responses; once this returns, no further
        request is sent for the certificate (until it is managed again).
        """
        entry = self._entries.get(name)
        if entry is None:
            return
        already = entry.cancelled is not None
        entry.cancelled = reason
        entry.generation += 1
        self._changed(entry, wake=False)
        flight = entry.flight
        if flight is not None:
            if flight.scope is not None:
                flight.scope.cancel()
            await flight.done.wait()
        if not already:
            await self._cancelled(name, reason)

    async def _cancelled(self, name: str, reason: str) -> None:
        await self._publish(CertificateCancelled(name, self.clock.now(), reason=reason))
        for hook in list(self._cancellation_hooks):
            try:
                result = hook(name, reason)
                if result is not None:
                    await result
            except Exception:
                log.exception("cancellation hook failed for %s", name)

    def get(self, name: str) -> IssuedCertificate | None:
        """The current certificate for ``name`` (``None`` until one is issued)."""
        entry = self._entries.get(name)
        if entry is None or entry.certificate is None:
            return None
        return self._issued(entry.certificate)

    def _issued(self, certificate: HeldCertificate | IssuedCertificate) -> IssuedCertificate:
        """``certificate`` as an :class:`IssuedCertificate` (the same object for a while)."""
        if isinstance(certificate, IssuedCertificate):
            return certificate
        issued = self._handed_out.get(certificate)
        if issued is None:
            issued = self._handed_out[certificate] = certificate.issued()
            if len(self._handed_out) > _MAX_HANDED_OUT:
                self._handed_out.popitem(last=False)
        else:
            self._handed_out.move_to_end(certificate)
        return issued

    def _hold(self, certificate: IssuedCertificate) -> HeldCertificate | IssuedCertificate:
        """The form ``certificate`` is kept in; :meth:`get` hands out ``certificate`` itself."""
        held = hold(certificate)
        if isinstance(held, HeldCertificate):
            self._handed_out[held] = certificate
            if len(self._handed_out) > _MAX_HANDED_OUT:
                self._handed_out.popitem(last=False)
        return held

    def managed(self) -> list[CertificateSpec]:
        """Every managed certificate's spec."""
        return [e.spec for e in self._entries.values() if e.cancelled is None]

    def renewal_at(self, name: str) -> _dt.datetime | None:
        """When ``name`` is planned to be renewed (ARI window choice or lifetime fraction)."""
        entry = self._entries.get(name)
        return entry.renew_at if entry is not None else None

    def status(self, name: str) -> CertificateStatus | None:
        """Where ``name`` stands: its state, next instant and last error (``None``: unknown).

        ``next_at`` is ``None`` only for a certificate that is parked (invalid input: it
        waits for its spec to change), exhausted or cancelled; every other one has an
        explicit instant, never "unknown".
        """
        entry = self._entries.get(name)
        if entry is None:
            return None
        state = entry.state
        reason = state.last_error
        now = self.clock.now()
        certificate = entry.certificate
        kind: CertificateState
        if entry.cancelled is not None:
            kind, reason = CertificateState.CANCELLED, entry.cancelled
        elif self._parked(entry):
            kind = CertificateState.PARKED
        elif self.schedule.exhausted(state):
            kind = CertificateState.EXHAUSTED
        elif entry.flight is not None:
            kind = CertificateState.IN_FLIGHT
        elif entry.hold_until is not None:
            kind, reason = CertificateState.HELD, entry.hold_reason
        elif state.next_attempt_at is not None:
            kind = CertificateState.RETRYING
        elif self._current(entry):
            kind = CertificateState.CURRENT
        else:
            kind = CertificateState.PENDING
        return CertificateStatus(
            name=name,
            state=kind,
            next_at=self._due_at(entry, now),
            attempts=state.attempts,
            reason=reason,
            serial=certificate.serial if certificate is not None else None,
            not_after=certificate.not_after if certificate is not None else None,
            renew_at=entry.renew_at,
        )

    def next_renewal(self, name: str) -> _dt.datetime | None:
        """When ``name`` next needs work: issuance, a retry, an ARI re-check or renewal."""
        entry = self._entries.get(name)
        return self._due_at(entry) if entry is not None else None

    # -- issuing ------------------------------------------------------------------------

    async def issue_many(
        self, specs: Iterable[CertificateSpec | str], *, force: bool = False
    ) -> list[IssueResult]:
        """Issue a batch in parallel; one result per spec, in order.

        A certificate that is already issued (and not stale) is returned as it is unless
        ``force``. One failure or one slow validation does not hold up the others.
        """
        entries = [self._entry_for(s) for s in specs]
        # under a short budget the first to ask get it: higher priority first, then the
        # renewals closest to expiry, then new certificates in the order given
        order = sorted(range(len(entries)), key=lambda i: self._urgency(entries[i], i))
        results: list[IssueResult | None] = [None] * len(entries)

        async def one(i: int, entry: _Entry) -> None:
            if entry.certificate is not None and not entry.stale and not force:
                results[i] = IssuedResult(entry.spec.name, self._issued(entry.certificate))
                return
            results[i] = await self._obtain(entry, force=force)

        async with anyio.create_task_group() as tg:
            for i in order:
                tg.start_soon(one, i, entries[i])
        return [r for r in results if r is not None]

    @staticmethod
    def _urgency(entry: _Entry, position: int) -> tuple[int, float, int]:
        expires = entry.certificate.not_after.timestamp() if entry.certificate else float("inf")
        return (-entry.spec.priority, expires, position)

    def _entry_for(self, spec: CertificateSpec | str) -> _Entry:
        if isinstance(spec, str):
            entry = self._entries.get(spec)
            if entry is not None and entry.cancelled is None:
                return entry
        return self._entries[self.manage(spec).name]

    async def _obtain(
        self, entry: _Entry, *, renewal: bool = False, force: bool = False
    ) -> IssueResult:
        """Run (or join) the single flight for ``entry``."""
        if entry.cancelled is not None:
            return CancelledResult(entry.spec.name, entry.cancelled)
        existing = entry.flight or self._flights_by_ids.get(entry.spec.identifier_set)
        if existing is not None:
            await existing.done.wait()
            assert existing.result is not None
            return _for_name(existing.result, entry.spec.name)
        flight = _Flight()
        ids = entry.spec.identifier_set
        entry.flight = flight
        self._flights_by_ids[ids] = flight
        self._contending.add(entry)
        result: IssueResult = CancelledResult(entry.spec.name, "interrupted")
        try:
            result = await self._attempt(entry, flight, renewal=renewal, force=force)
        finally:
            self._stop_contending(entry)
            flight.result = result
            entry.flight = None
            if self._flights_by_ids.get(ids) is flight:
                del self._flights_by_ids[ids]
            flight.done.set()
            self._changed(entry)  # the scheduler plans what comes next (renewal, retry)
        return result

    def _stop_contending(self, entry: _Entry) -> None:
        if entry in self._contending:
            self._contending.discard(entry)
            self._contention.set()

    def _needs_order(self, entry: _Entry) -> bool:
        """Whether ``entry`` (its stored state read) is on its way to an order now."""
        if entry.cancelled is not None or self._parked(entry):
            return False
        if self._store is not None and not entry.loaded:
            return False
        return not self._current(entry)

    async def _budget_gate(self, entry: _Entry) -> _dt.datetime | None:
        """Priority reserves quota: ``None`` to go on now, else when ``entry``'s turn comes.

        Without a ledger, or with no certificate of higher priority on its way to an
        order (loading, waiting for a slot, in an attempt), it answers at once. Else it
        waits until their stored state is read (they may be current and need nothing),
        and plans them and ``entry`` with the ledger (:meth:`RateLimitLedger.plan`,
        highest priority first, as if none of them had spent yet): if ``entry`` fits
        even then, it goes on; if it would fit only later, it waits for one of them to
        finish and looks again; once none is left, the ledger's own reservation decides.
        A deferral says the instant ``entry`` fits behind them.
        """
        ledger = self.client.ledger
        if ledger is None or not self._needs_order(entry):
            return None
        priority = entry.spec.priority
        while True:
            higher = [e for e in self._contending if e.spec.priority > priority]
            if not higher:
                return None
            if all(self._store is None or e.loaded for e in higher):
                ahead = [e for e in higher if self._needs_order(e)]
                if not ahead:
                    return None
                account = self.client.account_url or await self.client._kid()
                requests = [self._issuance_request(e) for e in (*ahead, entry)]
                planned = await ledger.plan(requests, account=account)
                mine = next(p for p in planned if p.request is requests[-1])
                if mine.at is None or mine.at <= self.clock.now():
                    return None  # it fits even if every one of them spends first
            if self._contention.is_set():  # every waiter shares one event until it fires
                self._contention = anyio.Event()
            await self._contention.wait()

    def _issuance_request(self, entry: _Entry) -> IssuanceRequest:
        """``entry``'s next order as the ledger's planner sees it."""
        current = entry.certificate
        return IssuanceRequest(
            entry.spec.identifiers,
            expires_at=current.not_after if current is not None else None,
            renewal_of=current.identifiers if current is not None else None,
            replaces=current is not None and self._replaces(entry) is not None,
            priority=entry.spec.priority,
            name=entry.spec.name,
        )

    async def _owner_present(self, spec: CertificateSpec) -> bool | None:
        if spec.owner is None:
            return True
        try:
            return bool(await spec.owner())
        except Exception as exc:
            log.warning("%s: the owner guard failed (%r); not starting an order", spec.name, exc)
            return None

    async def _attempt(
        self, entry: _Entry, flight: _Flight, *, renewal: bool, force: bool = False
    ) -> IssueResult:
        try:
            return await self._attempt_once(entry, flight, renewal=renewal, force=force)
        except StorageError as exc:
            # the store failed (read, lock, write): ours to retry, on the error backoff
            name = entry.spec.name
            until = self._hiccup(entry, f"{type(exc).__name__}: {exc}")
            log.warning("%s: storage failed (%s); next try at %s", name, exc, until)
            await self._publish(
                CertificateFailed(name, self.clock.now(), error=exc, next_attempt_at=until)
            )
            return FailedResult(name, exc, until)

    async def _attempt_once(
        self, entry: _Entry, flight: _Flight, *, renewal: bool, force: bool = False
    ) -> IssueResult:
        spec = entry.spec
        name = spec.name
        generation = entry.generation
        await self._load(entry)
        if self._parked(entry) and not force:
            assert entry.state.last_error is not None
            return FailedResult(name, InvalidInput(entry.state.last_error))
        now = self.clock.now()
        if not self.schedule.ready(entry.state, now) and entry.state.next_attempt_at is not None:
            return DeferredResult(name, entry.state.next_attempt_at, "backoff after a failure")
        # before taking a slot: an entry waiting here must not keep others from theirs
        fits_at = None if force else await self._budget_gate(entry)
        if fits_at is not None:
            deferred = RateLimitDeferred(
                "certificates of higher priority take the rate-limit budget until then",
                retry_after=fits_at,
                limit=None,
            )
            result = await self._failed(entry, deferred)
            await self._save_state(entry)
            return result
        with anyio.CancelScope() as scope:
            flight.scope = scope
            if entry.cancelled is not None:
                scope.cancel()
            async with self._limiter, self._global_limiter or _NO_LIMIT:
                if self._store is None:
                    result = await self._owned_issue(entry, generation, renewal, force)
                else:
                    # the owner is asked under the lock: a deletion seen while another
                    # replica held it still stops this order
                    async with self._store.lock(name, lease=self._lock_lease):
                        result = await self._owned_issue(entry, generation, renewal, force)
                if isinstance(result, CancelledResult) and result.reason == _OWNER_GONE:
                    await self._retire(name, entry)  # (outside the lock: a purge takes it)
                return result
        return CancelledResult(name, entry.cancelled or "cancelled")

    async def _owned_issue(
        self, entry: _Entry, generation: int, renewal: bool, force: bool
    ) -> IssueResult:
        """Ask the owner, then issue (under the store's lock when there is a store)."""
        refused = await self._ask_owner(entry)
        if refused is not None:
            return refused
        if entry.cancelled is not None or entry.generation != generation:
            return CancelledResult(entry.spec.name, entry.cancelled or "cancelled")
        return await self._issue(entry, renewal=renewal, force=force)

    async def _ask_owner(self, entry: _Entry) -> IssueResult | None:
        """Ask the owner guard before an order: ``None`` to go on, else the outcome.

        Gone: the certificate is cancelled (nothing more is sent). Unknown (the guard
        raised): held on the error backoff, then asked again; never taken for "gone".
        """
        name = entry.spec.name
        owner = await self._owner_present(entry.spec)
        if owner is True:
            return None
        if owner is False:
            entry.cancelled = _OWNER_GONE
            entry.generation += 1
            await self._cancelled(name, _OWNER_GONE)
            return CancelledResult(name, _OWNER_GONE)
        until = self._hiccup(entry, "the owner guard failed")
        reason = "the owner guard failed"
        await self._publish(CertificateDeferred(name, self.clock.now(), until=until, reason=reason))
        return DeferredResult(name, until, reason)

    async def _issue(self, entry: _Entry, *, renewal: bool, force: bool = False) -> IssueResult:
        spec = entry.spec
        name = spec.name
        if self._store is not None:
            # under the store's lock: another process may have issued it meanwhile, or
            # failed with it (its attempt state says when to try again, or that the
            # input is invalid)
            await self._load(entry, again=True)
            await self._adopt(entry)
            await self._forget_finished_order(entry)
            if not force and self._current(entry):
                assert entry.certificate is not None
                return IssuedResult(name, self._issued(entry.certificate))
            if not force and self._parked(entry):
                assert entry.state.last_error is not None
                return FailedResult(name, InvalidInput(entry.state.last_error))
            retry_at = entry.state.next_attempt_at
            if not force and retry_at is not None and retry_at > self.clock.now():
                return DeferredResult(name, retry_at, "another process's attempt failed")
            renewal = renewal or (entry.certificate is not None and not entry.stale)
        await self._publish(
            CertificateObtaining(
                name, self.clock.now(), renewal=renewal, attempt=entry.state.attempts + 1
            )
        )
        replaces = self._replaces(entry) if renewal else None
        renewal_of = (
            entry.certificate.identifiers if renewal and entry.certificate is not None else None
        )
        try:
            try:
                certificate = await self._client_issue(entry, replaces, renewal_of)
            except AlreadyReplaced:
                log.info("%s: the CA refused replaces=%s; ordering without it", name, replaces)
                if self._store is not None:
                    # the refused newOrder created no order: its intent must not send the
                    # next one looking for an unrecorded order
                    await self._store.delete_order(name)
                # a new order: the owner may have gone meanwhile, so ask before it again
                refused = await self._ask_owner(entry)
                if refused is not None:
                    return refused
                certificate = await self._client_issue(entry, None, renewal_of)
        except StorageError:
            raise  # our store, not the CA: the error backoff (see _attempt), not the schedule
        except AcmeCertsError as exc:
            self._steady(entry)
            result = await self._failed(entry, exc)
            await self._save_state(entry)
            return result
        self._steady(entry)
        if self._store is not None:
            # saved before it counts as held: if the store fails here, the attempt is
            # retried on the error backoff and resumes the order (recorded) instead of
            # keeping an unsaved certificate that nobody would ever publish
            await self._store.save_certificate(name, certificate)
            await self._store.delete_order(name)
        entry.certificate = self._hold(certificate)
        entry.stale = False
        entry.state = self.schedule.after_success(entry.state)
        if self._store is not None:
            await self._save_state(entry)
        await self._plan_renewal(entry)
        await self._publish(
            CertificateObtained(name, self.clock.now(), certificate=certificate, renewal=renewal)
        )
        return IssuedResult(name, certificate, renewed=renewal)

    async def _client_issue(
        self,
        entry: _Entry,
        replaces: str | None,
        renewal_of: Sequence[Identifier] | None = None,
    ) -> IssuedCertificate:
        spec = entry.spec
        store = self._store
        resume_url: str | None = None
        recover = False
        private_key: PrivateKey | None = None
        journal: Callable[[IssuanceEvent], Awaitable[None]] | None = None
        if store is not None:
            record = await store.load_order(spec.name)
            if record is not None and set(record.identifiers) == spec.identifier_set:
                resume_url = record.order_url
                # no URL: the last process died after sending newOrder, before recording
                # the answer; the CA may hold that order
                recover = record.order_url is None
                private_key = load_private_key(record.private_key_pem)

            async def journal(event: IssuanceEvent) -> None:
                """The order journal: awaited, so durable before the client goes on."""
                if isinstance(event, OrderRequested):  # an intent, before newOrder
                    order_url = None
                elif isinstance(event, OrderCreated):  # the order, before anything else
                    order_url = event.order.url
                else:
                    return
                assert event.private_key is not None
                await store.save_order(
                    spec.name,
                    OrderRecord(
                        order_url=order_url,
                        identifiers=spec.identifiers,
                        private_key_pem=private_key_pem(event.private_key).decode("ascii"),
                        created_at=self.clock.now(),
                    ),
                )

        try:
            return await self.client.issue(
                [i.value for i in spec.identifiers],
                solvers=self.solvers,
                key_type=spec.key_type,
                private_key=private_key,
                profile=spec.profile,
                replaces=replaces,
                preferred_chain=spec.preferred_chain,
                resume_order_url=resume_url,
                recover_order=recover,
                renewal_of=renewal_of,
                events=journal,
            )
        except AcmeCertsError as exc:
            if store is not None and not exc.reached_ca and not recover:
                # nothing reached the CA: an intent this attempt left names no order
                try:
                    record = await store.load_order(spec.name)
                    if record is not None and record.order_url is None:
                        await store.delete_order(spec.name)
                except AcmeCertsError as cleanup_error:
                    log.warning("%s: cannot drop the order intent: %s", spec.name, cleanup_error)
            raise

    async def _load(self, entry: _Entry, *, again: bool = False) -> None:
        """Read the stored certificate and attempt state of ``entry`` (once, or ``again``)."""
        store = self._store
        if store is None or (entry.loaded and not again):
            return
        name = entry.spec.name
        if not entry.loaded and self._retired is not None:
            await self._retired.reclaim(name, entry.spec.identifier_set)  # managed again
        stored = await store.load_certificate(name)
        loaded: IssuedCertificate | None = None
        if stored is not None and (
            entry.certificate is None or stored.serial != entry.certificate.serial
        ):
            if frozenset(stored.identifiers) == entry.spec.identifier_set:
                entry.certificate = self._hold(stored)
                entry.stale = False
                await self._plan_renewal(entry)
                loaded = stored
            elif entry.certificate is None:
                entry.certificate = self._hold(stored)
                entry.stale = True  # managed with other identifiers now: issue again
        if not entry.state_changed:
            # the stored state is the truth: a replica may have failed (or succeeded)
            entry.state = await store.load_attempt_state(name) or AttemptState()
        entry.loaded = True
        if loaded is not None and self.clock.now() < loaded.not_after:
            await self._publish(
                CertificateLoaded(
                    name, self.clock.now(), certificate=loaded, renew_at=entry.renew_at
                )
            )

    async def _forget_finished_order(self, entry: _Entry) -> None:
        """Delete the order record of a certificate that is already saved.

        A process that died after saving the certificate but before deleting the record
        leaves it behind; resumed by the next renewal, that order (``valid``) would hand
        back the saved certificate instead of a new one.
        """
        store = self._store
        if store is None or entry.certificate is None:
            return
        record = await store.load_order(entry.spec.name)
        if record is not None and record.order_url == entry.certificate.order_url:
            log.info("%s: forgetting the finished order %s", entry.spec.name, record.order_url)
            await store.delete_order(entry.spec.name)

    async def _save_state(self, entry: _Entry) -> None:
        if self._store is not None:
            await self._store.save_attempt_state(entry.spec.name, entry.state)
        entry.state_changed = False

    def _hiccup(self, entry: _Entry, reason: str) -> _dt.datetime:
        """Hold ``entry`` back after a failure on our side; returns the end of the hold.

        The n-th hiccup in a row waits the n-th step of :attr:`error_backoff` (5 s
        doubling to 5 min by default, jittered). Only progress (an attempt that reached
        an outcome, a successful read) resets the count (:meth:`_steady`).
        """
        entry.hiccups += 1
        delay = self.error_backoff.delay(entry.hiccups, rng=self._rng)
        until = self.clock.now() + _dt.timedelta(seconds=delay)
        entry.hold_until = until
        entry.hold_reason = reason
        return until

    @staticmethod
    def _steady(entry: _Entry) -> None:
        """Progress was made for ``entry``: forget its hiccups."""
        entry.hiccups, entry.hold_until, entry.hold_reason = 0, None, None

    def _current(self, entry: _Entry) -> bool:
        """Whether ``entry`` has a certificate that is not stale and not yet due."""
        if entry.certificate is None or entry.stale:
            return False
        renew_at = entry.renew_at or entry.certificate.not_after
        return self.clock.now() < renew_at

    async def _failed(self, entry: _Entry, error: AcmeCertsError) -> IssueResult:
        name = entry.spec.name
        if isinstance(error, InvalidInput):
            # bad input will not get better by waiting: parked until the spec changes
            entry.state = dataclasses.replace(
                entry.state,
                next_attempt_at=None,
                last_error=f"{type(error).__name__}: {error}",
                last_error_kind=error.kind.value,
                parked=entry.spec.fingerprint,
            )
            log.warning("%s: invalid input, parked until its spec changes: %s", name, error)
            await self._publish(CertificateFailed(name, self.clock.now(), error=error))
            return FailedResult(name, error)
        if isinstance(error, RateLimitDeferred) and error.retry_after is None:
            # the ledger named no instant (a pause): hold on our own backoff, never "now"
            until = self._hiccup(entry, f"{type(error).__name__}: {error}")
            await self._publish(
                CertificateDeferred(name, self.clock.now(), until=until, reason=str(error))
            )
            return DeferredResult(name, until, str(error))
        if isinstance(error, RateLimitDeferred):
            # predicted by the ledger, nothing was sent: not a failure, no escalation
            entry.state = dataclasses.replace(
                entry.state,
                next_attempt_at=error.retry_after,
                last_error=f"{type(error).__name__}: {error}",
                last_error_kind=error.kind.value,
            )
        else:
            entry.state = self.schedule.after_failure(
                entry.state, error, now=self.clock.now(), rng=self._rng
            )
        next_at = entry.state.next_attempt_at
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
            await self._publish(event)
            return DeferredResult(name, next_at, str(error))
        log.warning("%s: attempt failed (%s), next at %s", name, error, next_at)
        await self._publish(
            CertificateFailed(name, self.clock.now(), error=error, next_attempt_at=next_at)
        )
        return FailedResult(name, error, next_at)

    # -- renewal ------------------------------------------------------------------------

    def _replaces(self, entry: _Entry) -> str | None:
        """The ARI certID of the current certificate, when the CA supports ARI."""
        if entry.certificate is None or entry.ari_recheck_at is None:
            return None
        try:
            return cert_id(_leaf(entry.certificate))
        except AcmeCertsError:
            return None

    async def _plan_renewal(self, entry: _Entry) -> None:
        """Set ``renew_at``: from ARI when the CA has it, else at the lifetime fraction.

        RFC 9773 §4.2: a uniformly random instant in the suggested window, re-checked at
        the CA's ``Retry-After`` (six hours by default). Without ``renewalInfo`` the
        certificate is renewed when ``renewal_fraction`` of its lifetime remains.
        """
        certificate = entry.certificate
        assert certificate is not None
        lifetime = certificate.not_after - certificate.not_before
        entry.renew_at = certificate.not_after - lifetime * self.renewal_fraction
        entry.ari_recheck_at = None
        try:
            directory = await self.client.directory()
            if directory.renewal_info is None:
                return
            result = await self.client.renewal_info(_leaf(certificate))
        except AcmeCertsError as exc:
            log.info("%s: no ARI window (%s); renewing at %s", entry.spec.name, exc, entry.renew_at)
            return
        now = self.clock.now()
        entry.renew_at = choose_renewal_time(result.info, now=now, rng=self._rng)
        entry.ari_recheck_at = result.retry_after

    def _parked(self, entry: _Entry) -> bool:
        """Whether ``entry``'s input was found invalid and has not changed since."""
        return entry.state.parked is not None and entry.state.parked == entry.spec.fingerprint

    def _due_at(self, entry: _Entry, now: _dt.datetime | None = None) -> _dt.datetime | None:
        """When ``entry`` next needs work (``now`` for a new certificate), or ``None``.

        ``None`` means no work at all: cancelled, parked (invalid input, until the spec
        changes) or the attempt schedule is exhausted. Otherwise the latest of what
        holds it back wins: the renewal time or ARI re-check, the attempt schedule (and
        the CA's ``Retry-After`` or the ledger, recorded in it), and a hiccup's hold.
        """
        now = now or self.clock.now()
        if entry.cancelled is not None or self._parked(entry):
            return None
        if self.schedule.exhausted(entry.state):
            return None
        retry_at = entry.state.next_attempt_at
        if entry.certificate is None or entry.stale:
            due = retry_at or now
        else:
            due = entry.renew_at or entry.certificate.not_after
            if entry.ari_recheck_at is not None:
                due = min(due, entry.ari_recheck_at)
            if retry_at is not None:
                due = max(due, retry_at)
        if entry.hold_until is not None:
            due = max(due, entry.hold_until)
        return due

    # -- background scheduling ----------------------------------------------------------

    async def _scheduler(self, task_group: anyio.abc.TaskGroup) -> None:
        while True:
            self._wake = anyio.Event()
            now = self.clock.now()
            due_now, next_due = self._plan_tick(now)
            for entry in due_now:
                task_group.start_soon(self._background, entry)
            if self._retired is not None:
                purge_at = self._retired.tick(task_group, now, self._wake_up)
                if purge_at is not None and (next_due is None or purge_at < next_due):
                    next_due = purge_at
            if next_due is None:
                # nothing is scheduled: sleep until something changes (manage, a flight
                # ends); a timed sleep here would move a fake clock under running work
                await self._wake.wait()
                continue
            delay = min(_MAX_SCHEDULER_SLEEP, (next_due - now).total_seconds())
            await self._sleep_or_wake(delay)

    def _changed(self, entry: _Entry, *, wake: bool = True) -> None:
        """``entry`` may need work at another time: the scheduler recomputes it."""
        self._dirty.add(entry)
        if wake:
            self._wake.set()

    def _queue_time(self, entry: _Entry, now: _dt.datetime) -> _dt.datetime | None:
        """When ``entry`` is due in the queue (:data:`_AT_ONCE` for "now"), or ``None``."""
        due = self._due_at(entry, now)
        if due is None:
            return None
        if (
            (entry.certificate is None or entry.stale)
            and entry.state.next_attempt_at is None
            and entry.hold_until is None
        ):
            return _AT_ONCE  # never tried: due whenever asked, before timed work
        return due

    def _enqueue(self, entry: _Entry, now: _dt.datetime) -> None:
        when = self._queue_time(entry, now) if self._entries.get(entry.spec.name) is entry else None
        if when is None:
            entry.queued = None
            return
        token = next(self._tokens)
        entry.queued = token
        heapq.heappush(self._queue, (when, token, entry))

    def _valid(self, item: tuple[_dt.datetime, int, _Entry]) -> bool:
        _, token, entry = item
        return entry.queued == token and self._entries.get(entry.spec.name) is entry

    def _plan_tick(self, now: _dt.datetime) -> tuple[list[_Entry], _dt.datetime | None]:
        """One scheduling decision: the entries to start now (in order), the next due time.

        Only the entries changed since the last tick are looked at again; the others wait
        in a heap by due time. Entries in flight are dropped from the queue (they are
        planned again when their flight ends). Due entries start highest priority first,
        then earliest due (new certificates last), then in declaration order.
        """
        self._plan_changes(now)
        queue = self._queue
        due: list[tuple[tuple[int, bool, _dt.datetime, int], _Entry]] = []
        while queue and queue[0][0] <= now:
            item = heapq.heappop(queue)
            entry = item[2]
            if not self._valid(item):
                continue
            entry.queued = None
            if entry.flight is None:
                key = (-entry.spec.priority, item[0] is _AT_ONCE, item[0], entry.seq)
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

    def _with_loads(self, due: list[_Entry]) -> list[_Entry]:
        """``due``, with at most :data:`_MAX_LOADS` entries at a time whose state is unread.

        Reading a stored certificate is the first step of its work; the rest wait their
        turn in :attr:`_to_load` (a read ending wakes the scheduler), so a restart with
        many certificates does not start one task per certificate at once.
        """
        if self._store is None:
            return due
        ready = [entry for entry in due if entry.loaded]
        self._to_load.extend(entry for entry in due if not entry.loaded)
        while self._to_load and len(self._loading) < _MAX_LOADS:
            entry = self._to_load.popleft()
            if self._entries.get(entry.spec.name) is entry and entry.flight is None:
                self._loading.add(entry)
                ready.append(entry)
        return ready

    async def _background(self, entry: _Entry) -> None:
        before = _progress_mark(entry)
        ended = False  # not cancelled (the manager stopping is no reason to hold)
        try:
            if entry in self._loading:
                self._contending.add(entry)
                try:
                    await self._load(entry)
                    self._steady(entry)
                finally:
                    self._loading.discard(entry)
                    self._stop_contending(entry)
                due = self._due_at(entry)
                if due is None or due > self.clock.now():
                    ended = True
                    return  # a stored certificate that is current: nothing to do yet
            await self._work(entry)
            ended = True
        except AcmeCertsError as exc:
            # reading the store (or the ARI re-check) failed outside an attempt
            until = self._hiccup(entry, f"{type(exc).__name__}: {exc}")
            log.warning("%s: %s; next try at %s", entry.spec.name, exc, until)
            ended = True
            await self._publish(
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
                and self._entries.get(entry.spec.name) is entry
                and entry.flight is None
                and _progress_mark(entry) == before
            ):
                due = self._due_at(entry)
                if due is not None and due <= self.clock.now():
                    # nothing moved and it would start again at once: never a hot loop
                    self._hiccup(entry, "no progress")
            self._changed(entry)

    async def _work(self, entry: _Entry) -> None:
        if entry.flight is not None:
            return
        if (
            entry.certificate is not None
            and not entry.stale
            and entry.ari_recheck_at is not None
            and entry.renew_at is not None
            and self.clock.now() < entry.renew_at
        ):
            # only the ARI re-check is due: ask the CA again, no order
            await self._plan_renewal(entry)
            return
        renewal = entry.certificate is not None and not entry.stale
        await self._obtain(entry, renewal=renewal)

    async def _sleep_or_wake(self, seconds: float) -> None:
        wake = self._wake
        if wake.is_set():
            await anyio.lowlevel.checkpoint()
            return
        async with anyio.create_task_group() as tg:

            async def sleeper() -> None:
                await self.clock.sleep(max(0.0, seconds))
                wake.set()

            tg.start_soon(sleeper)
            await wake.wait()
            tg.cancel_scope.cancel()

    async def _publish(self, event: CertificateEvent) -> None:
        await self._events.publish(event)

    # -- retention (see _retention.py) ----------------------------------------------------

    def _wake_up(self) -> None:
        self._wake.set()

    def _is_managed(self, name: str) -> bool:
        """Whether ``name`` is managed (its stored files are in use)."""
        entry = self._entries.get(name)
        return entry is not None and entry.cancelled is None

    def _waits_for(self, identifiers: frozenset[Identifier]) -> bool:
        """Whether a managed certificate with exactly ``identifiers`` has none yet."""
        return any(
            e.cancelled is None
            and (e.certificate is None or e.stale)
            and e.spec.identifier_set == identifiers
            for e in self._entries.values()
        )

    async def _retire(self, name: str, entry: _Entry | None) -> None:
        """``name`` is no longer managed: keep its stored certificate for the retention."""
        if self._retired is None:
            return
        identifiers = entry.spec.identifiers if entry is not None else None
        # recorded even when the caller is being cancelled: else the files stay forever
        with anyio.CancelScope(shield=True), anyio.move_on_after(_RETIRE_TIMEOUT):
            try:
                await self._retired.retire(name, identifiers)
            except AcmeCertsError as exc:
                log.warning("%s: cannot record its retirement (its files stay): %s", name, exc)

    async def _adopt(self, entry: _Entry) -> None:
        """Take over a retired certificate with exactly ``entry``'s identifiers, if any.

        Called under ``entry``'s store lock before ordering: a certificate deleted and
        applied again (under this name or another) gets the stored one back.
        """
        if self._retired is None or (entry.certificate is not None and not entry.stale):
            return
        spec = entry.spec
        try:
            certificate = await self._retired.adopt(spec.name, spec.identifier_set, spec.key_type)
        except AcmeCertsError as exc:
            log.warning("%s: cannot take over a retired certificate: %s", spec.name, exc)
            return
        if certificate is None:
            return
        entry.certificate = self._hold(certificate)
        entry.stale = False
        await self._plan_renewal(entry)
        await self._publish(
            CertificateLoaded(
                spec.name, self.clock.now(), certificate=certificate, renew_at=entry.renew_at
            )
        )


def _progress_mark(entry: _Entry) -> tuple[object, ...]:
    """What changes when work for ``entry`` made progress (compared before and after)."""
    return (
        entry.certificate,
        entry.state,
        entry.stale,
        entry.renew_at,
        entry.ari_recheck_at,
        entry.hold_until,
        entry.cancelled,
    )


def _after_spec_change(state: AttemptState) -> AttemptState:
    """The attempt state for a changed spec: fresh, but a wait the CA imposed holds."""
    imposed = state.last_error_kind in (ErrorKind.RATE_LIMITED.value, ErrorKind.SERVER_BUSY.value)
    if imposed and state.next_attempt_at is not None:
        return AttemptState(
            next_attempt_at=state.next_attempt_at,
            last_error=state.last_error,
            last_error_kind=state.last_error_kind,
        )
    return AttemptState()


def _leaf(certificate: HeldCertificate | IssuedCertificate) -> x509.Certificate:
    """The leaf certificate of a held or issued certificate."""
    if isinstance(certificate, IssuedCertificate):
        return certificate.chain.leaf
    return certificate.leaf()


def _for_name(result: IssueResult, name: str) -> IssueResult:
    """A joined flight's result, reported under the joining certificate's name."""
    if result.name == name:
        return result
    return dataclasses.replace(result, name=name)
