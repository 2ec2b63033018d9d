"""Certificates for IP addresses (RFC 8738), validated over IPv4 and IPv6 by one listener.

Pebble 2.10 validates an IP identifier by connecting to that address at its ``httpPort``:
``127.0.0.1`` over IPv4, ``::1`` over IPv6. One :class:`Http01Server` listening on both
loopbacks at that port (``host=["127.0.0.1", "::1"]``: one server, one port, a socket per
family, nothing bound beyond loopback) answers both. The order names the ``shortlived``
profile, the only one of Let's Encrypt's profiles that allows IP addresses.

Which listening address answered each validation is read from the server's log line
``http-01 server: answered a challenge request from CLIENT on ADDRESS`` (Pebble 2.10
validates from several "perspectives", so each validation is several requests).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import re
from typing import TYPE_CHECKING

import pytest
from cryptography import x509

from acmecerts import AcmeClient, Http01Server
from acmecerts.errors import AcmeCertsError
from tests.integration.conftest import assert_valid_chain

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer
    from tests.conftest import PebbleFactory

pytestmark = pytest.mark.anyio

LOOPBACKS = ["127.0.0.1", "::1"]
_ANSWERED = re.compile(r"answered a challenge request from (\S+) on (\S+)$")


def answered(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """``(client, listening address)`` of every challenge the http-01 server answered."""
    found = []
    for record in caplog.records:
        if record.name == "acmecerts.solvers.http01":
            match = _ANSWERED.search(record.getMessage())
            if match:
                found.append((match[1], match[2]))
    return found


def ip_sans(certificate: x509.Certificate) -> set[str]:
    san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == []
    return {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}


async def test_an_ipv6_address_certificate(
    pebble: PebbleServer, client: AcmeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="acmecerts.solvers.http01")
    async with Http01Server(host=LOOPBACKS, port=pebble.http_port) as solver:
        issued = await client.issue(["::1"], solver=solver, profile="shortlived")
    assert_valid_chain(issued, pebble, ["::1"])
    leaf = issued.chain.certificates[0]
    assert ip_sans(leaf) == {"::1"}
    assert issued.not_after - issued.not_before <= dt.timedelta(hours=160)
    # Pebble connected over IPv6 (from ::1, to ::1 at its httpPort), and our listener answered.
    # (Pebble 2.10 validates from several "perspectives": one request each.)
    requests = answered(caplog)
    assert requests
    assert {on for _peer, on in requests} == {f"[::1]:{pebble.http_port}"}
    assert all(peer.startswith("[::1]:") for peer, _on in requests)


async def test_an_ipv4_and_ipv6_pair_validated_by_one_listener(
    pebble: PebbleServer, client: AcmeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="acmecerts.solvers.http01")
    port = pebble.http_port
    async with Http01Server(host=LOOPBACKS, port=port) as solver:
        assert solver.port == port
        assert solver.hosts == ("127.0.0.1", "::1")
        issued = await client.issue(LOOPBACKS, solver=solver, profile="shortlived")
    assert_valid_chain(issued, pebble, LOOPBACKS)
    assert ip_sans(issued.chain.certificates[0]) == {"127.0.0.1", "::1"}
    assert {ipaddress.ip_address(name) for name in issued.names} == {
        ipaddress.ip_address(name) for name in LOOPBACKS
    }
    # Both validations reached the one server, each over its own family, on the one port.
    requests = answered(caplog)
    assert {on for _peer, on in requests} == {f"127.0.0.1:{port}", f"[::1]:{port}"}
    for peer, on in requests:  # each over the family of the address it validated
        assert peer.startswith("[") == on.startswith("["), (peer, on)


async def test_an_ipv4_only_listener_cannot_answer_for_an_ipv6_address(
    pebble: PebbleServer, client: AcmeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Why the listener must answer on IPv6 too: on 127.0.0.1 alone, ::1 is not validated."""
    caplog.set_level(logging.INFO, logger="acmecerts.solvers.http01")
    async with Http01Server(host="127.0.0.1", port=pebble.http_port) as solver:
        with pytest.raises(AcmeCertsError) as failed:
            await client.issue(LOOPBACKS, solver=solver, profile="shortlived")
    assert "::1" in str(failed.value)
    # The IPv4 identifier may or may not have been validated before the order failed,
    # never the IPv6 one.
    assert all(not on.startswith("[") for _peer, on in answered(caplog))


async def test_a_dns_name_validated_over_ipv6(
    pebble_factory: PebbleFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """With AAAA records (``default_ipv6="::1"``) Pebble dials the name over IPv6."""
    caplog.set_level(logging.INFO, logger="acmecerts.solvers.http01")
    server = pebble_factory(default_ipv6="::1")
    async with (
        AcmeClient(server.directory_url, ca_bundle=server.ca_bundle) as acme,
        Http01Server(host=LOOPBACKS, port=server.http_port) as solver,
    ):
        issued = await acme.issue(["v6.example.test"], solver=solver)
    assert_valid_chain(issued, server, ["v6.example.test"])
    requests = answered(caplog)
    assert requests
    assert {on for _peer, on in requests} == {f"[::1]:{server.http_port}"}
