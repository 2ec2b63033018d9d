"""Coverage over time per strategy, for fleet scenarios (a), (b) and (e): the chart of
docs/fleet.md, and the measures of every run.

    python bench/fleet_chart.py --out docs/img/fleet-coverage.png --json fleet-chart.json

Each scenario runs with every strategy of ``acmecerts.testing.fleet.STRATEGIES`` at the
sizes below (``--onboarding``, ``--steady``, ``--revocation``: certificates and days),
the same seed for all; prints the measures' table and draws one panel per scenario.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from acmecerts.testing.fleet import SCENARIOS, STRATEGIES, FleetRun, strategy
from acmecerts.testing.fleet.__main__ import _print
from acmecerts.testing.fleet._chart import Recorded, draw


def _size(text: str) -> tuple[int, float]:
    n, days = text.split("x")
    return int(n), float(days)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onboarding", type=_size, default=(320, 1.5), help="N x DAYS")
    parser.add_argument("--steady", type=_size, default=(60, 60.0), help="N x DAYS")
    parser.add_argument("--revocation", type=_size, default=(150, 4.0), help="N x DAYS")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("docs/img/fleet-coverage.png"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    panels, measures = {}, []
    for name in ("onboarding", "steady", "revocation"):
        n, days = getattr(args, name)
        panels[name] = []
        for chosen in STRATEGIES:
            recorded = Recorded(strategy(chosen), every=3600.0 if days <= 10 else 6 * 3600.0)
            m = FleetRun(name, certificates=n, days=days, seed=args.seed, strategy=recorded).run()
            assert recorded.series is not None
            panels[name].append(recorded.series)
            measures.append(m)
            print(f"{name} ({chosen}): {m.wall_seconds} s", file=sys.stderr)
    titles = {
        name: f"{SCENARIOS[name].title}: {getattr(args, name)[0]} certificates" for name in panels
    }
    draw(panels, args.out, titles=titles)
    _print(measures)
    if args.json is not None:
        out = {
            "measures": [m.as_dict() for m in measures],
            "series": [s.as_dict() for ss in panels.values() for s in ss],
        }
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
