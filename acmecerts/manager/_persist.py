"""How the manager keeps certificates, attempt state and orders in flight in a Storage.

Layout (names from :class:`~acmecerts.storage.KeyLayout`): per certificate name,
``cert.pem`` (the full chain), ``privkey.pem`` (secret), ``meta.json`` (identifiers and
URLs, written last: a certificate without its ``meta.json`` was not completely saved and
is ignored); ``attempts/<name>.json`` (the attempt schedule's state); and
``orders/<name>.json`` (secret: the order URL and the key its CSR uses, written right
after ``newOrder`` so a restarted process resumes the order instead of ordering again;
written first right *before* ``newOrder`` without a URL, so a process that died in
between knows to look for the order the CA may have created).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from contextlib import AbstractAsyncContextManager
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from acmecerts._issued import IssuedCertificate
from acmecerts.errors import AcmeCertsError, StorageError
from acmecerts.protocol.certificate import (
    CertificateChain,
    CertificateInfo,
    certificate_info,
    check_certificate_matches,
    parse_pem_chain,
)
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import load_private_key
from acmecerts.retry import AttemptState
from acmecerts.storage import KeyLayout, Lease, Storage

__all__ = ["CertificateStore", "HeldCertificate", "OrderRecord", "hold"]

_FORMAT = 1
#: Issuer chains kept for sharing between held certificates (a CA has a handful).
_MAX_SHARED = 64
_SHARED: dict[tuple[x509.Certificate, ...], tuple[tuple[x509.Certificate, ...], str]] = {}


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class OrderRecord:
    """An order in flight: enough to resume it after a restart.

    ``order_url`` is ``None`` while ``newOrder`` is under way: the CA may have created
    an order whose URL was never recorded.
    """

    order_url: str | None
    identifiers: tuple[Identifier, ...]
    private_key_pem: str
    created_at: _dt.datetime

    def __repr__(self) -> str:
        return f"OrderRecord({self.order_url!r}, {[i.value for i in self.identifiers]!r})"


@dataclasses.dataclass(frozen=True, slots=True, eq=False, repr=False)
class HeldCertificate:
    """A certificate as the manager keeps it in memory, in a few hundred bytes.

    An :class:`IssuedCertificate` costs kilobytes: the PEM text of the whole chain, the
    parsed leaf and what ``cryptography`` caches on it once names and extensions were
    read, the issuers parsed again for every certificate. This keeps the leaf's DER,
    the issuers shared between certificates of the same chain, and the metadata the
    schedule reads; :meth:`issued` builds an equal :class:`IssuedCertificate`.
    """

    identifiers: tuple[Identifier, ...]
    leaf_der: bytes
    issuers: tuple[x509.Certificate, ...]
    issuers_pem: str
    private_key_pem: str
    info: CertificateInfo
    order_url: str
    certificate_url: str

    @property
    def not_before(self) -> _dt.datetime:
        """Start of validity (UTC)."""
        return self.info.not_before

    @property
    def not_after(self) -> _dt.datetime:
        """End of validity (UTC)."""
        return self.info.not_after

    @property
    def serial(self) -> str:
        """Serial number, lower-case hex."""
        return self.info.serial

    def leaf(self) -> x509.Certificate:
        """The leaf certificate, parsed again."""
        return x509.load_der_x509_certificate(self.leaf_der)

    def issued(self) -> IssuedCertificate:
        """The certificate as an :class:`IssuedCertificate` (equal to the one held)."""
        leaf = self.leaf()
        pem = leaf.public_bytes(Encoding.PEM).decode("ascii") + self.issuers_pem
        return IssuedCertificate(
            identifiers=self.identifiers,
            chain=CertificateChain(pem=pem, certificates=(leaf, *self.issuers)),
            private_key_pem=self.private_key_pem,
            info=self.info,
            order_url=self.order_url,
            certificate_url=self.certificate_url,
        )


def hold(issued: IssuedCertificate) -> HeldCertificate | IssuedCertificate:
    """``issued`` in the form the manager keeps (``issued`` itself if it cannot be held)."""
    chain = issued.chain
    if issued.alternate_chains:
        return issued
    leaf_der = chain.leaf.public_bytes(Encoding.DER)
    issuers, issuers_pem = _shared(chain.certificates[1:])
    leaf_pem = x509.load_der_x509_certificate(leaf_der).public_bytes(Encoding.PEM)
    if leaf_pem.decode("ascii") + issuers_pem != chain.pem:
        return issued  # not the canonical PEM: keep it as it is
    return HeldCertificate(
        identifiers=issued.identifiers,
        leaf_der=leaf_der,
        issuers=issuers,
        issuers_pem=issuers_pem,
        private_key_pem=issued.private_key_pem,
        info=issued.info,
        order_url=issued.order_url,
        certificate_url=issued.certificate_url,
    )


def _shared(
    issuers: tuple[x509.Certificate, ...],
) -> tuple[tuple[x509.Certificate, ...], str]:
    """One copy of an issuer chain (and its PEM) for every certificate it issued."""
    shared = _SHARED.get(issuers)
    if shared is None:
        if len(_SHARED) >= _MAX_SHARED:
            _SHARED.clear()
        pem = "".join(cert.public_bytes(Encoding.PEM).decode("ascii") for cert in issuers)
        shared = _SHARED[issuers] = (issuers, pem)
    return shared


def _decode(data: bytes, key: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StorageError(f"{key} is not valid JSON: {exc}", path=key) from exc
    if not isinstance(value, dict):
        raise StorageError(f"{key} is not a JSON object", path=key)
    return value


def _encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


class CertificateStore:
    """The manager's view of a :class:`~acmecerts.storage.Storage`."""

    def __init__(self, storage: Storage, layout: KeyLayout) -> None:
        self.storage = storage
        self.layout = layout

    def lock(self, name: str, *, lease: float = 120.0) -> AbstractAsyncContextManager[Lease]:
        """The cross-process lock that makes issuance of ``name`` single-flight."""
        return self.storage.lock(self.layout.certificate_lock(name), lease=lease)

    # -- certificates -------------------------------------------------------------------

    async def load_certificate(self, name: str) -> IssuedCertificate | None:
        """The stored certificate for ``name``; ``None`` if none was completely saved.

        Raises :class:`StorageError` when the stored files do not belong together.
        """
        keys = self.layout.certificate(name)
        meta_value = await self.storage.load(keys.meta)
        if meta_value is None:
            return None
        cert_value = await self.storage.load(keys.cert)
        key_value = await self.storage.load(keys.privkey)
        if cert_value is None or key_value is None:
            return None
        meta = _decode(meta_value.data, keys.meta)
        try:
            identifiers = parse_identifiers(meta["identifiers"])
            chain = parse_pem_chain(cert_value.data, url=keys.cert)
            private_key = load_private_key(key_value.data)
            check_certificate_matches(chain, key=private_key, identifiers=identifiers)
            return IssuedCertificate(
                identifiers=identifiers,
                chain=chain,
                private_key_pem=key_value.data.decode("ascii"),
                info=certificate_info(chain.leaf),
                order_url=str(meta["order_url"]),
                certificate_url=str(meta["certificate_url"]),
            )
        except (KeyError, TypeError, UnicodeDecodeError, AcmeCertsError) as exc:
            if isinstance(exc, StorageError):
                raise
            raise StorageError(
                f"stored certificate {name!r} is unusable: {exc}", path=keys.prefix
            ) from exc

    async def save_certificate(self, name: str, issued: IssuedCertificate) -> None:
        """Store key, chain, then ``meta.json`` (the commit marker), each atomically."""
        keys = self.layout.certificate(name)
        await self.storage.delete(keys.meta)  # until the new pair is complete
        await self.storage.store(keys.privkey, issued.private_key_pem.encode("ascii"), secret=True)
        await self.storage.store(keys.cert, issued.fullchain_pem.encode("ascii"))
        meta = {
            "format": _FORMAT,
            "name": name,
            "identifiers": [i.value for i in issued.identifiers],
            "order_url": issued.order_url,
            "certificate_url": issued.certificate_url,
            "serial": issued.serial,
            "not_after": issued.not_after.isoformat(),
        }
        await self.storage.store(keys.meta, _encode(meta))

    # -- attempt state --------------------------------------------------------------------

    async def load_attempt_state(self, name: str) -> AttemptState | None:
        """The stored attempt-schedule state for ``name``."""
        key = self.layout.attempt_state(name)
        value = await self.storage.load(key)
        if value is None:
            return None
        return AttemptState.from_json(_decode(value.data, key))

    async def save_attempt_state(self, name: str, state: AttemptState) -> None:
        """Persist ``state`` (the fresh state deletes the record)."""
        key = self.layout.attempt_state(name)
        if state == AttemptState():
            await self.storage.delete(key)
        else:
            await self.storage.store(key, _encode(state.to_json()))

    # -- orders in flight ---------------------------------------------------------------

    async def load_order(self, name: str) -> OrderRecord | None:
        """The order in flight for ``name``, if a previous attempt left one."""
        key = self.layout.order(name)
        value = await self.storage.load(key)
        if value is None:
            return None
        data = _decode(value.data, key)
        try:
            order_url = data["order_url"]
            if order_url is not None and not isinstance(order_url, str):
                raise TypeError(f"order_url must be a string or null, got {order_url!r}")
            return OrderRecord(
                order_url=order_url,
                identifiers=parse_identifiers(data["identifiers"]),
                private_key_pem=str(data["private_key_pem"]),
                created_at=_dt.datetime.fromisoformat(str(data["created_at"])),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageError(f"{key} is not a valid order record: {exc}", path=key) from exc

    async def save_order(self, name: str, record: OrderRecord) -> None:
        """Remember an order in flight (secret: it holds the certificate key)."""
        value = {
            "format": _FORMAT,
            "order_url": record.order_url,
            "identifiers": [i.value for i in record.identifiers],
            "private_key_pem": record.private_key_pem,
            "created_at": record.created_at.isoformat(),
        }
        await self.storage.store(self.layout.order(name), _encode(value), secret=True)

    async def delete_order(self, name: str) -> None:
        """Forget the order in flight for ``name``."""
        await self.storage.delete(self.layout.order(name))
