"""Fixtures for the rate-limit ledger tests: a fake clock, a ledger, a proxy, a solver."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import pytest

from acmecerts import FakeClock, Http01Server
from acmecerts.ratelimit import LETS_ENCRYPT, RateLimitLedger
from acmecerts.testing import PebbleServer

#: Where every fake clock of these tests starts.
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ACCOUNT = "https://ca.test/acme/acct/1"


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at :data:`T0`."""
    return FakeClock(T0)


@pytest.fixture
def ledger(clock: FakeClock) -> RateLimitLedger:
    """An in-memory ledger of Let's Encrypt's limits on the fake clock."""
    return RateLimitLedger(LETS_ENCRYPT, clock=clock)


@pytest.fixture
async def http01(pebble: PebbleServer) -> AsyncIterator[Http01Server]:
    """An http-01 solver where the session Pebble validates."""
    async with Http01Server(host="127.0.0.1", port=pebble.http_port) as solver:
        yield solver
