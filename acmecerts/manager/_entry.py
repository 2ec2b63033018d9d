"""One managed certificate's record in the manager, and when it next needs work.

:class:`Entry` is what the manager knows of a certificate (its spec, the certificate it
holds, its attempt state, holds and timers); :func:`due_at` is the explicit next instant
every managed certificate has (or ``None`` when no work is left: cancelled, parked,
exhausted). Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as _dt
import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cryptography import x509

from acmecerts._issued import IssuedCertificate
from acmecerts.errors import ErrorKind
from acmecerts.manager._held import HeldCertificate, hold
from acmecerts.manager._spec import (
    CertificateSpec,
    CertificateState,
    CertificateStatus,
    IssueResult,
)
from acmecerts.protocol.ari import RenewalInfoResult, ReplacementReason
from acmecerts.retry import AttemptSchedule, AttemptState
from acmecerts.solvers._base import Solver

if TYPE_CHECKING:
    from acmecerts.manager._attempts import Flight

#: The queue time of work due at once (a new certificate): before any other instant.
AT_ONCE = _dt.datetime.min.replace(tzinfo=_dt.UTC)
#: Held certificates handed out recently, as :class:`IssuedCertificate` objects.
_MAX_HANDED_OUT = 256


@dataclasses.dataclass(eq=False, slots=True)
class Entry:
    spec: CertificateSpec
    #: The current certificate, held compactly (see :class:`HeldCertificate`).
    certificate: HeldCertificate | IssuedCertificate | None = None
    state: AttemptState = dataclasses.field(default_factory=AttemptState)
    renew_at: _dt.datetime | None = None
    #: ARI: when to ask the CA again for the renewal window.
    ari_recheck_at: _dt.datetime | None = None
    #: ARI: the CA's last answer for the current certificate (its ``cert_id`` says which).
    ari_answer: RenewalInfoResult | None = None
    #: ARI: the CA asked for this certificate to be replaced at once, and why.
    ari_replacement: ReplacementReason | None = None
    #: The certificate's identifiers changed: issue again even though one is valid.
    stale: bool = False
    cancelled: str | None = None
    #: The attempt in the air (an anyio object the core holds but never touches).
    flight: Flight | None = None
    #: Bumped on every cancel, so work started before a cancel never starts an order.
    generation: int = 0
    #: Whether stored state (certificate, attempt state) was read.
    loaded: bool = False
    #: Position in the manager's declaration order (the schedule's last tie-breaker).
    seq: int = 0
    #: Failures of our own side in a row (owner check, storage, no progress): each one
    #: holds the certificate back on the manager's ``error_backoff``.
    hiccups: int = 0
    #: No work before this instant (the current hiccup's backoff), ``None``: no hold.
    hold_until: _dt.datetime | None = None
    #: Why the last hiccup happened, for people (``status()``).
    hold_reason: str | None = None
    #: The spec changed: ``state`` was reset here and is newer than the stored one.
    state_changed: bool = False
    #: The serial of a certificate another replica wrote while this manager ran (read
    #: from the store in place of the one held): its ARI re-check is stretched.
    written_elsewhere: str | None = None


class HandedOut:
    """The :class:`IssuedCertificate` objects made of held certificates recently.

    A certificate is kept compactly (:class:`HeldCertificate`); :meth:`issued` hands out
    the same object for one while it is among the last :data:`_MAX_HANDED_OUT`.
    """

    def __init__(self) -> None:
        self._recent: collections.OrderedDict[HeldCertificate, IssuedCertificate] = (
            collections.OrderedDict()
        )

    def issued(self, certificate: HeldCertificate | IssuedCertificate) -> IssuedCertificate:
        """``certificate`` as an :class:`IssuedCertificate` (the same object for a while)."""
        if isinstance(certificate, IssuedCertificate):
            return certificate
        issued = self._recent.get(certificate)
        if issued is None:
            issued = self._recent[certificate] = certificate.issued()
            if len(self._recent) > _MAX_HANDED_OUT:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(certificate)
        return issued

    def hold(self, certificate: IssuedCertificate) -> HeldCertificate | IssuedCertificate:
        """The form ``certificate`` is kept in; :meth:`issued` hands out ``certificate``."""
        held = hold(certificate)
        if isinstance(held, HeldCertificate):
            self._recent[held] = certificate
            if len(self._recent) > _MAX_HANDED_OUT:
                self._recent.popitem(last=False)
        return held


def parked(entry: Entry) -> bool:
    """Whether ``entry``'s input was found invalid and has not changed since."""
    return entry.state.parked is not None and entry.state.parked == entry.spec.fingerprint


def current(entry: Entry, now: _dt.datetime) -> bool:
    """Whether ``entry`` has a certificate that is not stale and not yet due at ``now``."""
    if entry.certificate is None or entry.stale:
        return False
    renew_at = entry.renew_at or entry.certificate.not_after
    return now < renew_at


def due_at(entry: Entry, schedule: AttemptSchedule, now: _dt.datetime) -> _dt.datetime | None:
    """When ``entry`` next needs work (``now`` for a new certificate), or ``None``.

    ``None`` means no work at all: cancelled, parked (invalid input, until the spec
    changes) or the attempt schedule is exhausted. Otherwise the latest of what
    holds it back wins: the renewal time or ARI re-check, the attempt schedule (and
    the CA's ``Retry-After`` or the ledger, recorded in it), and a hiccup's hold.
    """
    if entry.cancelled is not None or parked(entry):
        return None
    if schedule.exhausted(entry.state):
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


def queue_time(entry: Entry, schedule: AttemptSchedule, now: _dt.datetime) -> _dt.datetime | None:
    """When ``entry`` is due in the queue (:data:`AT_ONCE` for "now"), or ``None``."""
    due = due_at(entry, schedule, now)
    if due is None:
        return None
    if (
        (entry.certificate is None or entry.stale)
        and entry.state.next_attempt_at is None
        and entry.hold_until is None
    ):
        return AT_ONCE  # never tried: due whenever asked, before timed work
    return due


def status_of(entry: Entry, schedule: AttemptSchedule, now: _dt.datetime) -> CertificateStatus:
    """Where ``entry`` stands at ``now``: its state, next instant and last error."""
    state = entry.state
    reason = state.last_error
    certificate = entry.certificate
    kind: CertificateState
    if entry.cancelled is not None:
        kind, reason = CertificateState.CANCELLED, entry.cancelled
    elif parked(entry):
        kind = CertificateState.PARKED
    elif schedule.exhausted(state):
        kind = CertificateState.EXHAUSTED
    elif entry.flight is not None:
        kind = CertificateState.IN_FLIGHT
    elif entry.hold_until is not None:
        kind, reason = CertificateState.HELD, entry.hold_reason
    elif state.next_attempt_at is not None:
        kind = CertificateState.RETRYING
    elif current(entry, now):
        kind = CertificateState.CURRENT
    else:
        kind = CertificateState.PENDING
    return CertificateStatus(
        name=entry.spec.name,
        state=kind,
        next_at=due_at(entry, schedule, now),
        attempts=state.attempts,
        reason=reason,
        serial=certificate.serial if certificate is not None else None,
        not_after=certificate.not_after if certificate is not None else None,
        renew_at=entry.renew_at,
    )


def progress_mark(entry: Entry) -> tuple[object, ...]:
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


def after_spec_change(state: AttemptState) -> AttemptState:
    """The attempt state for a changed spec: fresh, but a wait the CA imposed holds."""
    imposed = state.last_error_kind in (ErrorKind.RATE_LIMITED.value, ErrorKind.SERVER_BUSY.value)
    if imposed and state.next_attempt_at is not None:
        return AttemptState(
            next_attempt_at=state.next_attempt_at,
            last_error=state.last_error,
            last_error_kind=state.last_error_kind,
        )
    return AttemptState()


#: How an earlier acmecerts stored the CA offering only types no solver answers: parked,
#: as if the input were invalid (it is retried now; see :func:`for_solvers`).
_PARKED_FOR_OFFER = "UnsupportedChallenge: the CA offers "


def solver_fingerprint(solvers: Iterable[Solver]) -> str:
    """A short digest of which solvers answer (each one's challenge type and class)."""
    kinds = sorted(
        {f"{s.challenge_type} {type(s).__module__}.{type(s).__qualname__}" for s in solvers}
    )
    return hashlib.sha256("\n".join(kinds).encode("utf-8")).hexdigest()[:16]


def for_solvers(state: AttemptState, fingerprint: str) -> AttemptState:
    """The attempt state under the solvers of ``fingerprint``.

    A failure (or parking) under other solvers says nothing of these: the state is reset
    as for a spec change (:func:`after_spec_change`: a wait the CA imposed holds). A state
    an earlier acmecerts parked because the CA offered only types no solver answered is
    reset too: that failure is the CA's choice, never stored for good.
    """
    if state.solvers is not None and state.solvers != fingerprint:
        return after_spec_change(state)
    if state.parked is not None and (state.last_error or "").startswith(_PARKED_FOR_OFFER):
        return after_spec_change(state)
    return state


def leaf(certificate: HeldCertificate | IssuedCertificate) -> x509.Certificate:
    """The leaf certificate of a held or issued certificate."""
    if isinstance(certificate, IssuedCertificate):
        return certificate.chain.leaf
    return certificate.leaf()


def for_name(result: IssueResult, name: str) -> IssueResult:
    """A joined flight's result, reported under the joining certificate's name."""
    if result.name == name:
        return result
    return dataclasses.replace(result, name=name)
