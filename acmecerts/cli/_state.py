"""The CLI's state directory: a :class:`~acmecerts.storage.FileStorage` shared with the library.

The state directory (``--state-dir``, ``$ACMECERTS_STATE_DIR``, else ``/var/lib/acmecerts``
for root, else ``$XDG_DATA_HOME/acmecerts``, else ``~/.local/share/acmecerts``) is the root of a
``FileStorage`` laid out by :class:`~acmecerts.storage.KeyLayout`, so a program using
``CertificateManager(client, storage=FileStorage(state_dir), ...)`` sees exactly what the
CLI issued, and the other way round::

    <state>/<ca>/ledger.json                                rate-limit ledger (per CA)
    <state>/<ca>/cli-settings.json                          the CA's directory URL and
                                                            --ca-bundle (for `renew`)
    <state>/<ca>/accounts/default/key.pem                   account key
    <state>/<ca>/accounts/default/account.json              account URL, key thumbprint
    <state>/<ca>/accounts/default/certificates/<cert>/      certificate.json (chain, key,
                                                            metadata; earlier versions:
                                                            cert.pem, privkey.pem, meta.json)
    <state>/<ca>/accounts/default/attempts/<cert>.json      deferral / last failure
    <state>/<ca>/accounts/default/orders/<cert>.json        order in flight (resumed)
    <state>/<ca>/accounts/default/cli/<cert>.json           the CLI's own record: export
                                                            directory, key type, profile,
                                                            preferred chain, revoked serial,
                                                            webroot, challenge settings,
                                                            hooks, deletion in progress
    <state>/<ca>/accounts/default/key-rollover.pem          only during `account rollover`
    <state>/<ca>/accounts/default/deactivated/<when>.pem    keys of deactivated accounts
    <state>/certificates/<first name>/                      default --out: plain PEM files

Files in the store carry FileStorage's integrity header (they are acmecerts' state, not
files for a web server); ``--out`` receives plain ``cert.pem``, ``chain.pem``,
``fullchain.pem`` and ``privkey.pem`` (0600) for servers.

The first cut of the CLI kept ``<state>/accounts/<host>_<port>_<path>/account.key`` and
``account.json``; such an account is imported into the store the first time it is needed
(the old files are left where they are, and never written again).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from acmecerts.errors import InvalidInput, StorageError
from acmecerts.manager import (
    CertificateRecord,
    StoredCertificate,
    certificate_record_key,
    known_certificates,
    list_certificate_records,
    list_stored_certificates,
    load_certificate_record,
    load_stored_certificate,
    save_ca_settings,
    save_certificate_record,
)
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.protocol.keys import AccountKey, KeyType, key_type_of
from acmecerts.storage import (
    FileStorage,
    KeyLayout,
    VersionConflict,
    load_account_url,
    load_or_create_account_key,
    load_stored_key,
    save_account_url,
)
from acmecerts.storage.export import CERTIFICATE_FILES, ensure_private_dir, write_certificate_files

__all__ = [
    "CERTIFICATE_FILES",
    "SYSTEM_STATE_DIR",
    "State",
    "certificate_name",
    "default_state_dir",
    "directory_slug",
    "ensure_private_dir",
    "write_certificate_files",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")


#: The state directory of the superuser (euid 0): the system's, as for a service.
SYSTEM_STATE_DIR = Path("/var/lib/acmecerts")


def default_state_dir(environ: Mapping[str, str] | None = None, *, euid: int | None = None) -> Path:
    """The state directory when neither ``--state-dir`` nor ``$ACMECERTS_STATE_DIR`` names one.

    Run as root (effective uid 0, ``euid`` defaults to :func:`os.geteuid`):
    ``/var/lib/acmecerts``, as a system service keeps its state (``$XDG_DATA_HOME`` is
    ignored, like certbot's ``/etc/letsencrypt``). Otherwise ``$XDG_DATA_HOME/acmecerts``
    if that is set and absolute, else ``~/.local/share/acmecerts``.
    """
    if (os.geteuid() if euid is None else euid) == 0:
        return SYSTEM_STATE_DIR
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_DATA_HOME", "")
    # XDG Base Directory spec: a relative value is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "acmecerts"
    return Path.home() / ".local" / "share" / "acmecerts"


def certificate_name(first_identifier: str) -> str:
    """The certificate name for a certificate whose first identifier is this one.

    The store's certificate names allow ``[a-z0-9._-*]``; an IPv6 address's ``:`` is
    spelled ``_`` (``2001:db8::1`` is stored as ``2001_db8__1``).
    """
    return first_identifier.lower().replace(":", "_")


def directory_slug(directory_url: str | DirectoryUrl) -> str:
    """The first cut's directory name for a CA: ``host[_port]_path_segments``.

    Raises:
        InvalidInput: ``directory_url`` is no directory URL (see :class:`DirectoryUrl`).
    """
    parts = DirectoryUrl(directory_url).parts
    assert parts.hostname is not None  # DirectoryUrl holds one
    pieces = [parts.hostname.lower()]
    if parts.port is not None:
        pieces.append(str(parts.port))
    pieces.extend(segment for segment in parts.path.split("/") if segment)
    if parts.query:
        pieces.append(parts.query)
    return "_".join(_UNSAFE.sub("-", piece) for piece in pieces)


def _key_type_of(pem: bytes) -> KeyType | None:
    try:
        return key_type_of(pem)
    except InvalidInput:
        return None


class State:
    """The state directory for one CA (see the module docstring for the layout)."""

    def __init__(self, root: Path, directory_url: str | DirectoryUrl) -> None:
        self.root = root.expanduser().absolute()
        self.directory_url = directory_url = DirectoryUrl(directory_url)
        self.layout = KeyLayout(directory_url)
        self.storage = FileStorage(self.root)

    def path_for(self, key: str) -> str:
        """The file that holds ``key``."""
        return self.storage.path_for(key)

    def default_out(self, name: str) -> Path:
        """``<state>/certificates/<name>``: where the PEM files go without ``--out``."""
        return self.root / "certificates" / _UNSAFE.sub("_", name.replace("*", "_"))

    async def aclose(self) -> None:
        await self.storage.aclose()

    async def save_ca_settings(self, ca_bundle: Path | None) -> None:
        """Remember the directory URL and ``ca_bundle`` so ``renew`` needs no flags."""
        await save_ca_settings(self.storage, self.layout, ca_bundle)

    # -- the account --------------------------------------------------------------------

    async def load_account_key(self) -> AccountKey | None:
        """The stored account key (imported from the first cut's layout if only that has one)."""
        loaded = await self.load_account_key_version()
        return None if loaded is None else loaded[0]

    async def load_account_key_version(self) -> tuple[AccountKey, str] | None:
        """The stored account key and its store version."""
        loaded = await load_stored_key(self.storage, self.layout.account_key())
        if loaded is None and await self._import_legacy():
            loaded = await load_stored_key(self.storage, self.layout.account_key())
        return loaded

    async def create_account_key(self, key_type: KeyType = KeyType.EC256) -> AccountKey:
        """Load the account key, creating (and storing) it when there is none."""
        key = await self.load_account_key()
        if key is not None:
            return key
        return await load_or_create_account_key(self.storage, self.layout, key_type=key_type)

    async def load_account_url(self, key: AccountKey | None) -> str | None:
        """The account URL stored for ``key`` (``None``: unknown, or stored for another key).

        Without ``key``: the stored URL whatever its key (the file is checked all the same).
        """
        try:
            return await load_account_url(self.storage, self.layout, account_key=key)
        except StorageError as exc:
            path = self.path_for(self.layout.account_meta())
            raise StorageError(f"{exc} ({path})", path=path) from exc

    async def save_account_url(self, url: str, key: AccountKey) -> None:
        """Record the account URL so the next run skips the ``newAccount`` round-trip."""
        await save_account_url(self.storage, self.layout, url, account_key=key)

    # -- the first cut's layout ---------------------------------------------------------

    def legacy_account_dir(self) -> Path | None:
        """``<state>/accounts/<slug>`` of the first cut, if this CA's account is there."""
        try:
            directory = self.root / "accounts" / directory_slug(self.directory_url)
        except InvalidInput:
            return None
        return directory if (directory / "account.key").is_file() else None

    async def _import_legacy(self) -> bool:
        directory = self.legacy_account_dir()
        if directory is None:
            return False
        key_path = directory / "account.key"
        try:
            key = AccountKey.from_pem(key_path.read_bytes())
        except OSError as exc:
            raise StorageError(
                f"cannot read account key {key_path}: {exc.strerror or exc}", path=str(key_path)
            ) from exc
        except InvalidInput as exc:
            raise StorageError(
                f"corrupt account key {key_path} ({exc}); restore it, or move it away to "
                "start a new account",
                path=str(key_path),
            ) from exc
        url: str | None = None
        json_path = directory / "account.json"
        with contextlib.suppress(OSError, ValueError):
            document = json.loads(json_path.read_text(encoding="utf-8"))
            if (
                isinstance(document, dict)
                and document.get("directory") == self.directory_url
                and isinstance(document.get("url"), str)
                and document["url"].startswith("https://")
            ):
                url = document["url"]
        try:
            await self.storage.store(
                self.layout.account_key(), key.to_pem(), secret=True, expect_version=None
            )
        except VersionConflict:
            return True  # another process imported it (or created a key) first
        if url is not None:
            await self.save_account_url(url, key)
        return True

    # -- certificates -------------------------------------------------------------------

    async def list_certificates(self) -> list[StoredCertificate]:
        """Every completely stored certificate of the account, by name."""
        return await list_stored_certificates(self.storage, self.layout)

    async def load_certificate(self, name: str) -> StoredCertificate | None:
        """The stored certificate ``name``; ``None`` if none was completely saved."""
        return await load_stored_certificate(self.storage, self.layout, name)

    def record_key(self, name: str) -> str:
        """The storage key of the CLI's record of certificate ``name``."""
        return certificate_record_key(self.layout, name)

    async def load_record(self, name: str) -> CertificateRecord | None:
        return await load_certificate_record(self.storage, self.layout, name)

    async def list_records(self) -> list[CertificateRecord]:
        """Every certificate the CLI was asked for (issued or not)."""
        return await list_certificate_records(self.storage, self.layout)

    async def known_certificates(
        self,
    ) -> list[tuple[str, StoredCertificate | None, CertificateRecord | None]]:
        """:func:`~acmecerts.manager.known_certificates`: ``acmecerts delete`` finishes
        an interrupted deletion."""
        return await known_certificates(self.storage, self.layout)

    async def save_record(self, record: CertificateRecord) -> None:
        await save_certificate_record(self.storage, self.layout, record)
