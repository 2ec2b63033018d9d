"""The manager's renewal planning: ARI re-checks, and the sweep after a replacement request.

:class:`RenewalPlanner` is a part :class:`~acmecerts.manager.CertificateManager` holds:
it sets each certificate's renewal instant (:func:`plan_renewal`), tells the CA's health
gate (:class:`~acmecerts.manager._outage.CaOutage`) what renewalInfo answered, stretches
the re-check of a certificate another replica wrote
(:class:`~acmecerts.manager._replicas.ReplicaRechecks`), and when the CA asks for a
certificate to be replaced at once, re-checks every other one.
"""

from __future__ import annotations

import datetime as _dt
import logging
import random
from collections.abc import Awaitable, Callable

import anyio

from acmecerts._time import Clock
from acmecerts.client import AcmeClient
from acmecerts.errors import AcmeCertsError
from acmecerts.manager._core import FleetCore
from acmecerts.manager._entry import Entry
from acmecerts.manager._events import (
    CertificateEvent,
    CertificateReplacementRequested,
)
from acmecerts.manager._replicas import ReplicaRechecks
from acmecerts.manager._scheduler import Scheduler, plan_renewal
from acmecerts.protocol.ari import ReplacementReason

#: renewalInfo requests at once while re-checking every certificate after the CA asked
#: for one to be replaced (the client's request throttle paces them further).
_SWEEP_CONCURRENCY = 16

log = logging.getLogger("acmecerts.manager")


class RenewalPlanner:
    """Renewal planning for the manager's certificates (ARI re-checks and the sweep).

    Args:
        client: Asked for each certificate's ARI window.
        core: The fleet core: the certificates, changed by its transitions only.
        scheduler: Told which certificates changed once a sweep ends.
        clock: Where "now" comes from.
        rng: Picks the renewal instant in the ARI window.
        fraction: The fraction of the lifetime left at which a certificate is renewed
            without ARI (``None``: a third, or half under 10 days).
        first_check: The longest wait before the first ARI check of a certificate just
            obtained (:meth:`FleetCore.first_check_planned`; zero: at once).
        observe: Tells the CA's health gate what renewalInfo answered.
        replicas: Stretches the re-check of a certificate another replica wrote.
        publish: Sends a :class:`CertificateEvent` to the manager's subscribers.
    """

    def __init__(
        self,
        client: AcmeClient,
        *,
        core: FleetCore,
        scheduler: Scheduler,
        clock: Clock,
        rng: random.Random,
        fraction: float | None,
        first_check: _dt.timedelta,
        observe: Callable[[AcmeCertsError | None], None],
        replicas: ReplicaRechecks,
        publish: Callable[[CertificateEvent], Awaitable[None]],
    ) -> None:
        self.client = client
        self.core = core
        self.scheduler = scheduler
        self.clock = clock
        self.rng = rng
        #: Read at each re-check (the manager's ``renewal_fraction`` sets it).
        self.fraction = fraction
        self.first_check = first_check
        self.observe = observe
        self.replicas = replicas
        self.publish = publish
        #: Whether every certificate's ARI window is being re-checked now (:meth:`sweep`).
        self.sweeping = False
        #: Set when the current sweep ends.
        self.sweep_end = anyio.Event()
        #: Certificates whose ARI window is being fetched now, and an event set after each.
        self.rechecking: set[Entry] = set()
        self.recheck_done = anyio.Event()

    async def ask_window(self, entry: Entry) -> ReplacementReason | None:
        """Ask the CA for ``entry``'s ARI window and plan its renewal from the answer.

        Returns why the CA wants it replaced now, if it does.
        """
        asked_at = self.clock.now()
        reason = await plan_renewal(
            entry,
            self.client,
            core=self.core,
            fraction=self.fraction,
            clock=self.clock,
            rng=self.rng,
            observe=self.observe,
        )
        self.replicas.stretch(self.core, entry, asked_at)  # another replica wrote it: it asks
        return reason

    async def plan_obtained(self, entry: Entry) -> None:
        """``entry``'s certificate was just obtained: when the CA has ARI, its window is
        asked for later (:meth:`FleetCore.first_check_planned`), else it is planned now."""
        directory = await self.client.directory()  # fetched before the order: no request
        if directory.renewal_info is not None and self.core.first_check_planned(
            entry, self.fraction, self.clock.now(), self.first_check
        ):
            return
        await self.plan(entry)

    async def plan(self, entry: Entry) -> None:
        """Re-check ``entry``'s ARI window; the CA asking for a replacement starts a sweep."""
        self.rechecking.add(entry)
        try:
            reason = await self.ask_window(entry)
        finally:
            self.rechecking.discard(entry)
            self.recheck_done.set()
        if reason is not None:
            await self.replacement_requested(entry, reason)
            if not self.sweeping:
                await self.sweep(entry)
                return
        if self.sweeping and entry.ari_replacement is not None:
            # found by its own re-check during a sweep: it starts with the others, in
            # priority order, when the sweep ends (not now, ahead of them)
            await self.sweep_end.wait()

    async def replacement_requested(self, entry: Entry, reason: ReplacementReason) -> None:
        """The CA asks for ``entry``'s replacement now: log it and publish
        :class:`CertificateReplacementRequested` with the window it named."""
        answer = entry.ari_answer
        assert answer is not None
        log.warning(
            "%s: the CA asks for the certificate to be replaced now (%s, window %s..%s)%s",
            entry.spec.name,
            reason,
            answer.window_start.isoformat(),
            answer.window_end.isoformat(),
            f"; see {answer.explanation_url}" if answer.explanation_url else "",
        )
        await self.publish(
            CertificateReplacementRequested(
                entry.spec.name,
                self.clock.now(),
                reason=reason,
                window_start=answer.window_start,
                window_end=answer.window_end,
                explanation_url=answer.explanation_url,
                cert_id=answer.cert_id,
            )
        )

    async def sweep(self, first: Entry) -> None:
        """The CA asked for ``first`` to be replaced: re-check every other certificate now.

        A mass revocation moves many windows at once, but each certificate would only
        learn of it at its own next re-check (up to six hours later). So every other
        certificate with an ARI window is asked about now (highest priority first, at
        most :data:`_SWEEP_CONCURRENCY` at a time, paced by the request throttle), and
        only then are they all handed to the scheduler together: the renewals due now
        start in one tick, highest priority first.
        """
        self.sweeping = True
        self.sweep_end = anyio.Event()
        others = sorted(
            (
                e
                for e in self.core.entries.values()
                if e is not first
                and e.cancelled is None
                and e.flight is None
                and e.certificate is not None
                and not e.stale
                and e.ari_recheck_at is not None
                and e.ari_replacement is None
                and e not in self.rechecking  # asking already: waited for below
            ),
            key=lambda e: (-e.spec.priority, e.seq),
        )
        swept = set(others)
        limiter = anyio.CapacityLimiter(_SWEEP_CONCURRENCY)

        async def recheck(other: Entry) -> None:
            async with limiter:
                try:
                    reason = await self.ask_window(other)
                    if reason is not None:
                        await self.replacement_requested(other, reason)
                except Exception:  # one certificate's bug must not stop the others
                    log.exception("%s: re-checking the ARI window failed", other.spec.name)

        log.info("re-checking the ARI windows of %d other certificates", len(others))
        try:
            async with anyio.create_task_group() as tg:
                for other in others:
                    tg.start_soon(recheck, other)
            while self.rechecking - {first}:  # their own re-checks, under way before
                self.recheck_done = anyio.Event()
                await self.recheck_done.wait()
        finally:
            self.sweeping = False
            self.sweep_end.set()
            # every certificate due now is planned in the same scheduler tick
            for other in self.core.entries.values():
                if other in swept or other.ari_replacement is not None:
                    self.scheduler.changed(other, wake=False)
            self.scheduler.wake_up()
