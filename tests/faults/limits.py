"""An "enforce Let's Encrypt limits" mode for :class:`~tests.faults.proxy.FaultProxy`.

:class:`CertificatesPerDomain` makes the proxy count certificates per registered domain
the way Let's Encrypt does, independently of acmecerts' own ledger (its own token
bucket arithmetic, its own Public Suffix List lookup): ``capacity`` certificates per
``period`` per registered domain, refilled evenly (one every ``period / capacity``),
shared by every account::

    limits = CertificatesPerDomain(capacity=50, period=timedelta(days=7), now=clock.now)
    limits.install(proxy)
    ...
    assert limits.refusals == []          # no 429 was needed

* at ``newOrder`` the identifiers (read from the JWS payload) are checked: an order
  naming a registered domain with no certificate left is answered ``429 rateLimited``
  with ``Retry-After`` and Let's Encrypt's detail text, and never reaches Pebble;
* at ``finalize`` the names of the CSR are checked again and, if they fit, one
  certificate is spent in each of their registered domains; otherwise 429.

``now`` is where the proxy's time comes from (pass the ledger's ``FakeClock.now`` so
that a week of fake time refills both). The hook runs in the proxy's thread.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import ipaddress
import json
import math
import threading
from collections.abc import Callable
from typing import Any

from cryptography import x509
from publicsuffixlist import PublicSuffixList

from tests.faults.proxy import RATE_LIMITED, Fault, FaultProxy, Respond

__all__ = ["CertificatesPerDomain", "Refusal"]

_PSL = PublicSuffixList()
_DOCS = "https://letsencrypt.org/docs/rate-limits/#new-certificates-per-registered-domain"


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One 429 the proxy answered: where, for which registered domain, until when."""

    path: str
    domain: str
    retry_at: dt.datetime


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _payload(body: bytes) -> dict[str, Any] | None:
    try:
        jws = json.loads(body)
        payload = json.loads(_b64decode(jws["payload"]))
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    return payload if isinstance(payload, dict) else None


def registered_domain(name: str) -> str:
    """The CA's counting key: PSL registered domain, IPv4 address, or IPv6 /64."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        base = name.lower().removeprefix("*.")
        found = _PSL.privatesuffix(base)
        return found if isinstance(found, str) else base
    if address.version == 6:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class CertificatesPerDomain:
    """Let's Encrypt's "new certificates per registered domain" limit, enforced by a proxy."""

    def __init__(
        self,
        *,
        capacity: int = 50,
        period: dt.timedelta = dt.timedelta(days=7),
        now: Callable[[], dt.datetime] | None = None,
        new_order_path: str = "/order-plz",
        finalize_prefix: str = "/finalize-order/",
    ) -> None:
        self.capacity = capacity
        self.period = period.total_seconds()
        self.interval = self.period / capacity
        self._now = now or (lambda: dt.datetime.now(dt.UTC))
        self._new_order_path = new_order_path
        self._finalize_prefix = finalize_prefix
        self._lock = threading.Lock()
        # registered domain -> theoretical arrival time (seconds since the epoch)
        self._tat: dict[str, float] = {}
        #: Certificates counted per registered domain (finalize requests let through).
        self.issued: dict[str, int] = {}
        #: Every 429 answered, in order.
        self.refusals: list[Refusal] = []

    def install(self, proxy: FaultProxy) -> CertificatesPerDomain:
        """Make ``proxy`` enforce this limit (replacing any other request hook)."""
        proxy.request_hook = self
        return self

    def __call__(self, method: str, path: str, body: bytes) -> Fault | None:
        if method != "POST":
            return None
        if path == self._new_order_path:
            names = self._order_names(body)
            spend = False
        elif path.startswith(self._finalize_prefix):
            names = self._csr_names(body)
            spend = True
        else:
            return None
        if not names:
            return None
        domains = sorted({registered_domain(n) for n in names})
        with self._lock:
            now = self._now().timestamp()
            for domain in domains:
                tat = max(self._tat.get(domain, now), now)
                if tat + self.interval - now > self.period + 1e-6:
                    return self._refuse(path, domain, tat + self.interval - self.period, now)
            if spend:
                for domain in domains:
                    self._tat[domain] = max(self._tat.get(domain, now), now) + self.interval
                    self.issued[domain] = self.issued.get(domain, 0) + 1
        return None

    def _refuse(self, path: str, domain: str, retry_at: float, now: float) -> Fault:
        instant = dt.datetime.fromtimestamp(retry_at, dt.UTC)
        self.refusals.append(Refusal(path, domain, instant))
        days = self.period / 86400
        detail = (
            f'too many certificates ({self.capacity}) already issued for "{domain}" in the '
            f"last {days:g} days, retry after {instant:%Y-%m-%d %H:%M:%S} UTC: see {_DOCS}"
        )
        return Respond(
            429,
            RATE_LIMITED,
            detail=detail,
            retry_after=str(max(1, math.ceil(retry_at - now))),
        )

    @staticmethod
    def _order_names(body: bytes) -> list[str]:
        payload = _payload(body)
        if payload is None:
            return []
        identifiers = payload.get("identifiers")
        if not isinstance(identifiers, list):
            return []
        return [str(i.get("value")) for i in identifiers if isinstance(i, dict)]

    @staticmethod
    def _csr_names(body: bytes) -> list[str]:
        payload = _payload(body)
        if payload is None or not isinstance(payload.get("csr"), str):
            return []
        try:
            csr = x509.load_der_x509_csr(_b64decode(payload["csr"]))
            san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except (ValueError, x509.ExtensionNotFound, binascii.Error):
            return []
        names: list[str] = list(san.get_values_for_type(x509.DNSName))
        names += [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
        return names
