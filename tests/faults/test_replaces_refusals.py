"""Every way Pebble 2.10 refuses ``replaces``, and the manager's one order without it.

Each test stores a certificate, then starts a manager whose fake clock is 140 hours
later: past the end of the window Pebble 2.10's real ``renewalInfo`` gives a 160-hour
(``shortlived``) certificate, so the renewal is due at once and names the stored
certificate in ``replaces``. Pebble refuses that ``newOrder`` for a reason of its own:

* ``409 alreadyReplaced``: the certificate was renewed with ``replaces`` already (by
  another process of the same account, whose result this one never saw);
* ``403 unauthorized``: another account ordered it (the account key was replaced by a
  new account, so the certificates on disk belong to the old one);
* ``400 malformed``: a certID of an issuer Pebble does not know (a certificate of another
  CA instance; here the proxy answers its ``renewalInfo``, as Pebble cannot).

The manager must then ask the owner again and order once without ``replaces``; without
that fallback the renewal fails (and the test with it). The fault proxy only counts and
decodes what is sent, except for the one ``renewalInfo`` answer of the last case.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import anyio
import pytest
from pebble_quirks import pebble_refuses_replaces_of

from acmecerts import AccountKey, AcmeClient, FakeClock, Http01Server, IssuedCertificate
from acmecerts.manager import (
    CertificateEvent,
    CertificateFailed,
    CertificateManager,
    CertificateObtained,
    CertificateReplacesRefused,
)
from acmecerts.metrics import PrometheusMetrics
from acmecerts.protocol.ari import cert_id
from acmecerts.protocol.identifiers import parse_identifier
from acmecerts.ratelimit import LETS_ENCRYPT, RateLimitLedger, identifier_set_key
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer
from tests.conftest import PebbleFactory
from tests.faults.proxy import AriAnswer, FaultProxy, Match

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

NEW_ORDER = "/order-plz"
RENEWAL_INFO = "/draft-ietf-acme-ari-03/renewalInfo/"
#: Past the end of Pebble's window for a 160-hour certificate (about 107 h +- 24 h).
LATER = dt.timedelta(hours=140)


async def _store_certificate(
    directory_url: str,
    ca_bundle: Path | str,
    storage: FileStorage,
    layout: KeyLayout,
    name: str,
    solver: Http01Server,
    key: AccountKey,
) -> IssuedCertificate:
    """Issue ``name`` with a manager on ``directory_url`` into ``storage`` (under ``layout``).

    Pebble can never find 1 certificate in 256 for a ``replaces`` (its serial-encoding bug,
    tests/pebble_quirks.py) and refuses it before the check each test is about: such a
    certificate is issued again, over it, until Pebble can find the one stored.
    """
    async with AcmeClient(directory_url, ca_bundle=ca_bundle, account_key=key) as client:
        manager = CertificateManager(
            client, solvers=[solver], storage=storage, layout=layout, rng=random.Random(3)
        )
        manager.manage(name, [name], profile="shortlived")
        [result] = await manager.issue_many([name])
        for _ in range(8):
            certificate = getattr(result, "certificate", None)
            assert isinstance(certificate, IssuedCertificate), result
            if not pebble_refuses_replaces_of(certificate.serial):
                return certificate
            [result] = await manager.issue_many([name], force=True)
    raise AssertionError("eight certificates in a row that Pebble cannot find for replaces")


async def _renew_later(
    proxy: FaultProxy,
    pebble: PebbleServer,
    storage: FileStorage,
    name: str,
    solver: Http01Server,
    key: AccountKey,
) -> tuple[list[CertificateEvent], PrometheusMetrics, list[int], RateLimitLedger, str]:
    """A manager 140 h later renews the stored ``name``; its events, metrics, guard calls."""
    clock = FakeClock(dt.datetime.now(dt.UTC) + LATER)
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock)
    events: list[CertificateEvent] = []
    guard_calls: list[int] = []
    renewed = anyio.Event()

    async def guard() -> bool:
        guard_calls.append(len(proxy.requests_to(NEW_ORDER, "POST")))
        return True

    def on_event(event: CertificateEvent) -> None:
        events.append(event)
        if isinstance(event, CertificateObtained | CertificateFailed):
            renewed.set()

    async with AcmeClient(
        proxy.directory_url,
        ca_bundle=pebble.ca_bundle,
        clock=clock,
        ledger=ledger,
        account_key=key,
        request_rates=None,
    ) as client:
        manager = CertificateManager(
            client,
            solvers=[solver],
            clock=clock,
            storage=storage,
            layout=KeyLayout(proxy.directory_url),
            rng=random.Random(5),
        )
        metrics = PrometheusMetrics()
        metrics.attach(manager)
        manager.subscribe(on_event)
        manager.manage(name, [name], profile="shortlived", owner=guard)
        async with manager:
            with anyio.fail_after(60):
                await renewed.wait()
        account = client.account_url
    assert account is not None
    return events, metrics, guard_calls, ledger, account


def _assert_fell_back(
    proxy: FaultProxy,
    events: list[CertificateEvent],
    old: IssuedCertificate,
    status: int,
    problem: str,
    guard_calls: list[int],
) -> IssuedCertificate:
    orders = proxy.requests_to(NEW_ORDER, "POST")
    assert [r.payload.get("replaces") for r in orders] == [cert_id(old.chain.leaf), None]
    assert [r.status for r in orders] == [status, 201]
    # asked before the renewal, and again between the refusal and the order without it
    assert guard_calls == [0, 1]
    [refused] = [e for e in events if isinstance(e, CertificateReplacesRefused)]
    assert refused.cert_id == cert_id(old.chain.leaf)
    assert refused.error is not None
    assert getattr(refused.error, "type", "").endswith(problem)
    [obtained] = [e for e in events if isinstance(e, CertificateObtained)]
    assert obtained.renewal
    assert obtained.certificate is not None
    assert obtained.certificate.serial != old.serial
    assert not [e for e in events if isinstance(e, CertificateFailed)]
    return obtained.certificate


def _refused_metric(metrics: PrometheusMetrics, problem: str) -> float | None:
    return metrics.registry.get_sample_value(
        "acmecerts_ari_replaces_refused_total", {"problem": problem}
    )


async def _spent(ledger: RateLimitLedger, limit: str) -> dict[str, int]:
    return {
        line.scope_key: (line.capacity or 0) - line.remaining
        for line in await ledger.budget()
        if line.limit == limit
    }


async def test_already_replaced_renewal_is_ordered_again_without_replaces(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    name = "twice.refusals.example.test"
    storage = FileStorage(tmp_path / "store")
    key = AccountKey.generate()
    layout = KeyLayout(proxy.directory_url)
    old = await _store_certificate(
        proxy.directory_url, pebble.ca_bundle, storage, layout, name, http01, key
    )
    # another process of the same account renewed it already (and its result was lost)
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, account_key=key) as c:
        await c.issue([name], solver=http01, profile="shortlived", replaces=cert_id(old.chain.leaf))
    proxy.clear_requests()

    events, metrics, calls, ledger, account = await _renew_later(
        proxy, pebble, storage, name, http01, key
    )
    _assert_fell_back(proxy, events, old, 409, "alreadyReplaced", calls)
    assert _refused_metric(metrics, "alreadyReplaced") == 1
    # the order without replaces is a renewal like any other: Let's Encrypt's limits
    # count it (the exact set's weekly five), where an ARI renewal would spend nothing
    ident_set = identifier_set_key([parse_identifier(name)])
    assert (await _spent(ledger, "certificates_per_exact_identifier_set")) == {ident_set: 1}
    assert account


async def test_another_accounts_certificate_is_renewed_without_replaces(
    proxy: FaultProxy, pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    name = "account.refusals.example.test"
    storage = FileStorage(tmp_path / "store")
    layout = KeyLayout(proxy.directory_url)
    old = await _store_certificate(
        proxy.directory_url, pebble.ca_bundle, storage, layout, name, http01, AccountKey.generate()
    )
    proxy.clear_requests()
    # the account key was replaced by a new account: same store, another account
    events, metrics, calls, _, _ = await _renew_later(
        proxy, pebble, storage, name, http01, AccountKey.generate()
    )
    _assert_fell_back(proxy, events, old, 403, "unauthorized", calls)
    assert _refused_metric(metrics, "unauthorized") == 1


async def test_a_certid_the_ca_does_not_know_is_renewed_without_replaces(
    proxy: FaultProxy,
    pebble: PebbleServer,
    pebble_factory: PebbleFactory,
    tmp_path: Path,
) -> None:
    name = "unknown.refusals.example.test"
    storage = FileStorage(tmp_path / "store")
    key = AccountKey.generate()
    other_ca = pebble_factory(va_nosleep=True, nonce_reject_percent=0, release="2.10")
    async with Http01Server(host="127.0.0.1", port=other_ca.http_port) as solver:
        old = await _store_certificate(
            other_ca.directory_url,
            other_ca.ca_bundle,
            storage,
            KeyLayout(proxy.directory_url),
            name,
            solver,
            key,
        )
    # Pebble answers renewalInfo for an unknown issuer with 400; a CA that lost track of
    # the certificate after answering renewalInfo is what the proxy plays here
    proxy.add_rule(
        Match(RENEWAL_INFO + cert_id(old.chain.leaf), "GET"),
        AriAnswer(
            dt.datetime.now(dt.UTC) - dt.timedelta(days=2),
            dt.datetime.now(dt.UTC) - dt.timedelta(days=1),
        ),
        times=None,
    )
    async with Http01Server(host="127.0.0.1", port=pebble.http_port) as http01:
        events, metrics, calls, _, _ = await _renew_later(proxy, pebble, storage, name, http01, key)
    _assert_fell_back(proxy, events, old, 400, "malformed", calls)
    assert _refused_metric(metrics, "malformed") == 1
