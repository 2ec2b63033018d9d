"""acmecerts: an async ACME (RFC 8555) client for issuing certificates at fleet scale.

The public API is re-exported here; everything else is an implementation detail.

The names are imported when first used (PEP 562), so ``import acmecerts`` (and the
``acmecerts`` command, which lives in this package) does not pay for httpx, cryptography,
dnspython and acme before it needs them: ``from acmecerts import AcmeClient`` works as
always, and type checkers read the imports under ``TYPE_CHECKING`` below.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from acmecerts._version import __version__

if TYPE_CHECKING:
    from acmecerts._issued import IssuedCertificate
    from acmecerts._time import (
        Clock,
        FakeClock,
        SystemClock,
        VirtualClock,
        duration_seconds,
        parse_retry_after,
    )
    from acmecerts.client import (
        AcmeClient,
        ExternalAccountBinding,
        PollPolicy,
        RevocationReason,
        TermsOfServiceNotAgreed,
    )
    from acmecerts.errors import (
        AccountDoesNotExist,
        AcmeCertsError,
        AcmeProblem,
        AlreadyReplaced,
        AttemptTimeout,
        AuthorizationFailed,
        BadNonce,
        BadServerResponse,
        CertificateMismatch,
        ConnectError,
        ErrorKind,
        ExternalAccountRequired,
        IdentifierPaused,
        InvalidIdentifier,
        InvalidInput,
        InvalidProfile,
        IssuanceError,
        NoSolverForChallenges,
        OrderFailed,
        ProblemType,
        ProfileRefused,
        ProxyError,
        RateLimitDeferred,
        RateLimited,
        RequestTimeout,
        ServerBusy,
        StorageError,
        TransportError,
        UnsafeUrl,
        UnsupportedChallenge,
    )
    from acmecerts.protocol.ari import RenewalDecision, RenewalInfoResult
    from acmecerts.protocol.certificate import CertificateChain, CertificateInfo
    from acmecerts.protocol.directory import DirectoryUrl
    from acmecerts.protocol.identifiers import Identifier, parse_identifier
    from acmecerts.protocol.keys import AccountKey, KeyType
    from acmecerts.protocol.resources import RenewalInfo
    from acmecerts.retry import AttemptSchedule, AttemptState, RequestRetry
    from acmecerts.solvers import (
        ChallengeTask,
        DnsHookSolver,
        DnsPersistSolver,
        Http01Server,
        Http01Webroot,
        LexiconSolver,
        PropagationCheck,
        Rfc2136Solver,
        Solver,
        TlsAlpn01Server,
    )
    from acmecerts.transport import ProxyConfig, UrlPolicy

__all__ = [
    "AccountDoesNotExist",
    "AccountKey",
    "AcmeCertsError",
    "AcmeClient",
    "AcmeProblem",
    "AlreadyReplaced",
    "AttemptSchedule",
    "AttemptState",
    "AttemptTimeout",
    "AuthorizationFailed",
    "BadNonce",
    "BadServerResponse",
    "CertificateChain",
    "CertificateInfo",
    "CertificateMismatch",
    "ChallengeTask",
    "Clock",
    "ConnectError",
    "DirectoryUrl",
    "DnsHookSolver",
    "DnsPersistSolver",
    "ErrorKind",
    "ExternalAccountBinding",
    "ExternalAccountRequired",
    "FakeClock",
    "Http01Server",
    "Http01Webroot",
    "Identifier",
    "IdentifierPaused",
    "InvalidIdentifier",
    "InvalidInput",
    "InvalidProfile",
    "IssuanceError",
    "IssuedCertificate",
    "KeyType",
    "LexiconSolver",
    "NoSolverForChallenges",
    "OrderFailed",
    "PollPolicy",
    "ProblemType",
    "ProfileRefused",
    "PropagationCheck",
    "ProxyConfig",
    "ProxyError",
    "RateLimitDeferred",
    "RateLimited",
    "RenewalDecision",
    "RenewalInfo",
    "RenewalInfoResult",
    "RequestRetry",
    "RequestTimeout",
    "RevocationReason",
    "Rfc2136Solver",
    "ServerBusy",
    "Solver",
    "StorageError",
    "SystemClock",
    "TermsOfServiceNotAgreed",
    "TlsAlpn01Server",
    "TransportError",
    "UnsafeUrl",
    "UnsupportedChallenge",
    "UrlPolicy",
    "VirtualClock",
    "__version__",
    "duration_seconds",
    "parse_identifier",
    "parse_retry_after",
]

#: Where each public name is defined; the same names as the imports above (a test checks).
_LAZY: dict[str, str] = {
    "AccountDoesNotExist": "acmecerts.errors",
    "AccountKey": "acmecerts.protocol.keys",
    "AcmeCertsError": "acmecerts.errors",
    "AcmeClient": "acmecerts.client",
    "AcmeProblem": "acmecerts.errors",
    "AlreadyReplaced": "acmecerts.errors",
    "AttemptSchedule": "acmecerts.retry",
    "AttemptState": "acmecerts.retry",
    "AttemptTimeout": "acmecerts.errors",
    "AuthorizationFailed": "acmecerts.errors",
    "BadNonce": "acmecerts.errors",
    "BadServerResponse": "acmecerts.errors",
    "CertificateChain": "acmecerts.protocol.certificate",
    "CertificateInfo": "acmecerts.protocol.certificate",
    "CertificateMismatch": "acmecerts.errors",
    "ChallengeTask": "acmecerts.solvers",
    "Clock": "acmecerts._time",
    "ConnectError": "acmecerts.errors",
    "DirectoryUrl": "acmecerts.protocol.directory",
    "DnsHookSolver": "acmecerts.solvers",
    "DnsPersistSolver": "acmecerts.solvers",
    "ErrorKind": "acmecerts.errors",
    "ExternalAccountBinding": "acmecerts.client",
    "ExternalAccountRequired": "acmecerts.errors",
    "FakeClock": "acmecerts._time",
    "Http01Server": "acmecerts.solvers",
    "Http01Webroot": "acmecerts.solvers",
    "Identifier": "acmecerts.protocol.identifiers",
    "IdentifierPaused": "acmecerts.errors",
    "InvalidIdentifier": "acmecerts.errors",
    "InvalidInput": "acmecerts.errors",
    "InvalidProfile": "acmecerts.errors",
    "IssuanceError": "acmecerts.errors",
    "IssuedCertificate": "acmecerts._issued",
    "KeyType": "acmecerts.protocol.keys",
    "LexiconSolver": "acmecerts.solvers",
    "NoSolverForChallenges": "acmecerts.errors",
    "OrderFailed": "acmecerts.errors",
    "PollPolicy": "acmecerts.client",
    "ProblemType": "acmecerts.errors",
    "ProfileRefused": "acmecerts.errors",
    "PropagationCheck": "acmecerts.solvers",
    "RateLimitDeferred": "acmecerts.errors",
    "RateLimited": "acmecerts.errors",
    "RenewalDecision": "acmecerts.protocol.ari",
    "RenewalInfo": "acmecerts.protocol.resources",
    "RenewalInfoResult": "acmecerts.protocol.ari",
    "RequestRetry": "acmecerts.retry",
    "RequestTimeout": "acmecerts.errors",
    "RevocationReason": "acmecerts.client",
    "Rfc2136Solver": "acmecerts.solvers",
    "ServerBusy": "acmecerts.errors",
    "Solver": "acmecerts.solvers",
    "StorageError": "acmecerts.errors",
    "SystemClock": "acmecerts._time",
    "VirtualClock": "acmecerts._time",
    "TermsOfServiceNotAgreed": "acmecerts.client",
    "TlsAlpn01Server": "acmecerts.solvers",
    "TransportError": "acmecerts.errors",
    "UnsafeUrl": "acmecerts.errors",
    "UnsupportedChallenge": "acmecerts.errors",
    "UrlPolicy": "acmecerts.transport",
    "ProxyConfig": "acmecerts.transport",
    "ProxyError": "acmecerts.errors",
    "duration_seconds": "acmecerts._time",
    "parse_identifier": "acmecerts.protocol.identifiers",
    "parse_retry_after": "acmecerts._time",
}

#: Subpackages that were imported as a side effect before the names became lazy; still
#: reachable as attributes after a bare ``import acmecerts``.
_SUBMODULES = frozenset(
    {"client", "errors", "protocol", "ratelimit", "retry", "solvers", "storage", "transport"}
)


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        """Import a public name (or a subpackage) on first use and keep it."""
        module = _LAZY.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
        elif name in _SUBMODULES:
            value = importlib.import_module(f"{__name__}.{name}")
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The public names, the private ones and the subpackages imported so far."""
    loaded = {
        name
        for name, value in globals().items()
        if name.startswith("_")
        or (isinstance(value, ModuleType) and value.__name__.startswith(f"{__name__}."))
    }
    return sorted(loaded | set(__all__))
