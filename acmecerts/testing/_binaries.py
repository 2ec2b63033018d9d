"""Which Pebble to run: :class:`PebbleBinaries` and :func:`find_pebble`.

Two releases matter to acmecerts' tests and users:

* **2.10** (Debian sid's ``pebble`` 2.10.0 package): profiles (``meta.profiles``), ARI
  (``renewalInfo``), ``replaces`` checks, ``Retry-After`` on polls, ``dns-account-01`` and
  ``dns-persist-01``. Its binaries need only glibc 2.34, so they run on Debian bookworm;
  ``scripts/test.sh`` downloads the package with a private apt state and unpacks it under
  ``${ACMECERTS_CACHE:-~/.cache/acmecerts}/pebble-2.10.0``.
* **2.4** (Debian bookworm's ``pebble`` package, ``/usr/bin/pebble``): none of the above, a
  CA as most private ACME servers still are.

:func:`find_pebble` looks in this order: ``$ACMECERTS_PEBBLE_DIR`` (a directory holding both
binaries), the cache above, then ``pebble`` on ``PATH``. The release of a pair found on
``PATH`` or in ``$ACMECERTS_PEBBLE_DIR`` is told by ``pebble-challtestsrv``'s flags: 2.4 names
its DNS listener ``-dns01``, later releases ``-dnsserver``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["PebbleBinaries", "PebbleNotFound", "Release", "find_pebble", "pebble_cache_dir"]

#: The two Pebble releases the harness knows how to drive.
Release = Literal["2.10", "2.4"]

#: The Debian package version ``scripts/test.sh`` unpacks into the cache.
PEBBLE_2_10_PACKAGE = "2.10.0"


class PebbleNotFound(RuntimeError):
    """No Pebble of the release asked for is installed; the message says how to get one."""


@dataclass(frozen=True)
class PebbleBinaries:
    """A ``pebble`` and ``pebble-challtestsrv`` pair, and the release they are."""

    pebble: str
    challtestsrv: str
    release: Release

    @property
    def modern(self) -> bool:
        """True for 2.10: profiles, ARI, ``retryAfter`` and the ``-dnsserver`` flag."""
        return self.release != "2.4"


def pebble_cache_dir() -> Path:
    """``$ACMECERTS_CACHE``, else ``~/.cache/acmecerts``: where the 2.10 package is unpacked."""
    configured = os.environ.get("ACMECERTS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "acmecerts"


def _cached_2_10() -> Path:
    return pebble_cache_dir() / f"pebble-{PEBBLE_2_10_PACKAGE}" / "usr" / "bin"


@functools.cache
def _release_of(challtestsrv: str) -> Release:
    try:
        shown = subprocess.run([challtestsrv, "-h"], capture_output=True, timeout=10, check=False)
    except OSError as exc:
        raise PebbleNotFound(f"cannot run {challtestsrv!r}: {exc}") from exc
    text = (shown.stdout + shown.stderr).decode("utf-8", "replace")
    return "2.10" if "-dnsserver" in text else "2.4"


def _pair_in(directory: Path) -> tuple[str, str] | None:
    pebble, challtestsrv = directory / "pebble", directory / "pebble-challtestsrv"
    if os.access(pebble, os.X_OK) and os.access(challtestsrv, os.X_OK):
        return str(pebble), str(challtestsrv)
    return None


def _candidates() -> list[PebbleBinaries]:
    found: list[PebbleBinaries] = []
    configured = os.environ.get("ACMECERTS_PEBBLE_DIR")
    if configured:
        pair = _pair_in(Path(configured))
        if pair is None:
            raise PebbleNotFound(
                f"ACMECERTS_PEBBLE_DIR={configured!r} does not hold executable "
                "'pebble' and 'pebble-challtestsrv'"
            )
        found.append(PebbleBinaries(*pair, _release_of(pair[1])))
    cached = _pair_in(_cached_2_10())
    if cached is not None:
        found.append(PebbleBinaries(*cached, "2.10"))
    pebble, challtestsrv = shutil.which("pebble"), shutil.which("pebble-challtestsrv")
    if pebble is not None and challtestsrv is not None:
        found.append(PebbleBinaries(pebble, challtestsrv, _release_of(challtestsrv)))
    return found


def find_pebble(release: Release | None = None) -> PebbleBinaries:
    """The Pebble to run: the first found of *release*, or the first found at all if ``None``.

    Raises:
        PebbleNotFound: none is installed (the message says how to install one).
    """
    for binaries in _candidates():
        if release is None or binaries.release == release:
            return binaries
    if release == "2.4":
        hint = "install Debian bookworm's package: apt-get install -y pebble"
    else:
        hint = (
            "run `bash scripts/pebble-2.10.sh` (it unpacks Debian sid's pebble 2.10 package into "
            f"{_cached_2_10().parent.parent}), or set ACMECERTS_PEBBLE_DIR to a directory "
            "holding pebble and pebble-challtestsrv"
        )
    what = f"Pebble {release}" if release else "Pebble"
    raise PebbleNotFound(f"{what} not found: {hint}")
