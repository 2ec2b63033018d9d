"""Benchmark: issue N single-name certificates concurrently against a local Pebble.

For the side-by-side comparison with peers (certbot acme, aioacme, lego), use
``bench/run.py``; this one runs acmecerts in-process, for quick iterations.

Prints, per N: wall seconds, certificates per second, client CPU (total and per
certificate), peak RSS of this process, and ACME requests per certificate (counted with
the client's ``RequestSent`` events; the account registration and directory fetch of the
warm-up are excluded, so the figure is per certificate with a warm nonce pool).

    python bench/issue_bench.py            # N = 1, 50, 200
    python bench/issue_bench.py 1 10 500   # other sizes
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import anyio

from acmecerts import AcmeClient, Http01Server
from acmecerts.client import ClientEvent, RequestSent
from acmecerts.testing import PebbleServer

HTTP2 = "--http2" in sys.argv  # httpx's HTTP/2 transport instead of the default pool
if HTTP2:
    sys.argv.remove("--http2")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run(pebble: PebbleServer, n: int, names_per_cert: int, round_no: int) -> dict[str, float]:
    requests = 0

    def count(event: ClientEvent) -> None:
        nonlocal requests
        if isinstance(event, RequestSent):
            requests += 1

    async with (
        Http01Server(host="127.0.0.1", port=pebble.http_port) as solver,
        AcmeClient(
            pebble.directory_url,
            ca_bundle=pebble.ca_bundle,
            http2=HTTP2,
        ) as client,
    ):
        client.subscribe(count)
        # warm-up: directory, account, one nonce in the pool
        await client.register()
        requests = 0
        cpu0, t0 = _cpu(), time.perf_counter()

        async def one(i: int) -> None:
            names = [f"c{i}-{j}.r{round_no}.bench.test" for j in range(names_per_cert)]
            await client.issue(names, solver=solver)

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        wall = time.perf_counter() - t0
        cpu = _cpu() - cpu0
    return {
        "n": n,
        "names": names_per_cert,
        "wall_s": wall,
        "certs_per_s": n / wall,
        "cpu_s": cpu,
        "cpu_ms_per_cert": 1000 * cpu / n,
        "requests_per_cert": requests / n,
        "peak_rss_mib": _peak_rss_mib(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[1, 50, 200])
    parser.add_argument("--names", type=int, default=1, help="names per certificate")
    parser.add_argument("--timeout", type=float, default=600, help="give up after this")
    args = parser.parse_args()
    header = (
        f"{'N':>5} {'names':>5} {'wall s':>8} {'certs/s':>8} {'cpu ms/cert':>11} "
        f"{'req/cert':>8} {'peak RSS MiB':>12}"
    )
    print(header)
    with (
        tempfile.TemporaryDirectory() as tmp,
        PebbleServer(Path(tmp), authz_reuse_percent=0) as pebble,
    ):
        for round_no, n in enumerate(args.sizes):

            async def measured(n: int = n, r: int = round_no) -> dict[str, float]:
                with anyio.fail_after(args.timeout):
                    return await run(pebble, n, args.names, r)

            row = anyio.run(measured)
            print(
                f"{row['n']:>5.0f} {row['names']:>5.0f} {row['wall_s']:>8.2f} "
                f"{row['certs_per_s']:>8.1f} {row['cpu_ms_per_cert']:>11.1f} "
                f"{row['requests_per_cert']:>8.2f} {row['peak_rss_mib']:>12.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
