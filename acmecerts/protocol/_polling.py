"""Polling: how long to wait before asking the CA again, within one deadline.

The one poll decision of acmecerts' client (:func:`next_poll`): the issuance flow
(:mod:`acmecerts.protocol._flow`) and the client's ``wait_order``/``wait_authorization``
both ask it. No I/O: the caller says what time it is and does the waiting.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt

from acmecerts._time import duration_seconds, growth_factor
from acmecerts.errors import AcmeCertsError, AttemptTimeout, InvalidInput

__all__ = ["Fail", "Poll", "PollPolicy", "next_poll"]

#: The durations of a :class:`PollPolicy` (seconds), and whether each must be more than 0.
_DURATIONS = (
    ("initial", True),
    ("max_interval", True),
    ("floor", False),
    ("max_retry_after", False),
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PollPolicy:
    """How to poll an order or authorization that is still being processed.

    The server's ``Retry-After`` wins when it gives one (up to ``max_retry_after``);
    otherwise the interval starts at ``initial`` and grows by ``multiplier`` up to
    ``max_interval``. Never below ``floor``, and never past the attempt's deadline.

    While the order stays ``pending`` after its challenges were answered, every
    ``authorization_look``-th poll fetches the authorizations still being validated
    instead of the order: a challenge the CA put back to ``pending`` with an ``error``
    (RFC 8555 §8.2: the CA retries only when asked) is answered again, until it was
    answered ``challenge_answers`` times in all; then the attempt fails with the CA's
    error. An order that is ready at the first poll costs no such look.
    """

    initial: float = 0.25
    multiplier: float = 1.6
    max_interval: float = 10.0
    floor: float = 0.05
    #: The longest server ``Retry-After`` honoured for a poll (a longer one is capped).
    max_retry_after: float = 600.0
    #: How many times one challenge is answered in all (the first answer included).
    challenge_answers: int = 3
    #: Every this-many-th poll of a pending order looks at its authorizations instead.
    authorization_look: int = 3

    def __post_init__(self) -> None:
        for name, positive in _DURATIONS:
            value = duration_seconds(getattr(self, name), f"PollPolicy.{name}", positive=positive)
            object.__setattr__(self, name, value)
        object.__setattr__(
            self, "multiplier", growth_factor(self.multiplier, "PollPolicy.multiplier")
        )
        for name in ("challenge_answers", "authorization_look"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"PollPolicy.{name} must be an integer >= 1, got {value!r}")

    def interval(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before poll number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(max(self.floor, retry_after), self.max_retry_after)
        computed = self.initial * self.multiplier ** max(0, attempt - 1)
        return max(self.floor, min(self.max_interval, computed))


@dataclasses.dataclass(frozen=True, slots=True)
class Poll:
    """Wait ``after`` seconds, then fetch ``url`` (POST-as-GET) and report what it says
    (with the answer's ``Retry-After``).

    ``resource`` says what ``url`` is: ``"order"`` or ``"authorization"``.
    """

    resource: str
    url: str
    after: float
    #: Why ``after``: ``"poll interval"``, or ``"the CA's Retry-After"`` when it decided.
    reason: str = dataclasses.field(default="poll interval", compare=False)

    def __str__(self) -> str:
        """``waiting 0.5 s before asking about the order URL again (poll interval)``."""
        return (
            f"waiting {self.after:.1f} s before asking about the {self.resource} {self.url} "
            f"again ({self.reason})"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Fail:
    """The attempt fails with ``error`` (raise it)."""

    error: AcmeCertsError


def next_poll(
    policy: PollPolicy,
    *,
    resource: str,
    url: str,
    attempt: int,
    retry_after: _dt.datetime | None,
    now: _dt.datetime,
    deadline: _dt.datetime,
) -> Poll | Fail:
    """Poll number ``attempt`` (1-based) of ``url``: after how long, or fail at the deadline.

    The server's ``Retry-After`` (an instant; one in the past counts as now) wins over the
    growing interval (:meth:`PollPolicy.interval`); the wait never reaches past the
    deadline, and once the deadline has passed the answer is
    :class:`~acmecerts.errors.AttemptTimeout`.
    """
    remaining = (deadline - now).total_seconds()
    if remaining <= 0:
        return Fail(AttemptTimeout("the attempt deadline passed while waiting for the CA"))
    seconds = max(0.0, (retry_after - now).total_seconds()) if retry_after is not None else None
    after = min(policy.interval(attempt, seconds), remaining)
    reason = "the CA's Retry-After" if retry_after is not None else "poll interval"
    return Poll(resource, url, after, reason)
