"""The storage contract, run against every kind of store in ``STORE_KINDS``."""

from __future__ import annotations

from tests.storage.contract import StorageContract


class TestStorageContract(StorageContract):
    """Each test runs once per store kind (the ``store_factory`` fixture's params)."""
