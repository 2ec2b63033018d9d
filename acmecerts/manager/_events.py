"""Typed events the manager publishes, and the bus that delivers them."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from collections.abc import Awaitable, Callable

from acmecerts._issued import IssuedCertificate
from acmecerts.errors import AcmeCertsError

__all__ = [
    "CertificateCancelled",
    "CertificateDeferred",
    "CertificateEvent",
    "CertificateFailed",
    "CertificateLoaded",
    "CertificateObtained",
    "CertificateObtaining",
    "CertificateRateLimited",
    "CertificateReplacementRequested",
    "CertificateReplacesRefused",
    "EventBus",
    "Subscriber",
]

log = logging.getLogger("acmecerts.events")


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateEvent:
    """Base of every event: which certificate, and when (aware UTC)."""

    name: str
    at: _dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateObtaining(CertificateEvent):
    """An attempt starts (``renewal`` for a renewal)."""

    renewal: bool = False
    attempt: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateObtained(CertificateEvent):
    """A certificate was issued (``renewal``: it replaced an earlier one)."""

    certificate: IssuedCertificate | None = None
    renewal: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateLoaded(CertificateEvent):
    """A current certificate was read from the store (at start, or written by a replica).

    Published once per certificate and serial the manager did not issue itself, so a
    subscriber that publishes certificates (a TLS Secret, a file) hears of every one
    after a restart. ``renew_at`` is when the manager plans to renew it.
    """

    certificate: IssuedCertificate | None = None
    renew_at: _dt.datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateFailed(CertificateEvent):
    """An attempt failed; ``next_attempt_at`` is when the schedule tries again.

    ``attempt`` counts the failed attempts since the last success, this one included
    (0: not counted, e.g. a failure outside an attempt).
    """

    error: AcmeCertsError | None = None
    next_attempt_at: _dt.datetime | None = None
    attempt: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateDeferred(CertificateEvent):
    """Work was deferred by the rate-limit ledger until ``until``."""

    until: _dt.datetime | None = None
    reason: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateRateLimited(CertificateEvent):
    """The CA answered ``rateLimited``; nothing is sent before ``until``."""

    until: _dt.datetime | None = None
    detail: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateReplacementRequested(CertificateEvent):
    """The CA asked (ARI, RFC 9773) for the certificate to be replaced at once.

    A CA that must revoke certificates early (a mass revocation) moves their renewal
    windows into the past. ``reason`` is ``"window-passed"`` (the window ended) or
    ``"window-moved"`` (it was moved earlier and has started); ``explanation_url`` is
    the CA's page about it, if it gave one. Published once per certificate; the
    renewal follows at once (highest priority first, within the request throttle).
    """

    reason: str = ""
    window_start: _dt.datetime | None = None
    window_end: _dt.datetime | None = None
    explanation_url: str | None = None
    #: The ARI certID of the certificate to replace.
    cert_id: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateReplacesRefused(CertificateEvent):
    """The CA refused the renewal's ``newOrder`` because of ``replaces`` (RFC 9773 §5).

    ``error`` is its answer (``alreadyReplaced``, ``unauthorized`` for a certificate
    another account ordered, ``malformed`` or ``serverInternal`` for a certID it does
    not know...). The owner is asked again, then one order is sent without
    ``replaces``: a renewal that counts against the rate limits like any other.
    """

    cert_id: str = ""
    error: AcmeCertsError | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateCancelled(CertificateEvent):
    """Work for the certificate was cancelled (``reason`` says why)."""

    reason: str = ""


#: A subscriber: a plain or async callable taking an event.
Subscriber = Callable[[CertificateEvent], Awaitable[None] | None]


class EventBus:
    """Delivers events to subscribers in order; a failing subscriber is logged, not fatal."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add ``subscriber``; returns a function that removes it."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    async def publish(self, event: CertificateEvent) -> None:
        """Deliver ``event`` to every subscriber."""
        for subscriber in list(self._subscribers):
            try:
                result = subscriber(event)
                if result is not None:
                    await result
            except Exception:  # one broken subscriber must not stop issuance
                log.exception("event subscriber %r failed on %s", subscriber, type(event).__name__)
