"""kill -9 at random instants while the manager's state is being written.

A child process writes what the manager writes for one certificate, over and over, with
two different certificates in turn: the order intent, the order record, the certificate
(one record, ``certificate.json``, with the chain, the key and the metadata), the deletion of
the order record, the attempt state. It is killed at a random instant, ten times. After
every kill the store must be usable as it is:

* every value loads (FileStorage's envelope: no truncated or half-written file), hidden
  files are only temp files and lease files, and the next write of a key removes its
  crashed temp file;
* the stored certificate is one of the two, whole, with its own key (the chain and the
  key never come from two certificates), or none at all;
* the order record and the attempt state load.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts.manager._persist import CertificateStore
from acmecerts.storage import FileStorage, KeyLayout
from tests.crash._scenario import hidden_files, store_problems

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]
DIRECTORY = "https://ca.crash.test/dir"
NAME = "random.crash.example.test"
ROUNDS = 10

# Imports only what the writes need (not the HTTP client): the child starts in well
# under a second, so the rounds stay cheap.
WRITER = textwrap.dedent(
    f"""
    import datetime, sys, types
    for name in ("acmecerts", "acmecerts.manager"):
        module = types.ModuleType(name)
        module.__path__ = [{str(REPO)!r} + "/" + name.replace(".", "/")]
        sys.modules[name] = module

    import anyio
    from acmecerts._issued import IssuedCertificate
    from acmecerts.manager._persist import CertificateStore
    from acmecerts.manager._records import OrderRecord
    from acmecerts.protocol.certificate import certificate_info, parse_pem_chain
    from acmecerts.protocol.identifiers import parse_identifiers
    from acmecerts.retry import AttemptState
    from acmecerts.storage import FileStorage, KeyLayout

    STATE, NAME, *PEMS = sys.argv[1:]
    IDS = parse_identifiers([NAME])

    def issued(cert_path, key_path, n):
        chain = parse_pem_chain(open(cert_path, "rb").read())
        return IssuedCertificate(
            identifiers=IDS,
            chain=chain,
            private_key_pem=open(key_path).read(),
            info=certificate_info(chain.leaf),
            order_url=f"https://ca.crash.test/order/{{n}}",
            certificate_url=f"https://ca.crash.test/cert/{{n}}",
        )

    async def main():
        certs = [issued(PEMS[0], PEMS[1], 0), issued(PEMS[2], PEMS[3], 1)]
        store = CertificateStore(FileStorage(STATE), KeyLayout({DIRECTORY!r}))
        n = 0
        while True:
            cert = certs[n % 2]
            now = datetime.datetime.now(datetime.UTC)
            intent = OrderRecord(None, IDS, cert.private_key_pem, now)
            await store.save_order(NAME, intent)
            recorded = OrderRecord(cert.order_url, IDS, cert.private_key_pem, now)
            await store.save_order(NAME, recorded)
            await store.save_certificate(NAME, cert)
            await store.delete_order(NAME)
            await store.save_attempt_state(NAME, AttemptState(attempts=n % 3))
            if n == 0:
                print("writing", flush=True)
            n += 1

    anyio.run(main)
    """
)


def self_signed(directory: Path, tag: str) -> tuple[Path, Path, str]:
    """A certificate for NAME and its key, as PEM files; and its serial (hex)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=90))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / f"{tag}-cert.pem"
    key_path = directory / f"{tag}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path, format(cert.serial_number, "x")


async def stored_state(state: Path) -> tuple[str | None, str | None, int | None]:
    """The stored certificate's serial, the order record's URL (``"intent"``: the record
    written before newOrder), the attempt count."""
    async with FileStorage(state) as storage:
        store = CertificateStore(storage, KeyLayout(DIRECTORY))
        issued = await store.load_certificate(NAME)  # StorageError if the files mix
        record = await store.load_order(NAME)
        attempts = await store.load_attempt_state(NAME)
    return (
        None if issued is None else issued.serial,
        None if record is None else record.order_url or "intent",
        None if attempts is None else attempts.attempts,
    )


async def rewrite_temps(state: Path) -> None:
    """Write each key whose temp file a kill left: the write removes the temp file."""
    temps, _ = hidden_files(state)
    async with FileStorage(state) as storage:
        for temp in temps:
            parent, name = os.path.split(temp)
            assert name.startswith(".")
            assert name.endswith(".tmp")
            await storage.store(f"{parent}/{name[1:-4]}", b"rewritten")


def test_random_kills_never_leave_a_broken_store(tmp_path: Path) -> None:
    a_cert, a_key, a_serial = self_signed(tmp_path, "a")
    b_cert, b_key, b_serial = self_signed(tmp_path, "b")
    state = tmp_path / "state"
    rng = random.Random()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", WRITER, str(state), NAME]
    argv += [str(a_cert), str(a_key), str(b_cert), str(b_key)]
    seen: set[tuple[str | None, str | None]] = set()
    left_temps = 0
    for _ in range(ROUNDS):
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env) as writer:
            assert writer.stdout is not None
            assert writer.stdout.readline() == "writing\n"
            anyio.run(anyio.sleep, rng.uniform(0.0, 0.3))
            writer.send_signal(signal.SIGKILL)
            assert writer.wait(10) == -signal.SIGKILL

        assert store_problems(state) == []
        serial, order_url, attempts = anyio.run(stored_state, state)
        assert serial in (None, a_serial, b_serial)
        assert order_url in (None, "intent", *(f"https://ca.crash.test/order/{n}" for n in (0, 1)))
        assert attempts in (None, 1, 2)
        seen.add((serial, order_url))
        left_temps += len(hidden_files(state)[0])
    anyio.run(rewrite_temps, state)
    assert hidden_files(state)[0] == []
    print(f"states after {ROUNDS} kills: {sorted(seen, key=str)}; temp files left: {left_temps}")
