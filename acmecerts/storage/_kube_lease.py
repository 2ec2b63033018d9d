"""KubernetesStorage's lease compare-and-swap: one ``coordination.k8s.io/v1`` Lease per lock.

The Lease's ``spec`` is the record: ``holderIdentity`` (absent when released),
``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` and ``leaseTransitions``; it
runs out at ``renewTime + leaseDurationSeconds``. The version is its
``metadata.resourceVersion``: a swap creates the Lease (none expected) or updates it
from that version, and the API server answers 409 Conflict when it changed. Leases are
never deleted. The lease logic is in :mod:`acmecerts.storage._lease`.
"""

from __future__ import annotations

import datetime as _dt
import math
import secrets

from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.resources.coordination_v1 import Lease as LeaseObject

from acmecerts._time import Backoff, aware_utc
from acmecerts.storage._kube_client import LOCK_ANNOTATION, KubeApi, object_name, version_of
from acmecerts.storage._lease import LeaseRecord, ObservedLease

__all__ = ["KubeLeases"]


def _micro_time(when: _dt.datetime | None) -> _dt.datetime | None:
    # The API server parses MicroTime with exactly six fractional digits, and the encoder
    # leaves them out when they are all zero.
    if when is None or when.microsecond:
        return when
    return when.replace(microsecond=1)


def _record(obj: LeaseObject) -> ObservedLease:
    spec = obj.spec or LeaseSpec()
    duration = spec.leaseDurationSeconds or 0
    renewed = spec.renewTime or spec.acquireTime
    expires_at = None
    if renewed is not None:
        expires_at = aware_utc(renewed, assume_utc=True) + _dt.timedelta(seconds=duration)
    acquired = spec.acquireTime
    record = LeaseRecord(
        holder=spec.holderIdentity or None,
        expires_at=expires_at,
        acquired_at=None if acquired is None else aware_utc(acquired, assume_utc=True),
        duration=float(duration),
        transitions=spec.leaseTransitions or 0,
    )
    return ObservedLease(record, version_of(obj))


def _spec(record: LeaseRecord) -> LeaseSpec:
    duration = math.ceil(record.duration or 0)
    renewed = None
    if record.expires_at is not None:
        renewed = record.expires_at - _dt.timedelta(seconds=duration)
    return LeaseSpec(
        holderIdentity=record.holder,
        leaseDurationSeconds=duration,
        acquireTime=_micro_time(record.acquired_at),
        renewTime=_micro_time(renewed),
        leaseTransitions=record.transitions,
    )


class KubeLeases:
    """The :class:`~acmecerts.storage._lease.LeaseBackend` of one KubernetesStorage."""

    #: Waiters poll a held Lease from 50 ms up to 500 ms, jittered.
    backoff = Backoff(initial=0.05, floor=0.025, cap=0.5, multiplier=1.5, jitter=0.5)

    def __init__(self, api: KubeApi, identity: str) -> None:
        """Leases in ``api``'s namespace, held as ``<identity>/<random>``."""
        self._api = api
        self._identity = identity

    def lease_name(self, name: str) -> str:
        """The Lease object behind lock ``name``."""
        return object_name(self._api.name_prefix, name, infix="lock")

    def lease_seconds(self, requested: float) -> float:
        """Whole seconds (``leaseDurationSeconds``), rounded up, at least one."""
        return float(max(1, math.ceil(requested)))

    def new_holder(self) -> str:
        """Unique per acquisition, so two tasks never mistake each other's lease."""
        return f"{self._identity}/{secrets.token_hex(4)}"

    def where(self, name: str) -> str | None:
        """Leases have no path."""
        return None

    def abandoned(self, record: LeaseRecord) -> bool:
        """Never known: a holder in another pod may be alive."""
        return False

    async def peek(self, name: str) -> ObservedLease | None:
        """The Lease as it is (it usually exists: Leases are never deleted)."""
        return await self.read(name)

    async def read(self, name: str) -> ObservedLease | None:
        """GET the Lease; ``None`` if there is none yet."""
        obj = await self._api.get(LeaseObject, self.lease_name(name))
        return None if obj is None else _record(obj)

    async def swap(
        self, name: str, expect: str | None, record: LeaseRecord
    ) -> tuple[bool, ObservedLease | None]:
        """Create the Lease (``expect`` None) or update it from ``expect``; on 409, GET it."""
        meta = self._api.meta(self.lease_name(name), "lock", {LOCK_ANNOTATION: name}, expect)
        written = await self._api.swap(
            LeaseObject(metadata=meta, spec=_spec(record)), create=expect is None
        )
        if written is not None:
            return True, _record(written)
        return False, await self.read(name)
