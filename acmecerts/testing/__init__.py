"""Test helpers for code that uses acmecerts: a real Pebble ACME server on loopback.

>>> from acmecerts.testing import PebbleServer
>>> with PebbleServer(tmp_path) as pebble:  # doctest: +SKIP
...     ...  # point your ACME client at pebble.directory_url, trusting pebble.ca_bundle

Needs the ``pebble`` and ``pebble-challtestsrv`` binaries: Pebble 2.10 (Debian sid's package,
which ``scripts/test.sh`` unpacks into ``~/.cache/acmecerts``) or 2.4 (Debian bookworm's
``pebble`` package). ``python -m acmecerts.testing pebble`` runs one until Ctrl-C.
"""

from __future__ import annotations

from acmecerts.testing._binaries import PebbleBinaries, PebbleNotFound, find_pebble
from acmecerts.testing._pebble import LETS_ENCRYPT_PROFILES, PebbleServer, Profile

__all__ = [
    "LETS_ENCRYPT_PROFILES",
    "PebbleBinaries",
    "PebbleNotFound",
    "PebbleServer",
    "Profile",
    "find_pebble",
]
