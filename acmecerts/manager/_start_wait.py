"""Waiting out a CA's ``Retry-After`` at the start of work, within a budget.

Before anything is ordered (directory, ``newNonce``, ``newAccount``, an account lookup)
a CA may answer ``rateLimited`` or 503 with the instant to come back. A run that may
wait a while (the CLI's ``--max-wait``) waits for that instant and calls again; an
instant past its budget stops the run at once, with nothing ordered:
:func:`call_within_wait`, which raises :class:`WaitBeyondBudget` then.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Awaitable, Callable
from typing import TypeVar

from acmecerts._time import Clock, SystemClock
from acmecerts.errors import AcmeCertsError, ErrorKind, RateLimitDeferred
from acmecerts.retry import RequestRetry, retry_request

__all__ = ["WaitBeyondBudget", "call_within_wait", "told_to_wait"]

T = TypeVar("T")
#: Calls of one start-up request at most (the first included) while waiting within the
#: budget; every wait is the CA's ``Retry-After`` or longer.
_MAX_START_CALLS = 20
#: Sleep this much past the instant the CA named, so "not before" holds.
_MARGIN = 0.05


class WaitBeyondBudget(Exception):
    """The CA asked to wait until ``until`` (its answer: ``error``), past the budget of
    :func:`call_within_wait`. Nothing was sent after that answer."""

    def __init__(self, error: AcmeCertsError, until: _dt.datetime) -> None:
        super().__init__(str(error))
        self.error = error
        self.until = until


class _AsItIs(Exception):
    """Wraps an error that waiting does not cure (raised unchanged, not retried)."""

    def __init__(self, error: AcmeCertsError) -> None:
        super().__init__(str(error))
        self.error = error


def told_to_wait(error: AcmeCertsError) -> _dt.datetime | None:
    """The instant a ``rateLimited``/503 answer named (``Retry-After``, made aware in
    UTC), else ``None``; never for :class:`~acmecerts.errors.RateLimitDeferred` (the
    rate-limit ledger's own deferral, not the CA's)."""
    if error.kind not in (ErrorKind.RATE_LIMITED, ErrorKind.SERVER_BUSY):
        return None
    if error.retry_after is None or isinstance(error, RateLimitDeferred):
        return None
    until = error.retry_after
    return until if until.tzinfo is not None else until.replace(tzinfo=_dt.UTC)


async def call_within_wait(
    call: Callable[[], Awaitable[T]],
    *,
    max_wait: float,
    on_wait: Callable[[float, AcmeCertsError], None] | None = None,
    clock: Clock | None = None,
) -> T:
    """Await ``call()``; when the CA answers ``rateLimited`` or 503 with a
    ``Retry-After``, wait for that instant and call again, as long as the waits end
    within ``max_wait`` seconds from now.

    The waits are :func:`acmecerts.retry.retry_request`'s (the transport's policy, with
    ``max_wait`` as its bound): never sooner than the CA said, never a tight loop, 20
    calls at most. ``on_wait(delay, error)`` is called before each wait (a countdown).

    Raises:
        WaitBeyondBudget: the CA named an instant past the budget (at once), or still
            refused after the last call.
        AcmeCertsError: any other error, as it is.
    """
    clock = clock or SystemClock()
    budget_end = clock.now() + _dt.timedelta(seconds=max_wait + _MARGIN)

    async def attempt() -> T:
        try:
            return await call()
        except AcmeCertsError as exc:
            until = told_to_wait(exc)
            if until is None:
                raise _AsItIs(exc) from exc
            if until > budget_end:
                raise WaitBeyondBudget(exc, until) from exc
            raise  # retry_request waits until then and calls again

    def waiting(calls: int, error: AcmeCertsError, delay: float) -> None:
        if on_wait is not None:
            on_wait(delay, error)

    policy = RequestRetry(max_wait=max_wait + _MARGIN, max_attempts=_MAX_START_CALLS)
    try:
        return await retry_request(
            attempt, policy=policy, clock=clock, idempotent=True, on_retry=waiting
        )
    except _AsItIs as wrapped:
        raise wrapped.error from wrapped.error.__cause__
    except AcmeCertsError as exc:  # still refused after _MAX_START_CALLS calls
        told = told_to_wait(exc)
        if told is None:
            raise
        raise WaitBeyondBudget(exc, told) from exc
