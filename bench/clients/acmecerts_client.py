"""acmecerts through its public API: one ``AcmeClient``, N ``issue()`` calls in a task group.

Run by ``bench/run.py`` (see ``_common.py`` for the protocol). ``--http2`` uses httpx's
HTTP/2 transport instead of the default HTTP/1.1 pool (``Http11Pool``).
``--profile FILE`` writes a cProfile of the measured phase (``python -m pstats FILE``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LoopLag, Phase, count_certificates, names_for, parse_args

from acmecerts import AcmeClient, Http01Server


def _extra(parser) -> None:
    parser.add_argument("--http2", action="store_true", help="httpx HTTP/2 instead of Http11Pool")
    parser.add_argument("--profile", default=None, help="cProfile the measured phase to FILE")


async def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], _extra)
    phase = Phase()
    errors: list[str] = []
    issued = 0
    async with (
        Http01Server(host="127.0.0.1", port=args.http_port) as solver,
        AcmeClient(args.directory, ca_bundle=args.ca, http2=args.http2) as client,
    ):
        await client.register()  # directory, nonce, account: the warm-up
        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile(time.process_time)  # CPU time, not wall time
        phase.ready_and_wait()
        lag = LoopLag()
        lag.start()
        if profiler is not None:
            profiler.enable()

        async def one(i: int) -> None:
            nonlocal issued
            try:
                cert = await client.issue(names_for(args, i), solver=solver)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            else:
                issued += count_certificates(cert.fullchain_pem) > 0

        async with anyio.create_task_group() as tg:
            for i in range(args.count):
                tg.start_soon(one, i)
        if profiler is not None:
            profiler.disable()
        phase.done(issued=issued, errors=errors, **lag.stop())
        if profiler is not None:
            profiler.dump_stats(args.profile)


if __name__ == "__main__":
    anyio.run(main)
