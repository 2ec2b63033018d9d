"""The exported files are switched as one set (acmecerts/storage/export.py).

Two certificates from the session Pebble 2.10 are written in turn into one ``--out``, in
both layouts, while a reader thread resolves the set once (``realpath``) and reads the key
and the certificate from it: it must never see a key with another certificate's leaf.
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from acmecerts import AcmeClient, Http01Server, IssuedCertificate
from acmecerts.protocol.certificate import parse_pem_chain
from acmecerts.protocol.keys import load_private_key
from acmecerts.storage.export import write_certificate_files
from acmecerts.testing import PebbleServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture
async def two(pebble: PebbleServer) -> AsyncIterator[list[IssuedCertificate]]:
    async with (
        AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client,
        Http01Server(host="127.0.0.1", port=pebble.http_port) as http01,
    ):
        yield [await client.issue(["atomic.example.test"], solver=http01) for _ in range(2)]


def _matches(directory: str) -> bool:
    key = load_private_key(Path(directory, "privkey.pem").read_bytes())
    leaf = parse_pem_chain(Path(directory, "cert.pem").read_bytes()).leaf
    return key.public_key().public_bytes(*_SPKI) == leaf.public_key().public_bytes(*_SPKI)


@pytest.mark.parametrize("layout", ["plain", "certbot"])
async def test_a_reader_never_sees_a_key_with_another_certificate(
    two: list[IssuedCertificate], tmp_path: Path, layout: str
) -> None:
    out = tmp_path / "out"
    write_certificate_files(out, two[0], layout=layout, name="atomic")
    live = out / ".live" if layout == "plain" else out / "live" / "atomic"
    stop = threading.Event()
    seen: list[bool] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                seen.append(_matches(os.path.realpath(live)))
            except FileNotFoundError:
                # two switches while reading: that generation was removed (never a mix)
                continue

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for turn in range(400):
            write_certificate_files(out, two[turn % 2], layout=layout, name="atomic")
    finally:
        stop.set()
        thread.join(10)
    assert len(seen) > 50
    assert all(seen)
    # the files at their usual paths are the last set written
    paths = out if layout == "plain" else out / "live" / "atomic"
    assert (paths / "cert.pem").read_text() == two[1].certificate_pem
    assert _matches(str(paths))
