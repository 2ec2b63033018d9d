"""The manager's retention on every kind of store (files, and a real Kubernetes API server).

Two replicas share one store: one retires a certificate, the other takes it back under a
new name without an order; the copy left behind, and later the certificate itself after
its retention, are deleted from the store (on Kubernetes with their TLS Secrets), by
whichever replica gets there, and only once.
"""

from __future__ import annotations

import datetime as dt

import pytest
from requests_seen import on_requests

from acmecerts import AcmeClient, Http01Server
from acmecerts._time import FakeClock
from acmecerts.manager import CertificateManager, CertificateSpec, IssuedResult
from acmecerts.storage import KeyLayout, Storage
from acmecerts.storage.keys import certificate_slug
from acmecerts.testing import PebbleServer
from tests.storage.contract import StoreFactory

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

START = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
IDENTIFIERS = ["api.stores.example.test"]


async def keys_of(storage: Storage, layout: KeyLayout, name: str) -> list[str]:
    slug = certificate_slug(name)
    keys = await storage.list(layout.account_prefix)
    return [k for k in keys if f"/{slug}/" in k or k.endswith(f"/{slug}.json")]


async def tls_secret(storage: Storage, name: str) -> bool | None:
    """Whether the store holds ``name``'s TLS Secret (``None``: not a Kubernetes store)."""
    load = getattr(storage, "load_tls_secret", None)
    if load is None:
        return None
    return await load(name) is not None


async def test_two_replicas_take_back_and_purge_on_every_store(
    store_factory: StoreFactory, pebble: PebbleServer
) -> None:
    clock = FakeClock(START)
    sent: list[str] = []
    layout = KeyLayout(pebble.directory_url)
    store_a = await store_factory()
    store_b = await store_factory()

    def client() -> AcmeClient:
        made = AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock)
        made.subscribe(on_requests(lambda m, u: sent.append(u) if "/order-plz" in u else None))
        return made

    async with (
        Http01Server(host="127.0.0.1", port=pebble.http_port) as solver,
        client() as client_a,
        client() as client_b,
    ):
        replica_a = CertificateManager(client_a, solvers=[solver], storage=store_a, retention=3600)
        replica_b = CertificateManager(client_b, solvers=[solver], storage=store_b, retention=3600)
        assert replica_a._retired is not None
        assert replica_b._retired is not None
        [first] = await replica_a.issue_many([CertificateSpec.of("team1.api", IDENTIFIERS)])
        assert isinstance(first, IssuedResult)
        await replica_a.unmanage("team1.api")
        assert len(await store_b.list(layout.retired_prefix())) == 1

        # the resource comes back under another name, on the other replica
        [again] = await replica_b.issue_many([CertificateSpec.of("team2.api", IDENTIFIERS)])
        assert isinstance(again, IssuedResult)
        assert again.certificate.serial == first.certificate.serial
        assert len(sent) == 1
        assert await tls_secret(store_b, "team2.api") in (True, None)

        # the copy left under the old name goes at once, deleted by one replica only
        assert await replica_b._retired.purge_due(clock.now()) == 1
        await replica_a._retired.scan()
        assert await replica_a._retired.purge_due(clock.now()) == 0
        assert await keys_of(store_a, layout, "team1.api") == []
        assert await tls_secret(store_a, "team1.api") in (False, None)
        assert len(await keys_of(store_a, layout, "team2.api")) == 1  # its record

        # deleted for good: replica A, which never saw it retired, purges it when due
        await replica_b.unmanage("team2.api")
        clock.advance(3599)
        assert await replica_a._retired.purge_due(clock.now()) == 0
        assert len(await keys_of(store_a, layout, "team2.api")) == 1
        clock.advance(2)
        assert await replica_a._retired.purge_due(clock.now()) == 1  # listed again, then due
        assert await keys_of(store_a, layout, "team2.api") == []
        assert await tls_secret(store_a, "team2.api") in (False, None)
        assert await store_a.list(layout.retired_prefix()) == []
    assert len(sent) == 1
