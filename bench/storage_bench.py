"""The manager's store traffic for N certificates at once, without a CA: FileStorage alone.

    python bench/storage_bench.py              # N = 200, 3 rounds
    python bench/storage_bench.py --count 50 --rounds 5 --dir /var/tmp

Each of N concurrent tasks does what ``CertificateManager`` + ``FileStorage`` do to the
store for one new certificate (see ``acmecerts/manager/_manager.py`` and ``_persist.py``;
tests/integration/test_manager_store_ops.py counts the same against Pebble): read the
retired record, the certificate's record (``certificate.json``) and attempt state; take
the certificate's lock; read them again, the retired record and the order record; write
the order intent and then the order (``orders/``, secret); save the certificate (one
record: chain, key and metadata, secret); delete the order record; release the lock. The
first certificate's missing record also lists the certificates once (which of them are
still in the previous layout). Every value is fsynced as in production (lease files
are not). Prints the wall time, the process's CPU time (user + system, every thread;
in brackets system alone, and the event loop's thread alone: the rest is the worker
threads) and its context switches per certificate, the median over ``--rounds`` fresh stores in
``--dir`` (a real disk: fsync must cost what it costs; where on the disk matters, see
docs/performance.md). ``--dir /dev/shm`` (tmpfs: files cost the kernel next to nothing)
leaves the store's own mechanism: dispatch to threads, locking, encoding.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acmecerts.storage import FileStorage, KeyLayout

KEY_PEM = b"-----BEGIN PRIVATE KEY-----\n" + b"A" * 180 + b"\n-----END PRIVATE KEY-----\n"
CHAIN_PEM = b"-----BEGIN CERTIFICATE-----\n" + b"B" * 2600 + b"\n-----END CERTIFICATE-----\n"


RECORD = (
    b'{"certificate_url":"https://ca/cert/1","format":2,"fullchain_pem":"'
    + CHAIN_PEM.replace(b"\n", b"\\n")
    + b'","identifiers":["c.example"],"name":"c","not_after":"2026-03-01T00:00:00+00:00",'
    + b'"order_url":"https://ca/order/1","private_key_pem":"'
    + KEY_PEM.replace(b"\n", b"\\n")
    + b'","serial":"01"}'
)


class Listing:
    """The manager's one listing of the certificates (``CertificateStore._has_legacy``)."""

    def __init__(self) -> None:
        self.done = False
        self.lock = anyio.Lock()

    async def once(self, storage: FileStorage, layout: KeyLayout) -> None:
        if not self.done:
            async with self.lock:
                if not self.done:
                    await storage.list(layout.certificates_prefix())
                    self.done = True


async def one(storage: FileStorage, layout: KeyLayout, i: int, listing: Listing) -> None:
    name = f"c{i}"
    keys = layout.certificate(name)
    order = layout.order(name)
    attempts = layout.attempt_state(name)
    retired = f"{layout.account_prefix}retired/{i:064x}.json"
    await storage.load(retired)  # the first _load: reclaim, then the certificate ...
    if await storage.load(keys.record) is None:
        await listing.once(storage, layout)  # ... none: is it in the previous layout?
    await storage.load(attempts)
    async with storage.lock(layout.certificate_lock(name), lease=120):
        for key in (keys.record, attempts, retired, order):  # _load again, _adopt, load_order
            await storage.load(key)
        await storage.store(order, b'{"order_url":null,"private_key_pem":"..."}', secret=True)
        await storage.store(order, b'{"order_url":"https://ca/order/1","pem":"..."}', secret=True)
        await storage.store(keys.record, RECORD, secret=True)
        await storage.delete(order)
        # no delete of the attempt state: read as absent under this lock


def usage() -> tuple[float, float, int]:
    """CPU (user + system), system CPU, and context switches of the process so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_stime, ru.ru_nvcsw + ru.ru_nivcsw


async def round_(count: int, base: str) -> tuple[float, float, float, int, float]:
    """Wall time, CPU, system CPU, context switches and the event loop's CPU of one round."""
    with tempfile.TemporaryDirectory(dir=base, prefix="acmecerts-storage-bench-") as tmp:
        layout = KeyLayout("https://ca.example/dir")
        async with FileStorage(Path(tmp) / "store") as storage:
            await storage.store(f"{layout.account_prefix}key.pem", KEY_PEM)  # the tree exists
            (cpu0, sys0, csw0), t0 = usage(), time.perf_counter()
            loop0 = time.thread_time()
            listing = Listing()
            async with anyio.create_task_group() as tg:
                for i in range(count):
                    tg.start_soon(one, storage, layout, i, listing)
            loop = time.thread_time() - loop0
            cpu1, sys1, csw1 = usage()
            return time.perf_counter() - t0, cpu1 - cpu0, sys1 - sys0, csw1 - csw0, loop


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="on a real disk")
    args = parser.parse_args()
    results = [await round_(args.count, args.dir) for _ in range(args.rounds)]
    wall = statistics.median(r[0] for r in results)
    cpu = statistics.median(r[1] for r in results)
    system = statistics.median(r[2] for r in results)
    switches = statistics.median(r[3] for r in results)
    loop = statistics.median(r[4] for r in results)
    per_cert = 1000 / args.count
    print(
        f"N={args.count}: {wall:.2f} s wall, {args.count / wall:.0f} certificates/s of store "
        f"traffic, {cpu * per_cert:.2f} ms CPU/cert (sys {system * per_cert:.2f}, event loop "
        f"{loop * per_cert:.2f}), "
        f"{switches / args.count:.0f} context switches/cert (median of {args.rounds}; "
        f"load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    anyio.run(main)
