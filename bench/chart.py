"""Draw the side-by-side run as an SVG: certificates/s and CPU per certificate, every row.

    python bench/run.py --json results.json ...
    python bench/chart.py results.json -o docs/performance.svg

Reads the ``table`` of ``bench/run.py``'s JSON (medians over its repeats) and draws two
panels sharing one legend: certificates per second (higher is better) and client CPU
milliseconds per certificate (lower is better), one group of bars per N, one bar per client
or path. Rows timed from process start to exit (``acmecerts-cli``, ``certbot-acme-process``)
are hatched. Needs matplotlib, which is not a dependency of acmecerts: it comes with
``bash bench/setup_peers.sh --tools`` (the ``bench-tools`` venv) and with ``nox -s bench``.
The SVG is deterministic for a given JSON (no date, fixed ids), so it diffs cleanly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: Bar order and colours: acmecerts' paths in blues, the raw floor in green, peers in warm
#: tones; the process-timed pair shares a colour with its phase-timed sibling.
STYLE: dict[str, tuple[str, str]] = {
    "acmecerts": ("#08519c", "acmecerts (AcmeClient)"),
    "acmecerts-h2": ("#4292c6", "acmecerts, http2=True"),
    "acmecerts-manager": ("#2171b5", "acmecerts CertificateManager + FileStorage"),
    "acmecerts-manager-nostore": ("#9ecae1", "acmecerts CertificateManager, no store"),
    "acmecerts-cli": ("#6baed6", "acmecerts CLI (process start to exit)"),
    "raw": ("#41ab5d", "raw floor client"),
    "certbot-acme": ("#d94801", "certbot's acme"),
    "certbot-acme-process": ("#fd8d3c", "certbot's acme (process start to exit)"),
    "aioacme": ("#807dba", "aioacme"),
    "lego": ("#969696", "lego"),
}
PROCESS_TIMED = {"acmecerts-cli", "certbot-acme-process"}


def _size(row: dict[str, Any]) -> str:
    return str(row["n"]) if row["names"] == 1 else f"{row['n']}x{row['names']}"


def draw(results: dict[str, Any], out: Path, *, title: str | None = None) -> None:
    """Write the chart of ``results`` (run.py's JSON) to ``out`` (SVG, or PNG by suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "acmecerts-bench"  # stable ids
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: small, searchable
    table = [r for r in results["table"] if not r.get("failed")]
    sizes: list[str] = []
    for row in sorted(table, key=lambda r: (r["names"], r["n"])):
        if _size(row) not in sizes:
            sizes.append(_size(row))
    clients = [c for c in STYLE if any(r["client"] == c for r in table)]
    clients += sorted({r["client"] for r in table} - set(clients))
    cell = {(r["client"], _size(r)): r for r in table}

    # Drawn at the width of the docs' text column (about 700 px), so that 1 pt is about 1 px
    # there: the panels one above the other, no text under 8 pt.
    fig, axes = plt.subplots(2, 1, figsize=(7.2, 9.6), constrained_layout=True)
    width = 0.8 / max(1, len(clients))
    panels = (
        ("certs_per_s", "certificates per second (higher is better)", "{:.0f}"),
        ("cpu_ms_per_cert", "client CPU ms per certificate (lower is better)", "{:.1f}"),
    )
    for ax, (field, label, fmt) in zip(axes, panels, strict=True):
        for k, client in enumerate(clients):
            colour, name = STYLE.get(client, ("#bdbdbd", client))
            xs, heights = [], []
            for i, size in enumerate(sizes):
                row = cell.get((client, size))
                if row is not None:
                    xs.append(i - 0.4 + width * (k + 0.5))
                    heights.append(row[field])
            bars = ax.bar(
                xs,
                heights,
                width,
                color=colour,
                label=name,
                hatch="//" if client in PROCESS_TIMED else None,
                edgecolor="white" if client in PROCESS_TIMED else None,
                linewidth=0,
            )
            ax.bar_label(bars, [fmt.format(h) for h in heights], fontsize=8, rotation=90, padding=2)
        ax.set_xticks(range(len(sizes)), [f"N={s}" for s in sizes], fontsize=11)
        ax.tick_params(axis="y", labelsize=10)
        ax.set_title(label, fontsize=12)
        ax.margins(y=0.15)
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(axis="y", linewidth=0.3)
        ax.set_axisbelow(True)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=10, frameon=False)
    if title:
        fig.suptitle(title, fontsize=13)
    fig.savefig(out, metadata={"Date": None} if out.suffix == ".svg" else None)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="bench/run.py --json output")
    parser.add_argument("-o", "--output", type=Path, default=Path("docs/performance.svg"))
    parser.add_argument("--title", default=None, help="a title above both panels")
    args = parser.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "bench/chart.py needs matplotlib (not an acmecerts dependency): "
            "bash bench/setup_peers.sh --tools, then run it with "
            "~/.cache/acmecerts/bench-tools/bin/python",
            file=sys.stderr,
        )
        return 2
    results = json.loads(args.results.read_text(encoding="utf-8"))
    draw(results, args.output, title=args.title)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
