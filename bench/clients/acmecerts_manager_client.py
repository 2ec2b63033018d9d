"""acmecerts as operators run it: ``CertificateManager`` + ``FileStorage``, one ``issue_many``.

Run by ``bench/run.py`` (see ``_common.py`` for the protocol). One ``AcmeClient`` (the same
defaults as ``acmecerts_client.py``), one ``Http01Server``, a ``FileStorage`` in the run's
scratch directory and a manager with ``concurrency`` = N, so every certificate is ordered at
once as in the bare client's run; the measured phase is ``issue_many`` of the N names, which
stores every key, certificate, order record and attempt state (each write fsynced) and
takes the store's lock per certificate. ``--no-store``: the same manager without a store
(what the manager itself costs). ``--profile FILE`` writes a cProfile of that phase.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LoopLag, Phase, count_certificates, names_for, parse_args

from acmecerts import AcmeClient, Http01Server
from acmecerts.manager import CertificateManager, IssuedResult
from acmecerts.storage import FileStorage


def _extra(parser) -> None:
    parser.add_argument("--profile", default=None, help="cProfile the measured phase to FILE")
    parser.add_argument(
        "--no-store", action="store_true", help="a manager without storage (what the store costs)"
    )


async def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], _extra)
    workdir = Path(args.workdir)
    phase = Phase()
    errors: list[str] = []
    issued = 0
    async with (
        Http01Server(host="127.0.0.1", port=args.http_port) as solver,
        AcmeClient(args.directory, ca_bundle=args.ca) as client,
        FileStorage(workdir / "store") as storage,  # created on the first write
    ):
        await client.register()  # directory, nonce, account: the warm-up
        manager = CertificateManager(
            client,
            solvers=[solver],
            storage=None if args.no_store else storage,
            concurrency=max(1, args.count),
        )
        specs = [manager.manage(f"c{i}", names_for(args, i)) for i in range(args.count)]
        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile(time.process_time)  # CPU time, not wall time
        phase.ready_and_wait()
        lag = LoopLag()
        lag.start()
        if profiler is not None:
            profiler.enable()
        results = await manager.issue_many(specs)
        if profiler is not None:
            profiler.disable()
        for result in results:
            if isinstance(result, IssuedResult):
                issued += count_certificates(result.certificate.fullchain_pem) > 0
            else:
                errors.append(f"{type(result).__name__}: {result}")
        phase.done(issued=issued, errors=errors, **lag.stop())
        if profiler is not None:
            profiler.dump_stats(args.profile)


if __name__ == "__main__":
    anyio.run(main)
