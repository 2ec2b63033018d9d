"""``CertificateManager``: many certificates, issued in parallel and kept renewed.

The manager owns an anyio task group. Inside it a scheduler looks at every managed
certificate and starts work when it is due: a first issuance, a renewal (ARI window, or
a third of the lifetime left, half of it under 10 days), or the next attempt after a
failure (the attempt schedule, never waiting past a quarter of the time left). Work runs
with bounded concurrency and is single-flight per certificate name and per exact
identifier set. Every attempt runs in its own cancel scope, so ``cancel()`` /
``unmanage()`` stop in-flight work at once: the client deactivates the pending
authorizations and removes challenge responses in its shielded cleanup, and when the
call returns nothing more is sent for that certificate.
"""

from __future__ import annotations

import datetime as _dt
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import anyio
import anyio.abc

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Clock, duration_seconds
from acmecerts.client import AcmeClient, IssuanceEvent, OrderCreated, OrderRequested
from acmecerts.errors import (
    AcmeCertsError,
    InvalidInput,
)
from acmecerts.manager._attempts import AttemptRunner, CancellationHook
from acmecerts.manager._core import FIRST_ARI_CHECK, FleetCore
from acmecerts.manager._entry import (
    Entry,
    due_at,
    solver_fingerprint,
    status_of,
)
from acmecerts.manager._events import (
    CertificateCancelled,
    EventBus,
    Subscriber,
)
from acmecerts.manager._outage import HELD_REASON, CaOutage
from acmecerts.manager._persist import CertificateStore
from acmecerts.manager._records import OrderRecord
from acmecerts.manager._renewals import RenewalPlanner
from acmecerts.manager._replicas import (
    DEFAULT_REPLICA_RECHECK_FACTOR,
    ReplicaRechecks,
    recheck_factor,
)
from acmecerts.manager._retention import DEFAULT_RETENTION, retention_seconds
from acmecerts.manager._scheduler import BudgetGate, Scheduler
from acmecerts.manager._spec import (
    CertificateSpec,
    CertificateStatus,
    IssuedResult,
    IssueResult,
    OwnerGuard,
)
from acmecerts.manager._stored import StoredEntries
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import (
    KeyType,
    PrivateKey,
    key_type_of,
    load_private_key,
    private_key_pem,
)
from acmecerts.retry import AttemptSchedule
from acmecerts.solvers._base import Solver
from acmecerts.storage import KeyLayout, Storage

__all__ = ["CancellationHook", "CertificateManager"]

log = logging.getLogger("acmecerts.manager")


class CertificateManager:
    """Keeps many certificates issued and renewed, in parallel, and cancellable.

    Args:
        client: The ACME client (one account on one CA) used for all orders.
        solvers: Challenge solvers, in order of preference.
        concurrency: At most this many attempts run at once.
        schedule: Spacing of attempts after a failure (default: Let's Encrypt's).
        renewal_fraction: Without ARI, renew when this fraction of the lifetime remains,
            whatever the lifetime. ``None`` (the default): a third, or half for a
            certificate of under 10 days (Let's Encrypt's guide, certbot 4, lego
            ``--dynamic``; :func:`~acmecerts.protocol.ari.fallback_renewal_time`). The
            CA's ARI window always wins over both.
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
        replica_recheck_factor: With replicas sharing ``storage``: a certificate another
            replica wrote while this one runs has its ARI window re-checked this many
            times as rarely as the CA's ``Retry-After`` says (4 by default, every 24 h at
            Let's Encrypt); its writer asks at the CA's rate. ``1``: every replica asks
            at the CA's rate. See the operator guide ("Several replicas, one store").
        first_ari_check: The longest wait, seconds or a ``timedelta``, before the CA is
            first asked for the ARI window of a certificate this manager just obtained
            (6 hours by default, or half the time until its lifetime-fraction renewal
            if that is shorter; it is planned at that fraction meanwhile). ``0``: ask at
            once, one request per new certificate more.

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
        renewal_fraction: float | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        storage: Storage | None = None,
        layout: KeyLayout | None = None,
        limiter: anyio.CapacityLimiter | None = None,
        lock_lease: float | _dt.timedelta = 120.0,
        error_backoff: AttemptSchedule | None = None,
        retention: float | _dt.timedelta | None = DEFAULT_RETENTION,
        replica_recheck_factor: float = DEFAULT_REPLICA_RECHECK_FACTOR,
        first_ari_check: float | _dt.timedelta = FIRST_ARI_CHECK,
    ) -> None:
        if not solvers:
            raise InvalidInput("the manager needs at least one solver")
        if concurrency < 1:
            raise InvalidInput("concurrency must be at least 1")
        if renewal_fraction is not None and not 0 < renewal_fraction < 1:
            raise InvalidInput("renewal_fraction must be between 0 and 1")
        #: Seconds a certificate no longer managed is kept (``None``: forever).
        self.retention = retention_seconds(retention)
        self.client = client
        self.solvers = list(solvers)
        self._schedule = schedule or AttemptSchedule()
        self._error_backoff = error_backoff or AttemptSchedule.exponential(
            base=5.0, multiplier=2.0, cap=300.0, jitter=0.2
        )
        self._clock: Clock = clock or client.clock
        self._rng = rng or random.Random()
        #: The fleet core: the one owner of every certificate's state (see ``_core.py``);
        #: the manager, its scheduler and its store carry out what it says.
        self._core = FleetCore(
            schedule=self.schedule,
            error_backoff=self.error_backoff,
            rng=self._rng,
            stored=storage is not None,
        )
        self._entries = self._core.entries  # read only: the core changes them
        self._handed_out = self._core.handed_out
        self._events = EventBus()
        self._cancellation_hooks: list[CancellationHook] = []
        self._task_group: anyio.abc.TaskGroup | None = None
        self._store: CertificateStore | None = None
        lease = duration_seconds(lock_lease, "lock_lease", positive=True)
        if storage is not None:
            self._store = CertificateStore(
                storage, layout or KeyLayout(client.transport.directory_url)
            )
        self._scheduler = Scheduler(self._core, clock=self.clock)
        #: While the CA keeps failing, background work waits for one probe at a time.
        self._outage = CaOutage(
            clock_now=self.clock.now,
            schedule=self.schedule,
            wake=self._unheld,
            check=lambda: client.transport.directory(refresh=True),
            rng=self._rng,
        )
        #: ARI re-checks and the sweep after a replacement request (``_renewals.py``).
        self._renewals = RenewalPlanner(
            client,
            core=self._core,
            scheduler=self._scheduler,
            clock=self.clock,
            rng=self._rng,
            fraction=renewal_fraction,
            first_check=_dt.timedelta(seconds=duration_seconds(first_ari_check, "first_ari_check")),
            observe=self._outage.observe,
            replicas=ReplicaRechecks(recheck_factor(replica_recheck_factor)),
            publish=self._events.publish,
        )
        self._stored = StoredEntries(
            self._store,
            self._core,
            self.clock,
            self._renewals.plan,
            self._events.publish,
            self.retention,
            solvers=self._solver_set,
        )
        #: Certificates no longer managed, kept for ``retention`` (see ``_retention.py``).
        self._retired = self._stored.retired
        self._gate = BudgetGate(client, clock=self.clock, stored=self._store is not None)
        #: The work for one certificate, from its turn to its outcome (``_attempts.py``).
        self._attempts = AttemptRunner(
            core=self._core,
            clock=self.clock,
            schedule=self.schedule,
            # bounds this manager's attempts (``concurrency``); ``limiter`` shares one
            # bound between the managers of several CAs (a global limit over per-CA ones)
            limiter=anyio.CapacityLimiter(concurrency),
            global_limiter=limiter,
            store=self._store,
            lock_lease=lease,
            stored=self._stored,
            scheduler=self._scheduler,
            gate=self._gate,
            outage=self._outage,
            renewals=self._renewals,
            client_issue=self._client_issue,
            directory=client.directory,
            solver_set=self._solver_set,
            cancelled=self._cancelled,
            publish=self._events.publish,
        )

    def _solver_set(self) -> str:
        """The fingerprint of the solvers now (a failure is recorded with it)."""
        return solver_fingerprint(self.solvers)

    async def _cancelled(self, name: str, reason: str) -> None:
        """Publish the cancellation of ``name`` and call the cancellation hooks."""
        await self._events.publish(CertificateCancelled(name, self.clock.now(), reason=reason))
        for hook in list(self._cancellation_hooks):
            try:
                result = hook(name, reason)
                if result is not None:
                    await result
            except Exception:
                log.exception("cancellation hook failed for %s", name)

    def _unheld(self, entry: Entry) -> None:
        """The CA answers again: ``entry``, held for it, is planned again at once."""
        if self._core.ca_answers(entry, HELD_REASON):
            self._scheduler.changed(entry)

    @property
    def schedule(self) -> AttemptSchedule:
        """The attempt schedule after failures (read-only: the fleet core and the attempt
        runner were built with it)."""
        return self._schedule

    @property
    def error_backoff(self) -> AttemptSchedule:
        """The schedule after errors that are not the CA's answer (read-only, as
        :attr:`schedule`)."""
        return self._error_backoff

    @property
    def clock(self) -> Clock:
        """The manager's clock (read-only, as :attr:`schedule`)."""
        return self._clock

    @property
    def renewal_fraction(self) -> float | None:
        """The fraction of the lifetime left at which a certificate is renewed without
        ARI; ``None``: a third, or half under 10 days of lifetime."""
        return self._renewals.fraction

    @renewal_fraction.setter
    def renewal_fraction(self, fraction: float | None) -> None:
        self._renewals.fraction = fraction

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> CertificateManager:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(
            self._scheduler.run,
            self._task_group,
            self._attempts.background,
            self._retired,
            self._attempts.recheck_only,
        )
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
        profile_required: bool = True,
    ) -> CertificateSpec:
        """Declare a certificate to keep issued (idempotent).

        Changing the identifiers of a managed certificate issues it again. A certificate
        that was cancelled is managed again from scratch. ``profile`` (with
        ``profile_required``) is ordered at every issuance and renewal of it.
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
                profile_required=profile_required,
            )
        self._scheduler.changed(self._core.managed(spec))
        return spec

    async def unmanage(self, name: str) -> None:
        """Stop managing ``name``: cancel in-flight work and forget its timers.

        With a store, its certificate, key and state are kept for ``retention`` and then
        deleted; managed again before that, it is taken back without a new order.
        """
        entry = self._entries.get(name)
        await self.cancel(name, reason="unmanaged")
        # (not a new entry managed while cancelling)
        await self._attempts.carry_out(self._core.unmanaged(name, entry))

    async def cancel(self, name: str, *, reason: str = "cancelled") -> None:
        """Cancel in-flight and future work for ``name``.

        The attempt's cancel scope is cancelled; the client deactivates its pending
        authorizations and cleans up challenge responses; once this returns, no further
        request is sent for the certificate (until it is managed again).
        """
        entry = self._entries.get(name)
        if entry is None:
            return
        already = self._core.cancelled(entry, reason)
        self._scheduler.changed(entry, wake=False)
        flight = entry.flight
        if flight is not None:
            if flight.scope is not None:
                flight.scope.cancel()
            await flight.done.wait()
        if not already:
            await self._cancelled(name, reason)

    def get(self, name: str) -> IssuedCertificate | None:
        """The current certificate for ``name`` (``None`` until one is issued)."""
        entry = self._entries.get(name)
        if entry is None or entry.certificate is None:
            return None
        return self._handed_out.issued(entry.certificate)

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
        return None if entry is None else status_of(entry, self.schedule, self.clock.now())

    def next_renewal(self, name: str) -> _dt.datetime | None:
        """When ``name`` next needs work: issuance, a retry, an ARI re-check or renewal."""
        entry = self._entries.get(name)
        return due_at(entry, self.schedule, self.clock.now()) if entry is not None else None

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

        async def one(i: int, entry: Entry) -> None:
            if entry.certificate is not None and not entry.stale and not force:
                results[i] = IssuedResult(
                    entry.spec.name, self._handed_out.issued(entry.certificate)
                )
                return
            results[i] = await self._attempts.obtain(entry, force=force)

        async with anyio.create_task_group() as tg:
            for i in order:
                tg.start_soon(one, i, entries[i])
        return [r for r in results if r is not None]

    @staticmethod
    def _urgency(entry: Entry, position: int) -> tuple[int, float, int]:
        expires = entry.certificate.not_after.timestamp() if entry.certificate else float("inf")
        return (-entry.spec.priority, expires, position)

    def _plan_tick(self, now: _dt.datetime) -> tuple[list[Entry], _dt.datetime | None]:
        """One scheduling decision: the entries to start now, the next due time."""
        return self._scheduler.plan_tick(now)

    def _entry_for(self, spec: CertificateSpec | str) -> Entry:
        if isinstance(spec, str):
            entry = self._entries.get(spec)
            if entry is not None and entry.cancelled is None:
                return entry
        return self._entries[self.manage(spec).name]

    async def _client_issue(
        self,
        entry: Entry,
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
            finished = self._stored.finished_order(entry)
            record = await store.load_order(spec.name, finished=finished)
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

        # reuse_key: the renewal keeps the current key, if it is of the type asked for
        current = entry.certificate
        if (
            private_key is None
            and spec.reuse_key
            and current is not None
            and current.private_key_pem is not None
            and key_type_of(current.private_key_pem) is spec.key_type
        ):
            private_key = load_private_key(current.private_key_pem)
        try:
            return await self.client.issue(
                [i.value for i in spec.identifiers],
                solvers=self.solvers,
                key_type=spec.key_type,
                private_key=private_key,
                profile=spec.profile,
                profile_required=spec.profile_required,
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
