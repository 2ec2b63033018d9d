"""The webroot http-01 solver: :class:`Http01Webroot` writes into a web server's files."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from acmecerts.errors import InvalidInput
from acmecerts.protocol.challenges import validate_token
from acmecerts.solvers.http01._tokens import (
    _WELL_KNOWN,
    _Holders,
    _Http01Solver,
)

if TYPE_CHECKING:
    from acmecerts.solvers._base import ChallengeTask

logger = logging.getLogger("acmecerts.solvers.http01")


class WebrootError(InvalidInput):
    """:class:`Http01Webroot` could not write the challenge file into its document root."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        #: The file or directory that could not be used.
        self.path = path


class Http01Webroot(_Http01Solver):
    """An http-01 solver for a web server you already run: it writes into its webroot.

    :meth:`present` writes ``<root>/.well-known/acme-challenge/<token>`` containing the key
    authorization (directories created as needed with mode ``0755``, the file ``0644``,
    written atomically: temporary file in the same directory, then rename). :meth:`cleanup`
    removes it. The web server must serve ``root`` for every name being validated, on
    port 80, and should serve these files as ``application/octet-stream`` or
    ``text/plain``.

    Tokens come from the CA and are validated before they touch the file system, so a
    hostile token cannot name a file outside the challenge directory.

    :param root: the document root; it must exist.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root)
        self._holders = _Holders()
        self._lock = anyio.Lock()

    @property
    def root(self) -> Path:
        """The document root."""
        return self._root

    @property
    def challenge_dir(self) -> Path:
        """``<root>/.well-known/acme-challenge``."""
        return self._root.joinpath(*_WELL_KNOWN)

    def path_for(self, token: str) -> Path:
        """The file that answers ``token`` (raises ``BadServerResponse`` for a bad token)."""
        return self.challenge_dir / validate_token(token)

    def __repr__(self) -> str:
        return f"Http01Webroot({str(self._root)!r})"

    async def _answer(self, task: ChallengeTask, token: str) -> None:
        """Write the challenge file (:class:`WebrootError` when it cannot be written)."""
        async with self._lock:
            # Registered first: the cleanup() that follows every present() undoes it,
            # whatever happened below.
            self._holders.add(task)
            await anyio.to_thread.run_sync(self._write, token, task.key_authorization)

    async def cleanup(self, task: ChallengeTask) -> None:
        """Remove the challenge file (once no other presented task holds the token).

        Idempotent; a missing file is fine; a malformed token is ignored. Shielded from
        cancellation so that it completes in a ``finally`` of a cancelled task. A file
        that cannot be removed is logged, not raised: a stale challenge file is harmless.
        """
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if self._release(task):
                    await anyio.to_thread.run_sync(self._remove, task.token)

    # -- blocking helpers (run in a worker thread) -----------------------------

    def _write(self, token: str, key_authorization: str) -> None:
        if not self._root.is_dir():
            raise WebrootError(
                f"webroot {str(self._root)!r} does not exist or is not a directory",
                path=str(self._root),
            )
        directory = self._root
        for part in _WELL_KNOWN:
            directory = directory / part
            try:
                directory.mkdir(mode=0o755)
            except FileExistsError:
                continue
            except OSError as exc:
                raise WebrootError(
                    f"cannot create {str(directory)!r}: {exc.strerror or exc}", path=str(directory)
                ) from exc
            # mkdir's mode is reduced by the umask; the web server must be able to read.
            directory.chmod(0o755)
        target = directory / token
        try:
            fd, temp_name = tempfile.mkstemp(prefix=f".{token}.", suffix=".tmp", dir=directory)
        except OSError as exc:
            raise WebrootError(
                f"cannot write into {str(directory)!r}: {exc.strerror or exc}", path=str(directory)
            ) from exc
        try:
            with os.fdopen(fd, "wb") as file:
                os.fchmod(file.fileno(), stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
                file.write(key_authorization.encode("ascii"))
            # The file is short-lived and worthless after a crash: no fsync needed.
            os.replace(temp_name, target)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp_name)
            if isinstance(exc, OSError):
                raise WebrootError(
                    f"cannot write {str(target)!r}: {exc.strerror or exc}", path=str(target)
                ) from exc
            raise

    def _remove(self, token: str) -> None:
        path = self.challenge_dir / token
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("http-01 webroot: cannot remove %s: %s", path, exc)
