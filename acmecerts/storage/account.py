"""One account key for every replica sharing a store, and the account's URL.

The first replica that needs the account key creates it under
:meth:`KeyLayout.account_lock`; the others wait for the lock, then load the key the
first one stored. So replicas that start together create exactly one key, and therefore
register exactly one account (a CA answers ``newAccount`` for an existing key with the
existing account, RFC 8555 §7.3.1).

A stored key that cannot be loaded is an error naming its key; it is never replaced,
because a new key would be a new account.
"""

from __future__ import annotations

import json

import anyio.to_thread

from acmecerts.errors import InvalidInput, StorageError
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.storage._base import Storage, StoredValue, VersionConflict
from acmecerts.storage._update import update
from acmecerts.storage.keys import KeyLayout

__all__ = [
    "load_account_url",
    "load_or_create_account_key",
    "load_stored_key",
    "save_account_url",
    "storage_label",
]


def storage_label(storage: Storage, key: str) -> str:
    """What a message calls ``key``: its file for a store that has files
    (:meth:`FileStorage.path_for <acmecerts.storage.FileStorage.path_for>`), else the key."""
    path_for = getattr(storage, "path_for", None)
    return str(path_for(key)) if callable(path_for) else key


async def load_stored_key(storage: Storage, key: str) -> tuple[AccountKey, str] | None:
    """The account key stored at ``key`` and its store version (``None``: nothing is).

    Raises:
        StorageError: what is stored is no usable private key (it is left as it is).
    """
    value = await storage.load(key)
    if value is None:
        return None
    try:
        return AccountKey.from_pem(value.data), value.version
    except InvalidInput as exc:
        path = storage_label(storage, key)
        raise StorageError(
            f"corrupt account key {path} ({exc}); restore it from a backup, or move it "
            "away to start a new account",
            path=path,
        ) from exc


async def _load_key(storage: Storage, key: str) -> AccountKey | None:
    value = await storage.load(key)
    if value is None:
        return None
    try:
        return AccountKey.from_pem(value.data)
    except InvalidInput as exc:
        raise StorageError(
            f"the account key {key!r} in {storage!r} cannot be loaded ({exc}); it was left "
            "as it is: restore it from a backup (a new key would be a new account)",
            path=key,
        ) from exc


async def load_or_create_account_key(
    storage: Storage,
    layout: KeyLayout,
    *,
    key_type: KeyType | str = KeyType.EC256,
    lock_timeout: float | None = 120.0,
) -> AccountKey:
    """Load the account key of ``layout``, creating and storing it if there is none.

    Creation happens under the account lock and re-checks the store first, so of several
    processes calling this at once exactly one creates the key and all return it. An
    existing key is returned whatever its type (``key_type`` only applies to a new key).

    Raises:
        StorageError: the stored key is corrupt or not a usable private key (it is left
            untouched), or the store failed.
        LockTimeout: another process held the account lock for ``lock_timeout`` seconds.
    """
    kind = KeyType.parse(key_type)
    key = layout.account_key()
    existing = await _load_key(storage, key)
    if existing is not None:
        return existing
    async with storage.lock(layout.account_lock(), timeout=lock_timeout):
        existing = await _load_key(storage, key)
        if existing is not None:
            return existing
        # RSA keys take long enough to generate to block the event loop noticeably.
        created = await anyio.to_thread.run_sync(AccountKey.generate, kind)
        try:
            await storage.store(key, created.to_pem(), secret=True, expect_version=None)
        except VersionConflict:
            # Someone stored a key without holding the lock: theirs wins, ours is dropped.
            existing = await _load_key(storage, key)
            if existing is None:
                raise
            return existing
        return created


def _parse_meta(data: bytes, key: str, storage: Storage) -> dict[str, object]:
    try:
        meta = json.loads(data)
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or not isinstance(meta.get("url"), str):
        raise StorageError(
            f"the account metadata {key!r} in {storage!r} is not valid (expected a JSON "
            'object with a "url"); it was left as it is',
            path=key,
        )
    return meta


async def load_account_url(
    storage: Storage, layout: KeyLayout, *, account_key: AccountKey | None = None
) -> str | None:
    """The stored account URL, or ``None`` if none is stored.

    With ``account_key``, a URL saved for a different key (its thumbprint is stored
    alongside) is ignored: ``None``, so the caller registers again with its key.
    """
    key = layout.account_meta()
    value = await storage.load(key)
    if value is None:
        return None
    meta = _parse_meta(value.data, key, storage)
    thumbprint = meta.get("thumbprint")
    if account_key is not None and thumbprint not in (None, account_key.thumbprint):
        return None
    url = meta["url"]
    assert isinstance(url, str)
    return url


async def save_account_url(
    storage: Storage, layout: KeyLayout, url: str, *, account_key: AccountKey | None = None
) -> None:
    """Store the account URL (and ``account_key``'s thumbprint) with compare-and-swap.

    Concurrent savers are safe: each re-reads and retries on a version conflict
    (:func:`~acmecerts.storage.update`), and an unchanged record is not rewritten.
    """
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise InvalidInput(f"an account URL must be an http(s) URL, got {url!r}")
    key = layout.account_meta()
    record: dict[str, object] = {"url": url, "directory": layout.directory_url}
    if account_key is not None:
        record["thumbprint"] = account_key.thumbprint
    data = json.dumps(record, sort_keys=True, indent=2).encode() + b"\n"

    def save(current: StoredValue | None) -> bytes | None:
        if current is not None and _parse_meta(current.data, key, storage) == record:
            return None  # unchanged: not rewritten
        return data

    await update(storage, key, save)
