"""The manager's view of the CA's health: while the CA keeps failing, one probe at a time.

When the CA answers ``503`` (or another 5xx) or cannot be reached, every certificate
whose turn comes would otherwise try on its own: a fleet of n certificates sends n
attempts (and n ARI re-checks) per step of the attempt schedule, and each attempt takes
the store's lock and writes its attempt state. :class:`CaOutage` closes after such a
failure: until its instant, background work is held in memory (no request, no store
operation); at that instant the first certificate whose turn comes sends the probe (a
fresh ``GET`` of the directory: no store operation, and no certificate's attempt spent
on a CA that is down); while it is out the others wait. The probe failing again closes
the gate for longer (exponential, with jitter, the CA's ``Retry-After`` winning); any
answer that is not a failure of the CA opens it and wakes everyone held. A renewal that
cannot wait that long (the attempt schedule's cut by the time its certificate has left)
is never held.
"""

from __future__ import annotations

import datetime as _dt
import logging
import random
from collections.abc import Awaitable, Callable

from acmecerts._time import aware_utc
from acmecerts.errors import AcmeCertsError, ConnectError, RequestTimeout
from acmecerts.manager._entry import Entry
from acmecerts.retry import AttemptSchedule

__all__ = ["HELD_REASON", "CaOutage", "ca_failing"]

log = logging.getLogger("acmecerts.manager")

#: ``hold_reason`` of a certificate held because the CA is failing.
HELD_REASON = "the CA is failing: waiting for a probe to get an answer"


def ca_failing(error: AcmeCertsError) -> bool | None:
    """Whether ``error`` says the CA is failing (``True``), answering (``False``), or
    nothing about it (``None``: decided on our side, e.g. the ledger deferring).

    Failing: an answer with a 5xx status (``503`` with or without ``Retry-After``,
    ``500``, ``502`` from its front), no connection, or no answer in time. Answering:
    any other HTTP answer (a problem document, ``429``, ``400 badNonce``...).
    """
    if isinstance(error, ConnectError | RequestTimeout):
        return True
    status = getattr(error, "status_code", None)
    if not isinstance(status, int):
        return None
    return status >= 500


class CaOutage:
    """The gate in front of a manager's background work (see the module docstring).

    Args:
        clock_now: Returns the current instant.
        schedule: The attempt schedule; its ``capped`` cut tells an urgent renewal.
        wake: Called with each held certificate when the gate opens.
        check: Sends the probe (one request to the CA); raises what it failed with.
        rng: The source of jitter.
        base: Seconds the gate stays closed after the first failure (then doubling).
        cap: The longest the gate stays closed on its own (a later ``Retry-After`` wins).
    """

    def __init__(
        self,
        *,
        clock_now: Callable[[], _dt.datetime],
        schedule: AttemptSchedule,
        wake: Callable[[Entry], None],
        check: Callable[[], Awaitable[object]],
        rng: random.Random,
        base: float = 60.0,
        cap: float = 3600.0,
    ) -> None:
        self._now = clock_now
        self._schedule = schedule
        self._wake = wake
        self._check = check
        self._rng = rng
        self.base = base
        self.cap = cap
        #: Failures of the CA in a row (each one that found the gate open).
        self.failures = 0
        #: Closed until this instant (``None``: open).
        self.closed_until: _dt.datetime | None = None
        #: The certificate whose work is the probe now.
        self.probe: Entry | None = None
        self._held: set[Entry] = set()

    def step(self, failures: int) -> float:
        """Seconds closed after the ``failures``-th failure in a row: ``base`` doubling up
        to ``cap``, times a uniform factor in [0.9, 1.1]."""
        seconds = min(self.cap, self.base * 2.0 ** min(failures - 1, 64))
        return seconds * self._rng.uniform(0.9, 1.1)

    def hold(self, entry: Entry) -> _dt.datetime | None:
        """``None``: ``entry``'s work may go now (the gate is open, it is the probe, or
        it is urgent); else the instant to look again (``entry`` is woken sooner if
        the gate opens)."""
        if self.closed_until is None:
            return None
        now = self._now()
        if self.probe is None and now >= self.closed_until:
            self.probe = entry
            self._held.discard(entry)  # it goes now: nothing to wake
            return None
        if self.probe is entry:
            return None
        until = self.closed_until if now < self.closed_until else None
        if until is None:  # a probe is out: look again when it would have failed
            until = now + _dt.timedelta(seconds=self.step(self.failures + 1))
        held = entry.certificate
        if held is not None and not entry.stale:
            wait = (until - now).total_seconds()
            cut = self._schedule.capped(wait, expires_at=held.not_after, now=now, rng=self._rng)
            if cut < wait:
                return None  # too little life left to wait for the CA: as without the gate
        self._held.add(entry)
        return until

    async def admit(self, entry: Entry) -> _dt.datetime | None:
        """``None``: ``entry``'s work may go now; else hold it until the instant returned.

        When the gate is due to be tried again, ``entry`` sends the probe first and is
        held if the CA still fails (:meth:`hold` then decides).
        """
        until = self.hold(entry)
        if until is not None or self.probe is not entry:
            return until
        try:
            await self._check()
        except AcmeCertsError as exc:
            self.observe(exc)
        else:
            self.observe(None)
        finally:
            if self.probe is entry:
                self.probe = None
        return self.hold(entry)

    def observe(self, error: AcmeCertsError | None) -> None:
        """A request's outcome: ``None`` (answered) or the error it ended with."""
        failing = False if error is None else ca_failing(error)
        if failing is None:
            return
        now = self._now()
        if not failing:
            if self.closed_until is not None:
                log.warning("the CA answers again: %d certificates held resume", len(self._held))
            self.failures, self.closed_until, self.probe = 0, None, None
            held, self._held = self._held, set()
            for entry in held:
                self._wake(entry)
            return
        assert error is not None
        if self.closed_until is not None and now < self.closed_until:
            return  # started before the gate closed: already known
        self.failures += 1
        self.probe = None
        until = now + _dt.timedelta(seconds=self.step(self.failures))
        if error.retry_after is not None:
            until = max(until, aware_utc(error.retry_after, assume_utc=True))
        self.closed_until = until
        log.warning(
            "the CA is failing (%s); background work held until %s (failure %d in a row)",
            error,
            until.isoformat(),
            self.failures,
        )
