"""The certificate manager: many certificates, parallel, single-flight, cancellable.

:func:`open_manager` wires one from a shared store in one call (account key, account,
rate-limit ledger); :class:`CertificateManager` is the manager itself.
"""

from acmecerts.manager._events import (
    CertificateCancelled,
    CertificateDeferred,
    CertificateEvent,
    CertificateFailed,
    CertificateLoaded,
    CertificateObtained,
    CertificateObtaining,
    CertificateRateLimited,
    CertificateReplacementRequested,
    CertificateReplacesRefused,
    Subscriber,
)
from acmecerts.manager._fleet import ClientOptions, ManagerOptions, OpenOptions, open_manager
from acmecerts.manager._manager import CancellationHook, CertificateManager
from acmecerts.manager._spec import (
    CancelledResult,
    CertificateSpec,
    CertificateState,
    CertificateStatus,
    DeferredResult,
    FailedResult,
    IssuedResult,
    IssueResult,
    OwnerGuard,
)

__all__ = [
    "CancellationHook",
    "CancelledResult",
    "CertificateCancelled",
    "CertificateDeferred",
    "CertificateEvent",
    "CertificateFailed",
    "CertificateLoaded",
    "CertificateManager",
    "CertificateObtained",
    "CertificateObtaining",
    "CertificateRateLimited",
    "CertificateReplacementRequested",
    "CertificateReplacesRefused",
    "CertificateSpec",
    "CertificateState",
    "CertificateStatus",
    "ClientOptions",
    "DeferredResult",
    "FailedResult",
    "IssueResult",
    "IssuedResult",
    "ManagerOptions",
    "OpenOptions",
    "OwnerGuard",
    "Subscriber",
    "open_manager",
]
