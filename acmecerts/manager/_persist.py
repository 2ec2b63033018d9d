"""How the manager keeps certificates, attempt state and orders in flight in a Storage.

Layout (names from :class:`~acmecerts.storage.KeyLayout`): per certificate name,
``certificates/<name>/certificate.json`` (secret: one record with the metadata, the full
chain and the private key, :class:`~acmecerts.storage.keys.CertificateBundle`, written
in one atomic ``store``); ``attempts/<name>.json`` (the attempt schedule's state); and
``orders/<name>.json`` (secret: the order URL and the key its CSR uses, written right
after ``newOrder`` so a restarted process resumes the order instead of ordering again;
written first right *before* ``newOrder`` without a URL, so a process that died in
between knows to look for the order the CA may have created).

An order record is not deleted when its certificate is saved: a record whose order URL
is the one the stored certificate names is *finished*, dead by that rule (see
:meth:`CertificateStore.load_order`), and the next order's intent overwrites it. That
spares each new certificate a delete and its directory fsync. Earlier versions sharing
the store delete such a record under the lock before they order (what they did after a
crash between the save and the delete), so they read this layout as it is.

The previous layout kept a certificate in three files, ``cert.pem``, ``privkey.pem`` and
``meta.json`` (written last: without it the certificate was not completely saved). Such
a certificate still loads (when it has no record); the next save writes the record and
only then removes the three files, ``meta.json`` first, so a crash at any point leaves
a certificate that loads (the record wins over files left beside it, which the next
save removes). Which names have files of the previous layout is learnt from one
``list`` of the certificates the first time it matters, so a new certificate costs no
reads of files that cannot exist. Every replica sharing a store must run a version that
writes the record: earlier versions do not read it.

Per exact identifier set, ``retired/<hash>.json`` lists the certificate names no longer
managed whose files are kept for a while (see :mod:`acmecerts.manager._retention`): when,
the serial, and the version of each file at that moment, so that deleting them later
never deletes what was written since.

While this process holds a certificate's lock (:meth:`CertificateStore.lock`) it
remembers what it read and wrote of that name's order record and whether its attempt
state was absent, and spares the store a read or a delete that cannot change anything
(see :class:`_Held`); the memory is dropped with the lock.

The reads one step of the manager makes (a certificate's record, attempt state, retired
record and order record) are made in one batch (:meth:`CertificateStore.reading`,
:func:`~acmecerts.storage.load_each`): one hop to FileStorage's worker thread instead
of one per key.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as _dt
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Literal

import anyio

from acmecerts._issued import IssuedCertificate
from acmecerts.errors import AcmeCertsError, InvalidInput, StorageError
from acmecerts.manager._records import (
    OrderRecord,
    RetiredEntry,
    RetiredRecord,
    StoredFiles,
    parse_instant,
)
from acmecerts.protocol.certificate import (
    certificate_info,
    check_certificate_matches,
    parse_pem_chain,
)
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import load_private_key
from acmecerts.retry import AttemptState
from acmecerts.storage import (
    DELETE,
    UNREAD,
    KeyLayout,
    Lease,
    LegacyCertificate,
    Outcome,
    Storage,
    StoredValue,
    UpdateMarker,
    VersionConflict,
    load_each,
    update,
)
from acmecerts.storage._json import decode_json, encode_json
from acmecerts.storage.keys import CertificateBundle, CertificateKeys, certificate_slug

__all__ = ["CertificateStore"]

_FORMAT = 1

#: The values :meth:`CertificateStore.reading` read for the block running in this task:
#: each is handed out once, to the first read of its key.
_BATCH: contextvars.ContextVar[dict[str, StoredValue | StorageError | None] | None] = (
    contextvars.ContextVar("acmecerts_store_batch", default=None)
)


@dataclasses.dataclass(eq=False)
class _Held:
    """What this process knows of one name's files while it holds the name's lock.

    Only this process writes the order record while it holds the lock (every writer of
    it holds the lock: issuance, adoption, purges, the CLI's delete), so what it read or
    wrote of the record under the lock is what is stored until it lets go: reading it
    again would return the same. The attempt state is also written without the lock (a
    deferral before the lock is taken); ``attempts_absent`` is used only to skip deleting
    it, which is the same as such a write landing just after the delete, an order those
    unsynchronised writers never had. A lease that was lost voids all of it.
    """

    lease: Lease
    #: Whether :attr:`order` was read or written under the lock.
    order_known: bool = False
    #: The order record as read or written under the lock (``None``: absent).
    order: OrderRecord | None = None
    #: The attempt state was read as absent (or deleted) under the lock.
    attempts_absent: bool = False

    @property
    def valid(self) -> bool:
        """Whether the lock is still held (a lost lease voids what is known)."""
        return not self.lease.lost

    def know_order(self, record: OrderRecord | None) -> None:
        self.order_known, self.order = True, record


class CertificateStore:
    """The manager's view of a :class:`~acmecerts.storage.Storage`."""

    def __init__(self, storage: Storage, layout: KeyLayout) -> None:
        self.storage = storage
        self.layout = layout
        #: Per certificate slug, while this process holds its lock.
        self._held: dict[str, _Held] = {}
        #: Slugs with files of the previous layout (``None``: not listed yet).
        self._legacy: set[str] | None = None
        self._listing = anyio.Lock()  # one listing, however many certificates ask at once

    def lock(
        self, name: str, *, lease: float = 120.0, timeout: float | None = None
    ) -> AbstractAsyncContextManager[Lease]:
        """The cross-process lock that makes issuance of ``name`` single-flight."""
        lock = self.storage.lock(self.layout.certificate_lock(name), lease=lease, timeout=timeout)
        return self._remembering(certificate_slug(name), lock)

    @asynccontextmanager
    async def _remembering(
        self, slug: str, lock: AbstractAsyncContextManager[Lease]
    ) -> AsyncIterator[Lease]:
        """Hold ``lock`` and remember what is read and written under it (see :class:`_Held`)."""
        async with lock as held:
            self._held[slug] = _Held(held)
            try:
                yield held
            finally:
                self._held.pop(slug, None)

    @asynccontextmanager
    async def reading(self, keys: Sequence[str]) -> AsyncIterator[None]:
        """Read ``keys`` in one batch for the reads this task makes in the block.

        Each value is handed to the first read of its key in the block (as fresh as that
        read would have been: read just before), later reads read again. Keep the block
        to reads that would have come right after each other. A key that could not be
        read raises its error at that read, where it did before (:func:`load_each`); if
        the batch as a whole fails, every read is made on its own.
        """
        values: dict[str, StoredValue | StorageError | None] | None
        try:
            values = dict(zip(keys, await load_each(self.storage, keys), strict=True))
        except StorageError:
            values = None
        token = _BATCH.set(values)
        try:
            yield
        finally:
            _BATCH.reset(token)

    async def _load(self, key: str) -> StoredValue | None:
        """``storage.load(key)``, or the value a :meth:`reading` block read for it."""
        batch = _BATCH.get()
        if batch is not None and key in batch:
            value = batch.pop(key)
            if isinstance(value, StorageError):
                raise value
            return value
        return await self.storage.load(key)

    def _holding(self, name: str) -> _Held | None:
        held = self._held.get(certificate_slug(name))
        return held if held is not None and held.valid else None

    # -- certificates -------------------------------------------------------------------

    async def _has_legacy(self, name: str) -> bool:
        """Whether ``name`` may have files of the previous layout.

        Listed once (the first time it matters), then kept up to date by this store's
        own saves: only earlier versions write those files, and they do not share a
        store with this one.
        """
        if self._legacy is None:
            async with self._listing:
                if self._legacy is None:
                    prefix = self.layout.certificates_prefix()
                    found: set[str] = set()
                    for key in await self.storage.list(prefix):
                        slug, _, file = key[len(prefix) :].partition("/")
                        if file in ("cert.pem", "privkey.pem", "meta.json"):
                            found.add(slug)
                    self._legacy = found
        return certificate_slug(name) in self._legacy

    async def load_certificate(self, name: str) -> IssuedCertificate | None:
        """The stored certificate for ``name``; ``None`` if none was completely saved.

        One read of the record; the previous layout is read only where it was found.
        Raises :class:`StorageError` when the stored files do not belong together.
        """
        keys = self.layout.certificate(name)
        record = await self._load(keys.record)
        if record is not None:
            return self._from_record(name, keys, record)
        if not await self._has_legacy(name):
            return None
        return await self._load_legacy(name, keys)

    def _from_record(
        self, name: str, keys: CertificateKeys, record: StoredValue
    ) -> IssuedCertificate:
        bundle = CertificateBundle.from_bytes(record.data, keys.record)
        try:
            identifiers = parse_identifiers(list(bundle.identifiers))
            chain = parse_pem_chain(bundle.fullchain_pem.encode("ascii"), url=keys.record)
            private_key = load_private_key(bundle.private_key_pem.encode("ascii"))
            check_certificate_matches(chain, key=private_key, identifiers=identifiers)
            return IssuedCertificate(
                identifiers=identifiers,
                chain=chain,
                private_key_pem=bundle.private_key_pem,
                info=certificate_info(chain.leaf),
                order_url=bundle.order_url,
                certificate_url=bundle.certificate_url,
            )
        except (TypeError, UnicodeError, AcmeCertsError) as exc:
            if isinstance(exc, StorageError):
                raise
            raise StorageError(
                f"stored certificate {name!r} is unusable: {exc}", path=keys.record
            ) from exc

    async def _load_legacy(self, name: str, keys: CertificateKeys) -> IssuedCertificate | None:
        """A certificate in the previous layout (``meta.json`` present: completely saved)."""
        legacy = await LegacyCertificate.load(self.storage, keys)
        if legacy is None:
            return None
        meta = legacy.meta
        try:
            identifiers = parse_identifiers(meta["identifiers"])
            chain = parse_pem_chain(legacy.fullchain_pem, url=keys.cert)
            private_key = load_private_key(legacy.private_key_pem)
            check_certificate_matches(chain, key=private_key, identifiers=identifiers)
            return IssuedCertificate(
                identifiers=identifiers,
                chain=chain,
                private_key_pem=legacy.private_key_pem.decode("ascii"),
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
        """Store the certificate's record: key, chain and metadata in one atomic write.

        The record replaces the previous one whole (a reader sees the old certificate or
        the new one, never a chain with another's key), so nothing is deleted first.
        Files of the previous layout go after it is stored (and durable: ``store``
        returns then), ``meta.json`` first; a crash in between leaves the record, which
        loads, and the files, which the next save removes.
        """
        if issued.private_key_pem is None:
            raise InvalidInput(
                f"certificate {name} was issued for the caller's own CSR: without its "
                "private key it cannot be stored (nor renewed) by the manager"
            )
        keys = self.layout.certificate(name)
        bundle = CertificateBundle(
            name=name,
            identifiers=tuple(i.value for i in issued.identifiers),
            fullchain_pem=issued.fullchain_pem,
            private_key_pem=issued.private_key_pem,
            order_url=issued.order_url,
            certificate_url=issued.certificate_url,
            serial=issued.serial,
            not_after=issued.not_after.isoformat(),
        )
        await self.storage.store(keys.record, bundle.to_bytes(), secret=True)
        if await self._has_legacy(name):
            for key in keys.legacy:
                await self.storage.delete(key)
            assert self._legacy is not None
            self._legacy.discard(certificate_slug(name))

    # -- attempt state --------------------------------------------------------------------

    async def load_attempt_state(self, name: str) -> AttemptState | None:
        """The stored attempt-schedule state for ``name``."""
        key = self.layout.attempt_state(name)
        value = await self._load(key)
        held = self._holding(name)
        if held is not None:
            held.attempts_absent = value is None
        if value is None:
            return None
        return AttemptState.from_json(decode_json(value.data, key))

    async def save_attempt_state(self, name: str, state: AttemptState) -> None:
        """Persist ``state`` (the fresh state deletes the record)."""
        key = self.layout.attempt_state(name)
        held = self._holding(name)
        if state == AttemptState():
            if held is not None and held.attempts_absent:
                # read as absent under this lock (see _Held): the delete would find nothing
                return
            await self.storage.delete(key)
            if held is not None:
                held.attempts_absent = True
        else:
            await self.storage.store(key, encode_json(state.to_json()))
            if held is not None:
                held.attempts_absent = False

    # -- orders in flight ---------------------------------------------------------------

    async def load_order(self, name: str, *, finished: str | None = None) -> OrderRecord | None:
        """The order in flight for ``name``, if a previous attempt left one.

        ``finished``: the order URL the stored certificate names. A record of that order
        is finished (its certificate was saved; the record stays until the next order's
        intent overwrites it) and reads as none.
        """
        held = self._holding(name)
        if held is not None and held.order_known:
            # read or written by this process under the lock it still holds (see _Held)
            record = held.order
        else:
            record = await self._read_order(name)
            if held is not None:
                held.know_order(record)
        if record is not None and finished and record.order_url == finished:
            return None
        return record

    async def drop_finished_order(self, name: str, finished: str) -> None:
        """Delete ``name``'s order record if it is the finished order ``finished``.

        For a certificate record replaced by one of another order (an adoption): the
        rule of :meth:`load_order` would no longer find the record finished.
        """
        record = await self.load_order(name)
        if record is not None and finished and record.order_url == finished:
            await self.delete_order(name)

    async def _read_order(self, name: str) -> OrderRecord | None:
        key = self.layout.order(name)
        value = await self._load(key)
        if value is None:
            return None
        data = decode_json(value.data, key)
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
        held = self._holding(name)
        if held is not None:
            held.order_known = False  # unknown if the store fails half-way
        await self.storage.store(self.layout.order(name), encode_json(value), secret=True)
        if held is not None:
            held.know_order(record)

    async def delete_order(self, name: str) -> None:
        """Forget the order in flight for ``name``."""
        held = self._holding(name)
        if held is not None:
            if held.order_known and held.order is None:
                return  # absent under this lock (see _Held): the delete would find nothing
            held.order_known = False  # unknown if the store fails half-way
        await self.storage.delete(self.layout.order(name))
        if held is not None:
            held.know_order(None)

    # -- retired certificates ---------------------------------------------------------

    def retired_key(self, identifiers: Iterable[Identifier]) -> str:
        """The key of the retired record for exactly ``identifiers``."""
        return self.layout.retired(f"{i.type}:{i.value}" for i in identifiers)

    async def list_retired(self) -> list[str]:
        """The keys of every retired record."""
        return await self.storage.list(self.layout.retired_prefix())

    async def load_retired(self, key: str) -> RetiredRecord | None:
        """The retired record at ``key``; :class:`StorageError` if it is not one of ours."""
        value = await self._load(key)
        return None if value is None else self._parse_retired(key, value)

    def _parse_retired(self, key: str, value: StoredValue) -> RetiredRecord:
        data = decode_json(value.data, key)
        try:
            identifiers = parse_identifiers(data["identifiers"])
            raw = data["entries"]
            if not isinstance(raw, list):
                raise TypeError("entries must be a list")
            entries = tuple(RetiredEntry.from_json(item) for item in raw)
        except (KeyError, TypeError, ValueError, InvalidInput) as exc:
            raise StorageError(f"{key} is not a valid retired record: {exc}", path=key) from exc
        if self.retired_key(identifiers) != key:
            raise StorageError(f"{key} holds the record of other identifiers", path=key)
        return RetiredRecord(key, identifiers, entries, value.version, value)

    async def update_retired(
        self,
        key: str,
        change: Callable[[RetiredRecord], tuple[RetiredEntry, ...] | None],
        *,
        create: tuple[Identifier, ...] | None = None,
        fresh: RetiredRecord | None = None,
    ) -> RetiredRecord | None:
        """Apply ``change`` to the record at ``key`` by compare-and-swap (:func:`update`).

        ``change`` gets the current record and returns its new entries (none: the record
        is deleted), or ``None`` to leave it as it is. An absent record is left absent,
        unless ``create`` gives its identifiers: ``change`` then gets an empty record.
        Returns the record as it is now (``None``: absent). ``fresh``: the record as just
        read, tried first instead of reading it again (a stale one only costs a conflict
        and a read).

        Raises :class:`~acmecerts.storage.UpdateConflict` when the record kept changing,
        :class:`StorageError` when it is not one of ours or the store failed.
        """
        made: RetiredRecord | None = None

        def edit(value: StoredValue | None) -> Outcome:
            nonlocal made
            made = record = None if value is None else self._parse_retired(key, value)
            if record is None:
                if create is None:
                    return None
                record = RetiredRecord(key, create, ())
            entries = change(record)
            if entries is None:
                return None
            if not entries:
                return DELETE
            made = RetiredRecord(key, record.identifiers, entries)
            return encode_json(
                {
                    "format": _FORMAT,
                    "identifiers": [i.value for i in record.identifiers],
                    "entries": [entry.to_json() for entry in entries],
                }
            )

        hint: StoredValue | Literal[UpdateMarker.UNREAD] = UNREAD
        if fresh is not None and fresh.value is not None:
            hint = fresh.value
        elif fresh is None and (batch := _BATCH.get()) is not None and key in batch:
            read = batch.pop(key)  # just read (see reading)
            if isinstance(read, StorageError):
                raise read
            if read is None and create is None:
                return None  # absent, and left absent: nothing to write
            hint = UNREAD if read is None else read
        stored = await update(self.storage, key, edit, current=hint)
        if stored is None or made is None:
            return None
        if made.value is not stored:  # written now: its version is the new one
            made = dataclasses.replace(made, version=stored.version, value=stored)
        return made

    async def stored_files(self, name: str) -> StoredFiles:
        """The versions of what is stored for ``name``, and what its metadata says.

        Both layouts are read (a crash while converting leaves both). A record or a
        ``meta.json`` that cannot be read as one is still counted (its version), so it is
        deleted with the rest; its identifiers then come from the order record.
        """
        keys = self.layout.certificate(name)
        record = await self.storage.load(keys.record)
        meta = await self.storage.load(keys.meta)
        attempts = await self.storage.load(self.layout.attempt_state(name))
        order = await self.storage.load(self.layout.order(name))
        identifiers: tuple[Identifier, ...] | None = None
        serial: str | None = None
        not_after: _dt.datetime | None = None
        for value, key in (
            (record, keys.record),
            (meta, keys.meta),
            (order, self.layout.order(name)),
        ):
            if value is None or identifiers is not None:
                continue
            try:
                if value is record:
                    bundle = CertificateBundle.from_bytes(value.data, key)
                    parsed = parse_identifiers(list(bundle.identifiers))
                    serial, not_after = bundle.serial, parse_instant(bundle.not_after, "not_after")
                else:
                    data = decode_json(value.data, key)
                    parsed = parse_identifiers(data["identifiers"])
                    if value is meta:
                        serial = str(data["serial"])
                        not_after = parse_instant(data["not_after"], "not_after")
            except (KeyError, TypeError, ValueError, AcmeCertsError):
                serial = not_after = None
                continue
            identifiers = parsed
        return StoredFiles(
            record_version=None if record is None else record.version,
            meta_version=None if meta is None else meta.version,
            attempts_version=None if attempts is None else attempts.version,
            order_version=None if order is None else order.version,
            identifiers=identifiers,
            serial=serial,
            not_after=not_after,
        )

    async def delete_retired_files(self, name: str, entry: RetiredEntry) -> list[str]:
        """Delete the files ``entry`` recorded for ``name``; the keys kept are returned.

        The certificate record goes first, then the previous layout's ``meta.json`` (a
        certificate without it does not load), its chain and key, then the attempt state
        and the order record. A file is only deleted while it is at the version recorded
        at retirement (absent then: only leftovers of a save that never completed); what
        changed since belongs to whoever manages the name now and is kept. Safe to
        repeat after a crash.
        """
        keys = self.layout.certificate(name)
        held = self._holding(name)
        if held is not None:
            self._held[certificate_slug(name)] = _Held(held.lease)  # written behind its back
        kept: list[str] = []
        if not await self._delete_if_unchanged(keys.record, entry.record_version):
            kept.append(keys.record)
        if await self._delete_if_unchanged(keys.meta, entry.meta_version):
            await self.storage.delete(keys.cert)
            await self.storage.delete(keys.privkey)
        else:
            kept.append(keys.meta)
        for key, version in (
            (self.layout.attempt_state(name), entry.attempts_version),
            (self.layout.order(name), entry.order_version),
        ):
            if not await self._delete_if_unchanged(key, version):
                kept.append(key)
        return kept

    async def _delete_if_unchanged(self, key: str, version: str | None) -> bool:
        """Delete ``key`` if it is at ``version``; whether ``key`` is gone now."""
        if version is not None:
            try:
                await self.storage.delete(key, expect_version=version)
                return True
            except VersionConflict:
                pass  # gone already (a purge that was interrupted), or written since
        return await self.storage.load(key) is None
