"""Read-modify-write of one key by compare-and-swap, retried on conflict: :func:`update`.

Every change acmecerts makes to a value that several processes or replicas may change at
once (the rate-limit ledger, the records of retired certificates, the account's URL)
goes through :func:`update`; a third-party caller of a :class:`~acmecerts.storage.Storage`
can use it the same way::

    def add_one(current: StoredValue | None) -> bytes:
        count = 0 if current is None else int(current.data)
        return b"%d" % (count + 1)

    await update(storage, "counters/x", add_one)

``change`` gets the value as stored (``None``: absent) and says what to store: new bytes,
:data:`DELETE`, or ``None`` to leave it as it is. It MUST NOT have effects outside its
return value that a second call could not undo: a conflict (another writer got there
first) calls it again on the value as it is then. After :data:`UPDATE_TRIES` conflicts
in a row (or ``tries``), :class:`UpdateConflict` is raised: with a working store, every
conflict means another writer's change went in, so that many in a row is a key far more
contended than acmecerts ever makes one, or a store whose versions never match.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Final, Literal

import anyio

from acmecerts.errors import InvalidInput
from acmecerts.storage._base import Storage, StoredValue, VersionConflict

__all__ = [
    "DELETE",
    "UNREAD",
    "UPDATE_TRIES",
    "Outcome",
    "UpdateConflict",
    "UpdateMarker",
    "update",
]

#: The default bound of :func:`update`: conflicting writes before it gives up. Every
#: acmecerts update uses it, except the rate-limit ledger (see its ``_LEDGER_TRIES``).
UPDATE_TRIES: Final = 8


class UpdateMarker(enum.Enum):
    """The two markers of :func:`update`: :data:`DELETE` and :data:`UNREAD`."""

    DELETE = "DELETE"
    UNREAD = "UNREAD"

    def __repr__(self) -> str:
        return self.value


#: Returned by an :func:`update` ``change``: delete the key (if it exists).
DELETE: Final[Literal[UpdateMarker.DELETE]] = UpdateMarker.DELETE
#: :func:`update`'s ``current`` when the caller has not read the key: read it first.
UNREAD: Final[Literal[UpdateMarker.UNREAD]] = UpdateMarker.UNREAD

#: What an :func:`update` ``change`` returns: new bytes, :data:`DELETE`, or ``None``.
Outcome = bytes | Literal[UpdateMarker.DELETE] | None


class UpdateConflict(VersionConflict):
    """:func:`update` gave up: each of its ``tries`` writes met a conflict.

    A :class:`~acmecerts.storage.VersionConflict` (so a
    :class:`~acmecerts.errors.StorageError`); nothing was written by this update.
    """

    def __init__(self, key: str, tries: int) -> None:
        super().__init__(
            f"{key!r} kept changing while it was updated: gave up after {tries} tries",
            path=key,
        )
        #: The key that was being updated.
        self.key = key
        #: How many writes met a conflict.
        self.tries = tries


def _version(value: StoredValue | None) -> str | None:
    return None if value is None else value.version


async def update(
    storage: Storage,
    key: str,
    change: Callable[[StoredValue | None], Outcome],
    *,
    tries: int = UPDATE_TRIES,
    secret: bool = False,
    current: StoredValue | Literal[UpdateMarker.UNREAD] | None = UNREAD,
    shield: bool = False,
    on_conflict: Callable[[int], Awaitable[object]] | None = None,
) -> StoredValue | None:
    """Change the value at ``key`` by compare-and-swap; return the value as it is now.

    Reads ``key``, calls ``change`` with what it read (``None``: absent) and writes what
    ``change`` returns only if the key is still at the version read
    (``expect_version``); on :class:`~acmecerts.storage.VersionConflict` it reads again
    and calls ``change`` again. ``change`` returns the new bytes, :data:`DELETE`, or
    ``None`` to leave the value as it is (then nothing is written).

    Returns what is stored once the update is done: the value written (with its new
    version), ``None`` if the key is now absent, or the value ``change`` left alone.
    That value was current at some instant during the call: a ``current`` that
    ``change`` leaves alone is read again to make sure it still is.

    Args:
        storage: Any :class:`~acmecerts.storage.Storage`.
        key: The key to change.
        change: What to store, given what is stored (see above). It may be called
            several times and MUST NOT await.
        tries: How many writes may meet a conflict before :class:`UpdateConflict` is
            raised (at least 1; :data:`UPDATE_TRIES` by default).
        secret: Passed to :meth:`Storage.store <acmecerts.storage.Storage.store>`.
        current: The value as the caller last read it, tried first instead of reading
            it again (a stale one costs a conflict and a read); :data:`UNREAD`: read it.
        shield: Shield each write from cancellation, so that a cancelled caller never
            leaves a write whose outcome it does not know.
        on_conflict: Awaited after the n-th conflict with n, before reading again (a
            jittered pause, for a key many writers contend for).

    Raises:
        UpdateConflict: ``tries`` writes in a row met a conflict.
        StorageError: the store failed, or ``change`` raised it (a value it cannot read).
        InvalidInput: ``tries`` is not an integer >= 1 (before any I/O).
    """
    if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
        raise InvalidInput(f"tries must be an integer >= 1, got {tries!r}")
    value: StoredValue | None
    if current is UNREAD:
        value, read = await storage.load(key), True
    else:
        value, read = current, False
    conflicts = 0
    while True:
        outcome = change(value)
        if outcome is None or (outcome is DELETE and value is None):
            if read:
                return value
            now = await storage.load(key)  # ``current`` was the caller's: still so?
            if _version(now) == _version(value):
                return value
            value, read = now, True
            continue
        try:
            with anyio.CancelScope(shield=shield):
                if outcome is DELETE:
                    assert value is not None
                    await storage.delete(key, expect_version=value.version)
                    return None
                if not isinstance(outcome, bytes):
                    raise InvalidInput(
                        f"an update must return bytes, DELETE or None, got {outcome!r}"
                    )
                version = await storage.store(
                    key, outcome, secret=secret, expect_version=_version(value)
                )
                return StoredValue(outcome, version)
        except VersionConflict as exc:
            conflicts += 1
            if conflicts >= tries:
                raise UpdateConflict(key, tries) from exc
        if on_conflict is not None:
            await on_conflict(conflicts)
        value, read = await storage.load(key), True
