"""What a simulation may change about the simulated CA: failures, outages, latency,
a mass revocation; and the records the CA keeps (orders, authorizations, certificates).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

from acmecerts.testing.simulated_ca._issuer import ari_window

__all__ = [
    "Account",
    "Authorization",
    "CertificateRecord",
    "MassRevocation",
    "Order",
    "Outage",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Outage:
    """Every request from ``start`` for ``duration`` is answered ``503``.

    ``retry_after``: seconds of ``Retry-After`` on those answers (``None``: none, as an
    unplanned outage's load balancer would send).
    """

    start: _dt.datetime
    duration: _dt.timedelta
    retry_after: int | None = None

    def covers(self, now: _dt.datetime) -> bool:
        """Whether ``now`` falls in the outage."""
        return self.start <= now < self.start + self.duration


@dataclasses.dataclass(frozen=True, slots=True)
class MassRevocation:
    """At ``at``, a ``fraction`` of the certificates issued before it must be replaced.

    Their renewalInfo answers move the window into the past (Boulder's immediate
    window); at ``deadline`` those not replaced yet count as revoked
    (:attr:`CertificateRecord.revoked_at`). Which ones: each certificate draws a uniform
    number at issuance; those under ``fraction`` are affected (reproducible by seed).
    """

    at: _dt.datetime
    fraction: float
    deadline: _dt.datetime


#: Latency of one request: seconds, or a function of the request (method, URL) giving them.
Latency = float | Callable[[str, str], float]


async def wait_latency(latency: Latency, method: str, url: object) -> None:
    """Sleep the ``latency`` of one request; none: still a checkpoint, as any I/O is.

    Under asyncio the checkpoint is what anyio's is there, ``asyncio.sleep(0)``, without
    anyio's lookup of its backend (a good part of a renewalInfo answer's CPU).
    """
    delay = latency(method, str(url)) if callable(latency) else latency
    if delay > 0:
        await anyio.sleep(delay)
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio)
        await anyio.lowlevel.checkpoint()
    else:
        await asyncio.sleep(0)


@dataclasses.dataclass(slots=True)
class Account:
    """One ACME account."""

    id: int
    url: str
    jwk: dict[str, Any]
    key: Any
    thumbprint: str


@dataclasses.dataclass(slots=True)
class Authorization:
    """One authorization of one identifier for one account."""

    id: int
    url: str
    account: int
    identifier: tuple[str, str]
    wildcard: bool
    token: str
    status: str
    expires: _dt.datetime
    validated_at: _dt.datetime | None = None
    error: dict[str, Any] | None = None


@dataclasses.dataclass(slots=True)
class Order:
    """One order."""

    id: int
    url: str
    account: int
    identifiers: tuple[tuple[str, str], ...]
    profile: str
    authorizations: list[Authorization]
    expires: _dt.datetime
    replaces: str | None
    #: Whether it renews an identical set (exempt from orders and per-domain limits).
    renewal: bool
    status: str = "pending"
    certificate: int | None = None
    error: dict[str, Any] | None = None


@dataclasses.dataclass(slots=True)
class CertificateRecord:
    """One issued certificate, and what became of it."""

    serial: int
    cert_id: str
    account: int
    identifiers: tuple[tuple[str, str], ...]
    profile: str
    not_before: _dt.datetime
    not_after: _dt.datetime
    pem: bytes
    #: Uniform in [0, 1), drawn at issuance: below a mass revocation's fraction, affected.
    draw: float
    #: The certificate that replaced it by ``replaces`` (its serial), and when.
    replaced_by: int | None = None
    replaced_at: _dt.datetime | None = None
    #: When a mass revocation revoked it (its deadline passed, not replaced).
    revoked_at: _dt.datetime | None = None
    #: The cached renewalInfo body and the window it states.
    ari_body: bytes = b""
    ari_window: tuple[_dt.datetime, _dt.datetime] | None = None
    #: Its window as Let's Encrypt places it (``ari_window`` of its validity).
    base_window: tuple[_dt.datetime, _dt.datetime] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.base_window = ari_window(self.not_before, self.not_after)
