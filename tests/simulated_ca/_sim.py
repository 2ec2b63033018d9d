"""Helpers: the real AcmeClient against a SimulatedCA on a VirtualClock."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from acmecerts import AcmeClient, VirtualClock
from acmecerts.protocol.keys import AccountKey
from acmecerts.retry import RequestRetry
from acmecerts.testing.simulated_ca import SimulatedCA, SimulatedSolver
from acmecerts.transport import AcmeTransport

T = TypeVar("T")
START = _dt.datetime(2026, 12, 2, tzinfo=_dt.UTC)
#: One account key for every test (generating one costs ~0.1 ms, but keeps runs alike).
KEY = AccountKey.generate()


def client_for(ca: SimulatedCA, *, source: str | None = None, **kw: Any) -> AcmeClient:
    """The real client, talking to ``ca`` through the transport's exchange seam."""
    exchange = ca if source is None else ca.exchange_for(source)
    transport = AcmeTransport(
        ca.directory_url,
        client=exchange,
        clock=ca.clock,
        retry=kw.pop("retry", None),
        request_rates=kw.pop("request_rates", None),
    )
    return AcmeClient(
        ca.directory_url,
        transport=transport,
        clock=ca.clock,
        account_key=kw.pop("account_key", KEY),
        **kw,
    )


def no_retry() -> RequestRetry:
    """A transport that does not retry (to see the CA's first answer)."""
    return RequestRetry(max_attempts=1)


def run(
    body: Callable[[SimulatedCA, AcmeClient, SimulatedSolver], Awaitable[T]],
    *,
    start: _dt.datetime = START,
    client: dict[str, Any] | None = None,
    **ca_options: Any,
) -> tuple[T, SimulatedCA]:
    """Run ``body(ca, client, solver)`` on a fresh virtual clock; its result and the CA."""
    clock = VirtualClock(start)
    ca = SimulatedCA(clock, **ca_options)

    async def main() -> T:
        acme = client_for(ca, **(client or {}))
        return await body(ca, acme, SimulatedSolver(ca.published))

    return clock.run(main), ca
