"""What one ARI renewalInfo check costs, layer by layer, against the simulated Let's Encrypt.

    python bench/ari_path.py                     # every layer, a few seconds
    python bench/ari_path.py --profile client    # and cProfile's top items for one layer
    python bench/ari_path.py --certs 500 --requests 50000 --days 4

Issue #26: a fleet of 10,000 certificates checks renewalInfo at Let's Encrypt's 6-hour
``Retry-After``, about 40,000 requests a simulated day, so 90 simulated days are 3.6 M
requests. Each figure is CPU time (``time.process_time``) per renewalInfo request, in
microseconds, on a :class:`~acmecerts.VirtualClock` (time jumps, so only CPU counts):

* ``ca``: the simulated CA alone (``SimulatedCA.answer``), the floor;
* ``transport``: ``AcmeTransport.get`` of the renewalInfo URL (URL policy, throttle at
  Let's Encrypt's request rates, retry wrapper, answer checks) plus the CA;
* ``client``: ``AcmeClient.renewal_info(certificate)`` (certID, URL, parse, window) plus
  the layers under it;
* ``recheck``: the manager's re-check of one held certificate (``plan_renewal`` through
  ``CertificateManager``: the leaf, the answer, the renewal instant);
* ``at rest``: a whole ``CertificateManager`` keeping ``--certs`` certificates for
  ``--days`` simulated days after issuing them (scheduler, wake-ups, store), per
  renewalInfo request it made; with the store operations per certificate-day.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import datetime as _dt
import io
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from acmecerts import AcmeClient, VirtualClock  # noqa: E402
from acmecerts.manager import CertificateManager, IssuedResult  # noqa: E402
from acmecerts.protocol.ari import cert_id  # noqa: E402
from acmecerts.protocol.keys import AccountKey  # noqa: E402
from acmecerts.ratelimit import LETS_ENCRYPT  # noqa: E402
from acmecerts.storage import FileStorage  # noqa: E402
from acmecerts.testing.fleet import CountingStorage  # noqa: E402
from acmecerts.testing.simulated_ca import Limit, Limits, SimulatedCA, SimulatedSolver  # noqa: E402
from acmecerts.transport import AcmeTransport  # noqa: E402

START = _dt.datetime(2026, 12, 2, tzinfo=_dt.UTC)
LAYERS = ("ca", "transport", "client", "recheck", "rest")


@dataclasses.dataclass
class Figure:
    """CPU microseconds per renewalInfo request of one layer."""

    layer: str
    requests: int
    cpu: float
    extra: str = ""

    @property
    def us(self) -> float:
        return self.cpu / self.requests * 1e6 if self.requests else float("nan")


def _names(n: int) -> list[str]:
    # 200 registered domains: under 50 certificates per domain per week up to 10,000
    return [f"svc{i}.team{i % 200}.example" for i in range(n)]


def _ca(clock: VirtualClock) -> SimulatedCA:
    # Let's Encrypt's limits, but orders unlimited: the bench issues its fleet at once
    # (and a burst one larger than the client's throttle: the CA's float buckets and the
    # client's microsecond ones disagree by rounding at the edge, a 503 now and then)
    rates = {k: (rate, burst + 1) for k, (rate, burst) in (Limits().request_rates or {}).items()}
    limits = dataclasses.replace(
        Limits(), new_orders_per_account=Limit(10**9, 3600), request_rates=rates
    )
    return SimulatedCA(clock, seed=26, limits=limits)


def _client(ca: SimulatedCA) -> AcmeClient:
    transport = AcmeTransport(
        ca.directory_url,
        client=ca,
        clock=ca.clock,
        request_rates=LETS_ENCRYPT.request_rates,  # as against Let's Encrypt
    )
    return AcmeClient(
        ca.directory_url, transport=transport, clock=ca.clock, account_key=AccountKey.generate()
    )


class _Profiler:
    def __init__(self, wanted: str | None, top: int) -> None:
        self.wanted = wanted
        self.top = top
        self.reports: dict[str, str] = {}

    @contextlib.contextmanager
    def measure(self, layer: str) -> Any:
        profile = cProfile.Profile() if self.wanted in (layer, "all") else None
        if profile is not None:
            profile.enable()
        try:
            yield
        finally:
            if profile is not None:
                profile.disable()
                out = io.StringIO()
                stats = pstats.Stats(profile, stream=out)
                stats.sort_stats("tottime").print_stats(self.top)
                self.reports[layer] = out.getvalue()


async def _timed(
    layer: str,
    count: int,
    one: Callable[[int], Awaitable[object]],
    profiler: _Profiler,
    clock: VirtualClock,
    repeat: int = 3,
) -> Figure:
    best = float("inf")
    per_round = count // repeat
    for _ in range(repeat):  # the best of a few rounds: the machine is shared
        await clock.sleep(1)  # every request bucket full again (the CA's, the client's)
        began = time.process_time()
        with profiler.measure(layer):
            for i in range(per_round):
                if i % 50 == 0:
                    # 500 requests a second of virtual time: under Let's Encrypt's 1,000/s,
                    # so none waits for the throttle (a fleet's 40,000 a day never does)
                    await clock.sleep(0.1)
                await one(i)
        best = min(best, time.process_time() - began)
    return Figure(layer, per_round, best)


def layers(args: argparse.Namespace, profiler: _Profiler) -> list[Figure]:
    """The ca, transport, client and recheck layers, on one fleet."""
    clock = VirtualClock(START)
    ca = _ca(clock)
    figures: list[Figure] = []

    async def main() -> None:
        client = _client(ca)
        solver = SimulatedSolver(ca.published)
        manager = CertificateManager(client, solvers=[solver], clock=clock)
        async with manager:
            names = _names(args.certs)
            results = await manager.issue_many(names)
            issued = [r for r in results if isinstance(r, IssuedResult)]
            assert len(issued) == len(names), results
            entries = [manager._entries[n] for n in names]
            leaves = [r.certificate.chain.leaf for r in issued]
            directory = await client.directory()
            assert directory.renewal_info is not None
            urls = [f"{directory.renewal_info}/{cert_id(leaf)}" for leaf in leaves]
            parsed = [httpx.URL(u) for u in urls]
            n = len(urls)
            src = ca.source
            count = args.requests
            before = ca.stats[("renewalInfo", 200)]
            figures.append(
                await _timed(
                    "ca",
                    count,
                    lambda i: ca.answer("GET", parsed[i % n], b"", src),
                    profiler,
                    clock,
                )
            )
            transport = client.transport
            figures.append(
                await _timed(
                    "transport", count, lambda i: transport.get(urls[i % n]), profiler, clock
                )
            )
            figures.append(
                await _timed(
                    "client",
                    count,
                    lambda i: client.renewal_info(leaves[i % n]),
                    profiler,
                    clock,
                )
            )
            recheck = manager._renewals.plan
            figures.append(
                await _timed("recheck", count, lambda i: recheck(entries[i % n]), profiler, clock)
            )
            answered = ca.stats[("renewalInfo", 200)] - before
            assert answered >= 4 * (count // 3 * 3), (answered, count, ca.stats, ca.refusals)
            assert not ca.refusals["request_rate:renewalInfo"], ca.refusals

    clock.run(main)
    return figures


def at_rest(args: argparse.Namespace, profiler: _Profiler) -> Figure:
    """A manager keeping its fleet for ``--days`` simulated days, nothing to renew."""
    clock = VirtualClock(START)
    ca = _ca(clock)
    figure = Figure("rest", 0, 0.0)

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            storage = CountingStorage(FileStorage(Path(tmp)))
            client = _client(ca)
            manager = CertificateManager(
                client, solvers=[SimulatedSolver(ca.published)], clock=clock, storage=storage
            )
            names = _names(args.certs)
            async with manager:
                for name in names:
                    # 90-day certificates: no renewal falls in the days measured
                    manager.manage(name, [name], profile="classic")
                while any(manager.status(n).not_after is None for n in names):  # type: ignore[union-attr]
                    await clock.sleep(60)
                await clock.sleep(6 * 3600)  # every first re-check planned
                storage.ops.clear()
                before = ca.stats[("renewalInfo", 200)]
                orders = ca.stats[("newOrder", 201)]
                began = time.process_time()
                with profiler.measure("rest"):
                    await clock.sleep(args.days * 86400)
                figure.cpu = time.process_time() - began
                figure.requests = ca.stats[("renewalInfo", 200)] - before
                assert ca.stats[("newOrder", 201)] == orders, "nothing renews at rest"
                ops = sum(storage.ops.values())
                figure.extra = (
                    f"{figure.requests / args.certs / args.days:.2f} renewalInfo and "
                    f"{ops / args.certs / args.days:.3f} store operations per certificate-day "
                    f"({dict(storage.ops)})"
                )

    clock.run(main)
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--certs", type=int, default=200, help="certificates in the fleet")
    parser.add_argument("--requests", type=int, default=20000, help="requests per layer")
    parser.add_argument("--days", type=float, default=3, help="simulated days at rest")
    parser.add_argument(
        "--profile", choices=(*LAYERS, "all"), help="print cProfile's top items for a layer"
    )
    parser.add_argument("--top", type=int, default=25, help="profile lines to print")
    parser.add_argument("--skip-rest", action="store_true", help="no manager-at-rest run")
    args = parser.parse_args()
    profiler = _Profiler(args.profile, args.top)
    figures = layers(args, profiler)
    if not args.skip_rest:
        figures.append(at_rest(args, profiler))
    print(f"{'layer':<10} {'requests':>9} {'us/request':>11}  (CPU, {args.certs} certificates)")
    for f in figures:
        print(f"{f.layer:<10} {f.requests:>9} {f.us:>11.1f}  {f.extra}")
    per_day = 40_000
    rest = figures[-1] if figures[-1].layer == "rest" else figures[3]
    print(
        f"10,000 certificates x 90 days at {rest.layer!r}'s cost: "
        f"{per_day * 90 * rest.us / 1e6:.0f} s of renewalInfo CPU"
    )
    for layer, report in profiler.reports.items():
        print(f"\n--- cProfile, {layer} (top {args.top} by own time) ---")
        print(report)


if __name__ == "__main__":
    main()
