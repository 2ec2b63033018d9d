"""Where acmecerts keeps its state: the :class:`Storage` contract and its stores.

* :class:`Storage`: the plug-in contract (load/store/delete/list with compare-and-swap,
  and leased locks); see :mod:`acmecerts.storage._base`.
* :func:`load_many`, :func:`load_each`: several keys read at once (one hop for
  acmecerts' stores, one ``load`` each for any other).
* :func:`update`: a read-modify-write of one key by compare-and-swap, retried on
  conflict up to :data:`UPDATE_TRIES` times, then :class:`UpdateConflict`.
* :class:`LeaseLocks` over a :class:`LeaseBackend`: the one lease lock of every store,
  for a third-party :class:`Storage` too (it provides the backend's compare-and-swap of
  a :class:`LeaseRecord`); :class:`Backoff` is how its waiters poll.
* :class:`FileStorage`: the default store, a local directory shared safely by several
  processes on one machine.
* :class:`KeyLayout`: the one place that names keys and locks (per CA and account).
* :func:`load_or_create_account_key`: one account key for every replica sharing a store;
  :func:`load_stored_key` reads one with its version.
* :mod:`acmecerts.storage.export`: a certificate's PEM files for servers, replaced as one set.
* :class:`LegacyCertificate`: a certificate as earlier versions stored it (three files).
"""

from __future__ import annotations

from acmecerts._time import Backoff
from acmecerts.storage._base import (
    ANY_VERSION,
    Lease,
    LockTimeout,
    Storage,
    StoredValue,
    VersionConflict,
    load_each,
    load_many,
)
from acmecerts.storage._lease import (
    HeldLease,
    LeaseBackend,
    LeaseLocks,
    LeaseRecord,
    LockBlock,
    ObservedLease,
)
from acmecerts.storage._update import (
    DELETE,
    UNREAD,
    UPDATE_TRIES,
    Outcome,
    UpdateConflict,
    UpdateMarker,
    update,
)
from acmecerts.storage.account import (
    load_account_url,
    load_or_create_account_key,
    load_stored_key,
    save_account_url,
    storage_label,
)
from acmecerts.storage.filesystem import FileStorage
from acmecerts.storage.keys import CertificateKeys, KeyLayout, LegacyCertificate

__all__ = [
    "ANY_VERSION",
    "DELETE",
    "UNREAD",
    "UPDATE_TRIES",
    "Backoff",
    "CertificateKeys",
    "FileStorage",
    "HeldLease",
    "KeyLayout",
    "Lease",
    "LeaseBackend",
    "LeaseLocks",
    "LeaseRecord",
    "LegacyCertificate",
    "LockBlock",
    "LockTimeout",
    "ObservedLease",
    "Outcome",
    "Storage",
    "StoredValue",
    "UpdateConflict",
    "UpdateMarker",
    "VersionConflict",
    "load_account_url",
    "load_each",
    "load_many",
    "load_or_create_account_key",
    "load_stored_key",
    "save_account_url",
    "storage_label",
    "update",
]
