"""Shared fixtures: the anyio backend and real Pebble servers.

* ``anyio_backend``: ``"asyncio"``, so ``@pytest.mark.anyio`` tests run on asyncio.
* ``pebble``: one :class:`~acmecerts.testing.PebbleServer` for the whole session
  (``PEBBLE_VA_NOSLEEP=1``, no nonce rejection). Do not reconfigure or stop it.
* ``pebble_factory``: ``pebble_factory(**kwargs)`` starts a dedicated server with the given
  :class:`~acmecerts.testing.PebbleServer` options; all are stopped when the test ends.

Pebble is a hard requirement: without the binaries these fixtures fail, they never skip.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from acmecerts.testing import PebbleServer

if TYPE_CHECKING:
    from collections.abc import Iterator


class PebbleFactory(Protocol):
    """Starts a :class:`PebbleServer` with the given options (see its constructor)."""

    def __call__(self, **kwargs: Any) -> PebbleServer: ...


def _require_pebble() -> None:
    missing = [b for b in ("pebble", "pebble-challtestsrv") if shutil.which(b) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not found on PATH. The tests need a real Pebble: run "
            "`bash scripts/test.sh` (installs it) or `apt-get install -y pebble`.",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio only."""
    return "asyncio"


@pytest.fixture(scope="session")
def pebble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PebbleServer]:
    """A Pebble shared by the session: no VA sleeps, no nonce rejection."""
    _require_pebble()
    server = PebbleServer(
        tmp_path_factory.mktemp("pebble"), va_nosleep=True, nonce_reject_percent=0
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pebble_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PebbleFactory]:
    """Start custom Pebbles, e.g. ``pebble_factory(nonce_reject_percent=30)``; stopped after."""
    _require_pebble()
    servers: list[PebbleServer] = []

    def start(**kwargs: Any) -> PebbleServer:
        server = PebbleServer(tmp_path_factory.mktemp("pebble-custom"), **kwargs)
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
