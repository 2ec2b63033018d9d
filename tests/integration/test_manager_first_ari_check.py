"""A certificate the manager just obtained is first asked about hours later, on a real Pebble.

The window of a certificate just issued is the CA's default one: the manager plans the
renewal at the lifetime fraction and asks renewalInfo after ``first_ari_check`` (six
hours by default, the CA's usual ``Retry-After``), not at issuance. Each test runs the
manager on a fake clock and counts the renewalInfo requests that reach Pebble, at the
instant each was sent.
"""

from __future__ import annotations

import datetime as dt
import math

import pytest
from requests_seen import on_requests

from acmecerts import AcmeClient, Http01Server
from acmecerts._time import FakeClock
from acmecerts.errors import InvalidInput
from acmecerts.manager import CertificateManager, CertificateSpec, IssuedResult
from acmecerts.manager._core import FIRST_ARI_CHECK, on_recheck_grid
from acmecerts.protocol.ari import fallback_renewal_time
from acmecerts.testing import PebbleServer
from tests.integration.test_manager_replica_ari import HorizonClock
from tests.integration.test_manager_retention import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class Asked:
    """The instants (of the client's clock) at which renewalInfo was requested."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.at: list[dt.datetime] = []

    def __call__(self, method: str, url: str) -> None:
        if "/renewalInfo/" in url:
            self.at.append(self.clock.now())


@pytest.mark.parametrize(
    ("profile", "first_check"),
    [
        # 90 days: renewal on day 60, so the first check comes after six hours
        pytest.param("classic", FIRST_ARI_CHECK, id="classic-6h"),
        # a 6-day certificate with first_ari_check of 4 days: half the 80 h to its
        # lifetime-fraction renewal (40 h) comes first
        pytest.param("shortlived", dt.timedelta(days=4), id="shortlived-half-the-room"),
    ],
)
async def test_the_first_ari_check_comes_later_and_then_the_window_decides(
    pebble: PebbleServer, http01: Http01Server, profile: str, first_check: dt.timedelta
) -> None:
    name = f"first-check-{profile}.example.test"
    clock = HorizonClock(dt.datetime.now(dt.UTC))  # Pebble's certificates start now
    asked = Asked(clock)
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as client:
        client.subscribe(on_requests(asked))
        options = {} if first_check == FIRST_ARI_CHECK else {"first_ari_check": first_check}
        manager = CertificateManager(client, solvers=[http01], clock=clock, **options)
        [result] = await manager.issue_many([CertificateSpec.of(name, profile=profile)])
        assert isinstance(result, IssuedResult), result
        certificate = result.certificate
        issued_at = clock.now()
        # no request yet; the renewal at the lifetime fraction meanwhile
        assert asked.at == []
        fallback = fallback_renewal_time(certificate.not_before, certificate.not_after)
        assert manager.renewal_at(name) == fallback
        expected = on_recheck_grid(issued_at + min(first_check, (fallback - issued_at) / 2))
        assert manager.next_renewal(name) == expected
        # the manager runs up to a minute after that instant: one request, at it
        clock.horizon = expected + dt.timedelta(minutes=1)
        async with manager:
            await wait_until(lambda: clock.parked, "the first check")
        assert asked.at == [expected]
        planned = manager.renewal_at(name)
        window = await client.renewal_info(certificate.chain.leaf)
    assert planned is not None
    assert window.window_start <= planned <= window.window_end  # the CA's window decides


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "6h", dt.timedelta(seconds=-1)])
async def test_a_first_ari_check_that_is_no_duration_is_refused(
    pebble: PebbleServer, http01: Http01Server, value: object
) -> None:
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        with pytest.raises(InvalidInput, match="first_ari_check"):
            CertificateManager(client, solvers=[http01], first_ari_check=value)  # type: ignore[arg-type]
