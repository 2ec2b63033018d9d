"""``python -m acmecerts.testing.fleet``: run fleet scenarios, print a table, write JSON.

::

    $ python -m acmecerts.testing.fleet onboarding churn --certificates 500 --days 30 \\
          --seed 1 --json fleet.json

Every scenario named runs in turn (``all``: every one) with the acmecerts strategy; the
table has one column per run. ``--days`` and ``--certificates`` default to each
scenario's own. The table is drawn with ``rich`` when it is installed (the ``cli``
extra), as plain text otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acmecerts.testing.fleet._baselines import STRATEGIES, strategy
from acmecerts.testing.fleet._measures import Measures
from acmecerts.testing.fleet._run import FleetRun
from acmecerts.testing.fleet._scenarios import SCENARIOS

__all__ = ["ROWS", "main", "table_rows"]

#: The table's rows: (label, field of :class:`Measures`).
ROWS: tuple[tuple[str, str], ...] = (
    ("certificates", "certificates"),
    ("days", "days"),
    ("wall seconds", "wall_seconds"),
    ("CPU s / simulated day", "cpu_seconds_per_day"),
    ("peak memory MiB", "peak_rss_mib"),
    ("hours to full coverage", "time_to_full_coverage_hours"),
    ("lower bound, hours", "lower_bound_hours"),
    ("cert-hours missing", "missing_certificate_hours"),
    ("cert-hours expired", "expired_certificate_hours"),
    ("rate-limit 429s", "rate_limit_429"),
    ("rate-limit 503s", "rate_limit_503"),
    ("outage 503s", "outage_503"),
    ("paused identifiers", "paused_identifiers"),
    ("CA requests / cert / day", "ca_requests_per_certificate_day"),
    ("needed / cert / day", "needed_requests_per_certificate_day"),
    ("requests / needed", "request_ratio"),
    ("orders", "orders"),
    ("peak orders / hour", "peak_orders_per_hour"),
    ("store ops / issued cert", "store_ops_per_issued_certificate"),
    ("store ops / cert-day at rest", "store_ops_per_certificate_day_at_rest"),
    ("replaced before deadline (e)", "replaced_before_deadline"),
    ("lapsed with 24 h left (d)", "outage_lapsed_with_24h"),
    ("zombie orders (f)", "zombie_orders"),
    ("zombie longest failure run (f)", "zombie_max_consecutive_failures"),
    ("duplicate issuances", "duplicate_issuances"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def table_rows(results: Sequence[Measures]) -> list[list[str]]:
    """The table as text cells: a label, then one cell per run."""
    return [[label, *(_cell(getattr(m, field)) for m in results)] for label, field in ROWS]


def _print(results: Sequence[Measures]) -> None:
    rows = table_rows(results)
    headers = ["measure", *(f"{m.scenario} ({m.strategy})" for m in results)]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # the cli extra is not installed: plain columns
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
        for row in [headers, *rows]:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        return
    table = Table(title="acmecerts fleet on the simulated Let's Encrypt")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m acmecerts.testing.fleet",
        description="Run fleet scenarios on the simulated Let's Encrypt and measure them.",
    )
    parser.add_argument(
        "scenarios",
        nargs="+",
        choices=[*SCENARIOS, "all"],
        metavar="SCENARIO",
        help=f"one or more of: {', '.join(SCENARIOS)}, or all",
    )
    parser.add_argument("--certificates", type=int, default=None, help="the fleet's size")
    parser.add_argument("--days", type=float, default=None, help="simulated days")
    parser.add_argument("--seed", type=int, default=0, help="seeds the run (default 0)")
    parser.add_argument("--json", type=Path, default=None, help="write the measures here")
    parser.add_argument(
        "--strategy",
        action="append",
        choices=list(STRATEGIES),
        metavar="STRATEGY",
        help=f"one of: {', '.join(STRATEGIES)} (repeat for several; default acmecerts)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the scenarios named in ``argv``; 0 when every run finished."""
    args = _parser().parse_args(argv)
    names = list(SCENARIOS) if "all" in args.scenarios else list(dict.fromkeys(args.scenarios))
    results = []
    for name in names:
        for chosen in args.strategy or ["acmecerts"]:
            run = FleetRun(
                name,
                certificates=args.certificates,
                days=args.days,
                seed=args.seed,
                strategy=strategy(chosen),
            )
            results.append(run.run())
            print(f"{name} ({chosen}): {results[-1].wall_seconds} s", file=sys.stderr)
    _print(results)
    if args.json is not None:
        args.json.write_text(json.dumps([m.as_dict() for m in results], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
