"""Test helpers for code that uses acmecerts: a real Pebble ACME server on loopback.

>>> from acmecerts.testing import PebbleServer
>>> with PebbleServer(tmp_path) as pebble:  # doctest: +SKIP
...     ...  # point your ACME client at pebble.directory_url, trusting pebble.ca_bundle

Needs the ``pebble`` and ``pebble-challtestsrv`` binaries (Debian package ``pebble``).

:class:`Acme2CertifierServer` runs acme2certifier (a second ACME server, with ARI) from its own
virtualenv, which it creates on first use (``pip install acme2certifier``).

:class:`BindServer` runs BIND 9 ``named`` (Debian package ``bind9``) with test zones that accept
TSIG-signed dynamic updates, for dns-01 (point ``PebbleServer(dns_server=...)`` at it).
"""

from __future__ import annotations

from acmecerts.testing._a2c import Acme2CertifierServer
from acmecerts.testing._bind import BindServer
from acmecerts.testing._pebble import PebbleServer

__all__ = ["Acme2CertifierServer", "BindServer", "PebbleServer"]
