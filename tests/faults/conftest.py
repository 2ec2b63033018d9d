"""Fixtures for the fault tests: a :class:`FaultProxy` in front of the session Pebble.

* ``proxy`` (defined in tests/conftest.py for every test): a fresh proxy (no rules,
  nothing recorded) in front of the session ``pebble``. Stopped after the test.
* ``http01``: an http-01 solver where the session Pebble validates (127.0.0.1:http_port).
* :func:`make_proxy` builds one by hand, e.g. to restart a proxy on the same port.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from acmecerts import Http01Server
from acmecerts.testing import PebbleServer
from tests.faults.proxy import make_proxy

__all__ = ["make_proxy"]


@pytest.fixture
async def http01(pebble: PebbleServer) -> AsyncIterator[Http01Server]:
    """An http-01 solver where the session Pebble validates (127.0.0.1:http_port)."""
    async with Http01Server(host="127.0.0.1", port=pebble.http_port) as solver:
        yield solver
