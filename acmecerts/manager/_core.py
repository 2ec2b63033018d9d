"""The fleet core: the one owner of the manager's certificates, synchronous and pure.

:class:`FleetCore` holds every :class:`~acmecerts.manager._entry.Entry`, the attempts in
flight (single flight per name and per identifier set), the certificates held, and the
due-queue (:class:`~acmecerts.manager._due.DueQueue`). It changes them only through its
named transitions, in the style of :class:`~acmecerts.protocol._flow.IssuanceFlow`:

===================================  ==================================================
transition                           what it returns (the driver's next action)
===================================  ==================================================
:meth:`~FleetCore.managed`           the entry to plan (start when due)
:meth:`~FleetCore.loaded`            :class:`Read`: plan the renewal of a certificate read
:meth:`~FleetCore.state_loaded`      nothing: the entry is loaded
:meth:`~FleetCore.attempt_started`   the flight to join, or ``None``: the attempt goes
:meth:`~FleetCore.attempt_failed`    :class:`Failure`: when next; after publishing, its
                                     ``actions``: :class:`SaveState` (with a store)
:meth:`~FleetCore.obtained`          :class:`SaveCertificate` (with a store), before
                                     the certificate counts as held
:meth:`~FleetCore.issued`            :class:`SaveState` (with a store), then
                                     :class:`PlanFirstCheck`
:meth:`~FleetCore.attempt_ended`     :class:`Replan` (once the joined are told)
:meth:`~FleetCore.owner_gone`        :class:`Retire` (with a store; outside the lock)
:meth:`~FleetCore.unmanaged`         :class:`Retire` (with a store)
:meth:`~FleetCore.time_passed`       :class:`Tick`: the work to start now, when to wake
===================================  ==================================================

The actions (``_actions.py``) are carried out in the order returned by
:meth:`~acmecerts.manager._attempts.AttemptRunner.carry_out`, which decides nothing.

The async manager (:class:`~acmecerts.manager.CertificateManager` with its
:class:`~acmecerts.manager._scheduler.Scheduler`, :class:`StoredEntries`, the
:class:`~acmecerts.manager._attempts.AttemptRunner` and the
:class:`~acmecerts.manager._renewals.RenewalPlanner`) does the I/O and calls the
transitions with what it found; nothing else assigns a field of an entry. No I/O, no
anyio, no clock: every instant comes in as an argument, so a test drives it with no event
loop (``tests/manager/test_fleet_core.py``).
Retired certificates are the store's (:class:`RetiredCertificates`): they ask the core
which names are managed and which identifiers wait for a certificate.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import itertools
import random
from typing import TYPE_CHECKING

from acmecerts._issued import IssuedCertificate
from acmecerts.errors import AcmeCertsError, InvalidInput, RateLimitDeferred
from acmecerts.manager._actions import (
    Action,
    PlanFirstCheck,
    Replan,
    Retire,
    SaveCertificate,
    SaveState,
)
from acmecerts.manager._due import DueQueue
from acmecerts.manager._entry import (
    Entry,
    HandedOut,
    after_spec_change,
    for_solvers,
)
from acmecerts.manager._held import HeldCertificate, ari_cert_id
from acmecerts.manager._spec import CertificateSpec
from acmecerts.protocol.ari import (
    ARI_MIN_RETRY,
    RenewalInfoResult,
    ReplacementReason,
    choose_renewal_time,
    fallback_renewal_time,
    replacement_requested,
)
from acmecerts.protocol.identifiers import Identifier
from acmecerts.retry import AttemptSchedule, AttemptState

if TYPE_CHECKING:
    from acmecerts.manager._attempts import Flight

__all__ = [
    "FIRST_ARI_CHECK",
    "RECHECK_GRID",
    "Failure",
    "FleetCore",
    "Read",
    "Tick",
    "on_recheck_grid",
]

#: ARI re-checks are asked on a grid of this many seconds (the CA's ``Retry-After``
#: rounded up to it): the re-checks of a fleet share their scheduler ticks (at
#: 10,000 certificates, ~28 a minute instead of one tick each).
RECHECK_GRID = 60.0

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MICROSECOND = _dt.timedelta(microseconds=1)


#: The longest wait for the first ARI check of a certificate just obtained
#: (:meth:`FleetCore.first_check_planned`): the CA's usual ``Retry-After`` for renewalInfo.
FIRST_ARI_CHECK = _dt.timedelta(hours=6)


def on_recheck_grid(instant: _dt.datetime) -> _dt.datetime:
    """``instant`` rounded up to the ARI re-check grid (:data:`RECHECK_GRID`), exactly."""
    grid = round(RECHECK_GRID * 1_000_000)
    micros = (instant - _EPOCH) // _MICROSECOND
    return _EPOCH + _dt.timedelta(microseconds=-(-micros // grid) * grid)


class Read(enum.Enum):
    """What a stored certificate read by :meth:`FleetCore.loaded` was to the entry."""

    #: Nothing new: none stored, the one held, or another's of other identifiers.
    NOTHING = "nothing"
    #: Taken as the entry's certificate: plan its renewal, tell the subscribers.
    TAKEN = "taken"
    #: Taken, and another replica wrote it while this one ran (its re-check stretches).
    WRITTEN_ELSEWHERE = "written elsewhere"
    #: Kept though its identifiers differ from the spec's (stale: issue again).
    STALE = "stale"


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """An attempt's failure as the core recorded it (:meth:`FleetCore.attempt_failed`)."""

    #: ``"parked"`` (invalid input: no next instant until the spec changes), ``"held"``
    #: (a pause of our own: ``until`` is the hold's end) or ``"retry"`` (``until`` is
    #: the attempt schedule's next attempt).
    kind: str
    until: _dt.datetime | None
    #: What the driver does after telling the subscribers (with a store: save the state).
    actions: tuple[Action, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Tick:
    """What :meth:`FleetCore.time_passed` says: the work to start now, and when to wake.

    ``start`` is in order (priority, due time, declaration); an entry of it whose stored
    state is unread (:meth:`FleetCore.loading`) reads it first. ``wake`` is the next
    due instant (``None``: only when something changes).
    """

    start: list[Entry]
    wake: _dt.datetime | None


class FleetCore:
    """Every managed certificate, changed only by the named transitions below.

    Args:
        schedule: The attempt schedule (spacing after a failure of the CA's side).
        error_backoff: Spacing of the holds after a failure on our side (a hiccup).
        rng: Jitter (hiccups, the attempt schedule, ARI window choice).
        stored: Whether the manager has a store (stored state is read before work).
    """

    def __init__(
        self,
        *,
        schedule: AttemptSchedule,
        error_backoff: AttemptSchedule,
        rng: random.Random,
        stored: bool,
    ) -> None:
        self.schedule = schedule
        self.error_backoff = error_backoff
        self._rng = rng
        #: Whether there is a store (what is saved, retired).
        self.stored = stored
        #: The certificates by name (read anywhere; changed only here).
        self.entries: dict[str, Entry] = {}
        self._seqs = itertools.count()
        #: Certificates handed out recently, and the compact form held.
        self.handed_out = HandedOut()
        #: The flights by exact identifier set (single flight across names).
        self._flights_by_ids: dict[frozenset[Identifier], Flight] = {}
        self._flight_ids: dict[Flight, frozenset[Identifier]] = {}
        self.due = DueQueue(self.entries, schedule=schedule, stored=stored)

    # -- declaring ------------------------------------------------------------------------

    def managed(self, spec: CertificateSpec) -> Entry:
        """``spec`` is declared (again): its entry, new, replaced or updated; planned."""
        entry = self.entries.get(spec.name)
        if entry is None or entry.cancelled is not None:
            # a replaced entry keeps its place in the declaration order, as in the dict
            seq = entry.seq if entry is not None else next(self._seqs)
            entry = self.entries[spec.name] = Entry(spec, seq=seq)
        elif entry.spec != spec or entry.spec.owner is not spec.owner:
            if entry.spec.identifier_set != spec.identifier_set:
                entry.stale = True
            if entry.spec.fingerprint != spec.fingerprint:
                # another request: its own schedule (a wait the CA imposed still holds)
                entry.state = after_spec_change(entry.state)
                entry.state_changed = True
                self.steady(entry)
            entry.spec = spec
        self.due.changed(entry)
        return entry

    def cancelled(self, entry: Entry, reason: str) -> bool:
        """No more work for ``entry`` (work started before never orders); whether it was
        cancelled already."""
        already = entry.cancelled is not None
        entry.cancelled = reason
        entry.generation += 1
        self.due.changed(entry)
        return already

    def owner_gone(self, entry: Entry, reason: str) -> tuple[Action, ...]:
        """The owner guard said the owner is gone: cancelled, and (with a store) retired
        once the certificate's store lock is released."""
        self.cancelled(entry, reason)
        return self._retire(entry.spec.name, entry)

    def unmanaged(self, name: str, entry: Entry | None) -> tuple[Action, ...]:
        """``name`` is no longer managed (unless a new ``entry`` took its place): with a
        store, retired (a name managed again by then keeps its files)."""
        if entry is not None and self.entries.get(name) is entry:
            del self.entries[name]
        return self._retire(name, entry)

    def _retire(self, name: str, entry: Entry | None) -> tuple[Action, ...]:
        if not self.stored:
            return ()
        return (Retire(name, entry.spec.identifiers if entry is not None else None),)

    # -- questions the store's retired certificates ask ----------------------------------

    def is_managed(self, name: str) -> bool:
        """Whether ``name`` is managed (its stored files are in use)."""
        entry = self.entries.get(name)
        return entry is not None and entry.cancelled is None

    def waits_for(self, identifiers: frozenset[Identifier]) -> bool:
        """Whether a managed certificate with exactly ``identifiers`` has none yet."""
        return any(
            e.cancelled is None
            and (e.certificate is None or e.stale)
            and e.spec.identifier_set == identifiers
            for e in self.entries.values()
        )

    # -- reading the store --------------------------------------------------------------

    def loaded(self, entry: Entry, stored: IssuedCertificate | None) -> Read:
        """The certificate stored for ``entry`` was read (``None``: none)."""
        if stored is None or (
            entry.certificate is not None and stored.serial == entry.certificate.serial
        ):
            return Read.NOTHING
        if frozenset(stored.identifiers) == entry.spec.identifier_set:
            read = Read.TAKEN
            if entry.loaded:  # read before: another replica wrote it since
                entry.written_elsewhere = stored.serial
                read = Read.WRITTEN_ELSEWHERE
            entry.certificate = self.handed_out.hold(stored)
            entry.stale = False
            return read
        if entry.certificate is None:
            entry.certificate = self.handed_out.hold(stored)
            entry.stale = True  # managed with other identifiers now: issue again
            return Read.STALE
        return Read.NOTHING

    def state_loaded(
        self,
        entry: Entry,
        state: AttemptState | None,
        solvers: str | None,
        *,
        read: bool = True,
    ) -> None:
        """The stored attempt state was ``read`` (``None``: none stored), or not read
        because the spec changed here (:attr:`Entry.state_changed`); ``entry`` is loaded.

        A spec changed while the state was being read keeps the state it reset.
        """
        if read and not entry.state_changed:
            # the stored state is the truth: a replica may have failed (or succeeded)
            entry.state = state or AttemptState()
            if solvers is not None:
                entry.state = for_solvers(entry.state, solvers)
        entry.loaded = True

    def load_ended(self, entry: Entry) -> None:
        """The scheduler's read of ``entry``'s stored state ended: its slot is free."""
        self.due.load_ended(entry)

    def loading(self, entry: Entry) -> bool:
        """Whether ``entry`` was started by the scheduler to read its stored state."""
        return entry in self.due.loading

    def adopted(self, entry: Entry, certificate: IssuedCertificate) -> None:
        """A retired certificate with ``entry``'s identifiers was taken over."""
        entry.certificate = self.handed_out.hold(certificate)
        entry.stale = False

    def state_saved(self, entry: Entry) -> None:
        """``entry``'s attempt state is in the store: the stored one is the truth again."""
        entry.state_changed = False

    def _save_state(self, entry: Entry) -> tuple[Action, ...]:
        """After an outcome: with a store, save ``entry``'s state (without one, the state
        in memory is the only one)."""
        if not self.stored:
            self.state_saved(entry)
            return ()
        return (SaveState(entry),)

    # -- attempts ---------------------------------------------------------------------------

    def attempt_started(self, entry: Entry, flight: Flight) -> Flight | None:
        """Work for ``entry`` wants to start (as ``flight``): the flight in the air for its
        name or identifiers, to join; ``None``: ``flight`` is now ``entry``'s."""
        existing = entry.flight or self._flights_by_ids.get(entry.spec.identifier_set)
        if existing is not None:
            return existing
        entry.flight = flight
        ids = self._flight_ids[flight] = entry.spec.identifier_set
        self._flights_by_ids[ids] = flight
        return None

    def attempt_ended(self, entry: Entry, flight: Flight) -> tuple[Action, ...]:
        """``flight`` (``entry``'s) ended: the entry is planned again (renewal, retry),
        and the scheduler woken if it is due sooner (once the joined ones are told)."""
        entry.flight = None
        # the identifiers it started with (the spec may have changed since)
        ids = self._flight_ids.pop(flight, entry.spec.identifier_set)
        if self._flights_by_ids.get(ids) is flight:
            del self._flights_by_ids[ids]
        self.due.changed(entry)
        return (Replan(entry),)

    def solvers_now(self, entry: Entry, solvers: str) -> None:
        """The solvers of the attempt starting: a failure under others imposes no wait."""
        entry.state = for_solvers(entry.state, solvers)

    def obtained(self, entry: Entry, certificate: IssuedCertificate) -> tuple[Action, ...]:
        """The CA issued ``certificate`` for ``entry`` (progress: its hiccups are
        forgotten). With a store it is saved first; only then is it :meth:`issued`."""
        self.steady(entry)
        if not self.stored:
            return ()
        return (SaveCertificate(entry.spec.name, certificate),)

    def issued(self, entry: Entry, certificate: IssuedCertificate) -> tuple[Action, ...]:
        """``certificate`` (:meth:`obtained`, saved when there is a store) is
        ``entry``'s: save the attempt state it resets, then plan its renewal."""
        entry.certificate = self.handed_out.hold(certificate)
        entry.stale = False
        entry.state = self.schedule.after_success(entry.state)
        return (*self._save_state(entry), PlanFirstCheck(entry))

    def attempt_failed(
        self,
        entry: Entry,
        error: AcmeCertsError,
        *,
        now: _dt.datetime,
        solvers: str,
        deferred_until: _dt.datetime | None = None,
    ) -> Failure:
        """An attempt (or the ledger before it) failed with ``error`` at ``now``.

        Invalid input parks the certificate until its spec changes; the ledger deferring
        without an instant holds it on the error backoff (never "now"); the ledger's
        deferral waits ``deferred_until`` (one token behind the others it deferred);
        anything else follows the attempt schedule, never waiting past a part of the
        time the certificate has left.
        """
        if isinstance(error, InvalidInput):
            # bad input will not get better by waiting: parked until the spec changes
            entry.state = dataclasses.replace(
                entry.state,
                next_attempt_at=None,
                last_error=f"{type(error).__name__}: {error}",
                last_error_kind=error.kind.value,
                parked=entry.spec.fingerprint,
                solvers=solvers,
            )
            return Failure("parked", None, self._save_state(entry))
        if isinstance(error, RateLimitDeferred) and error.retry_after is None:
            until = self.hiccup(entry, f"{type(error).__name__}: {error}", now)
            return Failure("held", until, self._save_state(entry))
        if isinstance(error, RateLimitDeferred):
            # predicted by the ledger, nothing sent: no escalation
            entry.state = dataclasses.replace(
                entry.state,
                next_attempt_at=deferred_until,
                last_error=f"{type(error).__name__}: {error}",
                last_error_kind=error.kind.value,
            )
        else:
            held = entry.certificate
            entry.state = self.schedule.after_failure(
                entry.state,
                error,
                now=now,
                rng=self._rng,
                expires_at=held.not_after if held is not None else None,
            )
        # another solver set is another attempt: this failure's wait is not its (for_solvers)
        entry.state = dataclasses.replace(entry.state, solvers=solvers)
        return Failure("retry", entry.state.next_attempt_at, self._save_state(entry))

    # -- holds --------------------------------------------------------------------------

    def hiccup(self, entry: Entry, reason: str, now: _dt.datetime) -> _dt.datetime:
        """A failure on our side at ``now``: hold ``entry`` back; returns the hold's end.

        The n-th hiccup in a row waits the n-th step of the error backoff. Only progress
        (:meth:`steady`) resets the count.
        """
        entry.hiccups += 1
        delay = self.error_backoff.delay(entry.hiccups, rng=self._rng)
        until = now + _dt.timedelta(seconds=delay)
        entry.hold_until = until
        entry.hold_reason = reason
        return until

    def steady(self, entry: Entry) -> None:
        """Progress was made for ``entry``: forget its hiccups."""
        entry.hiccups, entry.hold_until, entry.hold_reason = 0, None, None

    def ca_held(self, entry: Entry, until: _dt.datetime, reason: str) -> None:
        """The CA is failing: no work for ``entry`` before ``until`` (or the gate opens)."""
        entry.hold_until, entry.hold_reason = until, reason

    def ca_answers(self, entry: Entry, reason: str) -> bool:
        """The CA answers again: a hold for ``reason`` ends; whether ``entry`` had one."""
        if entry.hold_reason != reason:
            return False
        entry.hold_until, entry.hold_reason = None, None
        self.due.changed(entry)
        return True

    # -- renewal planning ---------------------------------------------------------------

    def renewal_planned(self, entry: Entry, fraction: float | None) -> _dt.datetime | None:
        """Before asking the CA for an ARI window: renew at the lifetime ``fraction``.

        Returns the renewal instant chosen from the CA's last window for this very
        certificate, kept if asking fails for a reason the CA may lift.
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
        return kept

    def first_check_planned(
        self,
        entry: Entry,
        fraction: float | None,
        now: _dt.datetime,
        longest: _dt.timedelta = FIRST_ARI_CHECK,
    ) -> bool:
        """A certificate just obtained: renew at the lifetime ``fraction`` until the CA is
        first asked for its ARI window, a while later (``longest`` at most).

        The window of a certificate the CA has just issued is its default one, which the
        lifetime fraction approximates; asking at once was one request per certificate
        more than issuing it (RFC 9773 asks for periodic checks, not one at issuance).
        The first check comes after the shorter of ``longest`` (by default the CA's usual
        ``Retry-After``, so the checks keep the cadence they had when the first came at
        issuance, and a fleet issued together shares its re-check ticks) and half the
        time until that fraction (each check well before the renewal it may move).
        Returns ``False`` (nothing changed) when there is no such time: ``longest`` is
        zero, or the certificate is due within minutes; its window is asked for now.
        """
        certificate = entry.certificate
        assert certificate is not None
        if longest <= _dt.timedelta(0) or certificate.not_after <= certificate.not_before:
            return False
        renew_at = fallback_renewal_time(
            certificate.not_before, certificate.not_after, fraction=fraction
        )
        room = renew_at - now
        if room <= 2 * ARI_MIN_RETRY:
            return False
        delay = min(longest, room / 2)
        entry.renew_at = renew_at
        entry.ari_replacement = None  # the request was about the certificate replaced
        entry.ari_recheck_at = on_recheck_grid(now + max(delay, ARI_MIN_RETRY))
        return True

    def window_unknown(self, entry: Entry, kept: _dt.datetime, recheck_at: _dt.datetime) -> None:
        """Asking for the window failed for a reason the CA may lift: the window the CA
        named stays, and it is asked again at ``recheck_at`` (on the grid)."""
        entry.renew_at = kept
        entry.ari_recheck_at = on_recheck_grid(recheck_at)

    def window_answered(
        self,
        entry: Entry,
        certificate: HeldCertificate | IssuedCertificate,
        result: RenewalInfoResult,
        now: _dt.datetime,
    ) -> ReplacementReason | None:
        """The CA named ``certificate``'s window at ``now``: renew in it (RFC 9773 §4.2).

        Returns why the CA asks for it to be replaced at once, the first time it asks
        (the request holds until the certificate is replaced). An answer about a
        certificate replaced meanwhile changes nothing.
        """
        if entry.certificate is not certificate:
            return None  # renewed while the CA answered: the answer is about the old one
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
            now if reason is not None else choose_renewal_time(result.info, now=now, rng=self._rng)
        )
        entry.ari_recheck_at = on_recheck_grid(result.retry_after)
        return reason if reason is not None and not announced else None

    def stretched(self, entry: Entry, asked_at: _dt.datetime, factor: float) -> None:
        """Another replica wrote ``entry``'s certificate: its re-check comes ``factor``
        times as late (see :class:`~acmecerts.manager._replicas.ReplicaRechecks`)."""
        recheck, held = entry.ari_recheck_at, entry.certificate
        if (
            factor == 1
            or recheck is None
            or held is None
            or entry.written_elsewhere != held.serial
            or entry.ari_replacement is not None  # the CA wants it replaced: not a poll
            or recheck <= asked_at
        ):
            return
        entry.ari_recheck_at = on_recheck_grid(asked_at + (recheck - asked_at) * factor)

    # -- time -------------------------------------------------------------------------------

    def time_passed(self, now: _dt.datetime) -> Tick:
        """It is ``now``: the work due (in order) and the next instant to look again."""
        start, wake = self.due.tick(now)
        return Tick(start, wake)


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
