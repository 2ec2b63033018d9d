"""The records the manager keeps in its store beside the certificates, as JSON.

:class:`OrderRecord`: an order in flight (its URL and the key its CSR uses).
:class:`RetiredRecord` / :class:`RetiredEntry` / :class:`RetiredState`: the certificate
names no longer managed, per exact identifier set (see :mod:`acmecerts.manager._retention`).
:class:`StoredFiles`: what is stored for a name, and at which versions.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
from typing import Any

from acmecerts._time import aware_utc
from acmecerts.protocol.identifiers import Identifier
from acmecerts.storage import StoredValue
from acmecerts.storage.keys import certificate_slug

__all__ = ["OrderRecord", "RetiredEntry", "RetiredRecord", "RetiredState", "StoredFiles"]


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class OrderRecord:
    """An order in flight: enough to resume it after a restart.

    ``order_url`` is ``None`` while ``newOrder`` is under way: the CA may have created
    an order whose URL was never recorded.
    """

    order_url: str | None
    identifiers: tuple[Identifier, ...]
    private_key_pem: str
    created_at: _dt.datetime

    def __repr__(self) -> str:
        return f"OrderRecord({self.order_url!r}, {[i.value for i in self.identifiers]!r})"


class RetiredState(enum.StrEnum):
    """Where a retired certificate is on its way out of the store."""

    #: No longer managed; kept until the retention ends, for a name that asks again.
    RETIRED = "retired"
    #: Taken over by another name (which holds a copy): its files go at once.
    ADOPTED = "adopted"
    #: Its files are being deleted (a purge that did not finish is finished later).
    PURGING = "purging"


@dataclasses.dataclass(frozen=True, slots=True)
class RetiredEntry:
    """One certificate name that is no longer managed, and what of it is stored.

    The versions are those of the name's certificate record (``record_version``), its
    previous layout's ``meta.json``, attempt state and order record when it was retired
    (``None``: absent then). A purge deletes a file only while it is
    still at that version, so whatever was written for the name since is kept.
    """

    name: str
    retired_at: _dt.datetime
    state: RetiredState = RetiredState.RETIRED
    serial: str | None = None
    not_after: _dt.datetime | None = None
    meta_version: str | None = None
    attempts_version: str | None = None
    order_version: str | None = None
    #: The name that took the certificate over (:attr:`RetiredState.ADOPTED`).
    adopted_by: str | None = None
    #: The version of ``certificate.json`` (entries written before it existed: ``None``).
    record_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "name": self.name,
            "retired_at": self.retired_at.isoformat(),
            "state": self.state.value,
            "serial": self.serial,
            "not_after": None if self.not_after is None else self.not_after.isoformat(),
            "meta_version": self.meta_version,
            "attempts_version": self.attempts_version,
            "order_version": self.order_version,
            "adopted_by": self.adopted_by,
            "record_version": self.record_version,
        }

    @classmethod
    def from_json(cls, value: object) -> RetiredEntry:
        """Parse the stored form (``TypeError``/``ValueError``/``InvalidInput`` if bad)."""
        if not isinstance(value, dict):
            raise TypeError("an entry must be a JSON object")
        name = value["name"]
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, got {name!r}")
        certificate_slug(name)  # a name that could not have been stored is not ours
        return cls(
            name=name,
            retired_at=parse_instant(value["retired_at"], "retired_at"),
            state=RetiredState(value["state"]),
            serial=_optional_str(value.get("serial"), "serial"),
            not_after=(
                None
                if value.get("not_after") is None
                else parse_instant(value["not_after"], "not_after")
            ),
            meta_version=_optional_str(value.get("meta_version"), "meta_version"),
            attempts_version=_optional_str(value.get("attempts_version"), "attempts_version"),
            order_version=_optional_str(value.get("order_version"), "order_version"),
            adopted_by=_optional_str(value.get("adopted_by"), "adopted_by"),
            record_version=_optional_str(value.get("record_version"), "record_version"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class RetiredRecord:
    """The retired certificates of one exact identifier set, as stored at ``key``."""

    key: str
    identifiers: tuple[Identifier, ...]
    entries: tuple[RetiredEntry, ...]
    #: The stored version (``None``: not stored).
    version: str | None = None
    #: The value as read or written (what an update tries first), if stored.
    value: StoredValue | None = dataclasses.field(default=None, compare=False, repr=False)

    def entry(self, name: str) -> RetiredEntry | None:
        """The entry of certificate ``name`` (names that share a storage slug are one)."""
        slug = certificate_slug(name)
        for entry in self.entries:
            if certificate_slug(entry.name) == slug:
                return entry
        return None

    def without(self, name: str) -> tuple[RetiredEntry, ...]:
        """The entries other than ``name``'s."""
        slug = certificate_slug(name)
        return tuple(e for e in self.entries if certificate_slug(e.name) != slug)


@dataclasses.dataclass(frozen=True, slots=True)
class StoredFiles:
    """What is stored for a certificate name: versions and what its metadata says."""

    record_version: str | None = None
    meta_version: str | None = None
    attempts_version: str | None = None
    order_version: str | None = None
    #: From the certificate record or ``meta.json`` (else from the order record);
    #: ``None`` when none says.
    identifiers: tuple[Identifier, ...] | None = None
    serial: str | None = None
    not_after: _dt.datetime | None = None

    @property
    def empty(self) -> bool:
        """Whether nothing at all is stored for the name."""
        versions = (self.record_version, self.meta_version)
        return (*versions, self.attempts_version, self.order_version) == (None,) * 4


def parse_instant(value: object, what: str) -> _dt.datetime:
    return aware_utc(_dt.datetime.fromisoformat(str(value)), what)


def _optional_str(value: object, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what} must be a string or null, got {value!r}")
    return value
