"""The manager's renewal planning: ARI re-checks, and the sweep after a replacement request.

:class:`Renewals` is a part of :class:`~acmecerts.manager._attempts.Attempts` (split out
of it): it sets each certificate's renewal instant (:func:`plan_renewal`), tells the CA's
health gate (:class:`~acmecerts.manager._outage.CaOutage`) what renewalInfo answered, and
when the CA asks for a certificate to be replaced at once, re-checks every other one.
"""

from __future__ import annotations

import logging
import random

import anyio

from acmecerts._time import Clock
from acmecerts.client import AcmeClient
from acmecerts.manager._core import FleetCore
from acmecerts.manager._entry import Entry
from acmecerts.manager._events import (
    CertificateEvent,
    CertificateReplacementRequested,
    EventBus,
)
from acmecerts.manager._outage import CaOutage
from acmecerts.manager._scheduler import Scheduler, plan_renewal
from acmecerts.protocol.ari import ReplacementReason

#: renewalInfo requests at once while re-checking every certificate after the CA asked
#: for one to be replaced (the client's request throttle paces them further).
_SWEEP_CONCURRENCY = 16

log = logging.getLogger("acmecerts.manager")


class Renewals:
    """Renewal planning for :class:`~acmecerts.manager._attempts.Attempts`."""

    client: AcmeClient
    renewal_fraction: float | None
    clock: Clock
    _rng: random.Random
    _core: FleetCore
    _entries: dict[str, Entry]
    _scheduler: Scheduler
    _outage: CaOutage
    _events: EventBus
    #: Whether every certificate's ARI window is being re-checked now (:meth:`_sweep`).
    _sweeping: bool = False
    #: Set when the current sweep ends.
    _sweep_end: anyio.Event
    #: Certificates whose ARI window is being fetched now, and an event set after each.
    _rechecking: set[Entry]
    _recheck_done: anyio.Event

    async def _publish(self, event: CertificateEvent) -> None:
        await self._events.publish(event)

    async def _ask_window(self, entry: Entry) -> ReplacementReason | None:
        """Ask the CA for ``entry``'s ARI window and plan its renewal from the answer.

        Returns why the CA wants it replaced now, if it does.
        """
        return await plan_renewal(
            entry,
            self.client,
            core=self._core,
            fraction=self.renewal_fraction,
            clock=self.clock,
            rng=self._rng,
            observe=self._outage.observe,
        )

    async def _plan_renewal(self, entry: Entry) -> None:
        self._rechecking.add(entry)
        try:
            reason = await self._ask_window(entry)
        finally:
            self._rechecking.discard(entry)
            self._recheck_done.set()
        if reason is not None:
            await self._replacement_requested(entry, reason)
            if not self._sweeping:
                await self._sweep(entry)
                return
        if self._sweeping and entry.ari_replacement is not None:
            # found by its own re-check during a sweep: it starts with the others, in
            # priority order, when the sweep ends (not now, ahead of them)
            await self._sweep_end.wait()

    async def _replacement_requested(self, entry: Entry, reason: ReplacementReason) -> None:
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
        await self._publish(
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

    async def _sweep(self, first: Entry) -> None:
        """The CA asked for ``first`` to be replaced: re-check every other certificate now.

        A mass revocation moves many windows at once, but each certificate would only
        learn of it at its own next re-check (up to six hours later). So every other
        certificate with an ARI window is asked about now (highest priority first, at
        most :data:`_SWEEP_CONCURRENCY` at a time, paced by the request throttle), and
        only then are they all handed to the scheduler together: the renewals due now
        start in one tick, highest priority first.
        """
        self._sweeping = True
        self._sweep_end = anyio.Event()
        others = sorted(
            (
                e
                for e in self._entries.values()
                if e is not first
                and e.cancelled is None
                and e.flight is None
                and e.certificate is not None
                and not e.stale
                and e.ari_recheck_at is not None
                and e.ari_replacement is None
                and e not in self._rechecking  # asking already: waited for below
            ),
            key=lambda e: (-e.spec.priority, e.seq),
        )
        swept = set(others)
        limiter = anyio.CapacityLimiter(_SWEEP_CONCURRENCY)

        async def recheck(other: Entry) -> None:
            async with limiter:
                try:
                    reason = await self._ask_window(other)
                    if reason is not None:
                        await self._replacement_requested(other, reason)
                except Exception:  # one certificate's bug must not stop the others
                    log.exception("%s: re-checking the ARI window failed", other.spec.name)

        log.info("re-checking the ARI windows of %d other certificates", len(others))
        try:
            async with anyio.create_task_group() as tg:
                for other in others:
                    tg.start_soon(recheck, other)
            while self._rechecking - {first}:  # their own re-checks, under way before
                self._recheck_done = anyio.Event()
                await self._recheck_done.wait()
        finally:
            self._sweeping = False
            self._sweep_end.set()
            # every certificate due now is planned in the same scheduler tick
            for other in self._entries.values():
                if other in swept or other.ari_replacement is not None:
                    self._scheduler.changed(other, wake=False)
            self._scheduler.wake_up()
