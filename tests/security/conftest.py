"""Fixtures of the security tests: an http-01 solver and a fault proxy for the session Pebble."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from acmecerts import Http01Server
from acmecerts.testing import PebbleServer


@pytest.fixture
async def http01(pebble: PebbleServer) -> AsyncIterator[Http01Server]:
    """An http-01 solver where the session Pebble validates (127.0.0.1:http_port)."""
    async with Http01Server(host="127.0.0.1", port=pebble.http_port) as solver:
        yield solver
