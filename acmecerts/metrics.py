"""Prometheus metrics for a :class:`~acmecerts.manager.CertificateManager` (extra ``metrics``).

::

    from prometheus_client import start_http_server
    from acmecerts.metrics import PrometheusMetrics

    metrics = PrometheusMetrics()
    metrics.attach(manager)          # events and ACME requests are counted from here on
    await metrics.refresh()          # optional: read a stored ledger now, not at the next event
    start_http_server(9100)          # or serve metrics.registry your own way

Metrics (all prefixed ``acmecerts_``): ``certificates_managed``,
``certificate_expiry_timestamp_seconds{name}`` and
``certificate_renewal_timestamp_seconds{name}`` (set when a certificate is issued and
when one is loaded from the store at start, removed when it is cancelled),
``issuance_attempts_total{kind}`` (``issuance``/``renewal``),
``issuance_outcomes_total{outcome,reason}`` (``obtained``, ``failed``, ``deferred``,
``rate_limited``, ``cancelled``; ``reason`` is the error class, bounded),
``ari_replacements_requested_total{reason}`` (the CA moved a certificate's ARI window
into the past, e.g. in a mass revocation: ``window-passed``/``window-moved``),
``ari_replaces_refused_total{problem}`` (a renewal's ``replaces`` refused by the CA, by
problem type: ``alreadyReplaced``, ``unauthorized``...; the renewal was ordered again
without it), ``acme_requests_total{endpoint,method,status}`` (``endpoint``: the
directory's own keys, ``newOrder``, ``renewalInfo``..., or the path without
identifiers), and, when the manager's client has a rate-limit ledger,
``ledger_budget_remaining{limit}``: the tokens left now in the scarcest bucket of each
limit (its capacity when none is spent), read from the ledger at every scrape. Names and
reasons are label values; no key material or URL with an identifier ever becomes a
label.

The budget at scrape time comes from the ledger's last-known state
(:meth:`~acmecerts.ratelimit.RateLimitLedger.cached_budget`; a scrape never waits for a
store): an in-memory ledger is exact, a stored one includes this process's own spends
at once and other replicas' after the next read of the store, which the metrics do after
manager events (at most once per ``budget_refresh`` seconds) and on :meth:`refresh`.
A stored ledger never read yet publishes no budget rather than a wrong one.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from acmecerts import duration_seconds
from acmecerts import manager as mgr
from acmecerts.client import ClientEvent, ResponseReceived
from acmecerts.errors import AcmeCertsError, AcmeProblem, InvalidInput, ProblemType
from acmecerts.ratelimit import RateLimitLedger

if TYPE_CHECKING:
    from prometheus_client.metrics import MetricWrapperBase
    from prometheus_client.metrics_core import GaugeMetricFamily, Metric

    from acmecerts.manager import CertificateManager
    from acmecerts.protocol.resources import Directory
    from acmecerts.ratelimit import BudgetLine, RateLimitModel

__all__ = ["PrometheusMetrics", "budget_by_limit", "endpoint_label"]

log = logging.getLogger("acmecerts.metrics")

#: A ``prometheus_client`` metric type (``Gauge``, ``Counter``).
M = TypeVar("M", bound="MetricWrapperBase")

_ID_LIKE = re.compile(r"^(?=.*\d)[A-Za-z0-9_-]{8,}$|^\d+$")
#: Directory resources whose URL is a prefix: the request's URL goes on below it.
_PREFIX_RESOURCES = ("renewalInfo",)


def endpoint_label(url: str, directory: dict[str, str] | None = None) -> str:
    """A low-cardinality name for the ACME resource ``url`` points at.

    Directory URLs map to their directory key (``newOrder``...), a ``renewalInfo`` request
    (its certID below the directory's URL) to ``renewalInfo``; other URLs keep their path
    segments that are not identifiers (``/acme/authz/123/abc`` → ``acme/authz``).
    """
    if directory:
        for name, value in directory.items():
            if value == url:
                return name
        for name in _PREFIX_RESOURCES:
            prefix = directory.get(name)
            if prefix and url.startswith(prefix.rstrip("/") + "/"):
                return name
    path = url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0]
    kept = [seg for seg in path.split("/") if seg and not _ID_LIKE.match(seg)]
    return "/".join(kept[:3]) or "/"


def _directory_labels(directory_url: str, directory: Directory | None) -> dict[str, str]:
    """Label name to URL for the directory itself and every resource it lists."""
    labels = {"directory": directory_url}
    if directory is None:
        return labels
    resources = {
        "newNonce": directory.new_nonce,
        "newAccount": directory.new_account,
        "newOrder": directory.new_order,
        "newAuthz": directory.new_authz,
        "revokeCert": directory.revoke_cert,
        "keyChange": directory.key_change,
        "renewalInfo": directory.renewal_info,
    }
    labels.update({name: url for name, url in resources.items() if url})
    return labels


def budget_by_limit(model: RateLimitModel, lines: Iterable[BudgetLine]) -> dict[str, int]:
    """Tokens left now per limit: its scarcest bucket, or its capacity if none is spent.

    ``lines`` is a ledger's budget (:meth:`~acmecerts.ratelimit.RateLimitLedger.budget`):
    only buckets that are not full are listed, so a limit without a line is full. A block
    learned from the CA (a limit the model lacks) counts 0 while it lasts, and so does a
    paused identifier for the limit that pauses.
    """
    values = {limit.name: limit.capacity for limit in model}
    for line in lines:
        values[line.limit] = min(values.get(line.limit, line.remaining), line.remaining)
    return values


class _LedgerBudget:
    """The ``ledger_budget_remaining`` family, computed at each scrape (a collector)."""

    def __init__(self, metrics: PrometheusMetrics, name: str) -> None:
        self._metrics = metrics
        self._name = name
        self._help = "Rate-limit budget left now, per limit (the scarcest scope)"

    def _family(self) -> GaugeMetricFamily:
        from prometheus_client.metrics_core import GaugeMetricFamily

        return GaugeMetricFamily(self._name, self._help, labels=["limit"])

    def describe(self) -> list[Metric]:
        return [self._family()]

    def collect(self) -> list[Metric]:
        family = self._family()
        for limit, remaining in sorted(self._metrics.budget_values().items()):
            family.add_metric([limit], remaining)
        return [family]


class PrometheusMetrics:
    """Counts what a manager does into a ``prometheus_client`` registry.

    Args:
        registry: The registry to register in (a new ``CollectorRegistry`` if omitted).
        namespace: The prefix of every metric name.
        budget_refresh: The shortest time (seconds or ``timedelta``, on the ledger's
            clock) between two reads of a stored ledger after manager events; the
            process's own spends show at once regardless.
    """

    def __init__(
        self,
        registry: Any = None,
        *,
        namespace: str = "acmecerts",
        budget_refresh: float | _dt.timedelta = 10.0,
    ) -> None:
        try:
            import prometheus_client as prom
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise InvalidInput(
                "metrics need prometheus_client: pip install 'acmecerts[metrics]'"
            ) from exc
        refresh = duration_seconds(budget_refresh, "budget_refresh")
        self.budget_refresh = _dt.timedelta(seconds=refresh)
        self.registry = registry if registry is not None else prom.CollectorRegistry()

        def metric(kind: type[M], name: str, documentation: str, labels: list[str]) -> M:
            return kind(name, documentation, labels, namespace=namespace, registry=self.registry)

        self.managed = metric(prom.Gauge, "certificates_managed", "Certificates managed", [])
        self.expiry = metric(
            prom.Gauge,
            "certificate_expiry_timestamp_seconds",
            "Expiry (not_after) of the current certificate, Unix time",
            ["name"],
        )
        self.renewal = metric(
            prom.Gauge,
            "certificate_renewal_timestamp_seconds",
            "When the manager plans to renew the current certificate, Unix time",
            ["name"],
        )
        self.attempts = metric(
            prom.Counter, "issuance_attempts", "Issuance attempts started", ["kind"]
        )
        self.outcomes = metric(
            prom.Counter, "issuance_outcomes", "Issuance attempt outcomes", ["outcome", "reason"]
        )
        self.ari_replacements = metric(
            prom.Counter,
            "ari_replacements_requested",
            "Certificates the CA asked (ARI) to replace at once, by reason",
            ["reason"],
        )
        self.replaces_refused = metric(
            prom.Counter,
            "ari_replaces_refused",
            "Renewals whose replaces the CA refused (ordered again without it), by problem",
            ["problem"],
        )
        self.requests = metric(
            prom.Counter,
            "acme_requests",
            "ACME HTTP requests by endpoint, method and status (0: no answer)",
            ["endpoint", "method", "status"],
        )
        #: The ``ledger_budget_remaining`` collector (values from :meth:`budget_values`).
        self.budget = _LedgerBudget(
            self, f"{namespace}_ledger_budget_remaining" if namespace else "ledger_budget_remaining"
        )
        self.registry.register(self.budget)
        self._set_budget: dict[str, float] = {}
        self._manager: CertificateManager | None = None
        self._directory: dict[str, str] | None = None
        self._directory_source: object = None
        self._refreshed_at: _dt.datetime | None = None

    def attach(self, manager: CertificateManager) -> None:
        """Start counting ``manager``'s events and its client's ACME requests.

        From now on ``ledger_budget_remaining`` follows the client's ledger, if it has
        one (a stored ledger once it has been read: at the first event, or
        :meth:`refresh`).
        """
        self._manager = manager
        manager.subscribe(self._on_event)
        manager.client.subscribe(self._on_client_event)
        self.managed.set(len(manager.managed()))

    @property
    def ledger(self) -> RateLimitLedger | None:
        """The rate-limit ledger of the attached manager's client, if any.

        Only a :class:`~acmecerts.ratelimit.RateLimitLedger` has a budget to publish: a
        ledger of your own (any :class:`~acmecerts.ratelimit.LedgerLike`) gives none.
        """
        ledger = None if self._manager is None else self._manager.client.ledger
        return ledger if isinstance(ledger, RateLimitLedger) else None

    async def refresh(self) -> None:
        """Read the ledger from its store now (after :meth:`attach`, or before a scrape).

        Errors of the store are logged, not raised: metrics never stop the manager.
        """
        await self._refresh_ledger(force=True)

    async def _on_event(self, event: mgr.CertificateEvent) -> None:
        self.observe(event)
        if not isinstance(event, mgr.CertificateObtaining):  # it spends nothing yet
            await self._refresh_ledger(force=False)

    async def _refresh_ledger(self, *, force: bool) -> None:
        ledger = self.ledger
        if ledger is None or ledger.storage is None:
            return  # in memory: the scrape reads it exactly
        now = ledger.clock.now()
        if (
            not force
            and self._refreshed_at is not None
            and now - self._refreshed_at < self.budget_refresh
        ):
            return
        self._refreshed_at = now
        try:
            await ledger.budget()  # reads the store; cached_budget() answers from it
        except AcmeCertsError as exc:
            log.warning("could not read the rate-limit ledger for metrics: %s", exc)

    def _on_client_event(self, event: ClientEvent) -> None:
        """The client's subscriber: counts each request as it ends (pure, cannot fail)."""
        if isinstance(event, ResponseReceived):
            endpoint = endpoint_label(event.url, self._directory_map())
            self.requests.labels(endpoint, event.method, str(event.status)).inc()

    def _directory_map(self) -> dict[str, str] | None:
        """The labels of the client's directory, rebuilt when it fetched a new one."""
        if self._manager is None:
            return self._directory
        transport = self._manager.client.transport
        # the directory the transport holds now (None until it fetched it)
        current = getattr(transport, "_directory", None)
        if self._directory is None or current is not self._directory_source:
            self._directory_source = current
            self._directory = _directory_labels(transport.directory_url, current)
        return self._directory

    def observe(self, event: mgr.CertificateEvent) -> None:
        """Record one manager event (pure: no I/O; also a :data:`~acmecerts.manager.Subscriber`)."""
        if isinstance(event, mgr.CertificateObtaining):
            self.attempts.labels("renewal" if event.renewal else "issuance").inc()
        elif isinstance(event, mgr.CertificateLoaded):
            if event.certificate is not None:
                self.expiry.labels(event.name).set(event.certificate.not_after.timestamp())
            self._set_renewal(event.name, event.renew_at)
        elif isinstance(event, mgr.CertificateObtained):
            self.outcomes.labels("obtained", "").inc()
            if event.certificate is not None:
                self.expiry.labels(event.name).set(event.certificate.not_after.timestamp())
            # a new certificate: the old plan is stale whether or not a new one is known
            plan = self._manager.renewal_at(event.name) if self._manager is not None else None
            self._set_renewal(event.name, plan)
        elif isinstance(event, mgr.CertificateFailed):
            reason = type(event.error).__name__ if event.error is not None else "unknown"
            self.outcomes.labels("failed", reason).inc()
        elif isinstance(event, mgr.CertificateRateLimited):
            self.outcomes.labels("rate_limited", "RateLimited").inc()
        elif isinstance(event, mgr.CertificateDeferred):
            self.outcomes.labels("deferred", "ledger").inc()
        elif isinstance(event, mgr.CertificateReplacementRequested):
            self.ari_replacements.labels(event.reason).inc()
        elif isinstance(event, mgr.CertificateReplacesRefused):
            error = event.error
            problem = error.type.rpartition(":")[2] if isinstance(error, AcmeProblem) else ""
            self.replaces_refused.labels(_bounded_problem(problem)).inc()
        elif isinstance(event, mgr.CertificateCancelled):
            self.outcomes.labels("cancelled", "").inc()
            _remove(self.expiry, event.name)
            _remove(self.renewal, event.name)
        if self._manager is not None:
            self.managed.set(len(self._manager.managed()))

    def _set_renewal(self, name: str, at: _dt.datetime | None) -> None:
        if at is None:
            _remove(self.renewal, name)  # no plan known: no stale instant either
        else:
            self.renewal.labels(name).set(at.timestamp())

    def budget_values(self) -> dict[str, float]:
        """What ``ledger_budget_remaining`` shows now, per limit.

        The attached client's ledger (:func:`budget_by_limit` of its
        :meth:`~acmecerts.ratelimit.RateLimitLedger.cached_budget`), over values given
        to :meth:`set_budget`; empty without either, or while a stored ledger has not
        been read yet.
        """
        values = dict(self._set_budget)
        ledger = self.ledger
        if ledger is not None:
            lines = ledger.cached_budget()
            if lines is not None:
                values.update(budget_by_limit(ledger.model, lines))
        return values

    def set_budget(self, limit: str, remaining: float) -> None:
        """Publish ``remaining`` for ``limit`` (a limit the attached ledger has wins)."""
        self._set_budget[limit] = float(remaining)

    def render(self) -> bytes:
        """The metrics in the Prometheus text format."""
        import prometheus_client as prom

        data: bytes = prom.generate_latest(self.registry)
        return data


#: The problem types a label may name (RFC 8555 §6.7 and later): a CA's own type is "other".
_KNOWN_PROBLEMS = frozenset(t.value.rpartition(":")[2] for t in ProblemType)


def _bounded_problem(problem: str) -> str:
    return problem if problem in _KNOWN_PROBLEMS else "other"


def _remove(gauge: Any, name: str) -> None:
    with contextlib.suppress(KeyError):  # older prometheus_client raise for an absent label set
        gauge.remove(name)
