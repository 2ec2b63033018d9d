"""A batch of certificates, issued in parallel by CertificateManager.issue_many.

    python examples/batch.py --count 100 --domain batch.example.com
    python examples/batch.py --names-file names.txt      # one certificate per line

A live progress display when stdout is a terminal (``rich``, from the ``cli`` extra), plain
lines otherwise. One failure or one slow validation does not hold up the others. With
Let's Encrypt the rate-limit ledger runs too, so a batch larger than the budget is not
refused by the CA: what does not fit is *deferred*, with the instant it will fit.

Exit status: 0 every certificate issued, 3 some deferred by rate limits (none failed),
1 some failed.

Configuration (flag, else environment variable, else default):
  --directory   ACMECERTS_DIRECTORY   the CA (default: Let's Encrypt *staging*)
  --ca-bundle   ACMECERTS_CA_BUNDLE   extra CA certificate to trust for the CA's HTTPS
  --http-port   ACMECERTS_HTTP_PORT   where to answer http-01 (the CA connects to 80)
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from acmecerts import AcmeClient, Http01Server
from acmecerts.manager import (
    CancelledResult,
    CertificateCancelled,
    CertificateDeferred,
    CertificateEvent,
    CertificateFailed,
    CertificateManager,
    CertificateObtained,
    CertificateObtaining,
    CertificateRateLimited,
    CertificateSpec,
    DeferredResult,
    FailedResult,
    IssuedResult,
    IssueResult,
)
from acmecerts.ratelimit import LETS_ENCRYPT, RateLimitLedger

STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"


def describe(event: CertificateEvent) -> tuple[str, str]:
    """``(state, detail)`` of a certificate after ``event``."""
    if isinstance(event, CertificateObtaining):
        return "ordering", f"attempt {event.attempt}"
    if isinstance(event, CertificateObtained):
        serial = event.certificate.serial if event.certificate else ""
        return "done", f"serial {serial}"
    if isinstance(event, CertificateFailed):
        retry = f"; next attempt {event.next_attempt_at:%H:%M:%S}" if event.next_attempt_at else ""
        return "failed", f"{event.error}{retry}"
    if isinstance(event, CertificateDeferred | CertificateRateLimited):
        until = f"{event.until:%Y-%m-%d %H:%M:%S} UTC" if event.until else "later"
        return "deferred", f"until {until}"
    if isinstance(event, CertificateCancelled):
        return "cancelled", event.reason
    return type(event).__name__, ""


class PlainProgress:
    """One line per state change, for logs and pipes."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.finished = 0

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def update(self, name: str, state: str, detail: str) -> None:
        if state in ("done", "failed", "deferred", "cancelled"):
            self.finished += 1
        print(f"[{self.finished}/{self.total}] {name}: {state} {detail}".rstrip(), flush=True)


class RichProgress:
    """A progress bar with counts by state, and a line for each problem."""

    def __init__(self, total: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]certificates"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
        )
        self.task = self.progress.add_task("", total=total)
        self.states: dict[str, str] = {}

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()

    def update(self, name: str, state: str, detail: str) -> None:
        self.states[name] = state
        counts = collections.Counter(self.states.values())
        finished = sum(counts[s] for s in ("done", "failed", "deferred", "cancelled"))
        self.progress.update(
            self.task,
            completed=finished,
            description=" ".join(f"{state} {n}" for state, n in sorted(counts.items())),
        )
        if state in ("failed", "deferred", "cancelled"):
            self.progress.console.print(f"{name}: {state} {detail}", markup=False)


def make_progress(total: int, *, plain: bool) -> PlainProgress | RichProgress:
    if not plain and sys.stdout.isatty():
        try:
            return RichProgress(total)
        except ImportError:  # rich comes with the cli extra
            pass
    return PlainProgress(total)


# --8<-- [start:batch]
async def issue_batch(
    specs: list[CertificateSpec],
    *,
    directory: str,
    ca_bundle: str | None,
    port: int,
    concurrency: int,
    ledger: RateLimitLedger | None,
    on_event: Callable[[CertificateEvent], Any],
) -> list[IssueResult]:
    async with (
        Http01Server(port=port) as solver,
        AcmeClient(directory, ca_bundle=ca_bundle, ledger=ledger) as client,
    ):
        manager = CertificateManager(client, solvers=[solver], concurrency=concurrency)
        manager.subscribe(on_event)
        return await manager.issue_many(specs)


# --8<-- [end:batch]


def read_specs(args: argparse.Namespace) -> list[CertificateSpec]:
    if args.names_file is not None:
        lines = [line.split() for line in Path(args.names_file).read_text().splitlines()]
        return [CertificateSpec.of(names[0], names) for names in lines if names]
    return [CertificateSpec.of(f"cert-{i:03d}.{args.domain}") for i in range(args.count)]


def summarize(results: list[IssueResult]) -> int:
    issued = [r for r in results if isinstance(r, IssuedResult)]
    failed = [r for r in results if isinstance(r, FailedResult | CancelledResult)]
    deferred = [r for r in results if isinstance(r, DeferredResult)]
    print(f"issued {len(issued)}, failed {len(failed)}, deferred {len(deferred)}", flush=True)
    for result in failed:
        print(f"  failed {result.name}: {getattr(result, 'error', None) or result.reason}")
    if deferred:
        last = max(r.until for r in deferred)
        print(f"  {len(deferred)} deferred by rate limits; the last until {last:%Y-%m-%d %H:%M}")
    if failed:
        return 1
    return 3 if deferred else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100, help="how many certificates")
    parser.add_argument("--domain", default="batch.example.com", help="their parent domain")
    parser.add_argument("--names-file", help="one certificate per line: its names")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--limits",
        choices=["auto", "letsencrypt", "none"],
        default="auto",
        help="rate-limit model of the ledger (auto: Let's Encrypt's for letsencrypt.org)",
    )
    parser.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    parser.add_argument("--directory", default=os.environ.get("ACMECERTS_DIRECTORY", STAGING))
    parser.add_argument("--ca-bundle", default=os.environ.get("ACMECERTS_CA_BUNDLE"))
    parser.add_argument(
        "--http-port", type=int, default=int(os.environ.get("ACMECERTS_HTTP_PORT", "80"))
    )
    args = parser.parse_args(argv)
    specs = read_specs(args)
    lets_encrypt = args.limits == "letsencrypt" or (
        args.limits == "auto" and "letsencrypt.org" in args.directory
    )
    ledger = RateLimitLedger(LETS_ENCRYPT) if lets_encrypt else None

    with make_progress(len(specs), plain=args.plain) as progress:

        def on_event(event: CertificateEvent) -> None:
            progress.update(event.name, *describe(event))

        results = anyio.run(
            lambda: issue_batch(
                specs,
                directory=args.directory,
                ca_bundle=args.ca_bundle,
                port=args.http_port,
                concurrency=args.concurrency,
                ledger=ledger,
                on_event=on_event,
            )
        )
    return summarize(results)


if __name__ == "__main__":
    sys.exit(main())
