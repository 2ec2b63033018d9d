"""The files a certificate is exported to, replaced as one set: :func:`write_certificate_files`.

Two layouts (the CLI's ``--out-layout``):

``plain`` (the default): ``OUT/cert.pem``, ``chain.pem``, ``fullchain.pem`` and
``privkey.pem`` (0600). Each is a symlink ``NAME.pem -> .live/NAME.pem``, and ``OUT/.live``
a symlink to the generation directory ``OUT/.vN`` that holds the four files::

    OUT/privkey.pem -> .live/privkey.pem
    OUT/.live -> .v7
    OUT/.v7/privkey.pem  (0600), cert.pem, chain.pem, fullchain.pem

``certbot``: certbot's paths under the root ``OUT``, for tools configured for them::

    OUT/archive/NAME/cert1.pem, chain1.pem, fullchain1.pem, privkey1.pem (0600), cert2.pem...
    OUT/live/NAME -> .NAME.v2
    OUT/live/.NAME.v2/cert.pem -> ../../archive/NAME/cert2.pem  (and the three others)

A new set is written into a new generation (``.vN+1``, or ``archive/NAME/*N+1.pem`` and
``live/.NAME.vN+1``), made durable, and switched to with **one** ``rename(2)`` of a symlink
(``OUT/.live``, or ``OUT/live/NAME``). The guarantee for a reader: every path resolution
of a file sees one complete set, the old one or the new one, never a mix and never a
half-written file. Two separate ``open()`` calls may straddle a switch (a first read of the
old key, then of the new certificate); a reader that needs a matching pair resolves the
directory once (``os.path.realpath(OUT/.live)``, ``os.path.realpath(OUT/live/NAME)``) and
reads the files from there: that directory is never changed. The previous generation
stays (so a reader that resolved it a moment ago still finds it); older ones are removed
(a reader that resolved a set two switches ago gets ``FileNotFoundError`` and resolves
again: never a mixed pair); the certbot layout's ``archive/`` keeps every certificate,
as certbot does.

The first switch of a directory written otherwise (an acmecerts that wrote plain files,
certbot's own ``live/NAME`` directory) cannot be one rename: plain files are replaced by
their symlinks one at a time (each one renamed whole, the key first), and certbot's
``live/NAME`` directory is moved aside to ``live/.NAME.certbot-*`` just before the symlink
takes its place (an instant in which ``live/NAME`` does not exist). Every later switch is
atomic.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from acmecerts.errors import InvalidInput, StorageError
from acmecerts.storage._files import fsync_directory

if TYPE_CHECKING:
    from acmecerts._issued import IssuedCertificate

__all__ = [
    "CERTIFICATE_FILES",
    "OUT_LAYOUTS",
    "ensure_private_dir",
    "export_dir_problem",
    "exported_paths",
    "remove_exported",
    "unwritable_dir",
    "write_certificate_files",
]

_DIR_MODE = 0o700
_KEY_MODE = 0o600
_PUBLIC_MODE = 0o644

#: The files ``--out`` receives, in the order they are written: the key first.
CERTIFICATE_FILES: tuple[tuple[str, str, int], ...] = (
    ("privkey", "privkey.pem", _KEY_MODE),
    ("cert", "cert.pem", _PUBLIC_MODE),
    ("chain", "chain.pem", _PUBLIC_MODE),
    ("fullchain", "fullchain.pem", _PUBLIC_MODE),
)
#: The values of ``--out-layout``.
OUT_LAYOUTS = ("plain", "certbot")

_LIVE = ".live"
_GENERATION = re.compile(r"\.v([0-9]+)")


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


def unwritable_dir(path: Path) -> str | None:
    """Why ``path`` cannot be a directory to write into (``None``: it can), from what
    exists of it: a file in its place, a part not writable (nothing is created)."""
    current = path
    while True:
        try:
            if current.is_dir():
                break
            if current.exists() or current.is_symlink():
                if current == path:
                    return "it is a file, not a directory"
                return f"{current} is a file, not a directory"
        except OSError as exc:  # e.g. a path component that is not searchable
            return exc.strerror or str(exc)
        if current.parent == current:
            return "no part of it exists"
        current = current.parent
    if not os.access(current, os.W_OK | os.X_OK):
        if current == path:
            return "it is not writable"
        return f"{current} is not writable (the directory cannot be created)"
    return None


def export_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be (made) a writable directory, ``None`` when it can: a check
    before anything is ordered, so that the files of a certificate have somewhere to go.

    It is tried, not guessed from permission bits (``root`` passes every ``access(2)``
    check, yet cannot create ``/proc/x``): the missing directories are created and a
    temporary file is written in the last one, then all of that is removed again. Nothing
    is left behind; the directory is made again when the files are written.
    """
    absolute = path.expanduser().absolute()
    return unwritable_dir(absolute) or _try_create(absolute)


def _try_create(path: Path) -> str | None:
    """Create ``path``'s missing directories and a file in it, then remove them; why not."""
    created: list[Path] = []
    try:
        missing = []
        current = path
        while not current.is_dir():
            missing.append(current)
            current = current.parent
        for directory in reversed(missing):
            directory.mkdir(mode=0o700)
            created.append(directory)
        probe = path / f".acmecerts-probe-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename and Path(exc.filename) != path else ""
        return f"{where}{exc.strerror or exc}"
    finally:
        for directory in reversed(created):
            with contextlib.suppress(OSError):
                directory.rmdir()
    return None


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` (it must not exist) with exactly ``mode`` and ``data``, durable."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(path, flags, mode)
    with open(fd, "wb") as file:  # closes fd
        os.fchmod(fd, mode)  # the umask may only have removed bits: make it exact
        file.write(data)
        file.flush()
        os.fsync(fd)


def _link(target: str, path: Path) -> None:
    """Make ``path`` a symlink to ``target`` with one rename (replacing whatever it was)."""
    if path.is_dir() and not path.is_symlink():
        raise StorageError(f"{path} is a directory, not a file acmecerts wrote", path=str(path))
    if path.is_symlink() and os.readlink(path) == target:
        return
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    os.symlink(target, temp)
    try:
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _contents(issued: IssuedCertificate) -> dict[str, bytes]:
    """The files' contents by kind; no ``privkey`` for a certificate of the user's CSR."""
    contents = {
        "cert": issued.certificate_pem.encode("ascii"),
        "chain": issued.chain_pem.encode("ascii"),
        "fullchain": issued.fullchain_pem.encode("ascii"),
    }
    if issued.private_key_pem is not None:
        contents["privkey"] = issued.private_key_pem.encode("ascii")
    return contents


def _generations(directory: Path, pattern: re.Pattern[str]) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := pattern.fullmatch(n)))


def _holds(directory: Path, contents: dict[str, bytes]) -> bool:
    """``directory`` already holds exactly this set (a certificate exported again as it
    is: no new generation)."""
    try:
        return all(
            (directory / name).read_bytes() == contents[kind]
            for kind, name, _ in CERTIFICATE_FILES
            if kind in contents
        )
    except OSError:
        return False


def _write_plain(out: Path, contents: dict[str, bytes]) -> dict[str, Path]:
    ensure_private_dir(out)
    paths = {kind: out / name for kind, name, _ in CERTIFICATE_FILES if kind in contents}
    if (out / _LIVE).is_symlink() and _holds(out, contents):
        return paths
    known = _generations(out, _GENERATION)
    number = (known[-1] if known else 0) + 1
    generation = out / f".v{number}"
    generation.mkdir(mode=_DIR_MODE)
    try:
        for kind, name, mode in CERTIFICATE_FILES:
            if kind in contents:
                _write_new(generation / name, contents[kind], mode)
        fsync_directory(generation)
    except BaseException:
        for _, name, _ in CERTIFICATE_FILES:
            with contextlib.suppress(OSError):
                (generation / name).unlink()
        with contextlib.suppress(OSError):
            generation.rmdir()
        raise
    previous = os.readlink(out / _LIVE) if (out / _LIVE).is_symlink() else None
    _link(generation.name, out / _LIVE)  # the switch: one rename
    for kind, name, _ in CERTIFICATE_FILES:  # once per directory: later runs find them
        if kind in contents:
            _link(f"{_LIVE}/{name}", out / name)
        elif (out / name).is_symlink() and os.readlink(out / name) == f"{_LIVE}/{name}":
            (out / name).unlink()  # a key of an earlier set: no longer this set's
    fsync_directory(out)
    for old in known:  # keep the previous generation for readers still in it
        if f".v{old}" != previous:
            _remove_generation(out / f".v{old}")
    return paths


def _remove_generation(directory: Path) -> None:
    for _, name, _ in CERTIFICATE_FILES:
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()
    with contextlib.suppress(OSError):
        directory.rmdir()


def _write_certbot(root: Path, name: str, contents: dict[str, bytes]) -> dict[str, Path]:
    if not name or "/" in name or name.startswith("."):
        raise InvalidInput(f"cannot lay out certificate {name!r} as certbot does")
    if "privkey" not in contents:
        raise InvalidInput("the certbot layout needs a private key: a CSR's certificate has none")
    archive, live = root / "archive" / name, root / "live"
    current = live / name
    paths = {kind: current / filename for kind, filename, _ in CERTIFICATE_FILES}
    if current.is_symlink() and _holds(current, contents):
        return paths
    ensure_private_dir(archive)
    ensure_private_dir(live)
    found = _generations(archive, re.compile(r"(?:cert|chain|fullchain|privkey)([0-9]+)\.pem"))
    number = (found[-1] if found else 0) + 1
    for kind, filename, mode in CERTIFICATE_FILES:
        stem = filename.removesuffix(".pem")
        _write_new(archive / f"{stem}{number}.pem", contents[kind], mode)
    fsync_directory(archive)
    pattern = re.compile(re.escape(f".{name}.v") + r"([0-9]+)")
    known = _generations(live, pattern)
    generation = live / f".{name}.v{number}"
    if generation.exists():
        _remove_generation(generation)  # left by a run that died before its switch
    generation.mkdir(mode=_DIR_MODE)
    for _, filename, _ in CERTIFICATE_FILES:
        stem = filename.removesuffix(".pem")
        os.symlink(f"../../archive/{name}/{stem}{number}.pem", generation / filename)
    fsync_directory(generation)
    previous = os.readlink(current) if current.is_symlink() else None
    if current.is_dir() and not current.is_symlink():
        # certbot's own live/NAME directory: moved aside once (see the module docstring)
        os.replace(current, live / f".{name}.certbot-{secrets.token_hex(4)}")
    _link(generation.name, current)  # the switch: one rename
    fsync_directory(live)
    for old in known:  # keep the previous generation for readers still in it
        if f".{name}.v{old}" not in (previous, generation.name):
            _remove_generation(live / f".{name}.v{old}")
    return paths


def write_certificate_files(
    out: Path, issued: IssuedCertificate, *, layout: str = "plain", name: str = ""
) -> dict[str, Path]:
    """Write the certificate's four PEM files to ``out`` as one set; return their paths.

    A certificate without a private key (issued for the user's CSR) gets the three
    others, in the plain layout only.

    ``layout`` is ``plain`` or ``certbot`` (then ``out`` is the root of ``live/`` and
    ``archive/`` and ``name`` the certificate's directory name in them). See the module
    docstring for what a reader sees while they are replaced.
    """
    if layout not in OUT_LAYOUTS:
        raise InvalidInput(f"--out-layout must be one of {', '.join(OUT_LAYOUTS)}, not {layout!r}")
    contents = _contents(issued)
    try:
        if layout == "certbot":
            return _write_certbot(out, name, contents)
        return _write_plain(out, contents)
    except OSError as exc:
        where = getattr(exc, "filename", None) or out
        raise StorageError(f"cannot write {where}: {exc.strerror or exc}", path=str(out)) from exc


def exported_paths(out: Path, *, layout: str = "plain", name: str = "") -> dict[str, Path]:
    """Where :func:`write_certificate_files` puts each file (by kind)."""
    base = out / "live" / name if layout == "certbot" else out
    return {kind: base / filename for kind, filename, _ in CERTIFICATE_FILES}


def remove_exported(directory: Path) -> list[Path]:
    """Remove the plain layout's files from ``directory`` (then the directory if empty).

    Returns the files removed (the four names; the generations go with them).
    """
    removed = []
    for _, filename, _ in CERTIFICATE_FILES:
        path = directory / filename
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageError(
                f"cannot remove {path}: {exc.strerror or exc}", path=str(path)
            ) from exc
        removed.append(path)
    with contextlib.suppress(FileNotFoundError):
        (directory / _LIVE).unlink()
    for number in _generations(directory, _GENERATION):
        _remove_generation(directory / f".v{number}")
    with contextlib.suppress(OSError):  # not empty (someone else's files): kept
        os.rmdir(directory)
    return removed
