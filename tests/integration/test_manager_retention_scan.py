"""The daily listing of retired records reads only what is new to the manager.

Against a real Pebble and a real FileStorage, on a FakeClock. A fleet whose deleted
services are kept for the retention used to read every retired record again at every
listing (every 6 hours): about one store read per retired certificate four times a day,
which the fleet simulator's churn scenario measured at 1.4 store operations per
certificate-day at rest. Now a listing reads only the records another replica wrote.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from acmecerts import Http01Server
from acmecerts._time import FakeClock
from acmecerts.storage import FileStorage, StoredValue
from acmecerts.testing import PebbleServer
from tests.integration.test_manager_retention import (
    Orders,
    client_for,
    issue,
    manager_for,
    retired_records,
)

pytestmark = pytest.mark.anyio


class Reads:
    """A FileStorage that counts its ``list`` and ``load`` calls on retired records."""

    def __init__(self, inner: FileStorage) -> None:
        self.inner = inner
        self.lists = 0
        self.retired_loads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def list(self, prefix: str) -> list[str]:
        self.lists += 1
        return await self.inner.list(prefix)

    async def load(self, key: str) -> StoredValue | None:
        if "retired/" in key:
            self.retired_loads += 1
        return await self.inner.load(key)


@pytest.mark.timeout(60)
async def test_a_listing_reads_only_the_records_another_replica_wrote(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    clock = FakeClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC))
    orders = Orders()
    async with (
        FileStorage(tmp_path) as inner,
        client_for(pebble, clock, orders) as client_a,
        client_for(pebble, clock, orders) as client_b,
    ):
        storage = Reads(inner)
        replica_a = manager_for(client_a, http01, storage)  # type: ignore[arg-type]
        replica_b = manager_for(client_b, http01, inner)
        retired = replica_a._retired
        assert retired is not None
        await retired.scan()  # the first listing (nothing yet)
        retired_at = []
        for n in range(3):
            name = f"scan{n}.retention.example.test"
            await issue(replica_a, name, [name])
            await replica_a.unmanage(name)
            retired_at.append(clock.now())
        assert len(retired_records(tmp_path)) == 3
        lists, loads = storage.lists, storage.retired_loads
        # a day later the records are listed again: A wrote all three, reads none
        clock.advance(dt.timedelta(days=1))
        assert await retired.purge_due(clock.now()) == 0
        assert storage.lists == lists + 1
        assert storage.retired_loads == loads
        assert retired.next_purge_at() == retired_at[0] + dt.timedelta(days=7)
        # replica B retires a certificate of its own: A's next listing reads that one
        other = "other.retention.example.test"
        await issue(replica_b, other, [other])
        await replica_b.unmanage(other)
        retired_b_at = clock.now()
        clock.advance(dt.timedelta(days=1))
        assert await retired.purge_due(clock.now()) == 0
        assert storage.lists == lists + 2
        assert storage.retired_loads == loads + 1
        # and A purges B's retired certificate when it is due, as its own
        clock.advance(retired_b_at + dt.timedelta(days=7) - clock.now())
        assert await retired.purge_due(clock.now()) == 4
        assert retired_records(tmp_path) == []
    assert len(orders) == 4
