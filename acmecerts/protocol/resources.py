"""Typed ACME resources parsed from the CA's JSON (RFC 8555 §7.1).

Answers become small frozen dataclasses that the rest of acmecerts uses. Anything missing
or malformed raises :class:`~acmecerts.errors.BadServerResponse` naming the URL.

Orders, authorizations and challenges are parsed for every certificate, several times, so
they are read straight from the JSON objects here, with every check ``acme.messages``
made (field types, known statuses and identifier types, RFC 3339 timestamps, tokens of
the challenge types it knows). So are the directory and accounts, parsed by every run:
``acme.messages`` imports ``requests`` and ``urllib3`` (~45 ms of CPU, a seventh of the
CLI's start before its first request). A renewalInfo answer of an unusual shape still
goes through ``acme.messages`` (imported then): the usual ones take a direct path.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
import re
from collections.abc import Mapping
from typing import Any

from josepy.errors import DeserializationError

from acmecerts._time import aware_utc
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
    "renewal_info_from_body",
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


#: Identifier types (RFC 8555 §9.7.7: ``dns``; RFC 8738: ``ip``).
_IDENTIFIER_TYPES = frozenset({"dns", "ip"})
#: Challenge types whose ``token`` acme.messages decoded (and so required): base64url of
#: at least 128 bits (RFC 8555 §8.3, §8.4).
_TOKEN_CHALLENGES = frozenset({"http-01", "dns-01", "dns", "dns-account-01"})
_TOKEN_MIN_OCTETS = 16
#: base64url without padding of at least 16 octets, and not of a length 4k+1.
_TOKEN_FAST = re.compile(r"[A-Za-z0-9_-]{22,}")


def _require_mapping(data: object, what: str, url: str | None) -> Mapping[str, Any]:
    if type(data) is not dict and not isinstance(data, Mapping):
        raise BadServerResponse(f"{what} is not a JSON object", url=url)
    return data


def _status(value: object, what: str, url: str | None) -> str:
    if not isinstance(value, str) or value not in _STATUSES:
        raise BadServerResponse(f"{what} has an unknown status {value!r}", url=url)
    return value


def _timestamp(value: object, what: str, url: str | None) -> _dt.datetime:
    """An RFC 3339 timestamp as an aware UTC datetime (a naive one is taken as UTC).

    ``datetime.fromisoformat`` takes ``Z`` and fractions of any length (truncated to
    microseconds, so Go's nanoseconds parse); a lower-case ``z`` is mapped as before.
    """
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith("z") else value
        try:
            return aware_utc(_dt.datetime.fromisoformat(text), what, assume_utc=True)
        except (ValueError, OverflowError):
            pass
    raise BadServerResponse(f"{what} is not an RFC 3339 timestamp: {value!r:.80}", url=url)


def _problem(doc: object, what: str, url: str | None, problem_url: str | None) -> AcmeProblem:
    if not isinstance(doc, Mapping):
        raise BadServerResponse(f"{what} 'error' is not a problem document", url=url)
    return problem_from_document(doc, url=problem_url)


def _check_token(token: object, url: str | None) -> None:
    """Refuse a token that is not base64url of at least 128 bits (as acme.challenges did)."""
    if isinstance(token, str):
        if _TOKEN_FAST.fullmatch(token) and len(token) % 4 != 1:
            return
        # the lenient decoding acme.challenges used (padding added, junk characters skipped)
        try:
            raw = token.encode("ascii")
            if len(base64.urlsafe_b64decode(raw + b"=" * (4 - len(raw) % 4))) >= _TOKEN_MIN_OCTETS:
                return
        except (UnicodeError, binascii.Error):
            pass
    raise BadServerResponse(f"challenge token {token!r:.80} is not base64url", url=url)


def _identifier(obj: object, url: str | None) -> Identifier:
    if not isinstance(obj, Mapping):
        raise BadServerResponse("identifier is not a JSON object", url=url)
    typ, value = obj.get("type"), obj.get("value")
    if not isinstance(typ, str) or typ not in _IDENTIFIER_TYPES or not isinstance(value, str):
        raise BadServerResponse(f"malformed identifier {obj!r:.200}", url=url)
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
    """Parse a directory document.

    The endpoints acmecerts needs must be strings; ``meta``, when present, an object.
    Optional members of another type read as absent (a CA's ``"website": 5``; a profile
    description that is not a string as empty), except ``caaIdentities``, which must be a
    list of strings (found by the fuzz tests).
    """
    obj = _require_mapping(data, "directory", url)
    for required in ("newNonce", "newAccount", "newOrder"):
        if not isinstance(obj.get(required), str):
            raise BadServerResponse(f"directory lacks {required!r}", url=url)

    def opt(name: str) -> str | None:
        value = obj.get(name)
        return value if isinstance(value, str) else None

    meta = obj.get("meta", {})
    if not isinstance(meta, Mapping):
        raise BadServerResponse("malformed directory: 'meta' is not an object", url=url)
    profiles = meta.get("profiles")
    if not isinstance(profiles, Mapping):
        profiles = {}
    caa = meta.get("caaIdentities")
    if caa is not None and (
        not isinstance(caa, list | tuple) or not all(isinstance(c, str) for c in caa)
    ):
        raise BadServerResponse("directory 'caaIdentities' is not a list of strings", url=url)
    tos, website = meta.get("termsOfService"), meta.get("website")
    return Directory(
        new_nonce=obj["newNonce"],
        new_account=obj["newAccount"],
        new_order=obj["newOrder"],
        revoke_cert=opt("revokeCert"),
        key_change=opt("keyChange"),
        new_authz=opt("newAuthz"),
        renewal_info=opt("renewalInfo"),
        terms_of_service=tos if isinstance(tos, str) else None,
        website=website if isinstance(website, str) else None,
        caa_identities=tuple(caa or ()),
        external_account_required=bool(meta.get("externalAccountRequired")),
        # a description that is not a string reads as empty (the name is what counts)
        profiles={str(k): v if isinstance(v, str) else "" for k, v in profiles.items()},
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
    """Parse an account object; ``url`` is the account URL from ``Location``.

    Its ``key`` is not read: the client signs with the key it has, whatever the CA echoes.
    """
    obj = _require_mapping(data, "account", url)
    status = obj.get("status", "valid")
    contact = obj.get("contact") or ()
    if not isinstance(contact, list | tuple) or not all(isinstance(c, str) for c in contact):
        raise BadServerResponse("account 'contact' is not a list of URIs", url=url)
    agreed = obj.get("termsOfServiceAgreed")
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
    #: dns-persist-01: the CA's issuer domain names, as sent (``None`` when absent, ``()``
    #: when not a list of strings); checked when a solver takes the challenge.
    issuer_domain_names: tuple[str, ...] | None = None
    #: dns-persist-01: the account URI the CA expects in the record, if it says (Pebble
    #: after 2.10.0 sends ``accounturi``; otherwise the account URL is used).
    account_uri: str | None = None


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
    get = chall.get
    curl = get("url")
    ctype = get("type")
    if not isinstance(curl, str) or not isinstance(ctype, str):
        raise BadServerResponse("challenge lacks 'url' or 'type'", url=url)
    token = get("token")
    if ctype in _TOKEN_CHALLENGES:
        _check_token(token, url)
    return Challenge(
        type=ctype,
        url=curl,
        status=_status(get("status", "pending"), "challenge", url),
        token=token if isinstance(token, str) else None,
        error=None if "error" not in chall else _problem(chall["error"], "challenge", url, curl),
        validated=None
        if "validated" not in chall
        else _timestamp(chall["validated"], "'validated'", url),
        # dns-persist-01 (checked when a solver takes the challenge, not here: a CA's odd
        # dns-persist-01 must not spoil the authorization for the other types)
        issuer_domain_names=_strings(get("issuer-domain-names")),
        account_uri=account_uri if isinstance(account_uri := get("accounturi"), str) else None,
    )


def _strings(value: object) -> tuple[str, ...] | None:
    """A JSON list of strings as a tuple; ``None`` when absent, ``()`` when malformed."""
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()


def parse_authorization(data: object, *, url: str) -> Authorization:
    """Parse an authorization object fetched from ``url``."""
    obj = _require_mapping(data, "authorization", url)
    get = obj.get
    challenges = get("challenges", [])
    if not isinstance(challenges, list):
        raise BadServerResponse("authorization 'challenges' is not a list", url=url)
    return Authorization(
        url=url,
        status=_status(get("status"), "authorization", url),
        identifier=_identifier(get("identifier"), url),
        challenges=tuple([parse_challenge(c, url=url) for c in challenges]),
        wildcard=bool(get("wildcard", False)),
        expires=None if "expires" not in obj else _timestamp(obj["expires"], "'expires'", url),
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
    get = obj.get
    authzs = get("authorizations", [])
    if not isinstance(authzs, list) or not all([isinstance(a, str) for a in authzs]):
        raise BadServerResponse("order 'authorizations' is not a list of URLs", url=url)
    finalize = get("finalize")
    if not isinstance(finalize, str):
        raise BadServerResponse("order lacks 'finalize'", url=url)
    idents = get("identifiers", [])
    if not isinstance(idents, list):
        raise BadServerResponse("order 'identifiers' is not a list", url=url)
    certificate = get("certificate")
    profile = get("profile")
    replaces = get("replaces")
    return Order(
        url=url,
        status=_status(get("status"), "order", url),
        identifiers=tuple([_identifier(i, url) for i in idents]),
        authorizations=tuple(authzs),
        finalize=finalize,
        certificate=certificate if isinstance(certificate, str) else None,
        expires=None if "expires" not in obj else _timestamp(obj["expires"], "'expires'", url),
        error=None if "error" not in obj else _problem(obj["error"], "order", url, url),
        profile=profile if isinstance(profile, str) else None,
        replaces=replaces if isinstance(replaces, str) else None,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class RenewalInfo:
    """ARI renewal information (RFC 9773 §4.2)."""

    window_start: _dt.datetime
    window_end: _dt.datetime
    explanation_url: str | None = None


#: An RFC 3339 instant in UTC as CAs write them (``2027-01-01T00:00:00Z``, a fraction).
_UTC_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


def _window_fast(obj: Mapping[str, Any]) -> tuple[_dt.datetime, _dt.datetime] | None:
    """The suggested window of the usual answer, read directly; ``None``: any other shape.

    A fleet asks for renewalInfo tens of thousands of times a day, and going through
    ``acme.messages`` costs ten times the parse. Only two strings of the exact form above
    are read here (the result is what ``acme.messages`` gives for them: ``fromisoformat``
    of the same text); everything else, and every error, takes the full path.
    """
    window = obj.get("suggestedWindow")
    if type(window) is not dict:
        return None
    start, end = window.get("start"), window.get("end")
    if type(start) is not str or type(end) is not str:
        return None
    if _UTC_INSTANT.fullmatch(start) is None or _UTC_INSTANT.fullmatch(end) is None:
        return None
    try:
        return (
            _dt.datetime.fromisoformat(start).astimezone(_dt.UTC),
            _dt.datetime.fromisoformat(end).astimezone(_dt.UTC),
        )
    except (ValueError, OverflowError):  # 2027-13-45...: said by the full path
        return None


#: The usual renewalInfo answer as bytes: one suggestedWindow of two UTC instants, nothing
#: else (JSON whitespace allowed between tokens, none inside them).
_WS = rb"[ \t\r\n]*"
_INSTANT = rb'"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?Z)"'
_USUAL_BODY = re.compile(
    _WS + rb"\{" + _WS + rb'"suggestedWindow"' + _WS + rb":" + _WS + rb"\{"
    + _WS + rb'"start"' + _WS + rb":" + _WS + _INSTANT + _WS + rb","
    + _WS + rb'"end"' + _WS + rb":" + _WS + _INSTANT + _WS + rb"\}" + _WS + rb"\}" + _WS
)  # fmt: skip


def renewal_info_from_body(content: bytes) -> RenewalInfo | None:
    """The usual ``renewalInfo`` answer read from its bytes; ``None``: any other answer.

    Only a JSON object holding nothing but ``suggestedWindow`` with a ``start`` and a
    later ``end`` in UTC (``2027-01-01T00:00:00Z``) is read here, without ``json``: what
    :func:`parse_renewal_info` makes of the same document. Every other answer (an
    ``explanationURL``, an escape, an empty window, an error) gives ``None``: parse it
    with :func:`parse_renewal_info`, which says what is wrong with it.
    """
    match = _USUAL_BODY.fullmatch(content)
    if match is None:
        return None
    try:
        start = _dt.datetime.fromisoformat(match[1].decode("ascii")).astimezone(_dt.UTC)
        end = _dt.datetime.fromisoformat(match[2].decode("ascii")).astimezone(_dt.UTC)
    except (ValueError, OverflowError):  # 2027-13-45...: said by the full path
        return None
    if end <= start:
        return None
    return RenewalInfo(window_start=start, window_end=end)


def parse_renewal_info(data: object, *, url: str) -> RenewalInfo:
    """Parse a ``renewalInfo`` answer; the window must have start <= end."""
    obj = _require_mapping(data, "renewalInfo", url)
    fast = _window_fast(obj)
    if fast is not None and fast[1] >= fast[0]:
        explanation = obj.get("explanationURL")
        return RenewalInfo(
            window_start=fast[0],
            window_end=fast[1],
            explanation_url=explanation if isinstance(explanation, str) else None,
        )
    from acme import messages  # an unusual answer only (see the module docstring)

    try:
        info = messages.RenewalInfo.from_json(dict(obj))
        start: _dt.datetime | None = info.suggested_window.start
        end: _dt.datetime | None = info.suggested_window.end
        if start is not None and end is not None:
            start = aware_utc(start, "start", assume_utc=True)
            end = aware_utc(end, "end", assume_utc=True)
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
