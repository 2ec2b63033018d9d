"""Prometheus metrics for a :class:`~acmecerts.manager.CertificateManager` (extra ``metrics``).

::

    from prometheus_client import start_http_server
    from acmecerts.metrics import PrometheusMetrics

    metrics = PrometheusMetrics()
    metrics.attach(manager)          # events and ACME requests are counted from here on
    start_http_server(9100)          # or serve metrics.registry your own way

Metrics (all prefixed ``acmecerts_``): ``certificates_managed``,
``certificate_expiry_timestamp_seconds{name}``,
``issuance_attempts_total{kind}`` (``issuance``/``renewal``),
``issuance_outcomes_total{outcome,reason}`` (``obtained``, ``failed``, ``deferred``,
``rate_limited``, ``cancelled``; ``reason`` is the error class, bounded),
``acme_requests_total{endpoint,method,status}``, and, when a ledger is attached,
``ledger_budget_remaining{limit}``. Names and reasons are label values; no key
material or URL with an identifier ever becomes a label.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from acmecerts.errors import InvalidInput
from acmecerts.manager import (
    CertificateCancelled,
    CertificateDeferred,
    CertificateEvent,
    CertificateFailed,
    CertificateObtained,
    CertificateObtaining,
    CertificateRateLimited,
)

if TYPE_CHECKING:
    from acmecerts.manager import CertificateManager

__all__ = ["PrometheusMetrics", "endpoint_label"]

_ID_LIKE = re.compile(r"^(?=.*\d)[A-Za-z0-9_-]{8,}$|^\d+$")


def endpoint_label(url: str, directory: dict[str, str] | None = None) -> str:
    """A low-cardinality name for the ACME resource ``url`` points at.

    Directory URLs map to their directory key (``newOrder``...); other URLs keep their
    path segments that are not identifiers (``/acme/authz/123/abc`` → ``acme/authz``).
    """
    if directory:
        for name, value in directory.items():
            if value == url:
                return name
    path = url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0]
    kept = [seg for seg in path.split("/") if seg and not _ID_LIKE.match(seg)]
    return "/".join(kept[:3]) or "/"


class PrometheusMetrics:
    """Counts what a manager does into a ``prometheus_client`` registry."""

    def __init__(self, registry: Any = None, *, namespace: str = "acmecerts") -> None:
        try:
            import prometheus_client as prom
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise InvalidInput(
                "metrics need prometheus_client: pip install 'acmecerts[metrics]'"
            ) from exc
        self.registry = registry if registry is not None else prom.CollectorRegistry()
        ns = namespace
        self.managed = prom.Gauge(
            "certificates_managed", "Certificates managed", namespace=ns, registry=self.registry
        )
        self.expiry = prom.Gauge(
            "certificate_expiry_timestamp_seconds",
            "Expiry (not_after) of the current certificate, Unix time",
            ["name"],
            namespace=ns,
            registry=self.registry,
        )
        self.attempts = prom.Counter(
            "issuance_attempts",
            "Issuance attempts started",
            ["kind"],
            namespace=ns,
            registry=self.registry,
        )
        self.outcomes = prom.Counter(
            "issuance_outcomes",
            "Issuance attempt outcomes",
            ["outcome", "reason"],
            namespace=ns,
            registry=self.registry,
        )
        self.requests = prom.Counter(
            "acme_requests",
            "ACME HTTP requests by endpoint, method and status (0: no answer)",
            ["endpoint", "method", "status"],
            namespace=ns,
            registry=self.registry,
        )
        self.budget = prom.Gauge(
            "ledger_budget_remaining",
            "Rate-limit budget left now, per limit (the scarcest scope)",
            ["limit"],
            namespace=ns,
            registry=self.registry,
        )
        self._manager: CertificateManager | None = None
        self._directory: dict[str, str] | None = None

    def attach(self, manager: CertificateManager) -> None:
        """Start counting ``manager``'s events and its client's ACME requests."""
        self._manager = manager
        manager.subscribe(self.observe)
        manager.client.transport.add_response_hook(self._on_response)

    def _on_response(self, method: str, url: str, status: int) -> None:
        if self._directory is None and self._manager is not None:
            cached = getattr(self._manager.client.transport, "_directory", None)
            if cached is not None:
                self._directory = {
                    "newNonce": cached.new_nonce,
                    "newAccount": cached.new_account,
                    "newOrder": cached.new_order,
                    **({"revokeCert": cached.revoke_cert} if cached.revoke_cert else {}),
                    **({"keyChange": cached.key_change} if cached.key_change else {}),
                }
        self.requests.labels(endpoint_label(url, self._directory), method, str(status)).inc()

    def observe(self, event: CertificateEvent) -> None:
        """Record one manager event (a :data:`~acmecerts.manager.Subscriber`)."""
        if isinstance(event, CertificateObtaining):
            self.attempts.labels("renewal" if event.renewal else "issuance").inc()
        elif isinstance(event, CertificateObtained):
            self.outcomes.labels("obtained", "").inc()
            if event.certificate is not None:
                self.expiry.labels(event.name).set(event.certificate.not_after.timestamp())
        elif isinstance(event, CertificateFailed):
            reason = type(event.error).__name__ if event.error is not None else "unknown"
            self.outcomes.labels("failed", reason).inc()
        elif isinstance(event, CertificateRateLimited):
            self.outcomes.labels("rate_limited", "RateLimited").inc()
        elif isinstance(event, CertificateDeferred):
            self.outcomes.labels("deferred", "ledger").inc()
        elif isinstance(event, CertificateCancelled):
            self.outcomes.labels("cancelled", "").inc()
            if self._has_expiry(event.name):
                self.expiry.remove(event.name)
        if self._manager is not None:
            self.managed.set(len(self._manager.managed()))

    def _has_expiry(self, name: str) -> bool:
        return any(
            sample.labels.get("name") == name
            for metric in self.expiry.collect()
            for sample in metric.samples
        )

    def set_budget(self, limit: str, remaining: float) -> None:
        """Publish the ledger's remaining budget for ``limit``."""
        self.budget.labels(limit).set(remaining)

    def render(self) -> bytes:
        """The metrics in the Prometheus text format."""
        import prometheus_client as prom

        data: bytes = prom.generate_latest(self.registry)
        return data
