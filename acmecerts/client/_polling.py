"""Polling: how the client waits for the CA between two looks at a resource.

One object, :class:`Polling`, holds the client's :class:`PollPolicy` and its clock, and
turns a ``check()`` into a wait that honours ``Retry-After`` with the policy's floor and
cap (never a tight loop) and ends at the attempt's deadline.
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

from acmecerts._time import Again, Backoff, Clock, poll_until
from acmecerts.errors import AttemptTimeout
from acmecerts.protocol._polling import PollPolicy

T = TypeVar("T")


class Polling:
    """The client's poll policy on its clock: :meth:`until` a check says done."""

    __slots__ = ("clock", "policy")

    def __init__(self, clock: Clock, policy: PollPolicy | None = None) -> None:
        self.clock = clock
        #: The pauses between two polls (``AcmeClient.poll``).
        self.policy = policy or PollPolicy()

    async def until(
        self, check: Callable[[], Awaitable[T | Again[T]]], deadline: _dt.datetime
    ) -> T:
        """``check()`` until it returns a value that is not :class:`Again`, paced by
        :attr:`policy` (an ``Again``'s ``Retry-After`` within its bounds); past
        ``deadline`` raises :class:`~acmecerts.errors.AttemptTimeout`."""
        return await poll_until(
            check,
            clock=self.clock,
            backoff=_poll_backoff(self.policy),
            deadline=deadline,
            on_deadline=lambda: AttemptTimeout(
                "the attempt deadline passed while waiting for the CA"
            ),
        )


@functools.lru_cache(maxsize=16)
def _poll_backoff(policy: PollPolicy) -> Backoff:
    """The :class:`~acmecerts._time.Backoff` of ``policy``: the same pauses, no jitter."""
    return Backoff(
        floor=policy.floor,
        cap=max(policy.max_interval, policy.floor),
        initial=policy.initial,
        multiplier=policy.multiplier,
        max_retry_after=policy.max_retry_after,
    )
