"""The real servers the tests run besides Pebble (each a ``ManagedServer``, like Pebble's).

* :class:`tests.servers.bind.BindServer`: BIND 9 ``named`` (Debian package ``bind9``) with test
  zones that take TSIG-signed dynamic updates, for dns-01 (point ``PebbleServer(dns_server=...)``
  at it).
* :class:`tests.servers.a2c.Acme2CertifierServer`: acme2certifier, a second ACME server (with
  ARI), from its own virtualenv, made on first use (:func:`tests.servers.a2c.ensure_a2c_venv`).
* :class:`tests.servers.tinyproxy.TinyProxy`: Debian's ``tinyproxy``, a real HTTP proxy for the
  egress-proxy tests.

Pebble's harness, :class:`acmecerts.testing.PebbleServer`, ships with the package (users test
their own code against it); these are for this project's tests only.
"""
