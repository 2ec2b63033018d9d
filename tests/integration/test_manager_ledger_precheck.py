"""A certificate the rate-limit ledger would refuse is deferred before the store's lock.

Against a real Pebble 2.10, on a :class:`FakeClock`: the ledger allows one new order an
hour. The second certificate's order does not fit, so the manager defers it to the
instant the ledger names, without taking its store lock, reading its stored files under
it, or writing an order intent (issue #26: in the fleet simulation ~700 of ~2,300
attempts took the lock and made a key, a CSR and an intent only to be refused). When the
budget refills, it is issued.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from acmecerts import AcmeClient, Http01Server
from acmecerts._time import FakeClock
from acmecerts.manager import (
    CertificateDeferred,
    CertificateEvent,
    CertificateManager,
    CertificateSpec,
    CertificateState,
    DeferredResult,
    IssuedResult,
)
from acmecerts.ratelimit import Limit, RateLimitLedger, RateLimitModel, Scope
from acmecerts.storage import FileStorage, KeyLayout, StoredValue
from acmecerts.storage.keys import certificate_slug
from acmecerts.testing import PebbleServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

HOUR = 3600.0
FIRST = "first.precheck.example.test"
SECOND = "second.precheck.example.test"


class RecordingStorage(FileStorage):
    """A real FileStorage that records every operation as ``(kind, key)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, str]] = []

    async def load(self, key: str) -> StoredValue | None:
        self.calls.append(("load", key))
        return await super().load(key)

    async def store(self, key: str, data: bytes, **kwargs: Any) -> str:
        self.calls.append(("store", key))
        return await super().store(key, data, **kwargs)

    async def delete(self, key: str, **kwargs: Any) -> bool:
        self.calls.append(("delete", key))
        return await super().delete(key, **kwargs)

    def lock(self, name: str, **kwargs: Any) -> Any:
        self.calls.append(("lock", name))
        return super().lock(name, **kwargs)

    def of(self, name: str, kind: str | None = None) -> list[tuple[str, str]]:
        """The calls about certificate ``name`` (of ``kind``, if given)."""
        slug = certificate_slug(name)
        return [c for c in self.calls if slug in c[1] and kind in (None, c[0])]


@pytest.mark.parametrize("stored_ledger", [False, True])
async def test_a_deferred_certificate_takes_no_lock_and_writes_no_order_intent(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path, stored_ledger: bool
) -> None:
    clock = FakeClock()
    model = RateLimitModel(
        [Limit("new_orders_per_account", 1, HOUR, Scope.ACCOUNT)], name="one-an-hour"
    )
    async with (
        RecordingStorage(tmp_path) as storage,
        AcmeClient(
            pebble.directory_url,
            ca_bundle=pebble.ca_bundle,
            clock=clock,
            ledger=RateLimitLedger(
                model,
                clock=clock,
                # in the store: asked from its cached state, a refusal read again
                storage=storage if stored_ledger else None,
                key=KeyLayout(pebble.directory_url).ledger() if stored_ledger else None,
            ),
        ) as client,
    ):
        manager = CertificateManager(client, solvers=[http01], clock=clock, storage=storage)
        [first] = await manager.issue_many([FIRST])  # spends the hour's one order
        assert isinstance(first, IssuedResult)
        events: list[CertificateEvent] = []
        manager.subscribe(events.append)
        start = clock.now()
        [result] = await manager.issue_many([CertificateSpec.of(SECOND, profile="shortlived")])
        assert isinstance(result, DeferredResult)
        assert [type(e).__name__ for e in events] == ["CertificateDeferred"]
        deferred = events[0]
        assert isinstance(deferred, CertificateDeferred)
        assert deferred.name == SECOND
        assert deferred.until == result.until
        assert start + dt.timedelta(minutes=59) <= deferred.until
        assert deferred.until <= start + dt.timedelta(hours=1, seconds=1)
        status = manager.status(SECOND)
        assert status is not None
        assert status.state is CertificateState.RETRYING
        assert status.next_at == deferred.until  # an explicit next instant
        assert status.attempts == 0  # a deferral is not a failure
        # nothing of an order for it: no lock, no order intent, no attempt announced
        assert storage.of(SECOND, "lock") == []
        assert not [k for op, k in storage.of(SECOND) if "/orders/" in k and op != "load"]
        assert len(storage.of(SECOND)) <= 6, storage.of(SECOND)  # its reads, its state saved
        # the budget refills at the instant named: it is issued then
        clock.advance((deferred.until - clock.now()).total_seconds())
        [again] = await manager.issue_many([CertificateSpec.of(SECOND, profile="shortlived")])
        assert isinstance(again, IssuedResult)
        assert len(storage.of(SECOND, "lock")) == 1
        kinds = [type(e).__name__ for e in events if e.name == SECOND]
        assert kinds[:3] == ["CertificateDeferred", "CertificateObtaining", "CertificateObtained"]
