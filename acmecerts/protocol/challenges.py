"""Challenge arithmetic: key authorizations (RFC 8555 §8.1), dns-01 values (§8.4), the
record names of dns-account-01 (draft-ietf-acme-dns-account-label) and the persistent
records of dns-persist-01 (draft-ietf-acme-dns-persist).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import hashlib
import re
from typing import Final

from acmecerts.errors import BadServerResponse, InvalidInput

__all__ = [
    "DNS_ACCOUNT_01",
    "DNS_PERSIST_01",
    "DnsPersistRecord",
    "check_issuer_domain_names",
    "dns01_txt_value",
    "dns_account01_label",
    "dns_account01_record_name",
    "dns_persist01_record_name",
    "dns_persist01_txt_value",
    "key_authorization",
    "parse_dns_persist01_value",
    "validate_token",
]

#: draft-ietf-acme-dns-account-label: dns-01 at a name that depends on the account.
DNS_ACCOUNT_01: Final = "dns-account-01"
#: draft-ietf-acme-dns-persist: one persistent TXT record names the CA and the account.
DNS_PERSIST_01: Final = "dns-persist-01"

# RFC 8555 §8.3: the token is base64url without padding, at least 128 bits of entropy.
# fullmatch, not match with ^...$: "$" also matches before a trailing newline.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,256}")
#: RFC 8659 §4.2 issuer-domain-name: labels of letters, digits and inner hyphens.
_ISSUER = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
#: RFC 8659 §4.2 value: printable ASCII without ";" (%x21-3A / %x3C-7E).
_VALUE = re.compile(r"[\x21-\x3a\x3c-\x7e]*")
#: RFC 8659 §4.2 tag: letters and digits.
_TAG = re.compile(r"[A-Za-z0-9]+")
#: dns-persist-01 §3.1: at most 10 issuer domain names, each at most 253 octets.
MAX_ISSUER_DOMAIN_NAMES: Final = 10
_MAX_NAME: Final = 253


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 8555 §6.1 / RFC 7515 §2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def validate_token(token: object) -> str:
    """Return ``token`` if it is a well-formed challenge token, else raise.

    Tokens become URL paths and file names, so anything but the base64url alphabet is
    refused (a hostile CA must not be able to make us write ``../`` anywhere).
    """
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise BadServerResponse(f"challenge token {token!r} is not base64url")
    return token


def key_authorization(token: str, thumbprint: str) -> str:
    """RFC 8555 §8.1: ``token || '.' || base64url(Thumbprint(accountKey))``."""
    return f"{validate_token(token)}.{thumbprint}"


def dns01_txt_value(key_authorization: str) -> str:
    """RFC 8555 §8.4: the TXT value, base64url(SHA-256(key authorization)).

    dns-account-01 publishes the same value, at another name.
    """
    return b64url(hashlib.sha256(key_authorization.encode("ascii")).digest())


def _base(domain: str) -> str:
    if not isinstance(domain, str) or not domain.strip(". "):
        raise InvalidInput(f"a DNS name is needed, not {domain!r}")
    return domain.strip().rstrip(".").lower().removeprefix("*.")


def dns_account01_label(account_url: str) -> str:
    """The account label of dns-account-01: ``_`` + the first 10 octets of
    SHA-256(account URL), base32 (RFC 4648 §6), lower-cased: 16 characters.

    draft-ietf-acme-dns-account-label §3: "base32(SHA-256(<ACCOUNT_RESOURCE_URL>)[0:10])",
    the slice taken of the digest's bytes (Pebble 2.10 computes it so too).
    """
    if not isinstance(account_url, str) or not account_url:
        raise InvalidInput("dns-account-01 needs the account URL")
    digest = hashlib.sha256(account_url.encode("utf-8")).digest()
    return "_" + base64.b32encode(digest[:10]).decode("ascii").lower()


def dns_account01_record_name(domain: str, account_url: str) -> str:
    """``_<account label>._acme-challenge.<domain>`` (a wildcard's ``*.`` dropped)."""
    return f"{dns_account01_label(account_url)}._acme-challenge.{_base(domain)}"


def dns_persist01_record_name(domain: str) -> str:
    """``_validation-persist.<domain>`` (a wildcard's ``*.`` dropped: the base name's record
    with ``policy=wildcard`` covers it, draft-ietf-acme-dns-persist §5)."""
    return f"_validation-persist.{_base(domain)}"


def _issuer(name: str) -> str:
    # §3.1: A-label, lower case, no trailing dot, at most 253 octets
    text = name.strip().rstrip(".").lower() if isinstance(name, str) else ""
    if not text or len(text) > _MAX_NAME or not _ISSUER.fullmatch(text):
        raise InvalidInput(f"{name!r} is not an issuer domain name")
    return text


def _unix(when: _dt.datetime) -> int:
    if when.tzinfo is None:
        raise InvalidInput("persist_until must be a timezone-aware datetime")
    return int(when.timestamp())


def dns_persist01_txt_value(
    issuer_domain_name: str,
    account_uri: str,
    *,
    wildcard: bool = False,
    persist_until: _dt.datetime | None = None,
) -> str:
    """The RDATA of the persistent ``_validation-persist`` TXT record (dns-persist-01 §4).

    An RFC 8659 issue-value: the CA's issuer domain name (one of the challenge's
    ``issuer-domain-names``), ``accounturi=`` the account URL, ``policy=wildcard`` when
    the record must also cover ``*.<name>`` and subdomains (§5), and ``persistUntil=`` a
    UNIX time after which the CA will not use the record for new validations::

        pebble.letsencrypt.org; accounturi=https://ca/acct/1; policy=wildcard

    Raises :class:`~acmecerts.errors.InvalidInput` for an issuer that is not a domain
    name, an account URI with a space, ``;`` or a non-ASCII character, or a naive
    ``persist_until``.
    """
    issuer = _issuer(issuer_domain_name)
    if not isinstance(account_uri, str) or not account_uri or not _VALUE.fullmatch(account_uri):
        raise InvalidInput(f"{account_uri!r} cannot be an accounturi value (RFC 8659 §4.2)")
    parts = [issuer, f"accounturi={account_uri}"]
    if wildcard:
        parts.append("policy=wildcard")
    if persist_until is not None:
        parts.append(f"persistUntil={_unix(persist_until)}")
    return "; ".join(parts)


@dataclasses.dataclass(frozen=True, slots=True)
class DnsPersistRecord:
    """One ``_validation-persist`` TXT value, read (:func:`parse_dns_persist01_value`)."""

    #: The issuer domain name (lower case).
    issuer: str
    #: ``accounturi``, if given.
    account_uri: str | None
    #: Whether ``policy=wildcard`` is given (case-insensitive; other values count as none).
    wildcard: bool
    #: ``persistUntil`` as an aware UTC datetime, if given.
    persist_until: _dt.datetime | None

    def authorizes(
        self,
        issuers: tuple[str, ...] | list[str],
        account_uri: str,
        *,
        wildcard: bool,
        now: _dt.datetime,
    ) -> bool:
        """Whether a CA with ``issuers`` would accept this record for the account now."""
        return (
            self.issuer in issuers
            and self.account_uri == account_uri
            and (self.wildcard or not wildcard)
            and (self.persist_until is None or now <= self.persist_until)
        )


def parse_dns_persist01_value(text: str) -> DnsPersistRecord | None:
    """Read a TXT value as an RFC 8659 issue-value; ``None`` when it is not one.

    Tags are matched case-insensitively; unknown tags are ignored (§4); a duplicate tag,
    a parameter without ``=``, a value with a space or a malformed ``persistUntil``
    make the record malformed (``None``), as a CA would find it.
    """
    issuer_part, *params = text.split(";")
    issuer = issuer_part.strip(" \t").lower()
    if not issuer or not _ISSUER.fullmatch(issuer):
        return None
    seen: dict[str, str] = {}
    for param in params:
        tag, sep, value = param.strip(" \t").partition("=")
        tag, value = tag.strip(" \t"), value.strip(" \t")
        if not sep or not _TAG.fullmatch(tag) or not _VALUE.fullmatch(value):
            return None
        if tag.lower() in seen:
            return None
        seen[tag.lower()] = value
    until: _dt.datetime | None = None
    if "persistuntil" in seen:
        raw = seen["persistuntil"]
        if not raw.lstrip("-").isdigit():
            return None
        try:
            until = _dt.datetime.fromtimestamp(int(raw), _dt.UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return DnsPersistRecord(
        issuer=issuer,
        account_uri=seen.get("accounturi") or None,
        wildcard=seen.get("policy", "").lower() == "wildcard",
        persist_until=until,
    )


def check_issuer_domain_names(names: object, *, url: str | None = None) -> tuple[str, ...]:
    """dns-persist-01 §3.1: a challenge's ``issuer-domain-names``, checked.

    Clients MUST reject an empty array or one of more than 10 names; each is a domain
    name of at most 253 octets. Raises :class:`~acmecerts.errors.BadServerResponse`.
    """
    if (
        not isinstance(names, list | tuple)
        or not 1 <= len(names) <= MAX_ISSUER_DOMAIN_NAMES
        or not all(isinstance(n, str) for n in names)
    ):
        raise BadServerResponse(
            f"dns-persist-01 challenge with malformed issuer-domain-names {names!r:.200} "
            f"(1 to {MAX_ISSUER_DOMAIN_NAMES} names are required)",
            url=url,
        )
    try:
        return tuple(_issuer(n) for n in names)
    except InvalidInput as exc:
        raise BadServerResponse(f"dns-persist-01 challenge: {exc}", url=url) from None
