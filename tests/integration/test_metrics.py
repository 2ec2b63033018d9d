"""Prometheus metrics of a manager issuing against Pebble."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from acmecerts import AcmeClient, ChallengeTask, Http01Server
from acmecerts.manager import CertificateManager, CertificateSpec
from acmecerts.metrics import PrometheusMetrics, endpoint_label
from acmecerts.protocol.identifiers import Identifier
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
            assert "example.test" not in value or name.endswith("expiry_timestamp_seconds")


def test_endpoint_labels_have_low_cardinality() -> None:
    directory = {"newOrder": "https://ca/acme/new-order"}
    assert endpoint_label("https://ca/acme/new-order", directory) == "newOrder"
    assert endpoint_label("https://ca/acme/authz/1234567/abcdEF12") == "acme/authz"
    assert endpoint_label("https://127.0.0.1:14000/authZ/Xk3-9aQbS1") == "authZ"
    assert endpoint_label("https://ca/acme/cert/fa1234567890abcdef") == "acme/cert"
