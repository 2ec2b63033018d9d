"""The certificate manager: many certificates, parallel, single-flight, cancellable."""

from acmecerts.manager._events import (
    CertificateCancelled,
    CertificateDeferred,
    CertificateEvent,
    CertificateFailed,
    CertificateLoaded,
    CertificateObtained,
    CertificateObtaining,
    CertificateRateLimited,
    Subscriber,
)
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
    "CertificateSpec",
    "CertificateState",
    "CertificateStatus",
    "DeferredResult",
    "FailedResult",
    "IssueResult",
    "IssuedResult",
    "OwnerGuard",
    "Subscriber",
]
