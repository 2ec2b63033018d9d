"""The issuance flow of RFC 8555 as a state machine with no I/O."""

from __future__ import annotations

import dataclasses

__all__ = ["PollPolicy"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PollPolicy:
    """How to poll an order or authorization that is still being processed.

    The server's ``Retry-After`` wins when it gives one (bounded by ``max_interval``
    scaled up to ``max_retry_after``); otherwise the interval starts at ``initial`` and
    grows by ``multiplier`` up to ``max_interval``. Never below ``floor``.
    """

    initial: float = 0.25
    multiplier: float = 1.6
    max_interval: float = 10.0
    floor: float = 0.05
    #: The longest server ``Retry-After`` honoured for a poll (a longer one is capped).
    max_retry_after: float = 600.0

    def interval(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before poll number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(max(self.floor, retry_after), self.max_retry_after)
        computed = self.initial * self.multiplier ** max(0, attempt - 1)
        return max(self.floor, min(self.max_interval, computed))
