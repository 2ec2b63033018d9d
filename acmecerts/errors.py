"""The one exception tree of acmecerts.

Every error acmecerts raises is an :class:`AcmeCertsError`. Foreign errors (httpx,
josepy, cryptography, OS errors) are translated where they cross into acmecerts
with ``raise Ours(...) from exc``.

::

    AcmeCertsError
    ├── InvalidInput                     bad input from the caller (ValueError too)
    │   ├── InvalidIdentifier            a malformed domain name or IP address
    │   ├── ProfileRefused               a profile the CA does not offer, or whose rules it breaks
    │   └── UnsupportedChallenge         e.g. a wildcard with http-01
    ├── TransportError                   the CA could not be reached or did not answer in time
    │   ├── ConnectError
    │   │   └── ProxyError               the HTTP proxy could not be reached or refused the tunnel
    │   └── RequestTimeout
    ├── BadServerResponse                the CA answered something that is not valid ACME
    │   └── UnsafeUrl                    the CA named a URL the UrlPolicy forbids (nothing sent)
    ├── AcmeProblem                      the CA answered with application/problem+json
    │   ├── BadNonce                     (transient: replayed with a fresh nonce)
    │   ├── RateLimited                  carries ``retry_after``
    │   ├── ServerBusy                   503 / serverInternal: the CA asks us to wait
    │   ├── AccountDoesNotExist
    │   ├── ExternalAccountRequired
    │   ├── AlreadyReplaced              (ARI ``replaces`` rejected)
    │   ├── InvalidProfile               the CA does not offer the requested profile
    │   └── ...                          one class per problem type that callers act on
    ├── IssuanceError                    an issuance attempt did not produce a certificate
    │   ├── AuthorizationFailed          a challenge was answered but validation failed
    │   ├── NoSolverForChallenges        the CA offered only challenge types no solver answers
    │   ├── OrderFailed                  the order became invalid
    │   ├── AttemptTimeout               the per-attempt deadline expired
    │   └── CertificateMismatch          the CA's certificate does not match the request
    ├── RateLimitDeferred                the ledger held an order back, nothing was sent
    ├── IdentifierPaused                 the CA paused issuance for a name after many failures
    └── StorageError                     a stored file is missing, corrupt or unwritable

Every error is classified by :class:`ErrorKind` (``error.kind``) so that retry policy can
decide without ``isinstance`` chains: *transient* errors are retried with backoff,
*rate-limited* and *server-busy* errors wait for ``retry_after``, *permanent* errors end
the attempt for this order.
"""

from __future__ import annotations

import datetime as _dt
import enum
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

__all__ = [
    "ERROR_PREFIX",
    "AccountDoesNotExist",
    "AcmeCertsError",
    "AcmeProblem",
    "AlreadyReplaced",
    "AttemptTimeout",
    "AuthorizationFailed",
    "BadCSR",
    "BadNonce",
    "BadServerResponse",
    "CertificateMismatch",
    "ConnectError",
    "ErrorKind",
    "ExternalAccountRequired",
    "IdentifierPaused",
    "InvalidIdentifier",
    "InvalidInput",
    "InvalidProfile",
    "IssuanceError",
    "Malformed",
    "NoSolverForChallenges",
    "OrderFailed",
    "OrderNotReady",
    "ProblemType",
    "ProfileRefused",
    "ProxyError",
    "RateLimitDeferred",
    "RateLimited",
    "RejectedIdentifier",
    "RequestTimeout",
    "ServerBusy",
    "StorageError",
    "TransportError",
    "Unauthorized",
    "UnsafeUrl",
    "UnsupportedChallenge",
    "problem_class",
]

#: RFC 8555 §6.7: the prefix of every ACME problem type URN.
ERROR_PREFIX = "urn:ietf:params:acme:error:"


class ProblemType(enum.StrEnum):
    """Every ACME problem type URN (RFC 8555 §6.7, RFC 9773 §7.4, RFC 8738, profiles)."""

    ACCOUNT_DOES_NOT_EXIST = ERROR_PREFIX + "accountDoesNotExist"
    ALREADY_REPLACED = ERROR_PREFIX + "alreadyReplaced"
    ALREADY_REVOKED = ERROR_PREFIX + "alreadyRevoked"
    BAD_CSR = ERROR_PREFIX + "badCSR"
    BAD_NONCE = ERROR_PREFIX + "badNonce"
    BAD_PUBLIC_KEY = ERROR_PREFIX + "badPublicKey"
    BAD_REVOCATION_REASON = ERROR_PREFIX + "badRevocationReason"
    BAD_SIGNATURE_ALGORITHM = ERROR_PREFIX + "badSignatureAlgorithm"
    CAA = ERROR_PREFIX + "caa"
    COMPOUND = ERROR_PREFIX + "compound"
    CONNECTION = ERROR_PREFIX + "connection"
    DNS = ERROR_PREFIX + "dns"
    EXTERNAL_ACCOUNT_REQUIRED = ERROR_PREFIX + "externalAccountRequired"
    INCORRECT_RESPONSE = ERROR_PREFIX + "incorrectResponse"
    INVALID_CONTACT = ERROR_PREFIX + "invalidContact"
    INVALID_PROFILE = ERROR_PREFIX + "invalidProfile"
    MALFORMED = ERROR_PREFIX + "malformed"
    ORDER_NOT_READY = ERROR_PREFIX + "orderNotReady"
    RATE_LIMITED = ERROR_PREFIX + "rateLimited"
    REJECTED_IDENTIFIER = ERROR_PREFIX + "rejectedIdentifier"
    SERVER_INTERNAL = ERROR_PREFIX + "serverInternal"
    TLS = ERROR_PREFIX + "tls"
    UNAUTHORIZED = ERROR_PREFIX + "unauthorized"
    UNSUPPORTED_CONTACT = ERROR_PREFIX + "unsupportedContact"
    UNSUPPORTED_IDENTIFIER = ERROR_PREFIX + "unsupportedIdentifier"
    USER_ACTION_REQUIRED = ERROR_PREFIX + "userActionRequired"


class ErrorKind(enum.Enum):
    """How a failure should be treated by retry policy (see ``docs/retries.md``)."""

    #: Worth retrying soon with backoff: connection errors, timeouts, 5xx, badNonce.
    TRANSIENT = "transient"
    #: The CA refused because a rate limit was hit; wait until ``retry_after``.
    RATE_LIMITED = "rate-limited"
    #: The CA is overloaded or in maintenance (503 with ``Retry-After``); wait.
    SERVER_BUSY = "server-busy"
    #: Retrying the same request will not help; this order (or input) is done for.
    PERMANENT = "permanent"


class AcmeCertsError(Exception):
    """Base class of every error acmecerts raises."""

    #: How retry policy should treat this error.
    kind: ErrorKind = ErrorKind.PERMANENT

    #: Whether the request that failed never reached the CA (so it spent nothing).
    reached_ca: bool = True

    def __init__(
        self,
        message: str,
        *,
        retry_after: _dt.datetime | None = None,
        kind: ErrorKind | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        #: Instant (timezone-aware UTC) before which the CA asked not to be asked again.
        self.retry_after = retry_after
        if kind is not None:  # else the class's own
            self.kind = kind

    def __str__(self) -> str:
        return self.message


class InvalidInput(AcmeCertsError, ValueError):
    """The caller passed something acmecerts cannot use; nothing was sent to the CA."""

    reached_ca = False


class InvalidIdentifier(InvalidInput):
    """A domain name or IP address that is not a valid ACME identifier."""

    def __init__(self, identifier: str, reason: str) -> None:
        super().__init__(f"invalid identifier {identifier!r}: {reason}")
        self.identifier = identifier
        self.reason = reason


class ProfileRefused(InvalidInput):
    """Refused before ordering: a required profile the CA does not offer, or an order that
    breaks its profile's rules at that CA (too many names, an IP identifier where none is
    allowed). Nothing was sent; ``profile`` is the profile's name."""

    def __init__(self, message: str, *, profile: str | None) -> None:
        super().__init__(message)
        self.profile = profile


class UnsupportedChallenge(InvalidInput):
    """No configured solver can answer a challenge the CA offers for an identifier."""


class TransportError(AcmeCertsError):
    """The CA could not be reached, or did not answer in time."""

    kind = ErrorKind.TRANSIENT

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        reached_ca: bool = True,
        kind: ErrorKind | None = None,
    ) -> None:
        super().__init__(message, kind=kind)
        self.url = url
        self.reached_ca = reached_ca


class ConnectError(TransportError):
    """No connection to the CA could be made (refused, reset, DNS, TLS handshake).
    ``unknown_host``: the host DNS said does not exist, when that is why (not retried)."""

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        reached_ca: bool = True,
        kind: ErrorKind | None = None,
        unknown_host: str | None = None,
    ) -> None:
        super().__init__(message, url=url, reached_ca=reached_ca, kind=kind)
        self.unknown_host = unknown_host


class ProxyError(ConnectError):
    """The HTTP proxy in between could not be reached, or refused the tunnel to the CA.

    ``proxy`` names it (``http://host:port``, never with credentials) and
    ``status_code`` is its answer to ``CONNECT`` when it gave one (407: credentials
    wanted or refused; 403: destination or port not allowed). Nothing reached the CA.
    A refusal (4xx) is permanent: retrying does not change the proxy's mind.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        proxy: str | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message, url=url, reached_ca=False)
        self.proxy = proxy
        self.status_code = status_code
        if status_code is not None and 400 <= status_code < 500 and status_code not in (408, 429):
            self.kind = ErrorKind.PERMANENT


class RequestTimeout(TransportError):
    """The CA did not answer one HTTP request within the request timeout."""


class BadServerResponse(AcmeCertsError):
    """The CA answered with something that is not valid ACME (bad JSON, missing header...).

    A 5xx answer without a problem document is a :class:`BadServerResponse` of kind
    ``TRANSIENT``; other malformed answers are ``PERMANENT``.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        status_code: int | None = None,
        kind: ErrorKind = ErrorKind.PERMANENT,
        retry_after: _dt.datetime | None = None,
    ) -> None:
        super().__init__(message, retry_after=retry_after, kind=kind)
        self.url = url
        self.status_code = status_code


class UnsafeUrl(BadServerResponse):
    """The CA named a URL that the client's :class:`~acmecerts.transport.UrlPolicy` forbids.

    Another host than the directory's (and the allowed origins), plain ``http``, or
    credentials in the URL: a malicious or broken CA, or a tampered answer. The check
    runs before a request is sent, so nothing reached that URL (``reached_ca`` is false).
    ``url`` is the refused URL, ``allowed_origins`` what the policy allows.
    """

    reached_ca = False

    def __init__(
        self, message: str, *, url: str | None = None, allowed_origins: Sequence[str] = ()
    ) -> None:
        super().__init__(message, url=url)
        #: The origins the policy allows (``https://host[:port]``).
        self.allowed_origins = tuple(allowed_origins)


class AcmeProblem(AcmeCertsError):
    """The CA answered with an RFC 7807 / RFC 8555 §6.7 problem document."""

    #: The problem type this class stands for (``None`` for the generic class).
    problem_type: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A class below that names its ``problem_type`` is :func:`problem_class`'s answer.

        Subclasses made elsewhere (a caller's own) do not replace the library's.
        """
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("problem_type")
        if own is not None and cls.__module__ == __name__:
            _PROBLEM_CLASSES[own] = cls

    def __init__(
        self,
        type: str,
        detail: str,
        *,
        status_code: int | None = None,
        url: str | None = None,
        identifier: Mapping[str, str] | None = None,
        subproblems: Sequence[AcmeProblem] = (),
        retry_after: _dt.datetime | None = None,
        document: Mapping[str, Any] | None = None,
        reached_ca: bool = True,
        kind: ErrorKind | None = None,
        request: str | None = None,
    ) -> None:
        short = type.removeprefix(ERROR_PREFIX)
        where = f" ({identifier.get('value')})" if identifier else ""
        text = f"{short}{where}: {detail}" if detail else f"{short}{where}"
        if subproblems:
            text += "; " + "; ".join(str(s) for s in subproblems)
        if request is not None and not (url and url in text):
            text += f" ({request})"
        if kind is None and status_code is not None and status_code >= 500:
            kind = None if type in _PERMANENT_5XX else ErrorKind.TRANSIENT
        super().__init__(text, retry_after=retry_after, kind=kind)
        #: The problem type URN, e.g. ``urn:ietf:params:acme:error:rateLimited``.
        self.type = type
        #: The CA's human-readable explanation.
        self.detail = detail
        self.status_code = status_code
        self.url = url
        self.identifier = dict(identifier) if identifier else None
        self.subproblems = tuple(subproblems)
        self.document = dict(document) if document else {}
        #: ``False`` when the CA refused the request unprocessed (a ``503``) or it was
        #: decided without asking the CA (e.g. from its directory): nothing was created.
        self.reached_ca = reached_ca
        #: The request it answered, if given (``"GET https://..."``): named in the message
        #: unless it names the URL already. ``kind`` overrides the class's (5xx: transient).
        self.request = request


_PERMANENT_5XX: frozenset[str] = frozenset()
#: The problem types that have a class of their own, filled as the classes are defined.
_PROBLEM_CLASSES: dict[str, type[AcmeProblem]] = {}


class BadNonce(AcmeProblem):
    """The nonce was refused; the request is replayed with a fresh one."""

    problem_type = ProblemType.BAD_NONCE
    kind = ErrorKind.TRANSIENT


class RateLimited(AcmeProblem):
    """A rate limit of the CA was hit. ``retry_after`` says when to try again."""

    problem_type = ProblemType.RATE_LIMITED
    kind = ErrorKind.RATE_LIMITED


class ServerBusy(AcmeProblem):
    """The CA is overloaded or failed internally (``serverInternal``, 503)."""

    problem_type = ProblemType.SERVER_INTERNAL
    kind = ErrorKind.SERVER_BUSY


class AccountDoesNotExist(AcmeProblem):
    """No account exists for this key (``onlyReturnExisting``, or it was deleted)."""

    problem_type = ProblemType.ACCOUNT_DOES_NOT_EXIST


class ExternalAccountRequired(AcmeProblem):
    """The CA requires external account binding (EAB) to create an account."""

    problem_type = ProblemType.EXTERNAL_ACCOUNT_REQUIRED


class AlreadyReplaced(AcmeProblem):
    """The certificate named in ``replaces`` was already replaced (RFC 9773 §5)."""

    problem_type = ProblemType.ALREADY_REPLACED


class InvalidProfile(AcmeProblem):
    """The CA refused the ``profile`` of a new order (draft-aaron-acme-profiles)."""

    problem_type = ProblemType.INVALID_PROFILE


class Malformed(AcmeProblem):
    """The CA says the request was malformed."""

    problem_type = ProblemType.MALFORMED


class Unauthorized(AcmeProblem):
    """The account lacks authorization for the request."""

    problem_type = ProblemType.UNAUTHORIZED


class RejectedIdentifier(AcmeProblem):
    """The CA will not issue for this identifier."""

    problem_type = ProblemType.REJECTED_IDENTIFIER


class BadCSR(AcmeProblem):
    """The CA refused the certificate signing request."""

    problem_type = ProblemType.BAD_CSR


class OrderNotReady(AcmeProblem):
    """Finalize was sent before every authorization was valid."""

    problem_type = ProblemType.ORDER_NOT_READY


def problem_class(problem_type: str) -> type[AcmeProblem]:
    """Return the exception class for a problem type URN (:class:`AcmeProblem` if none)."""
    return _PROBLEM_CLASSES.get(problem_type, AcmeProblem)


class IssuanceError(AcmeCertsError):
    """An issuance attempt ended without a certificate."""

    def __init__(
        self,
        message: str,
        *,
        order_url: str | None = None,
        problem: AcmeProblem | None = None,
        retry_after: _dt.datetime | None = None,
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.order_url = order_url
        #: The CA's problem document behind this failure, when it gave one.
        self.problem = problem


class AuthorizationFailed(IssuanceError):
    """The CA could not validate control of an identifier."""

    def __init__(
        self,
        identifier: str,
        problem: AcmeProblem | None,
        *,
        authorization_url: str,
        order_url: str | None = None,
        note: str = "",
    ) -> None:
        detail = str(problem) if problem else "authorization became invalid"
        super().__init__(
            f"validation of {identifier} failed" + (f" {note}" if note else "") + f": {detail}",
            order_url=order_url,
            problem=problem,
        )
        self.identifier = identifier
        self.authorization_url = authorization_url


class NoSolverForChallenges(IssuanceError):
    """The CA offered only challenge types no configured solver answers, for an identifier.

    The order exists at the CA (``reached_ca``); it is not bad input: the CA chose the
    types, and another solver (or the CA, later) may answer, so it is retried on the
    attempt schedule, never parked. ``offered`` names the types the CA offered (maybe
    none), ``solver_types`` those of the configured solvers; ``hint`` (appended to the
    message) says what would answer.
    """

    def __init__(
        self,
        *,
        identifier: str,
        offered: Sequence[str],
        solver_types: Sequence[str],
        authorization_url: str,
        order_url: str | None = None,
        hint: str = "",
    ) -> None:
        #: The identifier (``"example.com"``, ``"*.example.com"``) no solver could answer.
        self.identifier = identifier
        #: The challenge types the CA offered for it, in its order.
        self.offered = tuple(offered)
        #: The challenge types of the configured solvers.
        self.solver_types = tuple(solver_types)
        self.authorization_url = authorization_url
        text = f"{self.offer}; no configured solver answers "
        text += "it" if len(self.offered) == 1 else "any of them"
        text += f" (the solvers answer {', '.join(self.solver_types) or 'nothing'})"
        super().__init__(text + (f"; {hint}" if hint else ""), order_url=order_url)

    @property
    def offer(self) -> str:
        """``"the CA offered dns-01 only for example.com"`` (or several types, or none)."""
        if not self.offered:
            return f"the CA offered no challenge for {self.identifier}"
        if len(self.offered) == 1:
            return f"the CA offered {self.offered[0]} only for {self.identifier}"
        return f"the CA offered {', '.join(self.offered)} for {self.identifier}"


class OrderFailed(IssuanceError):
    """The order became invalid (RFC 8555 §7.1.6), or finalization failed."""


class AttemptTimeout(IssuanceError):
    """The per-attempt deadline expired before the certificate was downloaded."""

    kind = ErrorKind.TRANSIENT


class CertificateMismatch(IssuanceError):
    """The CA returned a certificate whose key or names do not match the request."""


class RateLimitDeferred(AcmeCertsError):
    """An order was held back before it was sent: it would exceed a limit of the CA.

    Raised by :class:`~acmecerts.AcmeClient` when its
    :class:`~acmecerts.ratelimit.RateLimitLedger` says the order does not fit the CA's
    rate limits now. Nothing reached the CA and nothing was spent. ``retry_after`` is the
    earliest instant (aware UTC) the ledger allows the order; ``limit`` names the limit
    that binds (e.g. ``"certificates_per_registered_domain"``) and ``scope_key`` what it
    counts (``"example.com"``, an account URL...).
    """

    kind = ErrorKind.RATE_LIMITED
    reached_ca = False

    def __init__(
        self,
        message: str,
        *,
        retry_after: _dt.datetime | None,
        limit: str | None,
        scope_key: str | None = None,
        identifiers: Sequence[str] = (),
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        #: The name of the limit that holds the order back.
        self.limit = limit
        #: What that limit counts for this order (a registered domain, an account...).
        self.scope_key = scope_key
        #: The identifiers of the order that was held back.
        self.identifiers = tuple(identifiers)


class IdentifierPaused(AcmeCertsError):
    """The CA paused issuance for an identifier after too many consecutive failed validations.

    Trying again does not help (Let's Encrypt pauses after 1,152 consecutive failed
    authorizations per identifier per account): fix validation, have the pause lifted
    (Let's Encrypt links a self-service unpause page in the error), then call
    :meth:`~acmecerts.ratelimit.RateLimitLedger.unpause`.
    """

    def __init__(
        self,
        message: str,
        *,
        identifiers: Sequence[str],
        account: str | None = None,
        reached_ca: bool = False,
    ) -> None:
        super().__init__(message)
        #: The paused identifiers (values such as ``"www.example.com"``).
        self.identifiers = tuple(identifiers)
        #: The account the pause applies to.
        self.account = account
        self.reached_ca = reached_ca


class StorageError(AcmeCertsError):
    """Stored state could not be read or written (missing, corrupt, or unwritable)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path
