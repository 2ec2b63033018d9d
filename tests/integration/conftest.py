"""Fixtures for tests against a real Pebble: a client, an http-01 solver, chain checks."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest
from cryptography import x509

from acmecerts import AcmeClient, Http01Server, IssuedCertificate
from acmecerts.testing import PebbleServer
from tests.servers.a2c import Acme2CertifierServer


@pytest.fixture
async def http01(pebble: PebbleServer) -> AsyncIterator[Http01Server]:
    """An http-01 solver where the session Pebble validates (127.0.0.1:http_port)."""
    async with Http01Server(host="127.0.0.1", port=pebble.http_port) as solver:
        yield solver


@pytest.fixture
async def client(pebble: PebbleServer) -> AsyncIterator[AcmeClient]:
    """A client with a fresh account key on the session Pebble."""
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as acme:
        yield acme


def assert_valid_chain(
    issued: IssuedCertificate, pebble: PebbleServer, names: Sequence[str]
) -> None:
    """The certificate names ``names``, matches its key, and chains to Pebble's root."""
    from cryptography.hazmat.primitives import serialization

    assert sorted(issued.names) == sorted(names)
    certs = issued.chain.certificates
    assert len(certs) >= 2
    key = serialization.load_pem_private_key(issued.private_key_pem.encode(), None)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    assert certs[0].public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)
    for child, parent in itertools.pairwise(certs):
        child.verify_directly_issued_by(parent)
    root = x509.load_pem_x509_certificate(pebble.root_pem().encode())
    certs[-1].verify_directly_issued_by(root)
    assert issued.not_before < issued.not_after
    assert int(issued.serial, 16) == certs[0].serial_number


@pytest.fixture(scope="session")
def a2c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Acme2CertifierServer]:
    """acme2certifier shared by the session (ARI; challenge validation disabled).

    Its virtualenv is created on first use (``pip install acme2certifier``). The window
    opens at 50 % of the lifetime and ``Retry-After`` is one hour.
    """
    server = Acme2CertifierServer(
        tmp_path_factory.mktemp("a2c"), renewal_threshold_pct=50.0, retry_after=3600
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()
