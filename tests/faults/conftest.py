"""Fixtures for the fault tests: a :class:`FaultProxy` in front of the session Pebble.

* ``proxy``: a fresh proxy (no rules, nothing recorded) for each test, in front of the
  session ``pebble``; point clients at ``proxy.directory_url``. Stopped after the test.
* ``http01``: an http-01 solver where the session Pebble validates (127.0.0.1:http_port).
* :func:`make_proxy` builds one by hand, e.g. to restart a proxy on the same port.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from acmecerts import Http01Server
from acmecerts.testing import PebbleServer
from tests.faults.proxy import FaultProxy


def make_proxy(pebble: PebbleServer, *, port: int = 0) -> FaultProxy:
    """A (not yet started) proxy in front of ``pebble``, with Pebble's TLS certificate."""
    return FaultProxy(
        pebble.directory_url,
        certfile=pebble.tls_cert_path,
        keyfile=pebble.tls_key_path,
        upstream_ca=pebble.ca_bundle,
        port=port,
    )


@pytest.fixture
def proxy(pebble: PebbleServer) -> Iterator[FaultProxy]:
    """A running proxy in front of the session Pebble, with no rules yet."""
    with make_proxy(pebble) as running:
        yield running


@pytest.fixture
async def http01(pebble: PebbleServer) -> AsyncIterator[Http01Server]:
    """An http-01 solver where the session Pebble validates (127.0.0.1:http_port)."""
    async with Http01Server(host="127.0.0.1", port=pebble.http_port) as solver:
        yield solver
