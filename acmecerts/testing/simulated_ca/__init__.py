"""A simulated Let's Encrypt, in process: replay a fleet under the real limits.

:class:`SimulatedCA` is an ACME server (RFC 8555, RFC 9773 renewal information, Let's
Encrypt's certificate profiles) that lives behind the transport's exchange seam: no
socket, no subprocess. The real :class:`~acmecerts.AcmeClient` (its flow, its retries,
its ledger), the :class:`~acmecerts.CertificateManager` and the store run unmodified
against it; on a :class:`~acmecerts.VirtualClock`, months pass in seconds::

    clock = VirtualClock(datetime(2027, 1, 1, tzinfo=UTC))
    ca = SimulatedCA(clock, seed=1)
    transport = AcmeTransport(ca.directory_url, client=ca, clock=clock)
    client = AcmeClient(ca.directory_url, transport=transport, clock=clock)
    solver = SimulatedSolver(ca.published)

What it enforces, as Let's Encrypt does (token buckets, :class:`Limits`): new orders per
account, certificates per registered domain and per exact identifier set, failed
authorizations per identifier, the pause after consecutive failures, new accounts per
address, and per-endpoint request rates (``503``). Every refusal carries
``Retry-After``. ARI renewals (``replaces``) are exempt from every limit; renewals of an
identical set from the orders and per-domain ones. renewalInfo places windows as Let's
Encrypt does and answers ``Retry-After: 21600``.

What a simulation may set: a validation failure rate and names that always fail,
outages (:class:`Outage`), latency in virtual seconds, a mass revocation
(:class:`MassRevocation`). What it records: :attr:`SimulatedCA.stats` (requests by
endpoint and status), :attr:`SimulatedCA.refusals` (by limit),
:attr:`SimulatedCA.certificates` (each with its replacement and revocation).
"""

from __future__ import annotations

from acmecerts.testing.simulated_ca._buckets import Limit, Limits
from acmecerts.testing.simulated_ca._config import (
    CertificateRecord,
    MassRevocation,
    Outage,
)
from acmecerts.testing.simulated_ca._issuer import ari_window, immediate_window
from acmecerts.testing.simulated_ca._profiles import (
    CLASSIC_45_DAYS,
    CLASSIC_64_DAYS,
    Era,
    Profile,
    lets_encrypt_profiles,
)
from acmecerts.testing.simulated_ca._server import ARI_RETRY_AFTER, SimulatedCA
from acmecerts.testing.simulated_ca._solver import Published, SimulatedSolver

__all__ = [
    "ARI_RETRY_AFTER",
    "CLASSIC_45_DAYS",
    "CLASSIC_64_DAYS",
    "CertificateRecord",
    "Era",
    "Limit",
    "Limits",
    "MassRevocation",
    "Outage",
    "Profile",
    "Published",
    "SimulatedCA",
    "SimulatedSolver",
    "ari_window",
    "immediate_window",
    "lets_encrypt_profiles",
]
