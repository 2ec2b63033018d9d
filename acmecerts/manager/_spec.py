"""What the manager is asked to keep issued, and what it answers."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable

from acmecerts._issued import IssuedCertificate
from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import KeyType

__all__ = [
    "CancelledResult",
    "CertificateSpec",
    "CertificateState",
    "CertificateStatus",
    "DeferredResult",
    "FailedResult",
    "IssueResult",
    "IssuedResult",
    "OwnerGuard",
]

#: Asked before every new order and attempt: ``True`` while the certificate's owner
#: (a Service, an Ingress...) still exists. It MUST be fast and MUST NOT raise for
#: "gone" (return ``False``); an exception counts as "unknown" and the attempt waits.
OwnerGuard = Callable[[], Awaitable[bool]]


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateSpec:
    """A certificate the manager keeps issued and renewed.

    ``name`` is the operator's handle (``"default/my-ingress"``, ``"example.com"``): it
    names the stored certificate and is the single-flight key. ``profile`` is the CA's
    certificate profile to order (``None``: its default), on every issuance and renewal
    alike; ``profile_required=False`` makes it only preferred (see
    :meth:`AcmeClient.issue <acmecerts.AcmeClient.issue>`). ``reuse_key=True`` orders
    every renewal with the current certificate's private key (when it is of
    ``key_type``; otherwise, and for the first certificate, a new key is made).
    """

    name: str
    identifiers: tuple[Identifier, ...]
    key_type: KeyType = KeyType.EC256
    #: Higher first when the rate-limit budget is short.
    priority: int = 0
    owner: OwnerGuard | None = dataclasses.field(default=None, compare=False)
    profile: str | None = None
    preferred_chain: str | None = None
    #: A ``profile`` the CA does not offer is refused (``True``) or falls back to its default.
    profile_required: bool = True
    #: Renew with the current certificate's private key instead of a new one.
    reuse_key: bool = False

    @classmethod
    def of(
        cls,
        name: str,
        identifiers: Iterable[str | Identifier] | None = None,
        **options: object,
    ) -> CertificateSpec:
        """Build a spec, validating the identifiers (default: ``[name]``)."""
        if not name or len(name) > 253 or any(c in name for c in "\x00\n\r"):
            raise InvalidInput(f"invalid certificate name {name!r}")
        raw = list(identifiers) if identifiers is not None else [name]
        idents = parse_identifiers(i.value if isinstance(i, Identifier) else i for i in raw)
        if "key_type" in options:
            options["key_type"] = KeyType.parse(str(options["key_type"]))
        return cls(name, idents, **options)  # type: ignore[arg-type]

    @property
    def identifier_set(self) -> frozenset[Identifier]:
        """The identifiers as a set (the "exact set" single-flight key)."""
        return frozenset(self.identifiers)

    @property
    def fingerprint(self) -> str:
        """A short digest of what is ordered (identifiers, key type, profile, chain).

        Two specs with the same fingerprint ask the CA for the same thing: input found
        invalid for one is invalid for the other (the manager parks it until it changes).
        """
        what: dict[str, object] = {
            "identifiers": sorted(i.value for i in self.identifiers),
            "key_type": str(self.key_type.value),
            "profile": self.profile,
            "preferred_chain": self.preferred_chain,
        }
        if self.profile is not None and not self.profile_required:
            what["profile_required"] = False  # (absent by default: older digests stand)
        text = json.dumps(what, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclasses.dataclass(frozen=True, slots=True)
class IssuedResult:
    """The certificate was issued (or renewed)."""

    name: str
    certificate: IssuedCertificate
    renewed: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class DeferredResult:
    """Not attempted now: a rate limit (predicted or the CA's) says to wait until ``until``."""

    name: str
    until: _dt.datetime
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class FailedResult:
    """The attempt failed; the manager retries on its schedule while it runs."""

    name: str
    error: AcmeCertsError
    next_attempt_at: _dt.datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CancelledResult:
    """The certificate was unmanaged or its owner is gone; nothing more is sent for it."""

    name: str
    reason: str


#: One certificate's outcome in :meth:`CertificateManager.issue_many`.
IssueResult = IssuedResult | DeferredResult | FailedResult | CancelledResult


class CertificateState(enum.StrEnum):
    """Where a managed certificate stands (see :meth:`CertificateManager.status`)."""

    #: Never attempted yet: due now.
    PENDING = "pending"
    #: An attempt is under way.
    IN_FLIGHT = "in-flight"
    #: A valid certificate; ``next_at`` is its renewal (or ARI re-check).
    CURRENT = "current"
    #: An attempt failed or was deferred (attempt schedule, ``Retry-After``, ledger).
    RETRYING = "retrying"
    #: Our side failed (owner guard, storage): held on the error backoff.
    HELD = "held"
    #: The input is invalid: no attempt until the spec changes.
    PARKED = "parked"
    #: The attempt schedule allows no further attempt.
    EXHAUSTED = "exhausted"
    #: Unmanaged or its owner is gone: nothing more is sent.
    CANCELLED = "cancelled"


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateStatus:
    """A managed certificate's state, next instant and last error, for people and probes."""

    name: str
    state: CertificateState
    #: When work for it next starts; ``None`` only when parked, exhausted or cancelled.
    next_at: _dt.datetime | None
    #: Failed attempts counted by the schedule since the last success.
    attempts: int = 0
    #: The last failure (or why it is held, parked or cancelled), for people.
    reason: str | None = None
    #: The current certificate's serial (lower-case hex) and expiry, if there is one.
    serial: str | None = None
    not_after: _dt.datetime | None = None
    #: When the current certificate is planned to be renewed.
    renew_at: _dt.datetime | None = None
