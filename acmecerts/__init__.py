"""acmecerts: an async ACME (RFC 8555) client for issuing certificates at fleet scale.

The public API is re-exported here; everything else is an implementation detail.
"""

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Clock, FakeClock, SystemClock, parse_retry_after
from acmecerts._version import __version__
from acmecerts.client import AcmeClient, ExternalAccountBinding, PollPolicy, RevocationReason
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
    OrderFailed,
    ProblemType,
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
from acmecerts.protocol.identifiers import Identifier, parse_identifier
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.protocol.resources import RenewalInfo
from acmecerts.retry import AttemptSchedule, AttemptState, RequestRetry
from acmecerts.solvers import (
    ChallengeTask,
    DnsHookSolver,
    Http01Server,
    Http01Webroot,
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
    "DnsHookSolver",
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
    "OrderFailed",
    "PollPolicy",
    "ProblemType",
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
    "TlsAlpn01Server",
    "TransportError",
    "UnsafeUrl",
    "UnsupportedChallenge",
    "UrlPolicy",
    "__version__",
    "parse_identifier",
    "parse_retry_after",
]
