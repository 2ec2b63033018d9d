"""Retry policy: pure decisions about when to try again (no network I/O).

Tight retry loops and fixed-interval retries are the main way ACME clients burn their
rate-limit quota. This module decides *whether* and *when* to retry; it never sends a
request itself. Two levels, each configured by a frozen, keyword-only dataclass:

**Request level** (:class:`RequestRetry`, driven by :func:`retry_request`): one HTTP
request to the CA, retried within seconds.

* ``badNonce`` (RFC 8555 §6.5) is replayed at once, without sleeping, up to
  ``max_bad_nonce`` times; the transport takes a fresh nonce inside the call.
* *transient* errors (connection errors, timeouts, 5xx) are retried with exponential
  backoff and full jitter: between ``floor`` and ``min(cap, floor * multiplier ** (attempt
  - 1))``. A POST that may have reached the CA is replayed only if idempotent. A host that
  does not exist (``ConnectError.unknown_host``) is not retried.
* *rate-limited* and *server-busy* errors are retried only when the CA said when
  (``retry_after``) and that is at most ``max_wait`` away; a longer wait is the caller's
  business (the attempt schedule, the rate-limit ledger), so the error is raised.
* the computed backoff never wins over a later ``Retry-After``: the CA is never asked
  sooner than it said.
* at most ``max_attempts`` calls (badNonce replays not counted); then the last error is
  raised as it is.

**Attempt level** (:class:`AttemptSchedule` and :class:`AttemptState`): whole issuance
attempts for one certificate, spaced minutes to a day apart. The default follows Let's
Encrypt's recommendation: 1 min, 10 min, 100 min, then every 24 h, each with ±10 %
jitter; a renewal never waits more than a quarter of the time its certificate has left
(not below 10 min). A later ``retry_after`` from the CA wins over the schedule; a transient
error the CA never answered does not escalate it. :class:`AttemptState` has a JSON form.

Request backoff is a :class:`~acmecerts._time.Backoff` slept by :func:`~acmecerts._time.poll_until`;
attempt schedules use tenacity's waits. Waits go through an injected
:class:`~acmecerts._time.Clock`; instants are aware UTC. See ``docs/retries.md``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import tenacity
import tenacity.wait

from acmecerts._time import (
    Again,
    Backoff,
    as_seconds,
    aware_utc,
    duration_seconds,
    growth_factor,
    poll_until,
)
from acmecerts.errors import (
    AcmeCertsError,
    BadNonce,
    ConnectError,
    ErrorKind,
    InvalidInput,
    StorageError,
    TransportError,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from acmecerts._time import Clock

__all__ = [
    "LETS_ENCRYPT_DELAYS",
    "AttemptSchedule",
    "AttemptState",
    "RequestRetry",
    "retry_request",
]

T = TypeVar("T")

_RNG = random.Random()
_RETRYING = tenacity.Retrying()
_MAX_ERROR_TEXT = 1000

#: Let's Encrypt's recommended spacing of failed issuance attempts, in seconds: 1 min,
#: 10 min, 100 min, then every 24 h (https://letsencrypt.org/docs/integration-guide/).
LETS_ENCRYPT_DELAYS: tuple[float, ...] = (60.0, 600.0, 6000.0, 86400.0)


def _call_state(attempt: int) -> tenacity.RetryCallState:
    """A tenacity call state for the wait strategies, which read ``attempt_number``."""
    state = tenacity.RetryCallState(_RETRYING, None, (), {})
    state.attempt_number = attempt
    return state


def _retry_after(error: AcmeCertsError) -> _dt.datetime | None:
    """The error's ``retry_after`` in UTC (a naive value is taken as UTC, not rejected)."""
    instant = error.retry_after
    return None if instant is None else aware_utc(instant, assume_utc=True)


def _add(now: _dt.datetime, seconds: float) -> _dt.datetime:
    try:
        return now + _dt.timedelta(seconds=seconds)
    except OverflowError:
        return _dt.datetime.max.replace(tzinfo=_dt.UTC)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestRetry:
    """How one HTTP request to the CA is retried (see :func:`retry_request`).

    Durations are seconds or ``timedelta`` (stored as float seconds). Every loop this
    drives has a floor, a cap, jitter and an attempt limit, and obeys ``Retry-After``::

        RequestRetry()                                   # the defaults below
        RequestRetry(max_attempts=3, cap=timedelta(seconds=10))
    """

    #: Calls of the request at most, the first included (badNonce replays not counted).
    max_attempts: int = 5
    #: The shortest backoff between two calls (> 0), and the top of the first window.
    floor: float | _dt.timedelta = 0.5
    #: The longest computed backoff (a later ``Retry-After`` may ask for more).
    cap: float | _dt.timedelta = 30.0
    #: How fast the backoff window grows: ``floor * multiplier ** (attempt - 1)``.
    multiplier: float = 2.0
    #: How many ``badNonce`` answers are replayed at once with a fresh nonce.
    max_bad_nonce: int = 10
    #: The longest ``Retry-After`` waited out inside one request; a longer one is raised.
    max_wait: float | _dt.timedelta = 60.0

    #: The backoff these fields make: full jitter between ``floor`` and the window's top.
    backoff: Backoff = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        floor = duration_seconds(self.floor, "floor")
        if floor <= 0:
            raise InvalidInput(f"floor must be > 0 (no tight loops), got {self.floor!r}")
        backoff = Backoff(
            floor=floor,
            cap=duration_seconds(self.cap, "cap"),
            multiplier=self.multiplier,
            jitter=1.0,
        )
        if self.max_attempts < 1:
            raise InvalidInput(f"max_attempts must be >= 1, got {self.max_attempts!r}")
        if self.max_bad_nonce < 0:
            raise InvalidInput(f"max_bad_nonce must be >= 0, got {self.max_bad_nonce!r}")
        object.__setattr__(self, "floor", backoff.floor)
        object.__setattr__(self, "cap", backoff.cap)
        object.__setattr__(self, "max_wait", duration_seconds(self.max_wait, "max_wait"))
        object.__setattr__(self, "backoff", backoff)

    def delay(
        self,
        attempt: int,
        *,
        retry_after: _dt.datetime | None,
        now: _dt.datetime,
        rng: random.Random | None = None,
    ) -> float:
        """Seconds to wait after the ``attempt``-th failed call (1 = the first).

        Full jitter in ``[floor, min(cap, floor * multiplier ** (attempt - 1))]``, unless
        ``retry_after`` is later: then exactly until it (never sooner than the CA said).

        Args:
            attempt: the number of the call that failed, from 1.
            retry_after: the instant the CA named (``Retry-After``), or ``None``.
            now: the current instant, timezone-aware.
            rng: the source of jitter (a seeded ``random.Random`` in tests).
        """
        if attempt < 1:
            raise InvalidInput(f"attempt counts from 1, got {attempt!r}")
        seconds = self.backoff.pause(attempt, rng=rng)
        if retry_after is not None:
            wait = (aware_utc(retry_after, "retry_after") - aware_utc(now, "now")).total_seconds()
            seconds = max(seconds, wait)
        return seconds

    def _decide(
        self,
        error: AcmeCertsError,
        *,
        attempt: int,
        idempotent: bool,
        now: _dt.datetime,
        rng: random.Random | None,
    ) -> float | None:
        """Seconds to sleep before the next call, or ``None``: raise ``error``."""
        if attempt >= self.max_attempts:
            return None
        if isinstance(error, ConnectError) and error.unknown_host is not None:
            return None
        retry_after = _retry_after(error)
        if retry_after is not None and (retry_after - now).total_seconds() > as_seconds(
            self.max_wait
        ):
            return None  # a long wait is the caller's decision (attempt schedule, ledger)
        if error.kind is ErrorKind.TRANSIENT:
            # A request that may have reached the CA may have had an effect there (an
            # order created, a rate limit spent); replay it only if that is harmless.
            if error.reached_ca and not idempotent:
                return None
        elif error.kind in (ErrorKind.RATE_LIMITED, ErrorKind.SERVER_BUSY):
            # The CA refused the request and said when to come back: safe to replay then.
            if retry_after is None:
                return None
        else:
            return None
        return self.delay(attempt, retry_after=retry_after, now=now, rng=rng)


async def retry_request(
    call: Callable[[], Awaitable[T]],
    *,
    policy: RequestRetry,
    clock: Clock,
    idempotent: bool,
    on_retry: Callable[[int, AcmeCertsError, float], None] | None = None,
    rng: random.Random | None = None,
) -> T:
    """Await ``call()`` until it succeeds or ``policy`` says to give up.

    Only :class:`~acmecerts.errors.AcmeCertsError` is handled (anything else, and
    cancellation, propagates at once). On such an error:

    * :class:`~acmecerts.errors.BadNonce`: call again at once, no sleep, up to
      ``policy.max_bad_nonce`` times (a counter of its own); ``call`` must take a fresh
      nonce each time.
    * kind ``TRANSIENT``: sleep :meth:`RequestRetry.delay` and call again, **if**
      ``idempotent`` is true or the error says the request never reached the CA
      (``reached_ca`` false). A POST that may have reached the CA (a timeout after
      sending ``newOrder`` or ``finalize``) is not blindly replayed: pass
      ``idempotent=True`` only for requests whose replay is harmless (GET, POST-as-GET,
      ``newNonce``, polling, a ``newAccount`` lookup).
    * kind ``RATE_LIMITED`` or ``SERVER_BUSY`` with a ``retry_after`` at most
      ``policy.max_wait`` away: sleep until then (or the backoff, if longer) and call
      again, whatever ``idempotent`` says, because the CA refused the request and named
      the time to come back.
    * anything else, a ``retry_after`` beyond ``policy.max_wait``, or the
      ``policy.max_attempts``-th failed call: the error is re-raised unchanged.

    Every sleep goes through ``clock.sleep``.

    Args:
        call: makes one request; called again for every retry.
        policy: the limits and backoff.
        clock: where the time comes from and how to sleep.
        idempotent: whether replaying a request that reached the CA is harmless.
        on_retry: called before each retry with the number of calls made so far
            (badNonce replays included), the error, and the seconds about to be slept.
        rng: the source of jitter (a seeded ``random.Random`` in tests).

    Returns:
        What ``call()`` returned.
    """
    calls = 0
    attempt = 0  # failed calls, badNonce replays not counted
    bad_nonces = 0

    async def once() -> T | Again[T]:
        nonlocal calls, attempt, bad_nonces
        calls += 1
        delay: float | None
        try:
            return await call()
        except BadNonce as exc:
            # RFC 8555 §6.5: "the client SHOULD retry the request using the new nonce".
            bad_nonces += 1
            if bad_nonces > policy.max_bad_nonce:
                raise
            error: AcmeCertsError = exc
            delay = 0.0
        except AcmeCertsError as exc:
            attempt += 1
            delay = policy._decide(
                exc, attempt=attempt, idempotent=idempotent, now=clock.now(), rng=rng
            )
            if delay is None:
                raise
            error = exc
        if on_retry is not None:
            on_retry(calls, error, delay)
        del error  # no reference cycle through the traceback while sleeping
        return Again(pause=delay)

    first = await once()  # outside the polling loop: nearly every request succeeds at once
    if not isinstance(first, Again):
        return first
    return await poll_until(once, clock=clock, backoff=policy.backoff, first=first)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttemptState:
    """Where one certificate stands in its :class:`AttemptSchedule` (plain data).

    ``AttemptState()`` is the fresh state: no failures, ready now. Keep one per
    certificate and persist it with :meth:`to_json` / :meth:`from_json`.
    """

    #: Failed attempts counted by the schedule since the last success.
    attempts: int = 0
    #: Not before this instant (UTC) may the next attempt start; ``None``: now.
    next_attempt_at: _dt.datetime | None = None
    #: A one-line description of the last failure, for people.
    last_error: str | None = None
    #: The :class:`~acmecerts.errors.ErrorKind` value of the last failure.
    last_error_kind: str | None = None
    #: Set when the input itself was found invalid: a fingerprint of that input (e.g.
    #: :attr:`CertificateSpec.fingerprint <acmecerts.manager.CertificateSpec.fingerprint>`).
    #: No attempt is made while the input is the same; another input starts afresh.
    parked: str | None = None
    #: A fingerprint of the solvers the last failure happened with (e.g.
    #: ``CertificateManager`` records its solvers' types): other solvers are another
    #: attempt, whose wait (or parking) this failure does not impose.
    solvers: str | None = None

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 0:
            raise InvalidInput(f"attempts must be an int >= 0, got {self.attempts!r}")
        if self.next_attempt_at is not None:
            if not isinstance(self.next_attempt_at, _dt.datetime):
                raise InvalidInput(f"next_attempt_at must be a datetime: {self.next_attempt_at!r}")
            object.__setattr__(
                self, "next_attempt_at", aware_utc(self.next_attempt_at, "next_attempt_at")
            )
        if self.last_error is not None and not isinstance(self.last_error, str):
            raise InvalidInput(f"last_error must be a str, got {self.last_error!r}")
        if self.parked is not None and not isinstance(self.parked, str):
            raise InvalidInput(f"parked must be a str, got {self.parked!r}")
        if self.solvers is not None and not isinstance(self.solvers, str):
            raise InvalidInput(f"solvers must be a str, got {self.solvers!r}")
        if self.last_error_kind is not None and (
            not isinstance(self.last_error_kind, str) or self.last_error_kind not in _KINDS
        ):
            raise InvalidInput(
                f"last_error_kind must be an ErrorKind value: {self.last_error_kind!r}"
            )

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (instants as ISO 8601 UTC strings)."""
        return {
            "attempts": self.attempts,
            "next_attempt_at": (
                None if self.next_attempt_at is None else self.next_attempt_at.isoformat()
            ),
            "last_error": self.last_error,
            "last_error_kind": self.last_error_kind,
            **({"parked": self.parked} if self.parked is not None else {}),
            **({"solvers": self.solvers} if self.solvers is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptState:
        """Rebuild a state from :meth:`to_json` output, validating every field.

        ``attempts`` is required; the other keys may be absent (``None``); unknown keys
        are ignored so that newer versions can add fields.

        Raises:
            StorageError: ``data`` is not such a dict (corrupt or tampered state).
        """
        if not isinstance(data, Mapping):
            raise StorageError(f"attempt state must be a JSON object, got {type(data).__name__}")
        if "attempts" not in data:
            raise StorageError("attempt state has no 'attempts'")
        raw_next = data.get("next_attempt_at")
        next_attempt_at: _dt.datetime | None = None
        if raw_next is not None:
            if not isinstance(raw_next, str):
                raise StorageError(f"next_attempt_at must be an ISO 8601 string: {raw_next!r}")
            try:
                next_attempt_at = _dt.datetime.fromisoformat(raw_next)
            except ValueError as exc:
                raise StorageError(f"next_attempt_at is not ISO 8601: {raw_next!r}") from exc
            if next_attempt_at.tzinfo is None:
                raise StorageError(f"next_attempt_at has no time zone: {raw_next!r}")
        try:
            return cls(
                attempts=data["attempts"],
                next_attempt_at=next_attempt_at,
                last_error=data.get("last_error"),
                last_error_kind=data.get("last_error_kind"),
                parked=data.get("parked"),
                solvers=data.get("solvers"),
            )
        except (InvalidInput, OverflowError) as exc:
            raise StorageError(f"corrupt attempt state: {exc}") from exc


_KINDS = frozenset(kind.value for kind in ErrorKind)


def _lets_encrypt_wait() -> tenacity.wait.wait_base:
    return tenacity.wait_chain(*(tenacity.wait_fixed(s) for s in LETS_ENCRYPT_DELAYS))


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttemptSchedule:
    """When the next issuance attempt for a certificate may start after a failure.
    The default is Let's Encrypt's recommendation, 1 min, 10 min, 100 min, then every
    24 h, each delay jittered by ±10 % so that a fleet does not retry in lockstep::

        AttemptSchedule()                                            # the default
        AttemptSchedule(jitter=0)                                    # exact delays
        AttemptSchedule.from_delays([30, 300, 3600], repeat_last=True)
        AttemptSchedule.exponential(base=60, multiplier=4, cap=timedelta(hours=12))

    Rules of :meth:`after_failure`: a *transient* error that never reached the CA does
    not escalate (the count stays, the next attempt comes after the first step); any
    other failure adds one to the count and waits that step; a renewal never waits more
    than ``expiry_fraction`` of the time its certificate has left (not below
    ``expiry_floor``); a later ``retry_after`` from the CA wins. :meth:`after_success`
    starts over.
    """

    #: A tenacity wait strategy; it is called with ``attempt_number`` = the failure
    #: count (1 = after the first failure) and returns the un-jittered delay in seconds.
    wait: tenacity.wait.wait_base = dataclasses.field(default_factory=_lets_encrypt_wait)
    #: Relative jitter: each delay is multiplied by a uniform factor in ``1 ± jitter``.
    jitter: float = 0.1
    #: Attempts in all before the schedule gives up (``None``: never gives up).
    max_attempts: int | None = None
    #: A renewal (``after_failure(expires_at=...)``) never waits more than this part of
    #: the time its certificate has left: a 6-day certificate with 30 h left tries again
    #: within 7.5 h, not 24 h. ``None``: no such cap.
    expiry_fraction: float | None = 0.25
    #: The shortest wait that cap makes (seconds or ``timedelta``; kept as seconds), so
    #: that the last hours before expiry do not spin; a shorter step stays as it is.
    expiry_floor: float | _dt.timedelta = 600.0

    def __post_init__(self) -> None:
        if not 0 <= self.jitter < 1:
            raise InvalidInput(f"jitter must be in [0, 1), got {self.jitter!r}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise InvalidInput(f"max_attempts must be >= 1 or None, got {self.max_attempts!r}")
        if self.expiry_fraction is not None and not 0 < self.expiry_fraction < 1:
            raise InvalidInput(f"expiry_fraction must be in (0, 1), got {self.expiry_fraction!r}")
        floor = duration_seconds(self.expiry_floor, "expiry_floor")
        if not 0 < floor < math.inf:
            raise InvalidInput(f"expiry_floor must be > 0 (no tight loops): {self.expiry_floor!r}")
        object.__setattr__(self, "expiry_floor", floor)

    @classmethod
    def from_delays(
        cls,
        delays: Sequence[float | _dt.timedelta],
        *,
        repeat_last: bool = True,
        jitter: float = 0.1,
    ) -> AttemptSchedule:
        """A schedule from explicit delays: the n-th failure waits ``delays[n-1]``.

        After the list, the last delay repeats (``repeat_last=True``) or the schedule
        is exhausted: at most ``len(delays) + 1`` attempts, then :meth:`ready` is false
        for good.
        """
        if not delays:
            raise InvalidInput("from_delays() needs at least one delay")
        seconds = [duration_seconds(d, "delay") for d in delays]
        return cls(
            wait=tenacity.wait_chain(*(tenacity.wait_fixed(s) for s in seconds)),
            jitter=jitter,
            max_attempts=None if repeat_last else len(seconds) + 1,
        )

    @classmethod
    def exponential(
        cls,
        *,
        base: float | _dt.timedelta = 60.0,
        multiplier: float = 10.0,
        cap: float | _dt.timedelta = _dt.timedelta(hours=24),
        jitter: float = 0.1,
        max_attempts: int | None = None,
    ) -> AttemptSchedule:
        """Exponential backoff: the n-th failure waits ``min(cap, base * multiplier**(n-1))``.

        The defaults give 1 min, 10 min, 100 min, ~16.7 h, then 24 h.
        """
        low = duration_seconds(base, "base")
        high = duration_seconds(cap, "cap")
        if high < low:
            raise InvalidInput(f"cap ({high} s) must not be below base ({low} s)")
        multiplier = growth_factor(multiplier, "multiplier")
        return cls(
            wait=tenacity.wait_exponential(multiplier=low, exp_base=multiplier, min=low, max=high),
            jitter=jitter,
            max_attempts=max_attempts,
        )

    def delay(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """Seconds to wait after the ``attempt``-th counted failure (1 = the first)."""
        if attempt < 1:
            raise InvalidInput(f"attempt counts from 1, got {attempt!r}")
        seconds = float(self.wait(_call_state(attempt)))
        if self.jitter:
            seconds *= (rng or _RNG).uniform(1 - self.jitter, 1 + self.jitter)
        return max(0.0, seconds)

    def exhausted(self, state: AttemptState) -> bool:
        """Whether the schedule allows no further attempt (only with ``max_attempts``)."""
        return self.max_attempts is not None and state.attempts >= self.max_attempts

    def capped(
        self,
        seconds: float,
        *,
        expires_at: _dt.datetime | None,
        now: _dt.datetime,
        rng: random.Random | None = None,
    ) -> float:
        """``seconds``, cut to :attr:`expiry_fraction` of the time until ``expires_at``.

        The cut is jittered down by up to ``jitter`` and never below :attr:`expiry_floor`;
        a shorter wait stays. No certificate, an expired one, or ``expiry_fraction``
        ``None``: the schedule as it is (an expired one is retried at its own pace).
        """
        if expires_at is None or self.expiry_fraction is None:
            return seconds
        left = (aware_utc(expires_at, "expires_at") - aware_utc(now, "now")).total_seconds()
        cap = left * self.expiry_fraction
        if left <= 0 or seconds <= cap:
            return seconds
        if self.jitter:
            cap *= (rng or _RNG).uniform(1 - self.jitter, 1)
        return min(seconds, max(as_seconds(self.expiry_floor), cap))

    def after_failure(
        self,
        state: AttemptState,
        error: AcmeCertsError,
        *,
        now: _dt.datetime,
        rng: random.Random | None = None,
        expires_at: _dt.datetime | None = None,
    ) -> AttemptState:
        """The state after an attempt failed with ``error`` at ``now``.

        * ``error.kind`` is ``TRANSIENT``, ``error.reached_ca`` is false and no HTTP
          status was answered (no connection): ``attempts`` stays, the next attempt
          comes after the first step's delay. A ``503`` escalates.
        * otherwise ``attempts + 1``, and the next attempt comes after that step.
        * ``expires_at`` (a renewal: when the certificate it replaces expires): that
          delay is cut to :attr:`expiry_fraction` of the time left (:meth:`capped`).
        * a ``retry_after`` later than that wins, also over the cut: the CA said when.
        * once :meth:`exhausted`, ``next_attempt_at`` is ``None`` and :meth:`ready`
          stays false.
        """
        now = aware_utc(now, "now")
        # a 503 the CA answered (reached_ca false: nothing spent) is the CA failing: it
        # escalates like any answer; no answer (a proxy's to CONNECT is none) does not
        answered = getattr(error, "status_code", None) is not None
        answered = answered and not isinstance(error, TransportError)
        if error.kind is ErrorKind.TRANSIENT and not error.reached_ca and not answered:
            attempts, step = state.attempts, 1
        else:
            attempts = state.attempts + 1
            step = attempts
        text = f"{type(error).__name__}: {error}"
        new = AttemptState(
            attempts=attempts,
            next_attempt_at=None,
            last_error=text[:_MAX_ERROR_TEXT],
            last_error_kind=error.kind.value,
        )
        if self.exhausted(new):
            return new
        delay = self.capped(self.delay(step, rng=rng), expires_at=expires_at, now=now, rng=rng)
        next_attempt_at = _add(now, delay)
        retry_after = _retry_after(error)
        if retry_after is not None and retry_after > next_attempt_at:
            next_attempt_at = retry_after
        return dataclasses.replace(new, next_attempt_at=next_attempt_at)

    def after_success(self, state: AttemptState | None = None) -> AttemptState:
        """The state after a successful attempt: the fresh ``AttemptState()``."""
        return AttemptState()

    def ready(self, state: AttemptState, now: _dt.datetime) -> bool:
        """Whether an attempt may start at ``now``."""
        if self.exhausted(state):
            return False
        return state.next_attempt_at is None or aware_utc(now, "now") >= state.next_attempt_at

    def wait_seconds(self, state: AttemptState, now: _dt.datetime) -> float:
        """Seconds from ``now`` until an attempt may start (0 if ready, inf if exhausted)."""
        if self.exhausted(state):
            return math.inf
        if state.next_attempt_at is None:
            return 0.0
        return max(0.0, (state.next_attempt_at - aware_utc(now, "now")).total_seconds())
