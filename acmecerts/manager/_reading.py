"""Reading what a manager stored, without running one: certificates and attempt state.

A program (the CLI's ``status``, ``renew`` and ``delete``, a monitoring script) that wants
to know what the store holds for one account asks here, with the store and its
:class:`~acmecerts.storage.KeyLayout`, and reads what :class:`CertificateManager` wrote:

* :func:`list_stored_certificates`, :func:`load_stored_certificate`: every completely
  stored certificate (its record, or the three files of the previous layout), parsed;
* :func:`delete_stored_certificate`: every key of a certificate removed (a lineage
  deleted for good: not retired as a manager retires one it no longer manages);
* :func:`load_attempt_state`, :func:`save_attempt_state`: the manager's attempt state of a
  certificate (a deferral, the last failure), e.g. to record a deferral found before the
  manager ran, so that the next run does not try before its instant.

Errors name the file that is wrong when the store is a
:class:`~acmecerts.storage.FileStorage` (its key otherwise).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from acmecerts.errors import AcmeCertsError, InvalidInput, StorageError
from acmecerts.protocol.certificate import (
    CertificateChain,
    CertificateInfo,
    certificate_info,
    parse_pem_chain,
)
from acmecerts.protocol.keys import KeyType, key_type_of
from acmecerts.retry import AttemptState
from acmecerts.storage import KeyLayout, LegacyCertificate, Storage, storage_label
from acmecerts.storage._json import decode_json, encode_json
from acmecerts.storage.keys import CertificateBundle

__all__ = [
    "StoredCertificate",
    "delete_stored_certificate",
    "list_stored_certificates",
    "load_attempt_state",
    "load_json_object",
    "load_stored_certificate",
    "natural_key",
    "save_attempt_state",
]

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[str | int, ...], str]:
    """A sort key that orders runs of digits by their value, letters case-insensitively
    (``host2`` before ``host10``).

    ``re.split`` with a capturing group alternates text and digits, always starting with
    text (maybe empty), so the pieces at one position are all ``str`` or all ``int`` and
    two keys always compare. The text itself breaks ties (``host01`` / ``host1``,
    ``A`` / ``a``), so the order is total and ``sorted`` is deterministic.
    """
    pieces = _DIGITS.split(text.casefold())
    key = tuple(int(p) if i % 2 else p for i, p in enumerate(pieces))
    return key, text


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class StoredCertificate:
    """A certificate the manager stored (its record, or a complete previous layout)."""

    name: str
    identifiers: tuple[str, ...]
    chain: CertificateChain
    info: CertificateInfo
    key_type: KeyType | None

    def __repr__(self) -> str:
        return f"StoredCertificate({self.name!r}, serial={self.info.serial!r})"


async def load_json_object(storage: Storage, key: str) -> dict[str, Any] | None:
    """The JSON object stored at ``key`` (``None``: nothing is); :class:`StorageError`
    naming its file when it holds something else."""
    value = await storage.load(key)
    return None if value is None else decode_json(value.data, storage_label(storage, key))


def _key_type_of(pem: bytes) -> KeyType | None:
    try:
        return key_type_of(pem)
    except InvalidInput:
        return None


async def list_stored_certificates(storage: Storage, layout: KeyLayout) -> list[StoredCertificate]:
    """Every completely stored certificate of ``layout``'s account, in natural name order."""
    keys = await storage.list(layout.certificates_prefix())
    records = {k.rpartition("/")[0] for k in keys if k.endswith("/certificate.json")}
    found: list[StoredCertificate] = []
    for key in keys:
        if key.endswith("/certificate.json"):
            value = await storage.load(key)
            if value is None:
                continue
            name = CertificateBundle.from_bytes(value.data, storage_label(storage, key)).name
        elif key.endswith("/meta.json") and key.rpartition("/")[0] not in records:
            meta = await load_json_object(storage, key)  # the previous layout
            if meta is None:
                continue
            named = meta.get("name")
            if not isinstance(named, str):
                label = storage_label(storage, key)
                raise StorageError(f"{label} has no certificate name", path=key)
            name = named
        else:
            continue
        stored = await load_stored_certificate(storage, layout, name)
        if stored is not None:
            found.append(stored)
    return sorted(found, key=lambda c: natural_key(c.name))


async def load_stored_certificate(
    storage: Storage, layout: KeyLayout, name: str
) -> StoredCertificate | None:
    """The stored certificate ``name``; ``None`` if none was completely saved.

    Its record (``certificate.json``), else the previous layout's three files.

    Raises:
        StorageError: what is stored is not a certificate chain with its identifiers.
    """
    keys = layout.certificate(name)
    record = await storage.load(keys.record)
    if record is not None:
        path = storage_label(storage, keys.record)
        bundle = CertificateBundle.from_bytes(record.data, path)
        cert_pem, key_pem = bundle.fullchain_pem.encode(), bundle.private_key_pem.encode()
        identifiers: object = list(bundle.identifiers)
        stored_name = bundle.name
    else:
        legacy = await LegacyCertificate.load(
            storage, keys, label=storage_label(storage, keys.meta)
        )
        if legacy is None:
            return None
        cert_pem, key_pem = legacy.fullchain_pem, legacy.private_key_pem
        path = storage_label(storage, keys.cert)
        identifiers = legacy.meta.get("identifiers")
        stored_name = str(legacy.meta.get("name", name))
    try:
        chain = parse_pem_chain(cert_pem)
    except AcmeCertsError as exc:
        raise StorageError(f"{path} is not a certificate chain: {exc}", path=path) from exc
    if not isinstance(identifiers, list) or not all(isinstance(i, str) for i in identifiers):
        path = storage_label(storage, keys.meta)
        raise StorageError(f"{path} has no identifiers", path=path)
    return StoredCertificate(
        name=stored_name,
        identifiers=tuple(identifiers),
        chain=chain,
        info=certificate_info(chain.leaf),
        key_type=_key_type_of(key_pem),
    )


async def load_attempt_state(storage: Storage, layout: KeyLayout, name: str) -> AttemptState | None:
    """The manager's attempt state for certificate ``name`` (deferral, last failure), if any."""
    key = layout.attempt_state(name)
    document = await load_json_object(storage, key)
    if document is None:
        return None
    try:
        return AttemptState.from_json(document)
    except StorageError as exc:
        path = storage_label(storage, key)
        raise StorageError(f"{path}: {exc}", path=path) from exc


async def save_attempt_state(
    storage: Storage, layout: KeyLayout, name: str, attempt: AttemptState
) -> None:
    """Store the manager's attempt state for certificate ``name`` (as the manager does;
    e.g. a deferral found before the manager ran: the next run does not try before its
    instant)."""
    await storage.store(layout.attempt_state(name), encode_json(attempt.to_json()))


async def delete_stored_certificate(storage: Storage, layout: KeyLayout, name: str) -> list[str]:
    """Remove every key of certificate ``name``: its record first (so that it is no longer
    listed as stored), the previous layout's files, anything else under its prefix, its
    order in flight and its attempt state. Returns the keys deleted, in that order.

    Call it under the certificate's lock (``layout.certificate_lock(name)``) so that no
    manager writes it meanwhile. A failure part-way leaves the rest for a second call.
    """
    keys = layout.certificate(name)
    ordered = [keys.record, *keys.legacy]
    ordered += [k for k in await storage.list(keys.prefix) if k not in ordered]
    ordered += [layout.order(name), layout.attempt_state(name)]
    for key in ordered:
        await storage.delete(key)
    return ordered
