"""The manager orders a certificate's profile at every issuance and renewal (Pebble 2.10,
where an order naming no profile gets one at random)."""

from __future__ import annotations

import datetime as dt

import anyio
import pytest

from acmecerts import AcmeClient, Http01Server
from acmecerts._time import FakeClock
from acmecerts.client import ClientEvent, OrderRequested, ProfileFallback
from acmecerts.manager import CertificateManager, CertificateObtained, CertificateSpec, IssuedResult
from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.anyio

SHORTLIVED = dt.timedelta(hours=160)


async def test_renewals_order_the_profile_of_the_spec(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    clock = FakeClock()
    name = "renew.manager-profiles.example.test"
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        requested: list[OrderRequested] = []
        client.subscribe(
            lambda e: requested.append(e) if isinstance(e, OrderRequested) else None,
            requests=False,
        )
        manager = CertificateManager(client, solvers=[http01])
        spec = CertificateSpec.of(name, profile="shortlived")
        [first] = await manager.issue_many([spec])
        assert isinstance(first, IssuedResult)
        renewals: list[CertificateObtained] = []
        two = anyio.Event()

        def obtained(event: object) -> None:
            if isinstance(event, CertificateObtained) and event.renewal:
                renewals.append(event)
                if len(renewals) == 2:
                    two.set()

        manager.subscribe(obtained)
        async with manager:
            with anyio.fail_after(60):
                await two.wait()
    issued = [first.certificate] + [r.certificate for r in renewals]
    for certificate in issued:
        assert certificate is not None
        assert abs((certificate.not_after - certificate.not_before) - SHORTLIVED) < dt.timedelta(
            minutes=1
        )
    assert len({c.serial for c in issued if c is not None}) == 3
    assert len(requested) >= 3
    assert {(r.profile, r.profile_required) for r in requested} == {("shortlived", True)}


async def test_a_preferred_profile_the_ca_lacks_is_issued_with_its_default(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        events: list[ClientEvent] = []
        client.subscribe(events.append, requests=False)
        manager = CertificateManager(client, solvers=[http01])
        spec = manager.manage(
            "preferred.manager-profiles.example.test", profile="longlived", profile_required=False
        )
        [result] = await manager.issue_many([spec])
    assert isinstance(result, IssuedResult)
    assert any(isinstance(e, ProfileFallback) and e.profile == "longlived" for e in events)
    assert spec.fingerprint != CertificateSpec.of(spec.name, profile="longlived").fingerprint
    assert (
        CertificateSpec.of(spec.name).fingerprint
        == CertificateSpec.of(spec.name, profile_required=False).fingerprint
    )  # no profile: required or not asks the same
