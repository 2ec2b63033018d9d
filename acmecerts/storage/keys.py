"""The key layout: the one place that names what acmecerts stores.

A key is a ``/``-separated path of *segments*. A segment is 1 to 200 characters of
``[a-z0-9._-]`` that starts and ends with ``[a-z0-9_]`` and never contains ``..``, so a
key can never climb out of a store, name a hidden file, or collide with a store's own
bookkeeping (temp files and lock files start with ``.``). A whole key is at most 1024
characters. Every store validates every key with :func:`validate_key` and refuses
anything else with :class:`~acmecerts.errors.InvalidInput`.

Names that come from the outside (the CA directory URL, certificate names chosen by the
operator or taken from DNS names) are turned into segments here, and only here::

    <ca>/ledger.json                                         rate-limit ledger (per CA)
    <ca>/accounts/<account>/key.pem                          account private key
    <ca>/accounts/<account>/account.json                     account URL and key thumbprint
    <ca>/accounts/<account>/certificates/<cert>/certificate.json
                                                             the certificate: chain, private
                                                             key and metadata in one record
    <ca>/accounts/<account>/certificates/<cert>/cert.pem     }
    <ca>/accounts/<account>/certificates/<cert>/privkey.pem  } the previous layout: read,
    <ca>/accounts/<account>/certificates/<cert>/meta.json    } converted on the next save
    <ca>/accounts/<account>/orders/<cert>.json               order in flight
    <ca>/accounts/<account>/attempts/<cert>.json             attempt / backoff state
    <ca>/accounts/<account>/retired/<identifier set>.json    certificates no longer managed

    locks: <ca>/accounts/<account>/account
           <ca>/accounts/<account>/certificates/<cert>

``<ca>`` is a slug of the directory URL (``acme-v02.api.letsencrypt.org-directory``) with
a short hash of the whole URL appended, so staging and production, or two CAs on one
host, never share state. The ledger is per CA rather than per account because several
of a CA's limits (certificates per registered domain, duplicate certificates) count
across accounts.

A certificate is one record, ``certificate.json`` (:class:`CertificateBundle`, stored
secret since it holds the private key): one atomic write saves it, so the chain and the
key can never belong to two different certificates, and one read loads it. Stores
written by earlier versions kept three files (``cert.pem``, ``privkey.pem``, and
``meta.json`` written last as the commit marker); they are still read, and replaced by
the record the next time the certificate is saved.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from acmecerts.errors import InvalidInput, StorageError
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.storage._json import decode_json, encode_json

if TYPE_CHECKING:
    from acmecerts.storage._base import Storage

__all__ = [
    "BUNDLE_FORMAT",
    "MAX_KEY_LENGTH",
    "MAX_SEGMENT_LENGTH",
    "WILDCARD",
    "CertificateBundle",
    "CertificateKeys",
    "KeyLayout",
    "LegacyCertificate",
    "ca_slug",
    "certificate_slug",
    "validate_key",
    "validate_prefix",
    "validate_segment",
]

#: The longest segment (file systems allow 255 bytes per name; stores need some room).
MAX_SEGMENT_LENGTH = 200
#: The longest key.
MAX_KEY_LENGTH = 1024

_SEGMENT = re.compile(r"[a-z0-9_](?:[a-z0-9._-]*[a-z0-9_])?", re.ASCII)
_PREFIX_TAIL = re.compile(r"[a-z0-9._-]*", re.ASCII)
_UNSAFE = re.compile(r"[^a-z0-9._-]+", re.ASCII)

#: How ``*`` (a wildcard label) is spelled in a certificate slug.
WILDCARD = "_wildcard_"
# A certificate name longer than this is shortened to a prefix plus a hash of the name.
_MAX_CERT_SLUG = 120
_CERT_SLUG_KEEP = 96
_MAX_CA_SLUG = 80


def validate_segment(segment: str, *, what: str = "key segment") -> str:
    """Return ``segment`` if it is a valid segment, else raise :class:`InvalidInput`."""
    if not isinstance(segment, str):
        raise InvalidInput(f"{what} must be a string, got {type(segment).__name__}")
    if len(segment) > MAX_SEGMENT_LENGTH:
        raise InvalidInput(f"{what} is longer than {MAX_SEGMENT_LENGTH} characters")
    if not _SEGMENT.fullmatch(segment) or ".." in segment:
        raise InvalidInput(
            f"invalid {what} {segment!r}: use 1-{MAX_SEGMENT_LENGTH} of [a-z0-9._-], "
            "starting and ending with [a-z0-9_], without '..'"
        )
    return segment


#: Keys found valid lately (a store checks the same few keys again and again: each
#: operation's key, then its file's path). The oldest is forgotten when full; only ``str``
#: itself goes in.
_VALID_KEYS: dict[str, None] = {}
_MAX_VALID_KEYS = 4096
_V = TypeVar("_V")


#: One store may serve event loops in several threads: evicting the oldest entry is a
#: read then a delete, which two threads must not do at once (both would pick the same key).
_MEMO_LOCK = threading.Lock()


def _remember(memo: dict[str, _V], key: str, value: _V) -> None:
    """Remember ``key`` in ``memo``, forgetting the oldest entry when it is full."""
    with _MEMO_LOCK:
        if len(memo) >= _MAX_VALID_KEYS:
            del memo[next(iter(memo))]
        memo[key] = value


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid storage key (or lock name), else raise InvalidInput."""
    if type(key) is str and key in _VALID_KEYS:
        return key
    if not isinstance(key, str):
        raise InvalidInput(f"a storage key must be a string, got {type(key).__name__}")
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(f"a storage key must be 1-{MAX_KEY_LENGTH} characters, got {key!r}")
    for segment in key.split("/"):
        validate_segment(segment, what=f"segment of storage key {key!r}")
    if type(key) is str:
        _remember(_VALID_KEYS, key, None)
    return key


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it can start a key (``""``, ``"a/b/"``, ``"a/b/ce"``...).

    Everything up to the last ``/`` must be valid segments; the rest may be any partial
    segment.
    """
    if not isinstance(prefix, str):
        raise InvalidInput(f"a storage prefix must be a string, got {type(prefix).__name__}")
    if len(prefix) > MAX_KEY_LENGTH:
        raise InvalidInput(f"a storage prefix must be at most {MAX_KEY_LENGTH} characters")
    head, _, tail = prefix.rpartition("/")
    if head or prefix.startswith("/"):
        validate_key(head)
    if not _PREFIX_TAIL.fullmatch(tail):
        raise InvalidInput(f"invalid storage prefix {prefix!r}")
    return prefix


def _short_hash(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def ca_slug(directory_url: str | DirectoryUrl) -> str:
    """The segment naming a CA: host, port and path of its directory URL, plus a hash.

    ``https://acme-v02.api.letsencrypt.org/directory`` becomes
    ``acme-v02.api.letsencrypt.org-directory-<8 hex>``; the hash covers the whole
    normalised URL (scheme, host, port, path, query) so distinct URLs never share a slug.
    The URL is read by :class:`~acmecerts.DirectoryUrl`, so what no client could talk to
    (``http://``, no host, credentials...) names no CA either.

    Raises:
        InvalidInput: ``directory_url`` is no directory URL (see :class:`DirectoryUrl`).
    """
    parts = DirectoryUrl(directory_url).parts
    # The slugs of stores written before DirectoryUrl existed must not change
    # (tests/storage/test_keys.py pins them): urlsplit's host (lower case, as given: no
    # IDNA, a trailing dot kept), the port unless it is https' own.
    host = parts.hostname or ""
    port = None if parts.port == 443 else parts.port
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    normalised = f"https://{netloc}{parts.path or '/'}"
    if parts.query:
        normalised += f"?{parts.query}"
    visible = "-".join(
        p for p in (host, None if port is None else str(port), parts.path.lower()) if p
    )
    slug = _UNSAFE.sub("-", visible)
    slug = re.sub(r"-{2,}", "-", slug)[:_MAX_CA_SLUG].strip(".-")
    slug = f"{slug}-{_short_hash(normalised, 8)}" if slug else _short_hash(normalised, 8)
    return validate_segment(slug, what="CA slug")


def certificate_slug(name: str) -> str:
    """The segment for a certificate name (``default.my-ingress``, ``*.example.com``...).

    The name is lowercased (DNS names are case-insensitive), ``*`` is spelled
    ``_wildcard_``, and a name longer than 120 characters is shortened to its first 96
    characters plus a hash of the whole name. Any other character outside
    ``[a-z0-9._-]`` is refused (:class:`InvalidInput`), so two different names never
    share a slug; internationalised names must be given in A-label form (``xn--...``).
    """
    if type(name) is str:
        known = _SLUGS.get(name)
        if known is not None:
            return known
    if not isinstance(name, str):
        raise InvalidInput(f"a certificate name must be a string, got {type(name).__name__}")
    lowered = name.lower()
    if WILDCARD in lowered:
        raise InvalidInput(f"invalid certificate name {name!r}: {WILDCARD!r} is reserved")
    slug = lowered.replace("*", WILDCARD)
    if not slug or _UNSAFE.search(slug):
        raise InvalidInput(
            f"invalid certificate name {name!r}: use letters, digits, '.', '-', '_' and '*'"
        )
    if len(slug) > _MAX_CERT_SLUG:
        slug = f"{slug[:_CERT_SLUG_KEEP].rstrip('.-')}--{_short_hash(slug, 16)}"
    validate_segment(slug, what=f"slug of certificate name {name!r}")
    if type(name) is str:
        _remember(_SLUGS, name, slug)
    return slug


#: The slugs of certificate names met lately (each store operation names one).
_SLUGS: dict[str, str] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateKeys:
    """The keys of one certificate's files (all under :attr:`prefix`)."""

    #: ``<ca>/accounts/<account>/certificates/<cert>/``
    prefix: str
    #: The certificate's record (:class:`CertificateBundle`, store with ``secret=True``).
    record: str
    #: Previous layout: the certificate chain, PEM (leaf first).
    cert: str
    #: Previous layout: the certificate's private key, PEM (secret).
    privkey: str
    #: Previous layout: JSON metadata, written last (the commit marker).
    meta: str

    @property
    def legacy(self) -> tuple[str, str, str]:
        """The previous layout's keys, ``meta.json`` (its commit marker) first."""
        return (self.meta, self.cert, self.privkey)


#: The version of the :class:`CertificateBundle` format.
BUNDLE_FORMAT = 2


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class CertificateBundle:
    """The stored record of one certificate: metadata, full chain and private key.

    Stored as one JSON object (``certificate.json``, with ``secret=True``)::

        {"format": 2, "name": ..., "identifiers": [...], "serial": ..., "not_after": ...,
         "order_url": ..., "certificate_url": ..., "fullchain_pem": ..., "private_key_pem": ...}

    The PEM texts are kept as they are; the metadata (serial, expiry) repeats what the
    leaf says, so a reader that does not parse certificates (retention) needs nothing
    else. This module only encodes and decodes: whether the chain and the key belong
    together is for the reader to check.
    """

    name: str
    identifiers: tuple[str, ...]
    fullchain_pem: str
    private_key_pem: str
    order_url: str
    certificate_url: str
    serial: str
    #: ISO 8601 with a time zone (as ``datetime.isoformat`` writes it).
    not_after: str

    def __repr__(self) -> str:
        return f"CertificateBundle({self.name!r}, serial={self.serial!r})"

    def to_bytes(self) -> bytes:
        """The stored form (compact JSON, keys sorted)."""
        value: dict[str, Any] = {
            "format": BUNDLE_FORMAT,
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
        }
        value["identifiers"] = list(self.identifiers)
        return encode_json(value)

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> CertificateBundle:
        """Parse the stored form read from ``key``; :class:`StorageError` if it is not one."""
        value = decode_json(data, key)
        if value.get("format") != BUNDLE_FORMAT:
            raise StorageError(
                f"{key} has format {value.get('format')!r}, this version reads {BUNDLE_FORMAT}",
                path=key,
            )
        fields: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            item = value.get(field.name)
            if field.name == "identifiers":
                if (
                    not isinstance(item, list)
                    or not item
                    or not all(isinstance(i, str) for i in item)
                ):
                    raise StorageError(f"{key}: identifiers must be a list of strings", path=key)
                item = tuple(item)
            elif not isinstance(item, str):
                raise StorageError(f"{key}: {field.name} must be a string", path=key)
            fields[field.name] = item
        return cls(**fields)


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class LegacyCertificate:
    """A certificate as earlier versions stored it: ``cert.pem``, ``privkey.pem``, ``meta.json``.

    Read it with :meth:`load`; it is the previous layout of :class:`CertificateKeys`
    (``meta.json`` was written last, as the commit marker). Like :class:`CertificateBundle`
    it only reads: whether the chain and the key belong together is for the reader to check.
    """

    #: ``meta.json``: a JSON object (``name``, ``identifiers``, ``order_url``,
    #: ``certificate_url`` as written; not checked here).
    meta: dict[str, Any]
    #: ``cert.pem``: the certificate chain, PEM (leaf first), as stored.
    fullchain_pem: bytes
    #: ``privkey.pem``: the certificate's private key, PEM, as stored.
    private_key_pem: bytes

    def __repr__(self) -> str:
        return f"LegacyCertificate({self.meta.get('name')!r})"

    @classmethod
    async def load(
        cls, storage: Storage, keys: CertificateKeys, *, label: str | None = None
    ) -> LegacyCertificate | None:
        """Read ``keys``' three files from ``storage``; ``None`` unless all three are there.

        A certificate with ``meta.json`` missing was not completely saved, and one with
        ``cert.pem`` or ``privkey.pem`` missing is being removed: neither is one. Raises
        :class:`~acmecerts.errors.StorageError` when ``meta.json`` is not a JSON object,
        naming ``label`` (default: the key ``keys.meta``), or when ``storage`` cannot read
        a file.
        """
        meta = await storage.load(keys.meta)
        if meta is None:
            return None
        cert = await storage.load(keys.cert)
        privkey = await storage.load(keys.privkey)
        if cert is None or privkey is None:
            return None
        document = decode_json(meta.data, keys.meta if label is None else label)
        return cls(meta=document, fullchain_pem=cert.data, private_key_pem=privkey.data)


class KeyLayout:
    """Names every key and lock for one account on one CA.

    >>> layout = KeyLayout("https://acme-v02.api.letsencrypt.org/directory")
    >>> layout.account_key()  # doctest: +ELLIPSIS
    'acme-v02.api.letsencrypt.org-directory-.../accounts/default/key.pem'
    """

    __slots__ = ("_account_prefix", "account", "ca", "directory_url")

    def __init__(self, directory_url: str | DirectoryUrl, account: str = "default") -> None:
        """Lay out keys for ``account`` (a segment, e.g. ``default``) on the CA."""
        #: The CA's directory URL, as given (a :class:`~acmecerts.DirectoryUrl`: parsed once).
        self.directory_url = directory_url = DirectoryUrl(directory_url)
        #: The account's name in the store (operator-chosen, a valid segment).
        self.account = validate_segment(account, what="account name")
        #: The segment naming the CA (see :func:`ca_slug`); every key starts with it.
        self.ca = ca_slug(directory_url)
        self._account_prefix = f"{self.ca}/accounts/{self.account}/"

    # -- keys -------------------------------------------------------------------------

    @property
    def account_prefix(self) -> str:
        """``<ca>/accounts/<account>/``: everything that belongs to this account."""
        return self._account_prefix

    def account_key(self) -> str:
        """The account private key (PEM, secret)."""
        return f"{self._account_prefix}key.pem"

    def account_meta(self) -> str:
        """The account's JSON metadata: its URL at the CA and the key's thumbprint."""
        return f"{self._account_prefix}account.json"

    def certificates_prefix(self) -> str:
        """The prefix under which every certificate of this account is stored."""
        return f"{self._account_prefix}certificates/"

    def certificate(self, name: str) -> CertificateKeys:
        """The keys of certificate ``name`` (see :func:`certificate_slug`)."""
        prefix = f"{self.certificates_prefix()}{certificate_slug(name)}/"
        return CertificateKeys(
            prefix=prefix,
            record=f"{prefix}certificate.json",
            cert=f"{prefix}cert.pem",
            privkey=f"{prefix}privkey.pem",
            meta=f"{prefix}meta.json",
        )

    def orders_prefix(self) -> str:
        """The prefix under which orders in flight are stored."""
        return f"{self._account_prefix}orders/"

    def order(self, name: str) -> str:
        """Certificate ``name``'s order in flight (JSON: URL, identifiers, CSR key ref)."""
        return f"{self.orders_prefix()}{certificate_slug(name)}.json"

    def attempt_state(self, name: str) -> str:
        """Certificate ``name``'s attempt and backoff state (JSON)."""
        return f"{self._account_prefix}attempts/{certificate_slug(name)}.json"

    def retired_prefix(self) -> str:
        """The prefix under which retired (no longer managed) certificates are recorded."""
        return f"{self._account_prefix}retired/"

    def retired(self, identifiers: Iterable[str]) -> str:
        """The record of the retired certificates for one exact identifier set (JSON).

        ``identifiers`` are typed values (``dns:www.example.com``, ``ip:192.0.2.1``);
        their order and repetitions do not matter. The key is a hash of the sorted set,
        so a certificate retired under one name is found by the identifiers another
        name asks for, with one read.
        """
        values = sorted(set(identifiers))
        if not values or not all(isinstance(v, str) and v for v in values):
            raise InvalidInput("a retired record needs at least one identifier")
        digest = _short_hash("\n".join(values), 32)
        return f"{self.retired_prefix()}{digest}.json"

    def ledger(self) -> str:
        """The CA's rate-limit ledger (JSON), shared by every account on the CA."""
        return f"{self.ca}/ledger.json"

    # -- locks ------------------------------------------------------------------------

    def account_lock(self) -> str:
        """The lock held while the account key is created or the account registered."""
        return f"{self._account_prefix}account"

    def certificate_lock(self, name: str) -> str:
        """The lock held while certificate ``name`` is ordered, so one replica orders it."""
        return f"{self.certificates_prefix()}{certificate_slug(name)}"

    def __repr__(self) -> str:
        return f"KeyLayout({self.directory_url!r}, account={self.account!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyLayout):
            return NotImplemented
        return (self.ca, self.account) == (other.ca, other.account)

    def __hash__(self) -> int:
        return hash((self.ca, self.account))
