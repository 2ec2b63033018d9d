"""Issuance attempts spaced by an :class:`~acmecerts.retry.AttemptSchedule`.

:func:`issue_with_retries` is the loop a long-running program wants for one
certificate: try, and after a failure wait as the schedule says (1 min, 10 min, 100 min,
then daily by default; for a renewal never more than a quarter of the time its
certificate has left) or as long as the CA's ``Retry-After`` says, whichever is later,
then try again. Each attempt runs under the client's per-attempt deadline. The schedule
state is handed to ``on_state`` after every change so it can be persisted and the
schedule survives a restart.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Again, Backoff, poll_until
from acmecerts.client import AcmeClient
from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.retry import AttemptSchedule, AttemptState

__all__ = ["StateHook", "issue_with_retries"]

log = logging.getLogger("acmecerts.attempts")

#: Called with the new :class:`AttemptState` whenever it changes (persist it here).
StateHook = Callable[[AttemptState], Awaitable[None]]

_SCHEDULE_ONLY = Backoff(floor=0.0, cap=0.0)


async def issue_with_retries(
    client: AcmeClient,
    names: Iterable[str],
    *,
    schedule: AttemptSchedule | None = None,
    state: AttemptState | None = None,
    on_state: StateHook | None = None,
    expires_at: datetime.datetime | None = None,
    **issue_options: Any,
) -> IssuedCertificate:
    """Issue a certificate, retrying failed attempts on ``schedule``.

    Args:
        client: The client (its clock does all the waiting).
        names: The identifiers.
        schedule: When to try again (default: Let's Encrypt's 1 min, 10 min, 100 min,
            24 h with jitter).
        state: Where a previous run left off (e.g. loaded from storage): an attempt is
            not started before ``state.next_attempt_at``.
        on_state: Awaited with each new state (after a failure, and the fresh state
            after success).
        expires_at: For a renewal, when the certificate it replaces expires: no wait
            is longer than the schedule's ``expiry_fraction`` (a quarter) of the time
            left then (:meth:`AttemptSchedule.capped`; the CA's ``Retry-After`` wins).
        issue_options: Passed to :meth:`AcmeClient.issue` (``solver``, ``key_type``...).

    Raises:
        InvalidInput: at once; bad input is not retried.
        AcmeCertsError: the last attempt's error once the schedule is exhausted
            (``AttemptSchedule(max_attempts=...)``); with the default schedule it keeps
            trying until cancelled.
    """
    schedule = schedule or AttemptSchedule()
    current = state or AttemptState()
    name_list = list(names)
    clock = client.clock
    first = True

    def pause() -> Again[IssuedCertificate]:
        wait = schedule.wait_seconds(current, clock.now())
        if wait > 0:
            log.info("next attempt for %s in %.0f s", name_list, wait)
        return Again(pause=wait)

    async def attempt() -> IssuedCertificate | Again[IssuedCertificate]:
        nonlocal current, first
        if first:
            first = False
            waiting = pause()
            if waiting.pause:
                return waiting  # where a previous run left off
        try:
            issued = await client.issue(name_list, **issue_options)
        except InvalidInput:
            raise
        except AcmeCertsError as exc:
            current = schedule.after_failure(current, exc, now=clock.now(), expires_at=expires_at)
            log.warning(
                "attempt %d for %s failed (%s): %s",
                current.attempts,
                name_list,
                exc.kind.value,
                exc,
            )
            if on_state is not None:
                await on_state(current)
            if schedule.exhausted(current):
                raise
            return pause()
        current = schedule.after_success(current)
        if on_state is not None:
            await on_state(current)
        return issued

    # every pause is the schedule's (``Again.pause``): the backoff is never consulted
    return await poll_until(attempt, clock=clock, backoff=_SCHEDULE_ONLY)
