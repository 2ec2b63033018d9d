"""The CLI's state directory: one account per CA, and the certificate files it writes.

Layout (``$ACMECERTS_STATE_DIR``, else ``$XDG_DATA_HOME/acmecerts``, else
``~/.local/share/acmecerts``)::

    <state>/
        accounts/<host>_<port>_<path>/      one directory per CA directory URL (0700)
            account.key                     the account's private key, PEM (0600)
            account.json                    {"directory": URL, "url": account URL}
        certificates/<first name>/          default --out: cert.pem, chain.pem,
                                            fullchain.pem, privkey.pem (0600)

Every write is atomic: a temporary file in the same directory (created with its final
mode, so a key is never readable by others, not even for an instant), ``fsync``,
``os.replace`` (or ``os.link`` where an existing file must win), then ``fsync`` of the
directory. Stored files that cannot be used raise :class:`~acmecerts.errors.StorageError`
naming the file, and are never overwritten.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from acmecerts.errors import InvalidInput, StorageError
from acmecerts.protocol.keys import AccountKey

if TYPE_CHECKING:
    from acmecerts._issued import IssuedCertificate

__all__ = [
    "CERTIFICATE_FILES",
    "StateDir",
    "StoredAccount",
    "atomic_write",
    "default_state_dir",
    "directory_slug",
    "ensure_private_dir",
    "write_certificate_files",
]

_DIR_MODE = 0o700
_KEY_MODE = 0o600
_PUBLIC_MODE = 0o644
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")

#: The files ``--out`` receives, in the order they are put in place: the key first,
#: so a server reloading on a new ``cert.pem`` finds the matching key already there.
CERTIFICATE_FILES: tuple[tuple[str, str, int], ...] = (
    ("privkey", "privkey.pem", _KEY_MODE),
    ("cert", "cert.pem", _PUBLIC_MODE),
    ("chain", "chain.pem", _PUBLIC_MODE),
    ("fullchain", "fullchain.pem", _PUBLIC_MODE),
)


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/acmecerts`` if set (and absolute), else ``~/.local/share/acmecerts``."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_DATA_HOME", "")
    # XDG Base Directory spec: a relative value is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "acmecerts"
    return Path.home() / ".local" / "share" / "acmecerts"


def directory_slug(directory_url: str) -> str:
    """A file name for a CA directory URL: ``host[_port]_path_segments``.

    ``https://acme-v02.api.letsencrypt.org/directory`` gives
    ``acme-v02.api.letsencrypt.org_directory``; ``https://127.0.0.1:14000/dir`` gives
    ``127.0.0.1_14000_dir``. Characters other than letters, digits, ``.`` and ``-`` become
    ``-``. Distinct URLs that map to one slug are told apart by ``account.json``.
    """
    try:
        parts = urlsplit(directory_url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"invalid directory URL {directory_url!r}: {exc}") from None
    if parts.scheme != "https" or not parts.hostname:
        raise InvalidInput(f"the directory URL must be https://..., got {directory_url!r}")
    pieces = [parts.hostname.lower()]
    if port is not None:
        pieces.append(str(port))
    pieces.extend(segment for segment in parts.path.split("/") if segment)
    if parts.query:
        pieces.append(parts.query)
    return "_".join(_UNSAFE.sub("-", piece) for piece in pieces)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents with mode 0700 (existing ones are left alone)."""
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=_DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise StorageError(
                    f"{directory} exists and is not a directory", path=str(directory)
                ) from None
        except OSError as exc:
            raise StorageError(
                f"cannot create directory {directory}: {exc.strerror or exc}", path=str(directory)
            ) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise StorageError(f"directory {path} is not writable", path=str(path))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stage(path: Path, data: bytes, mode: int) -> Path:
    """Write ``data`` to a new temporary file next to ``path``, created with ``mode``."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(temp, flags, mode)
    try:
        # The umask may only have removed bits; make the mode exact (never wider).
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    os.close(fd)
    return temp


def atomic_write(path: Path, data: bytes, *, mode: int, overwrite: bool = True) -> bool:
    """Write ``data`` to ``path`` atomically with ``mode``; return whether it was written.

    With ``overwrite=False`` an existing ``path`` is kept (and ``False`` returned), so two
    processes creating the same file agree on one winner.
    """
    try:
        temp = _stage(path, data, mode)
        try:
            if overwrite:
                os.replace(temp, path)
            else:
                try:
                    os.link(temp, path)
                except FileExistsError:
                    return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        _fsync_dir(path.parent)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}", path=str(path)) from exc
    return True


def write_certificate_files(out: Path, issued: IssuedCertificate) -> dict[str, Path]:
    """Write ``cert.pem``, ``chain.pem``, ``fullchain.pem`` and ``privkey.pem`` (0600) to ``out``.

    All four are staged first and then renamed into place one after the other, so a crash
    leaves either complete old files or complete new ones (never a half-written file).
    """
    ensure_private_dir(out)
    contents = {
        "privkey": issued.private_key_pem,
        "cert": issued.certificate_pem,
        "chain": issued.chain_pem,
        "fullchain": issued.fullchain_pem,
    }
    staged: list[tuple[Path, Path]] = []
    files: dict[str, Path] = {}
    try:
        for kind, name, mode in CERTIFICATE_FILES:
            target = out / name
            staged.append((_stage(target, contents[kind].encode("ascii"), mode), target))
            files[kind] = target
        for temp, target in staged:
            os.replace(temp, target)
        _fsync_dir(out)
    except OSError as exc:
        where = getattr(exc, "filename", None) or out
        raise StorageError(f"cannot write {where}: {exc.strerror or exc}", path=str(out)) from exc
    finally:
        for temp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    return files


@dataclasses.dataclass(frozen=True, slots=True)
class StoredAccount:
    """An account found in the state directory."""

    key: AccountKey
    #: The account URL at the CA; ``None`` when ``account.json`` is missing.
    url: str | None


class StateDir:
    """The state directory (see the module docstring for the layout)."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser()

    def account_dir(self, directory_url: str) -> Path:
        """``<state>/accounts/<slug>``: where the account for ``directory_url`` lives."""
        return self.root / "accounts" / directory_slug(directory_url)

    def account_key_path(self, directory_url: str) -> Path:
        """The account key file for ``directory_url``."""
        return self.account_dir(directory_url) / "account.key"

    def account_json_path(self, directory_url: str) -> Path:
        """The account metadata file for ``directory_url``."""
        return self.account_dir(directory_url) / "account.json"

    def default_out(self, first_name: str) -> Path:
        """``<state>/certificates/<first-name>``."""
        return self.root / "certificates" / _UNSAFE.sub("_", first_name.replace("*", "_"))

    def load_account(self, directory_url: str) -> StoredAccount | None:
        """The stored account for ``directory_url``, or ``None`` when there is no key yet.

        Raises :class:`StorageError` naming the file when a stored file is unreadable or
        corrupt (it is left as it is).
        """
        key_path = self.account_key_path(directory_url)
        try:
            pem = key_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(
                f"cannot read account key {key_path}: {exc.strerror or exc}", path=str(key_path)
            ) from exc
        try:
            key = AccountKey.from_pem(pem)
        except InvalidInput as exc:
            raise StorageError(
                f"corrupt account key {key_path} ({exc}); restore it, or move it away to "
                "start a new account",
                path=str(key_path),
            ) from exc
        return StoredAccount(key=key, url=self._load_account_url(directory_url))

    def _load_account_url(self, directory_url: str) -> str | None:
        json_path = self.account_json_path(directory_url)
        try:
            text = json_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeError) as exc:
            raise StorageError(f"cannot read {json_path}: {exc}", path=str(json_path)) from exc

        def corrupt(reason: str) -> StorageError:
            return StorageError(
                f"corrupt account file {json_path} ({reason}); fix or remove it",
                path=str(json_path),
            )

        try:
            document = json.loads(text)
        except ValueError as exc:
            raise corrupt(f"not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise corrupt("not a JSON object")
        url = document.get("url")
        if not isinstance(url, str) or not url.startswith("https://"):
            raise corrupt('"url" is not an https:// URL')
        stored_directory = document.get("directory")
        if stored_directory != directory_url:
            raise corrupt(f'"directory" is {stored_directory!r}, expected {directory_url!r}')
        return url

    def create_account_key(self, directory_url: str, key: AccountKey) -> AccountKey:
        """Store a new account key (0600); if another process stored one first, return that."""
        key_path = self.account_key_path(directory_url)
        ensure_private_dir(key_path.parent)
        if atomic_write(key_path, key.to_pem(), mode=_KEY_MODE, overwrite=False):
            return key
        stored = self.load_account(directory_url)
        if stored is None:  # created and removed again meanwhile: nothing sensible to do
            raise StorageError(f"{key_path} changed while being created", path=str(key_path))
        return stored.key

    def save_account_url(self, directory_url: str, account_url: str) -> None:
        """Record the account URL so the next run skips the ``newAccount`` round-trip."""
        json_path = self.account_json_path(directory_url)
        ensure_private_dir(json_path.parent)
        document = {"directory": directory_url, "url": account_url}
        data = (json.dumps(document, indent=2) + "\n").encode("utf-8")
        atomic_write(json_path, data, mode=_KEY_MODE)
