"""A fleet at rest: ARI re-checks every six hours, and nothing written to the store.

Issue #26's goal: store operations at rest at most 0.1 per certificate-day (with
``KubernetesStorage`` each one is an API-server request). An answer that changes nothing
(the same window, asked again at the CA's ``Retry-After``) must cost one renewalInfo
request and no store operation at all.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

import pytest
from integration.test_manager_store_ops import CountingStorage

from acmecerts import AcmeClient, VirtualClock
from acmecerts.errors import InvalidInput
from acmecerts.manager import CertificateManager
from acmecerts.ratelimit import LETS_ENCRYPT
from acmecerts.storage import FileStorage
from acmecerts.testing.simulated_ca import ARI_RETRY_AFTER, SimulatedCA, SimulatedSolver

from ._sim import START, client_for, run

DAYS = 5
CERTS = 20


@pytest.mark.timeout(120)
def test_unchanged_ari_answers_write_nothing_to_the_store(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    ca = SimulatedCA(clock, seed=11)
    names = [f"rest{i}.team{i % 4}.example" for i in range(CERTS)]

    async def main() -> tuple[int, list[tuple[str, str]], list[_dt.datetime | None]]:
        client = client_for(ca, request_rates=LETS_ENCRYPT.request_rates)
        async with FileStorage(tmp_path) as inner:
            storage = CountingStorage(inner)
            manager = CertificateManager(
                client, solvers=[SimulatedSolver(ca.published)], clock=clock, storage=storage
            )
            async with manager:
                for name in names:
                    manager.manage(name, [name], profile="classic")  # 90 days: no renewal
                await clock.sleep(3600)
                issued = [s.not_after if (s := manager.status(n)) else None for n in names]
                assert all(issued), "every certificate issued in the first hour"
                await clock.sleep(ARI_RETRY_AFTER)  # every certificate re-checked once
                storage.calls.clear()
                before = ca.stats[("renewalInfo", 200)]
                await clock.sleep(DAYS * 86400)
                checks = ca.stats[("renewalInfo", 200)] - before
                calls = list(storage.calls)
                after = [s.not_after if (s := manager.status(n)) else None for n in names]
        return checks, calls, [a if a == b else None for a, b in zip(after, issued, strict=True)]

    checks, calls, same = clock.run(main)
    # every certificate asked at the CA's six-hour Retry-After, as the protocol needs
    assert CERTS * 4 * DAYS - CERTS <= checks <= CERTS * 4 * DAYS + CERTS, checks
    assert all(same), "no renewal at rest"
    writes = [c for c in calls if c[0] in ("store", "delete", "lock")]
    assert writes == [], writes
    # nothing read per certificate either: only the retention's sweep lists the retired
    # certificates, four times a day per fleet (10,000 certificates: 0.0004 a day each)
    assert {c for c in calls} <= {c for c in calls if c[0] == "list" and "/retired/" in c[1]}
    assert len(calls) <= 4 * DAYS + 1, calls
    assert ca.stats[("newOrder", 201)] == CERTS


def test_renewal_info_by_cert_id_is_the_same_answer() -> None:
    async def body(ca: SimulatedCA, client: AcmeClient, solver: SimulatedSolver) -> Any:
        cert = await client.issue(["by-id.example"], solvers=[solver], profile="classic")
        by_cert = await client.renewal_info(cert.certificate_pem)
        by_id = await client.renewal_info(cert_id=by_cert.cert_id)
        refused = []
        for bad in ("../directory", "a.b/c", "no-dot", ""):
            with pytest.raises(InvalidInput, match="cert_id"):
                await client.renewal_info(cert_id=bad)
            refused.append(bad)
        with pytest.raises(InvalidInput, match="one of them"):
            await client.renewal_info(cert.certificate_pem, cert_id=by_cert.cert_id)
        with pytest.raises(InvalidInput, match="one of them"):
            await client.renewal_info()
        return by_cert, by_id, refused

    (by_cert, by_id, refused), ca = run(body)
    assert by_id == by_cert
    assert len(refused) == 4
    assert ca.stats[("renewalInfo", 200)] == 2  # nothing sent for the refused ones
    assert not [k for k in ca.stats if k[0] == "renewalInfo" and k[1] != 200]
