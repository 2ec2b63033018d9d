"""How a ``CertificateManager`` scales with the number of certificates it manages.

    python bench/manager_scale.py                  # 100,000 certificates
    python bench/manager_scale.py --count 1000 --count 10000 --count 100000

Per size N, a fresh process-local setup, as an operator's process would have after a
restart: a ``FileStorage`` in a temporary directory holding N issued certificates (each
for its own name ``svc-<i>.ns-<i % 500>.example.test``, a 90-day lifetime, issued at
spread-out times over the last 59 days so the renewal schedule is populated), an
attempt-state record for 1 % of them (an earlier failure), and the CA's rate-limit ledger
with the spends of the certificates issued in the last 7 days. The certificates are sized
like Let's Encrypt's: a P-256 leaf with the usual extensions and 240 bytes standing in for
its SCTs (1.3 KB PEM), under a P-384 intermediate padded to E5's size (1.5 KB PEM); they
share one leaf key (generating 100,000 keys adds nothing to what is measured).

The manager is built as in ``tests/integration/test_manager_storage.py``:
``CertificateManager(client, solvers=[...], storage=FileStorage(...))``, every certificate
declared with ``manage()``, then entered (``async with``) so its scheduler loads the stored
state. The client has a rate-limit ledger in the same store. There is no CA: the client's
HTTP client answers the directory (without ``renewalInfo``, so renewals are planned at a
third of the lifetime left) and refuses everything else; no certificate is due while the
state loads, so nothing is sent.

Figures:

* **load s**: from the first ``manage()`` until every certificate's renewal time is known
  (the stored certificates and attempt states read and checked).
* **RSS MiB**: growth of the process's resident set (``VmRSS``) from before the manager
  was built to after the load, the ledger loaded too; **peak** is ``VmHWM`` growth.
* **tick ms**: one scheduling decision (``CertificateManager._plan_tick``: what the
  background scheduler runs each time it wakes, deciding which certificates to start
  and how long to sleep), timed directly, with the scheduler stopped: *idle* after one
  certificate changed (nothing due), and *1 % due* at an instant when 1 % of the
  certificates are due for renewal (the decision only: the attempts are not started;
  before each tick the certificates the previous one picked are marked changed, as if
  their attempts had ended, so each tick re-plans and picks them again). Median and max
  over ``--ticks`` ticks.
* **ledger**: the stored ledger's keys, and one ``ledger.check()`` of an order (it reads
  the ledger file, as each replica does before it orders).

The certificate files are written directly in ``FileStorage``'s documented on-disk
envelope (``acmecerts-v1 <version> <length> <sha256>``), without an fsync per file, by
two worker processes: writing them through ``FileStorage.store`` (three fsyncs each)
would take longer than the benchmark.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime as _dt
import gc
import hashlib
import itertools
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts import AcmeClient, FakeClock, Http01Server, SystemClock
from acmecerts.manager import CertificateManager
from acmecerts.ratelimit import LETS_ENCRYPT, RateLimitLedger
from acmecerts.retry import AttemptState
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.transport import AcmeTransport

DIRECTORY_URL = "https://ca.invalid/dir"
ACCOUNT_URL = "https://ca.invalid/acct/1"
LIFETIME = _dt.timedelta(days=90)
#: Certificates were issued over this span before now (all renew after now).
ISSUED_SPAN = _dt.timedelta(days=59)
#: Spends younger than this are in the ledger (the longest window of Let's Encrypt's limits).
LEDGER_SPAN = _dt.timedelta(days=7)
FAILED_FRACTION = 0.01
MIB = 1024 * 1024


def cert_name(i: int) -> str:
    """The ``i``-th certificate's name (and its only identifier)."""
    return f"svc-{i}.ns-{i % 500}.example.test"


def issued_at(i: int, now: _dt.datetime, count: int) -> _dt.datetime:
    """When the ``i``-th certificate was issued: spread evenly, then shuffled by ``i``."""
    slot = (i * 7919) % count  # a permutation of 0..count-1 (7919 is prime)
    return now - ISSUED_SPAN * (slot + 0.5) / count


# -- the store, written by worker processes ---------------------------------------------


def _envelope(data: bytes) -> bytes:
    """``FileStorage``'s on-disk envelope around ``data`` (its module docstring)."""
    digest = hashlib.sha256(data).hexdigest()
    return b"acmecerts-v1 %s %d %s\n" % (secrets.token_hex(16).encode(), len(data), digest.encode())


def _write(root: Path, key: str, data: bytes) -> None:
    path = root / key
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(path, "wb", opener=lambda p, f: os.open(p, f, 0o600)) as out:
        out.write(_envelope(data) + data)


#: A private extension standing in for the two SCTs of a CT-logged certificate (~240 bytes).
_SCT_STANDIN = x509.ObjectIdentifier("1.3.6.1.4.1.55555.1")


def _with_profile(
    builder: x509.CertificateBuilder, subject_key: ec.EllipticCurvePublicKey, issuer_key: Any
) -> x509.CertificateBuilder:
    """The extensions a public CA's certificates carry, so sizes are realistic."""
    return (
        builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(subject_key), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False
        )
        .add_extension(
            x509.AuthorityInformationAccess(
                [
                    x509.AccessDescription(
                        x509.oid.AuthorityInformationAccessOID.CA_ISSUERS,
                        x509.UniformResourceIdentifier("http://e5.i.lencr.example/"),
                    )
                ]
            ),
            critical=False,
        )
        .add_extension(
            x509.CRLDistributionPoints(
                [
                    x509.DistributionPoint(
                        [x509.UniformResourceIdentifier("http://e5.c.lencr.example/42.crl")],
                        None,
                        None,
                        None,
                    )
                ]
            ),
            critical=False,
        )
        .add_extension(
            x509.CertificatePolicies(
                [x509.PolicyInformation(x509.ObjectIdentifier("2.23.140.1.2.1"), None)]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    )


def _key_usage(ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


@dataclasses.dataclass(frozen=True)
class _Issuer:
    """A throw-away intermediate (P-384, like Let's Encrypt's E5) and the one leaf key."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    leaf_key: ec.EllipticCurvePrivateKey

    @classmethod
    def make(cls) -> _Issuer:
        key = ec.generate_private_key(ec.SECP384R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Bench Encrypt"),
                x509.NameAttribute(NameOID.COMMON_NAME, "E5"),
            ]
        )
        start = _dt.datetime.now(_dt.UTC) - _dt.timedelta(days=400)
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + _dt.timedelta(days=1095))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .add_extension(  # E5's signature is ISRG Root X1's RSA-4096: 512 bytes
                x509.UnrecognizedExtension(_SCT_STANDIN, b"\x04\x82\x01\x90" + os.urandom(400)),
                critical=False,
            )
        )
        cert = _with_profile(builder, key.public_key(), key.public_key()).sign(key, hashes.SHA384())
        return cls(key, cert, ec.generate_private_key(ec.SECP256R1()))

    def pem_keys(self) -> tuple[bytes, bytes, bytes]:
        """The issuer key, the issuer certificate and the leaf key, PEM."""
        fmt = serialization.PrivateFormat.PKCS8
        none = serialization.NoEncryption()
        pem = serialization.Encoding.PEM
        return (
            self.key.private_bytes(pem, fmt, none),
            self.cert.public_bytes(pem),
            self.leaf_key.private_bytes(pem, fmt, none),
        )


def _leaf(issuer: _Issuer, name: str, not_before: _dt.datetime) -> bytes:
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer.cert.subject)
        .public_key(issuer.leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_before + LIFETIME)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(
            x509.UnrecognizedExtension(_SCT_STANDIN, b"\x04\x81\xf0" + os.urandom(240)),
            critical=False,
        )
    )
    leaf_public = issuer.leaf_key.public_key()
    cert = _with_profile(builder, leaf_public, issuer.key.public_key()).sign(
        issuer.key, hashes.SHA384()
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def _write_range(
    root: str, start: int, stop: int, count: int, now_iso: str, pems: tuple[bytes, bytes, bytes]
) -> int:
    """Worker: write certificates ``start..stop-1`` (cert, key, meta, some attempt states)."""
    issuer_key = serialization.load_pem_private_key(pems[0], None)
    assert isinstance(issuer_key, ec.EllipticCurvePrivateKey)
    leaf_key = serialization.load_pem_private_key(pems[2], None)
    assert isinstance(leaf_key, ec.EllipticCurvePrivateKey)
    issuer = _Issuer(issuer_key, x509.load_pem_x509_certificate(pems[1]), leaf_key)
    now = _dt.datetime.fromisoformat(now_iso)
    layout = KeyLayout(DIRECTORY_URL)
    base = Path(root)
    failed_every = round(1 / FAILED_FRACTION)
    for i in range(start, stop):
        name = cert_name(i)
        keys = layout.certificate(name)
        _write(base, keys.privkey, pems[2])
        _write(base, keys.cert, _leaf(issuer, name, issued_at(i, now, count)) + pems[1])
        meta = {
            "format": 1,
            "name": name,
            "identifiers": [name],
            "order_url": f"https://ca.invalid/order/{i}",
            "certificate_url": f"https://ca.invalid/cert/{i}",
        }
        _write(base, keys.meta, json.dumps(meta).encode())
        if i % failed_every == 0:
            state = AttemptState(
                attempts=1,
                next_attempt_at=now - _dt.timedelta(hours=1),
                last_error="TransportError: connection reset",
                last_error_kind="transient",
            )
            _write(base, layout.attempt_state(name), json.dumps(state.to_json()).encode())
    return stop - start


def write_certificates(root: Path, count: int, now: _dt.datetime, workers: int = 2) -> None:
    """Write ``count`` stored certificates under ``root``, in ``workers`` processes."""
    pems = _Issuer.make().pem_keys()
    bounds = [count * k // workers for k in range(workers + 1)]
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
        jobs = [
            pool.submit(_write_range, str(root), a, b, count, now.isoformat(), pems)
            for a, b in itertools.pairwise(bounds)
        ]
        written = sum(job.result() for job in jobs)
    assert written == count


async def write_ledger(storage: FileStorage, count: int, now: _dt.datetime) -> int:
    """Record the spends of the certificates issued in the last 7 days; store the ledger.

    The spends are recorded through the public API in a memory ledger (a stored ledger
    rewrites its file at every record), in the order they happened, then stored once.
    """
    clock = FakeClock(now - LEDGER_SPAN)
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock)
    recent = sorted(
        (issued_at(i, now, count), i)
        for i in range(count)
        if now - issued_at(i, now, count) < LEDGER_SPAN
    )
    for at, i in recent:
        clock.advance(max(_dt.timedelta(0), at - clock.now()))
        name = cert_name(i)
        await ledger.order_created([name], account=ACCOUNT_URL, renewal_of=[name])
        await ledger.certificate_issued([name], account=ACCOUNT_URL, renewal_of=[name])
    state = ledger._state  # no bulk export in the API: store the state as the ledger would
    await storage.store(KeyLayout(DIRECTORY_URL).ledger(), state.to_bytes())
    return state.size()


# -- a client with no CA behind it -------------------------------------------------------


def _no_ca(request: httpx.Request) -> httpx.Response:
    """The directory (no ARI), and 503 for anything else: nothing is issued."""
    if request.method == "GET" and str(request.url) == DIRECTORY_URL:
        base = "https://ca.invalid"
        return httpx.Response(
            200,
            json={
                "newNonce": f"{base}/nonce",
                "newAccount": f"{base}/account",
                "newOrder": f"{base}/order",
                "revokeCert": f"{base}/revoke",
                "keyChange": f"{base}/key-change",
            },
        )
    return httpx.Response(503, json={"type": "urn:ietf:params:acme:error:serverInternal"})


def make_client(ledger: RateLimitLedger) -> AcmeClient:
    """An ``AcmeClient`` with a ledger whose HTTP client answers only the directory."""
    transport = AcmeTransport(
        DIRECTORY_URL, client=httpx.AsyncClient(transport=httpx.MockTransport(_no_ca))
    )
    return AcmeClient(DIRECTORY_URL, transport=transport, account_url=ACCOUNT_URL, ledger=ledger)


# -- measuring ---------------------------------------------------------------------------


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0), if allowed."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _timed(fn: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


@dataclasses.dataclass
class Result:
    """One size's figures."""

    count: int
    write_s: float = 0.0
    load_s: float = 0.0
    rss_mib: float = 0.0
    peak_mib: float = 0.0
    idle_ms: list[float] = dataclasses.field(default_factory=list)
    due_ms: list[float] = dataclasses.field(default_factory=list)
    due_started: int = 0
    ledger_keys: int = 0
    check_ms: float = 0.0
    notes: list[str] = dataclasses.field(default_factory=list)


async def _wait_loaded(manager: CertificateManager, names: Sequence[str], limit: float) -> None:
    deadline = time.monotonic() + limit
    pending = list(names)
    while pending:
        pending = [n for n in pending if manager.renewal_at(n) is None]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} certificates not loaded after {limit:g} s")
        await anyio.sleep(0.05 if len(pending) < 5000 else 0.5)  # a scan costs too


def _tick_figures(
    manager: CertificateManager, names: Sequence[str], ticks: int, result: Result
) -> None:
    """Time ``_plan_tick``: after one change with nothing due, and with 1 % due."""
    now = manager.clock.now()
    changed = manager._entries[names[len(names) // 2]]
    touch: Callable[[Any], None] = getattr(manager, "_changed", lambda entry: None)

    def idle() -> None:
        touch(changed)
        due, _ = manager._plan_tick(now)
        assert not due, f"{len(due)} due at start"

    result.idle_ms = _timed(idle, ticks)
    renewals = sorted(t for n in names if (t := manager.renewal_at(n)) is not None)
    later = renewals[max(0, len(renewals) // 100 - 1)] + _dt.timedelta(microseconds=1)
    started: list[Any] = []

    def one_percent() -> None:
        for entry in started:  # their attempts would have ended and been planned again
            touch(entry)
        started[:] = manager._plan_tick(later)[0]

    one_percent()
    result.due_ms = _timed(one_percent, ticks)
    result.due_started = len(started)


async def measure(count: int, ticks: int, workdir: Path) -> Result:
    """Build the store, load it into a manager, and measure."""
    result = Result(count)
    now = _dt.datetime.now(_dt.UTC)
    root = workdir / f"store-{count}"
    start = time.perf_counter()
    await anyio.to_thread.run_sync(write_certificates, root, count, now)
    async with FileStorage(root) as storage:
        await write_ledger(storage, count, now)
        result.write_s = time.perf_counter() - start
        names = [cert_name(i) for i in range(count)]
        gc.collect()
        rss0 = _status("VmRSS")
        _reset_peak()
        start = time.perf_counter()
        layout = KeyLayout(DIRECTORY_URL)
        ledger = RateLimitLedger(LETS_ENCRYPT, storage=storage, key=layout.ledger())
        async with make_client(ledger) as client:
            manager = CertificateManager(
                client, solvers=[Http01Server(port=0)], storage=storage, clock=SystemClock()
            )
            for name in names:
                manager.manage(name)
            async with manager:
                await _wait_loaded(manager, names, limit=max(600.0, count / 20))
                result.load_s = time.perf_counter() - start
            check_start = time.perf_counter()
            await ledger.check([cert_name(1)], account=ACCOUNT_URL, renewal_of=[cert_name(1)])
            result.check_ms = (time.perf_counter() - check_start) * 1000
            result.ledger_keys = ledger._state.size()
            gc.collect()
            result.rss_mib = (_status("VmRSS") - rss0) / MIB
            result.peak_mib = (_status("VmHWM") - rss0) / MIB
            _tick_figures(manager, names, ticks, result)
    return result


def _ms(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def report(results: Sequence[Result]) -> str:
    """The figures as a Markdown table."""
    lines = [
        "| N | write store s | load s | RSS growth MiB | peak MiB | tick idle ms (median / max) "
        "| tick 1 % due ms (median / max) | started | ledger keys | ledger.check ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.count:,} | {r.write_s:.1f} | {r.load_s:.1f} | {r.rss_mib:.0f} | "
            f"{r.peak_mib:.0f} | {_ms(r.idle_ms)} | {_ms(r.due_ms)} | {r.due_started:,} | "
            f"{r.ledger_keys:,} | {r.check_ms:.1f} |"
        )
    return "\n".join(lines)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--count", type=int, action="append", help="certificates (repeatable; 100000)"
    )
    parser.add_argument("--ticks", type=int, default=20, help="ticks timed per figure")
    parser.add_argument("--dir", type=Path, help="where to write the stores (a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _run_one(count: int, args: argparse.Namespace) -> Result:
    """One size in a fresh process, so that no size inherits another's heap."""
    command = [sys.executable, __file__, "--one", "--count", str(count)]
    command += ["--ticks", str(args.ticks)] + (["--dir", str(args.dir)] if args.dir else [])
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    return Result(**json.loads(done.stdout.splitlines()[-1]))


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every size (each in its own process); print the table."""
    args = _arguments(argv)
    sizes = args.count or [100_000]
    if args.one:
        with tempfile.TemporaryDirectory(dir=args.dir) as workdir:
            result = anyio.run(measure, sizes[0], args.ticks, Path(workdir))
        print(json.dumps(dataclasses.asdict(result)))
        return 0
    results: list[Result] = []
    for count in sizes:
        result = _run_one(count, args)
        print(
            f"N={count:,}: load {result.load_s:.1f} s, RSS +{result.rss_mib:.0f} MiB, "
            f"tick {_ms(result.idle_ms)} ms idle, {_ms(result.due_ms)} ms 1 % due",
            file=sys.stderr,
            flush=True,
        )
        results.append(result)
    load = os.getloadavg()[0]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.1f}")
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
