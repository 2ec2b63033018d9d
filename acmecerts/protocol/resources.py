"""Typed ACME resources parsed from the CA's JSON (RFC 8555 §7.1).

Answers are decoded with ``acme.messages`` (which validates field types) and turned into
small frozen dataclasses that the rest of acmecerts uses. Anything missing or malformed
raises :class:`~acmecerts.errors.BadServerResponse` naming the URL.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping
from typing import Any

from acme import messages
from josepy.errors import DeserializationError

from acmecerts.errors import AcmeProblem, BadServerResponse
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.problems import problem_from_document

__all__ = [
    "Account",
    "Authorization",
    "Challenge",
    "Directory",
    "Order",
    "RenewalInfo",
    "parse_account",
    "parse_authorization",
    "parse_challenge",
    "parse_directory",
    "parse_order",
    "parse_renewal_info",
]

#: What ``acme.messages``/josepy raise for odd JSON: a malicious CA can trigger any of them
#: (e.g. ``AttributeError`` for ``"key": {"x": null}``), so all become BadServerResponse.
_DECODE_ERRORS = (
    DeserializationError,
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    IndexError,
    OverflowError,
    RecursionError,
)

_STATUSES = frozenset(
    {"pending", "processing", "valid", "invalid", "ready", "revoked", "deactivated", "expired"}
)


def _require_mapping(data: object, what: str, url: str | None) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise BadServerResponse(f"{what} is not a JSON object", url=url)
    return data


def _status(value: object, what: str, url: str | None) -> str:
    if not isinstance(value, str) or value not in _STATUSES:
        raise BadServerResponse(f"{what} has an unknown status {value!r}", url=url)
    return value


def _aware(value: _dt.datetime | None) -> _dt.datetime | None:
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=_dt.UTC)
    return value.astimezone(_dt.UTC)


def _identifier(obj: object, url: str | None) -> Identifier:
    if not isinstance(obj, Mapping):
        raise BadServerResponse("identifier is not a JSON object", url=url)
    typ, value = obj.get("type"), obj.get("value")
    if not isinstance(typ, str) or not isinstance(value, str):
        raise BadServerResponse(f"malformed identifier {obj!r}", url=url)
    return Identifier(typ, value.lower() if typ == "dns" else value)


@dataclasses.dataclass(frozen=True, slots=True)
class Directory:
    """The directory (§7.1.1): the URLs of every resource, and meta information."""

    new_nonce: str
    new_account: str
    new_order: str
    revoke_cert: str | None
    key_change: str | None
    new_authz: str | None = None
    #: RFC 9773 ARI endpoint, if the CA supports it.
    renewal_info: str | None = None
    terms_of_service: str | None = None
    website: str | None = None
    caa_identities: tuple[str, ...] = ()
    external_account_required: bool = False
    #: Certificate profiles the CA offers (name to description).
    profiles: Mapping[str, str] = dataclasses.field(default_factory=dict)


def parse_directory(data: object, *, url: str | None = None) -> Directory:
    """Parse a directory document."""
    obj = dict(_require_mapping(data, "directory", url))
    try:
        parsed = messages.Directory.from_json(dict(obj))
    except _DECODE_ERRORS as exc:
        raise BadServerResponse(f"malformed directory: {exc}", url=url) from exc
    for required in ("newNonce", "newAccount", "newOrder"):
        if not isinstance(obj.get(required), str):
            raise BadServerResponse(f"directory lacks {required!r}", url=url)

    def opt(name: str) -> str | None:
        value = obj.get(name)
        return value if isinstance(value, str) else None

    meta = parsed.meta
    profiles = meta.profiles if isinstance(meta.profiles, Mapping) else {}
    return Directory(
        new_nonce=obj["newNonce"],
        new_account=obj["newAccount"],
        new_order=obj["newOrder"],
        revoke_cert=opt("revokeCert"),
        key_change=opt("keyChange"),
        new_authz=opt("newAuthz"),
        renewal_info=opt("renewalInfo"),
        terms_of_service=meta.terms_of_service,
        website=meta.website,
        caa_identities=tuple(meta.caa_identities or ()),
        external_account_required=bool(meta.external_account_required),
        profiles={str(k): str(v) for k, v in profiles.items()},
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Account:
    """An account resource (§7.1.2)."""

    url: str
    status: str
    contact: tuple[str, ...] = ()
    orders: str | None = None
    terms_of_service_agreed: bool | None = None


def parse_account(data: object, *, url: str) -> Account:
    """Parse an account object; ``url`` is the account URL from ``Location``."""
    obj = _require_mapping(data, "account", url)
    try:
        reg = messages.Registration.from_json(dict(obj))
    except _DECODE_ERRORS as exc:
        raise BadServerResponse(f"malformed account: {exc}", url=url) from exc
    status = obj.get("status", "valid")
    contact = reg.contact or ()
    if not isinstance(contact, list | tuple) or not all(isinstance(c, str) for c in contact):
        raise BadServerResponse("account 'contact' is not a list of URIs", url=url)
    agreed = reg.terms_of_service_agreed
    return Account(
        url=url,
        status=_status(status, "account", url),
        contact=tuple(contact),
        orders=obj.get("orders") if isinstance(obj.get("orders"), str) else None,
        terms_of_service_agreed=agreed if isinstance(agreed, bool) else None,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Challenge:
    """A challenge (§7.1.5, §8)."""

    type: str
    url: str
    status: str
    token: str | None
    error: AcmeProblem | None = None
    validated: _dt.datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Authorization:
    """An authorization (§7.1.4)."""

    url: str
    status: str
    identifier: Identifier
    challenges: tuple[Challenge, ...]
    wildcard: bool = False
    expires: _dt.datetime | None = None

    @property
    def dns_name(self) -> str:
        """The identifier as requested (``*.`` restored for wildcard authorizations)."""
        if self.wildcard and self.identifier.type == "dns":
            return "*." + self.identifier.value
        return self.identifier.value

    def challenge(self, challenge_type: str) -> Challenge | None:
        """The challenge of ``challenge_type``, if the CA offered one."""
        for chall in self.challenges:
            if chall.type == challenge_type:
                return chall
        return None

    @property
    def error(self) -> AcmeProblem | None:
        """The first challenge error, which explains an invalid authorization."""
        for chall in self.challenges:
            if chall.error is not None:
                return chall.error
        return None


def parse_challenge(obj: object, *, url: str | None) -> Challenge:
    """Parse a challenge object (inside an authorization, or a challenge POST's answer)."""
    chall = _require_mapping(obj, "challenge", url)
    try:
        body = messages.ChallengeBody.from_json(dict(chall))
    except _DECODE_ERRORS as exc:
        raise BadServerResponse(f"malformed challenge: {exc}", url=url) from exc
    curl = chall.get("url")
    ctype = chall.get("type")
    if not isinstance(curl, str) or not isinstance(ctype, str):
        raise BadServerResponse("challenge lacks 'url' or 'type'", url=url)
    token = chall.get("token")
    error_doc = chall.get("error")
    error = problem_from_document(error_doc, url=curl) if isinstance(error_doc, Mapping) else None
    return Challenge(
        type=ctype,
        url=curl,
        status=_status(chall.get("status", "pending"), "challenge", url),
        token=token if isinstance(token, str) else None,
        error=error,
        validated=_aware(body.validated),
    )


def parse_authorization(data: object, *, url: str) -> Authorization:
    """Parse an authorization object fetched from ``url``."""
    obj = _require_mapping(data, "authorization", url)
    try:
        body = messages.Authorization.from_json(dict(obj))
    except _DECODE_ERRORS as exc:
        raise BadServerResponse(f"malformed authorization: {exc}", url=url) from exc
    challenges = obj.get("challenges", [])
    if not isinstance(challenges, list):
        raise BadServerResponse("authorization 'challenges' is not a list", url=url)
    return Authorization(
        url=url,
        status=_status(obj.get("status"), "authorization", url),
        identifier=_identifier(obj.get("identifier"), url),
        challenges=tuple(parse_challenge(c, url=url) for c in challenges),
        wildcard=bool(obj.get("wildcard", False)),
        expires=_aware(body.expires),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Order:
    """An order (§7.1.3)."""

    url: str
    status: str
    identifiers: tuple[Identifier, ...]
    authorizations: tuple[str, ...]
    finalize: str
    certificate: str | None = None
    expires: _dt.datetime | None = None
    error: AcmeProblem | None = None
    profile: str | None = None
    replaces: str | None = None


def parse_order(data: object, *, url: str) -> Order:
    """Parse an order object; ``url`` is the order URL."""
    obj = _require_mapping(data, "order", url)
    try:
        body = messages.Order.from_json(dict(obj))
    except _DECODE_ERRORS as exc:
        raise BadServerResponse(f"malformed order: {exc}", url=url) from exc
    authzs = obj.get("authorizations", [])
    if not isinstance(authzs, list) or not all(isinstance(a, str) for a in authzs):
        raise BadServerResponse("order 'authorizations' is not a list of URLs", url=url)
    finalize = obj.get("finalize")
    if not isinstance(finalize, str):
        raise BadServerResponse("order lacks 'finalize'", url=url)
    idents = obj.get("identifiers", [])
    if not isinstance(idents, list):
        raise BadServerResponse("order 'identifiers' is not a list", url=url)
    certificate = obj.get("certificate")
    error_doc = obj.get("error")
    replaces = obj.get("replaces")
    return Order(
        url=url,
        status=_status(obj.get("status"), "order", url),
        identifiers=tuple(_identifier(i, url) for i in idents),
        authorizations=tuple(authzs),
        finalize=finalize,
        certificate=certificate if isinstance(certificate, str) else None,
        expires=_aware(body.expires),
        error=problem_from_document(error_doc, url=url) if isinstance(error_doc, Mapping) else None,
        profile=body.profile if isinstance(body.profile, str) else None,
        replaces=replaces if isinstance(replaces, str) else None,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class RenewalInfo:
    """ARI renewal information (RFC 9773 §4.2)."""

    window_start: _dt.datetime
    window_end: _dt.datetime
    explanation_url: str | None = None


def parse_renewal_info(data: object, *, url: str) -> RenewalInfo:
    """Parse a ``renewalInfo`` answer; the window must have start <= end."""
    obj = _require_mapping(data, "renewalInfo", url)
    try:
        info = messages.RenewalInfo.from_json(dict(obj))
        start = _aware(info.suggested_window.start)
        end = _aware(info.suggested_window.end)
    except _DECODE_ERRORS as exc:
        raise BadServerResponse(f"malformed renewalInfo: {exc}", url=url) from exc
    if start is None or end is None or end < start:
        raise BadServerResponse("renewalInfo window is missing or ends before it starts", url=url)
    explanation = obj.get("explanationURL")
    return RenewalInfo(
        window_start=start,
        window_end=end,
        explanation_url=explanation if isinstance(explanation, str) else None,
    )
