"""The simulated CA seen from one client address (its own per-IP limits)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from acmecerts.transport import Answer

if TYPE_CHECKING:
    from acmecerts.testing.simulated_ca._server import SimulatedCA

__all__ = ["SourceExchange"]


class SourceExchange:
    """The CA seen from one source address (an :class:`HttpExchange`)."""

    def __init__(self, ca: SimulatedCA, source: str) -> None:
        self.ca = ca
        self.source = source

    async def exchange(
        self, method: str, url: httpx.URL, headers: Any, body: bytes, timeouts: Any
    ) -> Answer:
        """Answer one request as from :attr:`source`."""
        return await self.ca.answer(method, url, body, self.source)

    async def aclose(self) -> None:
        """Nothing to release."""
