"""Where acmecerts keeps its state: the :class:`Storage` contract and its stores.

* :class:`Storage`: the plug-in contract (load/store/delete/list with compare-and-swap,
  and leased locks); see :mod:`acmecerts.storage._base`.
* :class:`FileStorage`: the default store, a local directory shared safely by several
  processes on one machine.
* :class:`KeyLayout`: the one place that names keys and locks (per CA and account).
* :func:`load_or_create_account_key`: one account key for every replica sharing a store.
* :class:`LegacyCertificate`: a certificate as earlier versions stored it (three files).
"""

from __future__ import annotations

from acmecerts.storage._base import (
    ANY_VERSION,
    Lease,
    LockTimeout,
    Storage,
    StoredValue,
    VersionConflict,
)
from acmecerts.storage.account import (
    load_account_url,
    load_or_create_account_key,
    save_account_url,
)
from acmecerts.storage.filesystem import FileStorage
from acmecerts.storage.keys import CertificateKeys, KeyLayout, LegacyCertificate

__all__ = [
    "ANY_VERSION",
    "CertificateKeys",
    "FileStorage",
    "KeyLayout",
    "Lease",
    "LegacyCertificate",
    "LockTimeout",
    "Storage",
    "StoredValue",
    "VersionConflict",
    "load_account_url",
    "load_or_create_account_key",
    "save_account_url",
]
