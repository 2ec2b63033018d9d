"""Where each CA of a store is, for a later run: :class:`CaSettings`.

A program that finds its CAs again from the store alone (the CLI's ``renew``, which runs
without flags) keeps each CA's directory URL and CA bundle beside its account:
:func:`save_ca_settings` writes them, :func:`load_ca_settings` reads them back;
:func:`find_ca_dirs` lists the CAs of a file store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path

from acmecerts.errors import StorageError
from acmecerts.storage import KeyLayout, Storage, storage_label

__all__ = [
    "CA_SETTINGS_FILE",
    "CaSettings",
    "find_ca_dirs",
    "load_ca_settings",
    "save_ca_settings",
]


#: ``<ca>/cli-settings.json``: how a later run (the CLI's ``renew``) reaches the CA again.
CA_SETTINGS_FILE = "cli-settings.json"
_SETTINGS_FORMAT = 1


@dataclasses.dataclass(frozen=True, slots=True)
class CaSettings:
    """What a later run needs to reach a CA again: its directory URL and CA bundle.

    Kept in ``<ca>/cli-settings.json`` of the store (the CLI writes it whenever it
    registered an account or ordered at the CA; ``renew`` reads it). No secrets: an EAB
    key is only needed to create the account, and is not kept.
    """

    #: The CA's ACME directory URL.
    directory: str
    #: The CA bundle used with it (an absolute path: the CLI's ``--ca-bundle``), if any.
    ca_bundle: str | None = None

    def to_bytes(self) -> bytes:
        """The stored form (indented JSON with a format number)."""
        document = {"format": _SETTINGS_FORMAT, **dataclasses.asdict(self)}
        return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> CaSettings:
        """Parse the stored form; :class:`StorageError` naming ``where`` if it is not one."""
        try:
            document = json.loads(data)
        except ValueError:
            document = None
        if (
            not isinstance(document, dict)
            or not isinstance(document.get("directory"), str)
            or not isinstance(document.get("ca_bundle"), str | None)
        ):
            raise StorageError(
                f'{where} is not valid CA settings (a JSON object with a "directory"); fix '
                "or remove it",
                path=where,
            )
        return cls(directory=document["directory"], ca_bundle=document.get("ca_bundle"))


async def load_ca_settings(storage: Storage, ca: str) -> CaSettings | None:
    """The settings stored for the CA ``ca`` (its segment of the store: ``KeyLayout.ca``).

    State written before the settings file existed has the directory URL in the
    account's ``account.json``; then the CA bundle is unknown (``None``). ``None`` when
    neither is there.
    """
    key = f"{ca}/{CA_SETTINGS_FILE}"
    value = await storage.load(key)
    if value is not None:
        return CaSettings.from_bytes(value.data, storage_label(storage, key))
    meta_key = f"{ca}/accounts/default/account.json"
    meta = await storage.load(meta_key)
    if meta is None:
        return None
    with contextlib.suppress(ValueError):
        document = json.loads(meta.data)
        if isinstance(document, dict) and isinstance(document.get("directory"), str):
            return CaSettings(directory=document["directory"])
    return None


def _absolute(path: str | Path) -> str:
    """``path`` with ``~`` expanded, made absolute (no I/O: the file is not looked at)."""
    return str(Path(path).expanduser().absolute())


async def save_ca_settings(
    storage: Storage, layout: KeyLayout, ca_bundle: str | Path | None
) -> None:
    """Remember the layout's directory URL and ``ca_bundle`` (made absolute) for later runs.

    A bundle stored before is kept when ``ca_bundle`` is ``None`` (a run that got by
    without one does not make the stored one wrong); nothing is written when nothing
    changed.
    """
    key = f"{layout.ca}/{CA_SETTINGS_FILE}"
    current = await storage.load(key)
    label = storage_label(storage, key)
    stored = None if current is None else CaSettings.from_bytes(current.data, label)
    directory = str(layout.directory_url)
    bundle = _absolute(ca_bundle) if ca_bundle is not None else None
    if bundle is None and stored is not None and stored.directory == directory:
        bundle = stored.ca_bundle
    settings = CaSettings(directory=directory, ca_bundle=bundle)
    if settings != stored:
        await storage.store(key, settings.to_bytes())


def find_ca_dirs(root: Path) -> list[str]:
    """The CA directories (segments) of a :class:`~acmecerts.storage.FileStorage` rooted at
    ``root``, sorted (what :func:`load_ca_settings` takes).

    A CA directory is one with an ``accounts`` directory or a ``cli-settings.json``;
    ``certificates`` (the default ``--out``) and ``accounts`` (the first cut's layout)
    are not. Raises :class:`OSError` when ``root`` cannot be read.
    """
    found: list[str] = []
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith(".") or entry.name in ("certificates", "accounts"):
                continue
            if not entry.is_dir(follow_symlinks=False):
                continue
            path = Path(entry.path)
            if (path / "accounts").is_dir() or (path / CA_SETTINGS_FILE).is_file():
                found.append(entry.name)
    return sorted(found)
