"""Retired certificates: kept for a while after their owner is gone, then forgotten.

When the manager stops managing a certificate (``unmanage()``, or its owner is gone) the
certificate, its key and its state stay in the store for the *retention* (7 days by
default), recorded as *retired*. Within that time a name that asks for exactly the same
identifiers gets the stored certificate back without a new order: the same name managed
again (a namespace deleted and applied again) simply keeps it, another name (a Helm
release installed again under a new name) *adopts* it, that is gets a copy under its
own name. After the retention the files are deleted.

Why keep them: Let's Encrypt allows 5 new certificates per exact set of identifiers per
7 days. A resource deleted and applied again that orders anew each time runs into that
limit after five rounds (cert-manager users meet it exactly this way). Kept for 7 days,
a re-applied resource never spends that budget twice within its window.

In the store (:class:`~acmecerts.storage.KeyLayout`), one record per exact identifier
set, ``retired/<hash of the set>.json``, lists its retired names (several names may
have held the same identifiers), each with the instant it was retired, its state
(:class:`RetiredState`), the certificate's serial and expiry, and the version of each of
its files at that moment. Finding a retired certificate by identifiers is one read.

Replicas sharing one store, and restarts:

* Every change of a record is a compare-and-swap, so replicas never overwrite each
  other's retirements; a retirement one replica records is found by every other.
* A purge holds the certificate name's store lock (the lock issuance holds), marks the
  entry ``purging`` before deleting anything, deletes the certificate's record first
  (then, for a store of the previous layout, ``meta.json``: a certificate without it does
  not load), and deletes a file only while it is at the version recorded
  at retirement: whatever was written for the name since (it was managed again, here or
  elsewhere) is kept. An interrupted purge is finished by the next one; repeating a
  purge is harmless.
* A name managed again cancels its retirement when its stored state is first read
  (:meth:`RetiredCertificates.reclaim`). A purge also spares a name this manager manages,
  and postpones a retired certificate whose identifiers a certificate of this manager
  still waits for (it is about to adopt it).
* Adoption copies the certificate to the new name under that name's lock and then marks
  the entry ``adopted``; the old name's files are purged at once. A crash in between
  leaves at worst two copies of one valid certificate, never none.
* The records are read from ``storage.list`` when the manager starts, so a restarted
  manager purges at the instants recorded. Afterwards they are listed again when the
  manager wakes and the last listing is a day old (records of a replica that went
  away); only records new to this manager are read then, so a fleet at rest costs one
  ``list`` a day, not one read per retired certificate. A record that cannot be read is
  a :class:`~acmecerts.errors.StorageError`: logged and skipped, never deleted, and
  never a reason to delete anything else.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from collections.abc import Callable

import anyio
import anyio.abc

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Clock, duration_seconds
from acmecerts.errors import AcmeCertsError, StorageError
from acmecerts.manager._persist import CertificateStore
from acmecerts.manager._records import RetiredEntry, RetiredRecord, RetiredState
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import KeyType, key_type_of
from acmecerts.storage.keys import certificate_slug

__all__ = ["DEFAULT_RETENTION", "RetiredCertificates", "retention_seconds"]

log = logging.getLogger("acmecerts.manager")

#: How long a certificate that is no longer managed stays in the store: Let's Encrypt's
#: window for its 5 certificates per exact identifier set.
DEFAULT_RETENTION = _dt.timedelta(days=7)

#: While the manager wakes anyway, the records are listed again once the last listing
#: is older than the retention, but never more often than every 10 minutes, nor less
#: often than daily: a record of a replica that went away is purged at most a day late,
#: and a fleet at rest lists once a day.
_RESCAN_MIN = 600.0
_RESCAN_MAX = 24 * 3600.0
#: A purge that failed (store unreachable, lock held) is retried after this, doubling.
_RETRY_MIN = 60.0
_RETRY_MAX = 3600.0
#: A purge waits this long for the certificate's lock (held while it is ordered).
_LOCK_TIMEOUT = 10.0
#: A retired certificate this manager is about to adopt is looked at again after this.
_POSTPONE = 600.0

_Change = Callable[[RetiredRecord], "tuple[RetiredEntry, ...] | None"]


def retention_seconds(value: float | _dt.timedelta | None) -> float | None:
    """Validate a retention (seconds or a ``timedelta``; ``None``: keep forever)."""
    if value is None:
        return None
    return duration_seconds(value, "retention")


def _key_type(certificate: IssuedCertificate) -> KeyType | None:
    """The key type of ``certificate``'s private key (``None``: none acmecerts makes)."""
    pem = certificate.private_key_pem
    return key_type_of(pem) if pem is not None else None


@dataclasses.dataclass(eq=False)
class _Retry:
    failures: int = 0
    not_before: _dt.datetime | None = None


class RetiredCertificates:
    """The retired certificates of one manager's store: retire, reclaim, adopt, purge.

    Args:
        store: The manager's store.
        retention: Seconds a retired certificate is kept (``0``: forget it at once;
            ``None``: keep it forever, still adoptable).
        clock: The manager's clock; replicas sharing a store must share the time.
        managed: Whether this manager manages a name now (its files are in use).
        wanted: Whether a certificate of this manager with exactly these identifiers
            has no certificate yet (it is about to adopt a retired one).

    The scheduler calls :meth:`tick` on every round; it runs :meth:`purge_due` in the
    background when :meth:`next_purge_at` has come.
    """

    def __init__(
        self,
        store: CertificateStore,
        *,
        retention: float | None,
        clock: Clock,
        managed: Callable[[str], bool],
        wanted: Callable[[frozenset[Identifier]], bool],
    ) -> None:
        self.store = store
        self.retention = retention
        self.clock = clock
        self._managed = managed
        self._wanted = wanted
        #: The known records by key (from the last listing and this manager's changes).
        self._records: dict[str, RetiredRecord] = {}
        #: Per (record key, recorded name): failures and postponements of its purge.
        self._retries: dict[tuple[str, str], _Retry] = {}
        #: Records that could not be read (each logged once).
        self._unreadable: set[str] = set()
        self._scanned_at: _dt.datetime | None = None
        #: When the records are to be listed again after a failure (or at once: never yet).
        self._scan_at: _dt.datetime | None = clock.now()
        self._scan_failures = 0
        self._paused_until: _dt.datetime | None = None
        self._pauses = 0
        self._running = False
        span = _RESCAN_MAX if retention is None else retention
        self._rescan = _dt.timedelta(seconds=min(_RESCAN_MAX, max(_RESCAN_MIN, span)))

    # -- when -------------------------------------------------------------------------

    def due_at(self, entry: RetiredEntry) -> _dt.datetime | None:
        """When ``entry``'s files are to be deleted (``None``: never)."""
        if entry.state is not RetiredState.RETIRED:
            return entry.retired_at  # adopted, or a purge to finish: at once
        if self.retention is None:
            return None
        return entry.retired_at + _dt.timedelta(seconds=self.retention)

    def _when(self, key: str, entry: RetiredEntry) -> _dt.datetime | None:
        due = self.due_at(entry)
        retry = self._retries.get((key, entry.name))
        if due is not None and retry is not None and retry.not_before is not None:
            due = max(due, retry.not_before)
        return due

    def next_purge_at(self) -> _dt.datetime | None:
        """The next instant something is to be purged (or the records listed); ``None``: none.

        Records of other replicas are learnt from the listing at start and the later
        ones (:meth:`tick`), not by a timer of their own.
        """
        instants = [
            when
            for key, record in self._records.items()
            for entry in record.entries
            if (when := self._when(key, entry)) is not None
        ]
        if self._scan_at is not None:
            instants.append(self._scan_at)
        if not instants:
            return None
        earliest = min(instants)
        if self._paused_until is not None:
            earliest = max(earliest, self._paused_until)
        return earliest

    def tick(
        self,
        task_group: anyio.abc.TaskGroup,
        now: _dt.datetime,
        wake: Callable[[], None],
    ) -> _dt.datetime | None:
        """One scheduler round: start the due purges in the background, say when next.

        Returns the next instant to call again (``None``: only when woken). While a
        purge runs it returns ``None``; ``wake()`` is called when it ends.
        """
        if self._running:
            return None
        at = self.next_purge_at()
        paused = self._paused_until is not None and now < self._paused_until
        if (at is not None and at <= now) or (self._scan_due(now) and not paused):
            self._running = True
            task_group.start_soon(self._run, wake)
            return None
        return at

    def _scan_due(self, now: _dt.datetime) -> bool:
        """Whether the records are to be listed: never yet, after a failure, or stale."""
        if self._scan_at is not None:
            return self._scan_at <= now  # the first listing, or again after a failure
        return self._scanned_at is not None and now >= self._scanned_at + self._rescan

    async def _run(self, wake: Callable[[], None]) -> None:
        try:
            await self.purge_due(self.clock.now())
            self._paused_until, self._pauses = None, 0
        except Exception:
            # a bug, not the store (purge_due handles StorageError): never a hot loop
            self._pauses += 1
            delay = min(_RETRY_MAX, _RETRY_MIN * 2 ** (self._pauses - 1))
            self._paused_until = self.clock.now() + _dt.timedelta(seconds=delay)
            log.exception("purging retired certificates failed; again at %s", self._paused_until)
        finally:
            self._running = False
            wake()

    # -- reading the records ----------------------------------------------------------

    async def scan(self) -> None:
        """List the records (``storage.list``); read those this manager does not know.

        A record already known is not read again: whatever this manager does with one
        (purge, adopt, reclaim) reads it afresh first and changes it by compare-and-swap,
        so a change another replica made is learnt then. A listing therefore costs one
        ``list`` plus one read per record that is new here (another replica's) or could
        not be read before; a record gone from the listing is forgotten. Unreadable ones
        are logged, skipped.
        """
        keys = await self.store.list_retired()
        records: dict[str, RetiredRecord] = {}
        for key in keys:
            known = self._records.get(key)
            if known is not None:
                records[key] = known
                continue
            try:
                record = await self.store.load_retired(key)
            except StorageError as exc:
                self._unreadable_record(key, exc)
                continue
            if record is not None:
                records[key] = record
                self._unreadable.discard(key)
        self._records = records
        self._retries = {k: r for k, r in self._retries.items() if k[0] in records}
        self._scanned_at = self.clock.now()
        self._scan_at = None
        self._scan_failures = 0

    def _unreadable_record(self, key: str, exc: StorageError) -> None:
        self._records.pop(key, None)
        if key not in self._unreadable:
            self._unreadable.add(key)
            log.warning("skipping a retired-certificate record that cannot be read: %s", exc)

    async def _load(self, key: str) -> RetiredRecord | None:
        record = await self.store.load_retired(key)
        self._remember(key, record)
        return record

    def _remember(self, key: str, record: RetiredRecord | None) -> None:
        if record is None or not record.entries:
            self._records.pop(key, None)
        else:
            self._records[key] = record
            self._unreadable.discard(key)

    async def _update(
        self,
        key: str,
        change: _Change,
        *,
        create: tuple[Identifier, ...] | None = None,
        fresh: RetiredRecord | None = None,
    ) -> RetiredRecord | None:
        """:meth:`CertificateStore.update_retired`, and remember the record as it is now."""
        record = await self.store.update_retired(key, change, create=create, fresh=fresh)
        self._remember(key, record)
        return record

    # -- retire / reclaim / adopt -----------------------------------------------------

    async def retire(
        self, name: str, identifiers: tuple[Identifier, ...] | None = None
    ) -> RetiredEntry | None:
        """Record that ``name`` is no longer managed; purge at once with no retention.

        ``identifiers`` (the name's last spec) are used when nothing stored says which
        identifiers it had. Nothing stored for ``name``: nothing to do (``None``). A
        record already retiring ``name`` keeps its first instant. A record that cannot be
        read raises :class:`StorageError` and is left as it is.
        """
        files = await self.store.stored_files(name)
        if files.empty:
            return None
        idents = files.identifiers or identifiers
        if not idents:
            log.warning("%s: cannot retire it: nothing says which identifiers it had", name)
            return None
        key = self.store.retired_key(idents)
        now = self.clock.now()
        entry = RetiredEntry(
            name=name,
            retired_at=now,
            serial=files.serial,
            not_after=files.not_after,
            record_version=files.record_version,
            meta_version=files.meta_version,
            attempts_version=files.attempts_version,
            order_version=files.order_version,
        )

        def add(current: RetiredRecord) -> tuple[RetiredEntry, ...] | None:
            nonlocal entry
            old = current.entry(name)
            if old is not None and old.state is RetiredState.RETIRED:
                entry = dataclasses.replace(entry, retired_at=old.retired_at)
                if old == entry:
                    return None
            return (*current.without(name), entry)

        await self._update(key, add, create=tuple(idents))
        self._forget_retries(key, name)
        due = self.due_at(entry)
        log.info("%s: retired (serial %s); its files are kept until %s", name, entry.serial, due)
        if due is not None and due <= now:
            await self.purge(key, name, now)
        return entry

    def _forget_retries(self, key: str, name: str) -> None:
        slug = certificate_slug(name)
        for item in [k for k in self._retries if k[0] == key]:
            if certificate_slug(item[1]) == slug:
                del self._retries[item]

    async def reclaim(self, name: str, identifiers: frozenset[Identifier]) -> None:
        """``name`` is managed again: cancel its retirement (its files are in use again).

        A purge already under way is left to finish (what it deletes is only what was
        there at retirement). Store errors are logged: a purge spares a name this manager
        manages anyway.
        """
        try:
            await self._drop(self.store.retired_key(identifiers), name)
        except StorageError as exc:
            log.warning("%s: cannot read or cancel its retirement: %s", name, exc)

    async def _drop(self, key: str, name: str) -> None:
        """Remove ``name``'s entry (not one being purged) from the record at ``key``."""
        dropped = False

        def drop(current: RetiredRecord) -> tuple[RetiredEntry, ...] | None:
            nonlocal dropped
            dropped = False
            entry = current.entry(name)
            if entry is None or entry.state is RetiredState.PURGING:
                return None
            dropped = True
            return current.without(name)

        await self._update(key, drop)
        if dropped:
            log.info("%s: managed again; its retirement is cancelled", name)
        self._forget_retries(key, name)

    async def adopt(
        self, name: str, identifiers: frozenset[Identifier], key_type: KeyType
    ) -> IssuedCertificate | None:
        """A retired certificate for exactly ``identifiers``, copied to ``name``; else ``None``.

        The caller holds ``name``'s store lock. The certificate must be unexpired, of
        ``key_type``, and the one the record names (serial). The latest to expire is
        taken. The retired name's files are then purged (its entry is due at once).
        """
        key = self.store.retired_key(identifiers)
        try:
            record = await self._load(key)
        except StorageError as exc:
            self._unreadable_record(key, exc)
            return None
        if record is None:
            return None
        now = self.clock.now()
        slug = certificate_slug(name)
        candidates = sorted(
            (
                e
                for e in record.entries
                if e.state is RetiredState.RETIRED
                and e.serial is not None
                and certificate_slug(e.name) != slug
                and (e.not_after is None or e.not_after > now)
            ),
            key=lambda e: e.not_after or now,
            reverse=True,
        )
        for entry in candidates:
            try:
                certificate = await self.store.load_certificate(entry.name)
            except StorageError as exc:
                log.warning(
                    "%s: the retired certificate of %s is unusable: %s", name, entry.name, exc
                )
                continue
            reason = None
            if certificate is None or certificate.serial != entry.serial:
                reason = "it is no longer stored"
            elif frozenset(certificate.identifiers) != identifiers:
                reason = "its identifiers differ"
            elif certificate.not_after <= now:
                reason = "it has expired"
            elif _key_type(certificate) is not key_type:
                reason = f"its key is not {key_type.value}"
            if reason is not None or certificate is None:
                log.info("%s: not taking over the certificate of %s: %s", name, entry.name, reason)
                continue
            await self.store.save_certificate(name, certificate)
            serial = certificate.serial

            def mark(
                current: RetiredRecord, old: str = entry.name, serial: str = serial
            ) -> tuple[RetiredEntry, ...] | None:
                found = current.entry(old)
                if (
                    found is None
                    or found.state is not RetiredState.RETIRED
                    or found.serial != serial
                ):
                    return None  # reclaimed or purged meanwhile: our copy stands alone
                adopted = dataclasses.replace(found, state=RetiredState.ADOPTED, adopted_by=name)
                return tuple(adopted if e is found else e for e in current.entries)

            self._forget_retries(key, entry.name)  # a postponement waited for this
            try:
                await self._update(key, mark)
            except StorageError as exc:
                # the copy is saved: the old name's files then wait for their retention
                log.warning(
                    "%s: cannot mark the certificate of %s adopted: %s", name, entry.name, exc
                )
            log.info(
                "%s: took over the retired certificate of %s (serial %s): no new order",
                name,
                entry.name,
                serial,
            )
            return certificate
        return None

    # -- purging ----------------------------------------------------------------------

    def _due(self, now: _dt.datetime) -> list[tuple[str, str]]:
        return sorted(
            (key, entry.name)
            for key, record in self._records.items()
            for entry in record.entries
            if (when := self._when(key, entry)) is not None and when <= now
        )

    async def purge_due(self, now: _dt.datetime) -> int:
        """Purge every retired certificate due at ``now``; how many were deleted.

        Lists the records first when that is due. A failure (store unreachable, lock
        held elsewhere, a record that cannot be read) is logged and tried again later,
        with a backoff per certificate.
        """
        if self._scan_due(now):
            try:
                await self.scan()
            except StorageError as exc:
                self._scan_failures += 1
                delay = min(_RETRY_MAX, _RETRY_MIN * 2 ** (self._scan_failures - 1))
                self._scan_at = now + _dt.timedelta(seconds=delay)
                log.warning(
                    "cannot list retired certificates (%s); again at %s", exc, self._scan_at
                )
        purged = 0
        for key, name in self._due(now):
            try:
                if await self.purge(key, name, now):
                    purged += 1
            except AcmeCertsError as exc:
                retry = self._retries.setdefault((key, name), _Retry())
                retry.failures += 1
                delay = min(_RETRY_MAX, _RETRY_MIN * 2 ** (retry.failures - 1))
                retry.not_before = now + _dt.timedelta(seconds=delay)
                log.warning(
                    "%s: cannot purge it now (%s); again at %s", name, exc, retry.not_before
                )
        return purged

    async def purge(self, key: str, name: str, now: _dt.datetime) -> bool:
        """Delete retired ``name``'s files if due at ``now``; whether they were deleted.

        Under ``name``'s store lock: a name managed here again only loses its record; a
        certificate a certificate of this manager waits for is postponed; otherwise the
        entry is marked ``purging``, the files deleted (see
        :meth:`CertificateStore.delete_retired_files`), then the entry removed.
        """
        async with self.store.lock(name, timeout=_LOCK_TIMEOUT):
            record = await self._load(key)
            found = record.entry(name) if record is not None else None
            if record is None or found is None:
                self._forget_retries(key, name)
                return False
            entry: RetiredEntry = found
            due = self.due_at(entry)
            if due is None or due > now:
                return False  # retired again meanwhile, or by a replica with other times
            if entry.state is not RetiredState.PURGING and self._managed(entry.name):
                await self._drop(key, entry.name)  # raises: tried again later
                return False
            if (
                entry.state is RetiredState.RETIRED
                and entry.serial is not None
                and self._wanted(frozenset(record.identifiers))
            ):
                retry = self._retries.setdefault((key, entry.name), _Retry())
                retry.not_before = now + _dt.timedelta(seconds=_POSTPONE)
                log.info("%s: a certificate here waits to take it over; not purged yet", name)
                return False

            def claim(current: RetiredRecord) -> tuple[RetiredEntry, ...] | None:
                latest = current.entry(name)
                if latest is None or latest.state is RetiredState.PURGING:
                    return None
                if latest.retired_at != entry.retired_at or latest.state is not entry.state:
                    return None  # changed by a replica meanwhile: looked at again next time
                purging = dataclasses.replace(latest, state=RetiredState.PURGING)
                return tuple(purging if e is latest else e for e in current.entries)

            claimed = await self._update(key, claim, fresh=record)
            mine = claimed.entry(name) if claimed is not None else None
            if mine is None or mine.state is not RetiredState.PURGING:
                return False
            kept = await self.store.delete_retired_files(mine.name, mine)

            def remove(current: RetiredRecord) -> tuple[RetiredEntry, ...] | None:
                latest = current.entry(name)
                if latest is None or latest.state is not RetiredState.PURGING:
                    return None
                return current.without(name)

            await self._update(key, remove, fresh=claimed)
        self._forget_retries(key, name)
        log.info(
            "%s: purged the retired certificate (serial %s, retired %s)%s",
            name,
            entry.serial,
            entry.retired_at.isoformat(),
            f"; kept what was written since: {', '.join(kept)}" if kept else "",
        )
        return True
