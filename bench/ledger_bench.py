"""Benchmark: rate-limit ledger decisions with 100,000 certificates across 1,000 domains.

Two histories are recorded with Let's Encrypt's limits, each for ``--certs`` managed
certificates under ``--domains`` registered domains (``--names`` names each):

* *steady*: every certificate was issued once in the last 60 days (the renewal cadence
  of 90-day certificates), 90 % of them as renewals of the same names, and one in 50
  had a failed validation;
* *burst* (the worst case for memory): every certificate was issued in the last 24 hours.

On the steady ledger it times ``check`` (may this order be sent now?), ``reserve``
(check and spend), ``plan`` (when will each of 1,000 queued certificates be issued?)
and ``reserve`` through a ``FileStorage`` (read, compare-and-swap write, fsync). For
both it reports the ledger's memory (tracemalloc), its JSON size, and live buckets;
finally the process' peak RSS. Identifiers are parsed once up front, as the manager
holds them; ``check (strings)`` shows the cost of passing fresh strings instead.

    python bench/ledger_bench.py                 # 100,000 certificates, 1,000 domains
    python bench/ledger_bench.py --certs 10000   # smaller
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import random
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acmecerts import FakeClock
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.ratelimit import LETS_ENCRYPT, IssuanceRequest, RateLimitLedger
from acmecerts.ratelimit._state import to_us
from acmecerts.storage import FileStorage, KeyLayout

ACCOUNT = "https://acme-v02.api.letsencrypt.org/acme/acct/123456789"
NOW = dt.datetime(2026, 1, 8, tzinfo=dt.UTC)


def certificate_names(certs: int, domains: int, names: int) -> list[list[str]]:
    tlds = ["com", "net", "org", "co.uk", "com.au", "de"]
    fleet = []
    for i in range(certs):
        domain = f"dom{i % domains}.{tlds[i % domains % len(tlds)]}"
        fleet.append([f"{'www' if j == 0 else f'n{j}'}.site{i}.{domain}" for j in range(names)])
    return fleet


async def populate(
    ledger: RateLimitLedger, clock: FakeClock, fleet: list[tuple[Identifier, ...]], days: float
) -> None:
    """Record ``days`` of issuance, oldest first, and a few failed validations."""
    rng = random.Random(1)
    start = NOW - dt.timedelta(days=days)
    offsets = sorted(rng.uniform(0, days * 86400) for _ in fleet)
    order = list(range(len(fleet)))
    rng.shuffle(order)
    for offset, index in zip(offsets, order, strict=True):
        clock._now = start + dt.timedelta(seconds=offset)  # replaying history
        names = fleet[index]
        renewal = names if index % 10 else None
        await ledger.order_created(names, account=ACCOUNT, renewal_of=renewal)
        await ledger.certificate_issued(names, account=ACCOUNT, renewal_of=renewal)
        if index % 50 == 0:
            await ledger.authorization_failed(names[0], account=ACCOUNT)
    clock._now = NOW


async def measure(fleet: list[tuple[Identifier, ...]], days: float, label: str) -> RateLimitLedger:
    clock = FakeClock(NOW)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock)
    t0 = time.perf_counter()
    await populate(ledger, clock, fleet, days)
    seconds = time.perf_counter() - t0
    await ledger.reserve(["prune.example"], account=ACCOUNT)  # a write now: prunes
    ledger._state.prune(ledger.model, to_us(NOW))
    gc.collect()
    state_bytes = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    print(
        f"  {label}: {2 * len(fleet):,} spends recorded in {seconds:.1f} s "
        f"({seconds * 1e6 / (2 * len(fleet)):.0f} µs each); live buckets "
        f"{ledger._state.size():,}; memory {state_bytes / 2**20:.1f} MiB; "
        f"JSON {len(ledger._state.to_bytes()) / 2**20:.2f} MiB"
    )
    return ledger


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>12,.0f} /s  ({seconds * 1e6 / count:,.1f} µs each)"


async def main(certs: int, domains: int, names: int, decisions: int) -> None:
    texts = certificate_names(certs, domains, names)
    fleet = [parse_identifiers(n) for n in texts]
    print(f"ledger of {certs:,} certificates, {domains:,} registered domains, {names} names each")
    await measure(fleet, 1, "burst (all in 24 h)")
    ledger = await measure(fleet, 60, "steady (60 days)")

    rng = random.Random(2)
    picks = [rng.randrange(certs) for _ in range(decisions)]
    sample = [fleet[i] for i in picks]
    t0 = time.perf_counter()
    allowed = 0
    for idents in sample:
        allowed += (await ledger.check(idents, account=ACCOUNT, renewal_of=idents)).allowed
    seconds = time.perf_counter() - t0
    print(f"  check (renewal):   {rate(decisions, seconds)}  {allowed:,}/{decisions:,} allowed")
    t0 = time.perf_counter()
    allowed = 0
    for idents in sample:
        allowed += (await ledger.check(idents, account=ACCOUNT)).allowed
    seconds = time.perf_counter() - t0
    print(f"  check (new):       {rate(decisions, seconds)}  {allowed:,}/{decisions:,} allowed")
    t0 = time.perf_counter()
    for i in picks:
        await ledger.check(texts[i], account=ACCOUNT)
    seconds = time.perf_counter() - t0
    print(f"  check (strings):   {rate(decisions, seconds)}")
    t0 = time.perf_counter()
    for k, idents in enumerate(sample):
        await ledger.reserve(idents, account=ACCOUNT, renewal_of=idents if k % 10 else None)
    seconds = time.perf_counter() - t0
    print(f"  reserve:           {rate(decisions, seconds)}")

    queue = [
        IssuanceRequest(
            fleet[rng.randrange(certs)],
            expires_at=NOW + dt.timedelta(days=i % 30) if i % 10 else None,
        )
        for i in range(1000)
    ]
    t0 = time.perf_counter()
    plan = await ledger.plan(queue, account=ACCOUNT)
    seconds = time.perf_counter() - t0
    latest = max(p.at for p in plan if p.at is not None)
    print(f"  plan of 1,000 queued certificates: {seconds * 1000:.0f} ms (last one at {latest})")

    blob = ledger._state.to_bytes()
    with tempfile.TemporaryDirectory() as root:
        storage = FileStorage(root)
        key = KeyLayout("https://acme-v02.api.letsencrypt.org/directory").ledger()
        await storage.store(key, blob)
        stored = RateLimitLedger(LETS_ENCRYPT, clock=ledger.clock, storage=storage, key=key)
        n = 50
        t0 = time.perf_counter()
        for idents in sample[:n]:
            await stored.reserve(idents, account=ACCOUNT, renewal_of=idents)
        seconds = time.perf_counter() - t0
        size = len(blob) / 2**20
        print(f"  reserve in FileStorage ({size:.2f} MiB ledger): {rate(n, seconds)}")

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS of the process: {peak:.0f} MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--certs", type=int, default=100_000)
    parser.add_argument("--domains", type=int, default=1_000)
    parser.add_argument("--names", type=int, default=2, help="names per certificate")
    parser.add_argument("--decisions", type=int, default=20_000)
    args = parser.parse_args()
    anyio.run(main, args.certs, args.domains, args.names, args.decisions)
