"""The manager's store, one certificate at a time: read, save, retire, take back.

:class:`StoredEntries` reads a certificate's stored certificate and attempt state into
its :class:`~acmecerts.manager._entry.Entry`, saves the attempt state, names its finished
order, and keeps certificates no longer managed for the retention
(:class:`~acmecerts.manager._retention.RetiredCertificates`). Without a store every
method does nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable

import anyio

from acmecerts._issued import IssuedCertificate
from acmecerts._time import Clock
from acmecerts.errors import AcmeCertsError
from acmecerts.manager._core import FleetCore, Read
from acmecerts.manager._entry import Entry
from acmecerts.manager._events import CertificateEvent, CertificateLoaded
from acmecerts.manager._persist import CertificateStore
from acmecerts.manager._retention import RetiredCertificates
from acmecerts.protocol.identifiers import Identifier

log = logging.getLogger("acmecerts.manager")

#: Recording a retirement may take this long (seconds), even while being cancelled.
_RETIRE_TIMEOUT = 30.0


@dataclasses.dataclass(eq=False)
class StoredEntries:
    """What the manager keeps in its store (``store``), for the entries it manages.

    Args:
        store: The certificate store, ``None`` for a manager without one.
        core: The fleet core: the certificates, changed by its transitions only.
        clock: Where "now" comes from.
        plan_renewal: Sets an entry's renewal instant (after a certificate is read).
        publish: Sends a :class:`CertificateEvent` to the manager's subscribers.
        retention: Seconds a certificate no longer managed is kept (``None``: forever).
        solvers: The fingerprint of the manager's solvers now (see the attribute).
    """

    store: CertificateStore | None
    core: FleetCore
    clock: Clock
    plan_renewal: Callable[[Entry], Awaitable[None]]
    publish: Callable[[CertificateEvent], Awaitable[None]]
    retention: dataclasses.InitVar[float | None]
    #: The fingerprint of the manager's solvers now (:func:`solver_fingerprint`): a
    #: stored failure under other solvers is reset when read (:func:`for_solvers`).
    solvers: Callable[[], str] | None = None
    #: Certificates no longer managed, kept for ``retention`` (see ``_retention.py``).
    retired: RetiredCertificates | None = dataclasses.field(init=False, default=None)
    #: The names whose retirement is being recorded now, each set when it is recorded.
    _retiring: dict[str, anyio.Event] = dataclasses.field(init=False, default_factory=dict)

    def __post_init__(self, retention: float | None) -> None:
        if self.store is not None:
            self.retired = RetiredCertificates(
                self.store,
                retention=retention,
                clock=self.clock,
                managed=self.core.is_managed,
                wanted=self.core.waits_for,
            )

    async def load(self, entry: Entry, *, again: bool = False) -> None:
        """Read the stored certificate and attempt state of ``entry`` (once, or ``again``)."""
        store = self.store
        if store is None or (entry.loaded and not again):
            return
        name = entry.spec.name
        reclaim = not entry.loaded and self.retired is not None
        if reclaim:
            # a retirement of the previous entry still being recorded is cancelled after
            # it, not before (else it is recorded again for a name in use)
            await self._after_retirements(name)
        async with store.reading(self._keys(entry, retired=reclaim)):
            await self._read(entry, store, reclaim=reclaim)

    def _keys(self, entry: Entry, *, retired: bool, order: bool = False) -> list[str]:
        """What :meth:`load` (and, under the lock, adoption and the order) will read."""
        assert self.store is not None
        spec, layout = entry.spec, self.store.layout
        keys = [layout.certificate(spec.name).record]
        if not entry.state_changed:
            keys.append(layout.attempt_state(spec.name))
        if retired:
            keys.append(self.store.retired_key(spec.identifiers))
        if order:
            keys.append(layout.order(spec.name))
        return keys

    async def _read(self, entry: Entry, store: CertificateStore, *, reclaim: bool) -> None:
        name = entry.spec.name
        if reclaim:
            assert self.retired is not None
            await self.retired.reclaim(name, entry.spec.identifier_set)  # managed again
        stored = await store.load_certificate(name)
        loaded: IssuedCertificate | None = None
        # taken as current, or written by another replica since it was read (the core
        # records which), its renewal is planned
        if self.core.loaded(entry, stored) in (Read.TAKEN, Read.WRITTEN_ELSEWHERE):
            await self.plan_renewal(entry)
            loaded = stored
        if entry.state_changed:  # the spec changed here: the state in memory is newer
            self.core.state_loaded(entry, None, None, read=False)
        else:
            state = await store.load_attempt_state(name)
            self.core.state_loaded(entry, state, self.solvers() if self.solvers else None)
        if loaded is not None and self.clock.now() < loaded.not_after:
            await self.publish(
                CertificateLoaded(
                    name, self.clock.now(), certificate=loaded, renew_at=entry.renew_at
                )
            )

    async def load_locked(self, entry: Entry) -> None:
        """Under ``entry``'s store lock: read it again, adopt, learn its order record.

        Another process may have issued it meanwhile, or failed with it. One batch of
        reads: the certificate, the attempt state, the retired record (adoption) and
        the order record (kept in the lock's memory for the order, see ``_persist.py``).
        """
        store = self.store
        if store is None:
            return
        name = entry.spec.name
        reclaim = not entry.loaded and self.retired is not None
        if reclaim:
            await self._after_retirements(name)  # (see load)
        retired = self.retired is not None
        async with store.reading(self._keys(entry, retired=retired, order=True)):
            await self._read(entry, store, reclaim=reclaim)
            await self.adopt(entry)
            await store.load_order(name)

    @staticmethod
    def finished_order(entry: Entry) -> str | None:
        """The order URL of ``entry``'s certificate: its order record is finished.

        The record is kept when the certificate is saved (see ``_persist.py``); resumed
        by the next renewal, that order (``valid``) would hand back the saved
        certificate instead of a new one, so it reads as none.
        """
        return None if entry.certificate is None else entry.certificate.order_url

    async def save_state(self, entry: Entry) -> None:
        """Store ``entry``'s attempt state (with a store) and tell the core it is saved."""
        if self.store is not None:
            await self.store.save_attempt_state(entry.spec.name, entry.state)
        self.core.state_saved(entry)

    async def retire(self, name: str, identifiers: tuple[Identifier, ...] | None) -> None:
        """``name`` is no longer managed: keep its stored certificate for the retention.

        ``identifiers``: its last spec's (used when nothing stored says which).
        """
        if self.retired is None:
            return
        # recorded even when the caller is being cancelled: else the files stay forever
        with anyio.CancelScope(shield=True), anyio.move_on_after(_RETIRE_TIMEOUT):
            await self._after_retirements(name)
            if self.core.is_managed(name):
                return  # managed again meanwhile (a new entry): its files are in use
            done = self._retiring[name] = anyio.Event()
            try:
                await self.retired.retire(name, identifiers)
            except AcmeCertsError as exc:
                log.warning("%s: cannot record its retirement (its files stay): %s", name, exc)
            finally:
                del self._retiring[name]
                done.set()

    async def _after_retirements(self, name: str) -> None:
        """Wait until no retirement of ``name`` is being recorded."""
        while (pending := self._retiring.get(name)) is not None:
            await pending.wait()

    async def adopt(self, entry: Entry) -> None:
        """Take over a retired certificate with exactly ``entry``'s identifiers, if any.

        Called under ``entry``'s store lock before ordering: a certificate deleted and
        applied again (under this name or another) gets the stored one back.
        """
        if self.retired is None or (entry.certificate is not None and not entry.stale):
            return
        spec = entry.spec
        try:
            if entry.certificate is not None and self.store is not None:
                # the record of its order is finished only while that certificate is
                # stored: gone before the adopted one replaces it
                await self.store.drop_finished_order(spec.name, entry.certificate.order_url)
            certificate = await self.retired.adopt(spec.name, spec.identifier_set, spec.key_type)
        except AcmeCertsError as exc:
            log.warning("%s: cannot take over a retired certificate: %s", spec.name, exc)
            return
        if certificate is None:
            return
        self.core.adopted(entry, certificate)
        await self.plan_renewal(entry)
        await self.publish(
            CertificateLoaded(
                spec.name, self.clock.now(), certificate=certificate, renew_at=entry.renew_at
            )
        )
