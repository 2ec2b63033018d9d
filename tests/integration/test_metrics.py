"""Prometheus metrics of a manager issuing against Pebble."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import anyio
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client.parser import text_string_to_metric_families
from requests_seen import on_requests

from acmecerts import (
    AcmeClient,
    CertificateChain,
    ChallengeTask,
    Http01Server,
    IssuedCertificate,
)
from acmecerts.manager import (
    CertificateCancelled,
    CertificateLoaded,
    CertificateManager,
    CertificateObtained,
    CertificateSpec,
    IssuedResult,
    Subscriber,
)
from acmecerts.metrics import PrometheusMetrics, budget_by_limit, endpoint_label
from acmecerts.protocol.certificate import certificate_info
from acmecerts.protocol.identifiers import Identifier
from acmecerts.ratelimit import LETS_ENCRYPT, BudgetLine, RateLimitLedger
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.anyio


class _Routing:
    challenge_type = "http-01"

    def __init__(self, server: Http01Server) -> None:
        self.server = server

    def supports(self, identifier: Identifier) -> bool:
        return True

    async def present(self, task: ChallengeTask) -> None:
        if not task.identifier.value.startswith("fail."):
            await self.server.present(task)

    async def cleanup(self, task: ChallengeTask) -> None:
        await self.server.cleanup(task)


def _samples(metrics: PrometheusMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_count_attempts_outcomes_requests_and_expiry(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        manager = CertificateManager(client, solvers=[_Routing(http01)])
        metrics = PrometheusMetrics()
        metrics.attach(manager)
        specs = [CertificateSpec.of(f"ok{i}.metrics.example.test") for i in range(3)]
        specs.append(CertificateSpec.of("fail.metrics.example.test"))
        results = await manager.issue_many(specs)
    samples = _samples(metrics)
    assert samples[("acmecerts_issuance_attempts_total", (("kind", "issuance"),))] == 4
    assert (
        samples[("acmecerts_issuance_outcomes_total", (("outcome", "obtained"), ("reason", "")))]
        == 3
    )
    failed = (("outcome", "failed"), ("reason", "AuthorizationFailed"))
    assert samples[("acmecerts_issuance_outcomes_total", failed)] == 1
    assert samples[("acmecerts_certificates_managed", ())] == 4
    for result in results[:3]:
        expiry = samples[
            ("acmecerts_certificate_expiry_timestamp_seconds", (("name", result.name),))
        ]
        assert expiry == result.certificate.not_after.timestamp()  # type: ignore[union-attr]
    orders = [
        value
        for (name, labels), value in samples.items()
        if name == "acmecerts_acme_requests_total"
        and dict(labels) == {"endpoint": "newOrder", "method": "POST", "status": "201"}
    ]
    assert orders == [4]
    # no label carries a URL with an identifier or an account id
    for name, labels in samples:
        for _, value in labels:
            assert "example.test" not in value or name.endswith("_timestamp_seconds")


def test_endpoint_labels_have_low_cardinality() -> None:
    directory = {
        "newOrder": "https://ca/acme/new-order",
        "renewalInfo": "https://ca/acme/renewal-info",
    }
    assert endpoint_label("https://ca/acme/new-order", directory) == "newOrder"
    # an ARI request carries a certID per certificate: one label for all of them
    certid = "https://ca/acme/renewal-info/aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE"
    assert endpoint_label(certid, directory) == "renewalInfo"
    assert endpoint_label("https://ca/acme/renewal-infox/1", directory) == "acme/renewal-infox"
    assert endpoint_label("https://ca/acme/authz/1234567/abcdEF12") == "acme/authz"
    assert endpoint_label("https://127.0.0.1:14000/authZ/Xk3-9aQbS1") == "authZ"
    assert endpoint_label("https://ca/acme/cert/fa1234567890abcdef") == "acme/cert"


# -- gauges restored after a restart: expiry and renewal ---------------------------------

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _certificate(name: str, not_after: dt.datetime) -> IssuedCertificate:
    """A self-signed certificate for ``name`` (what the metrics read of it is not_after)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_after - dt.timedelta(days=90))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return IssuedCertificate(
        identifiers=(Identifier("dns", name),),
        chain=CertificateChain(pem, (cert,)),
        private_key_pem=key_pem,
        info=certificate_info(cert),
        order_url="https://ca.test/order/1",
        certificate_url="https://ca.test/cert/1",
    )


class _Manager:
    """What the metrics use of a manager: events, the client, and the renewal plan."""

    def __init__(self, plans: dict[str, dt.datetime]) -> None:
        self.plans = plans
        self.client = SimpleNamespace(
            transport=SimpleNamespace(directory_url=""),
            subscribe=lambda subscriber: lambda: None,
            ledger=None,
        )
        self.subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        self.subscribers.append(subscriber)
        return lambda: None

    def managed(self) -> list[CertificateSpec]:
        return []

    def renewal_at(self, name: str) -> dt.datetime | None:
        return self.plans.get(name)


def _gauge(metrics: PrometheusMetrics, metric: str, name: str) -> float | None:
    key = (f"acmecerts_certificate_{metric}_timestamp_seconds", (("name", name),))
    return _samples(metrics).get(key)


def test_loaded_and_obtained_certificates_set_expiry_and_renewal_gauges() -> None:
    first = _certificate("a.gauges.example.test", T0 + dt.timedelta(days=90))
    other = _certificate("b.gauges.example.test", T0 + dt.timedelta(days=60))
    planned = T0 + dt.timedelta(days=60)
    metrics = PrometheusMetrics()

    # after a restart: the manager publishes what it read from the store
    metrics.observe(CertificateLoaded("a", T0, certificate=first, renew_at=planned))
    metrics.observe(CertificateLoaded("b", T0, certificate=other, renew_at=None))
    assert _gauge(metrics, "expiry", "a") == first.not_after.timestamp()
    assert _gauge(metrics, "renewal", "a") == planned.timestamp()
    assert _gauge(metrics, "expiry", "b") == other.not_after.timestamp()
    assert _gauge(metrics, "renewal", "b") is None  # no plan: no instant is made up

    # not attached: an obtained certificate sets its expiry, the renewal plan is unknown
    renewed = _certificate("a.gauges.example.test", T0 + dt.timedelta(days=150))
    metrics.observe(CertificateObtained("a", T0, certificate=renewed, renewal=True))
    assert _gauge(metrics, "expiry", "a") == renewed.not_after.timestamp()
    assert _gauge(metrics, "renewal", "a") is None

    # attached: the renewal instant is the manager's plan
    plan = T0 + dt.timedelta(days=120)
    metrics.attach(cast("CertificateManager", _Manager({"a": plan})))
    metrics.observe(CertificateObtained("a", T0, certificate=renewed, renewal=True))
    assert _gauge(metrics, "renewal", "a") == plan.timestamp()
    assert _gauge(metrics, "expiry", "a") == renewed.not_after.timestamp()

    # cancelled: both gone for it, the other certificate keeps its own
    metrics.observe(CertificateCancelled("a", T0, reason="unmanaged"))
    assert _gauge(metrics, "expiry", "a") is None
    assert _gauge(metrics, "renewal", "a") is None
    assert _gauge(metrics, "expiry", "b") == other.not_after.timestamp()
    metrics.observe(CertificateCancelled("a", T0, reason="again"))  # nothing left: no error


def test_the_budget_of_a_limit_is_its_scarcest_bucket() -> None:
    def line(limit: str, key: str, remaining: int) -> BudgetLine:
        return BudgetLine(limit, key, 50, remaining, T0, T0)

    values = budget_by_limit(
        LETS_ENCRYPT,
        [
            line("certificates_per_registered_domain", "a.com", 40),
            line("certificates_per_registered_domain", "b.com", 3),
            BudgetLine("rate_limited", "acct", None, 0, T0, T0),  # learned from the CA
        ],
    )
    assert values["certificates_per_registered_domain"] == 3
    assert values["new_orders_per_account"] == 300  # nothing spent: full
    assert values["rate_limited"] == 0
    assert set(values) == {limit.name for limit in LETS_ENCRYPT} | {"rate_limited"}


# -- the ledger budget gauge, against Pebble ------------------------------------------------

#: Let's Encrypt's limits, with a small per-domain budget (so a drop of one shows well).
MODEL = LETS_ENCRYPT.with_overrides({"certificates_per_registered_domain": 5}, name="le-small")
BUDGET = "acmecerts_ledger_budget_remaining"
PER_DOMAIN = "certificates_per_registered_domain"


def _budget(metrics: PrometheusMetrics) -> dict[str, float]:
    return {
        dict(labels)["limit"]: value
        for (name, labels), value in _samples(metrics).items()
        if name == BUDGET
    }


async def test_ledger_budget_is_published_at_attach_and_drops_after_an_issuance(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    ledger = RateLimitLedger(MODEL)
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, ledger=ledger
    ) as client:
        manager = CertificateManager(client, solvers=[http01])
        metrics = PrometheusMetrics()
        metrics.attach(manager)
        full = {limit.name: float(limit.capacity) for limit in MODEL}
        assert _budget(metrics) == full  # right after attach, before anything was sent

        (result,) = await manager.issue_many(["one.budget-metrics.example.test"])
        assert isinstance(result, IssuedResult)
        after = _budget(metrics)
        plan = manager.renewal_at(result.name)
    spent = {
        PER_DOMAIN,
        "certificates_per_exact_identifier_set",
        "new_orders_per_account",
        "new_accounts_per_ip",  # the client registered its account first
    }
    assert after == {name: full[name] - (name in spent) for name in full}
    assert plan is not None
    assert _gauge(metrics, "renewal", result.name) == plan.timestamp()
    assert _gauge(metrics, "expiry", result.name) == result.certificate.not_after.timestamp()
    endpoints = {
        dict(labels)["endpoint"]
        for name, labels in _samples(metrics)
        if name == "acmecerts_acme_requests_total"
    }
    assert {"directory", "newNonce", "newAccount", "newOrder"} <= endpoints


async def test_a_stored_ledger_budget_follows_the_store(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    key = KeyLayout(pebble.directory_url).ledger()

    def ledger() -> RateLimitLedger:
        return RateLimitLedger(MODEL, storage=FileStorage(tmp_path), key=key)

    replica = ledger()  # another process sharing the store
    other_account = "https://ca.test/acct/9"
    await replica.reserve(["shop.stored-metrics.example.test"], account=other_account)
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, ledger=ledger()
    ) as client:
        manager = CertificateManager(client, solvers=[http01])
        metrics = PrometheusMetrics(budget_refresh=dt.timedelta(hours=1))
        metrics.attach(manager)
        assert _budget(metrics) == {}  # not read yet: nothing rather than a wrong "full"
        await metrics.refresh()
        assert _budget(metrics)[PER_DOMAIN] == 4  # the replica's spend, from the store

        (result,) = await manager.issue_many(["www.stored-metrics.example.test"])
        assert isinstance(result, IssuedResult)
        assert _budget(metrics)[PER_DOMAIN] == 3  # this process's spend, at once

        await replica.reserve(["api.stored-metrics.example.test"], account=other_account)
        assert _budget(metrics)[PER_DOMAIN] == 3  # not read again yet (budget_refresh)
        await metrics.refresh()
        assert _budget(metrics)[PER_DOMAIN] == 2


async def test_after_a_restart_the_gauges_are_restored_from_the_store(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    """A restarted operator: expiry, renewal and budget gauges without a single order."""
    names = ["one.restart-metrics.example.test", "two.restart-metrics.example.test"]
    layout = KeyLayout(pebble.directory_url)
    async with FileStorage(tmp_path) as storage:
        ledger = RateLimitLedger(MODEL, storage=storage, key=layout.ledger())
        async with AcmeClient(
            pebble.directory_url, ca_bundle=pebble.ca_bundle, ledger=ledger
        ) as client:
            first = CertificateManager(client, solvers=[http01], storage=storage)
            issued = await first.issue_many(names)
        assert all(isinstance(result, IssuedResult) for result in issued)

        orders: list[str] = []
        ledger = RateLimitLedger(MODEL, storage=storage, key=layout.ledger())
        async with AcmeClient(
            pebble.directory_url,
            ca_bundle=pebble.ca_bundle,
            ledger=ledger,
        ) as client:
            client.subscribe(
                on_requests(lambda m, u: orders.append(u) if "/order-plz" in u else None)
            )
            restarted = CertificateManager(client, solvers=[http01], storage=storage)
            metrics = PrometheusMetrics()
            metrics.attach(restarted)
            await metrics.refresh()
            loaded: list[object] = []
            restarted.subscribe(loaded.append)
            for name in names:
                restarted.manage(name)
            async with restarted:
                for _ in range(3000):  # the scheduler reads the store: up to 30 s
                    if len(loaded) >= len(names):
                        break
                    await anyio.sleep(0.01)
                else:
                    raise AssertionError(f"30 s and only {len(loaded)} events: {loaded}")
    assert orders == []
    for result in issued:
        assert isinstance(result, IssuedResult)
        plan = restarted.renewal_at(result.name)
        assert plan is not None
        assert _gauge(metrics, "expiry", result.name) == result.certificate.not_after.timestamp()
        assert _gauge(metrics, "renewal", result.name) == plan.timestamp()
    # the stored ledger's spends of the first run show in the restarted process's gauge
    assert _budget(metrics)[PER_DOMAIN] == 5 - 2
