"""Test helpers for code that uses acmecerts: a real Pebble ACME server on loopback.

>>> from acmecerts.testing import PebbleServer
>>> with PebbleServer(tmp_path) as pebble:  # doctest: +SKIP
...     ...  # point your ACME client at pebble.directory_url, trusting pebble.ca_bundle

Needs the ``pebble`` and ``pebble-challtestsrv`` binaries (Debian package ``pebble``).
"""

from __future__ import annotations

from acmecerts.testing._pebble import PebbleServer

__all__ = ["PebbleServer"]
