"""How long the ``acmecerts`` command takes to start: ``--version``, ``issue --help``, the floor.

The fourth row imports what an http-01 ``issue`` runs on (the command's modules, the
manager, the client, the http-01 solver) and exits: the fixed import cost of a real run,
without the CA.

    python bench/cli_start.py                   # 20 runs of each, a table of wall times
    python bench/cli_start.py --runs 50 --top 8 # and the 8 slowest imports of each command
    python bench/cli_start.py --source DIR      # time another checkout (e.g. an older commit)

Each figure is one whole process, from start to exit (``subprocess.run``, output thrown
away), so it includes the interpreter's own start: ``python -c pass`` is the floor nothing
goes below. The commands take turns (A B C A B C ...), so a machine that gets busier
slows all of them alike; the table gives the median, min and max wall time and the median
CPU time (user + system, from ``getrusage``), which depends less on how loaded the machine
is. The load average before and after is printed: quote medians from a quiet machine.

``acmecerts`` is the console script next to this Python when there is one (else
``python -m acmecerts.cli``), importing the package from ``--source`` (default: this
checkout) through ``PYTHONPATH``. The package is byte-compiled first, as ``pip install``
does (``--no-compile`` to skip), so the figures are not inflated by compiling the sources
at each start. ``tests/cli/test_cli_start.py`` holds the import graph behind these figures.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The modules an ``issue`` answered by http-01 imports before its first request.
ISSUE_PATH = (
    "import acmecerts.cli._app, acmecerts.cli._issue, acmecerts.cli._engine, "
    "acmecerts.cli._solvers, acmecerts.solvers.http01"
)


@dataclass
class Timings:
    """The runs of one command."""

    label: str
    argv: list[str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run (a failed run stops the benchmark).

    It runs in ``cwd`` (the ``--source`` checkout): ``python -c`` and ``python -m`` put the
    working directory first on ``sys.path``, before ``PYTHONPATH``.
    """
    cpu = children_cpu()
    start = time.perf_counter()
    subprocess.run(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    return time.perf_counter() - start, children_cpu() - cpu


def acmecerts_argv(python: str) -> list[str]:
    script = Path(python).with_name("acmecerts")
    return [str(script)] if script.is_file() else [python, "-m", "acmecerts.cli"]


def top_imports(python: str, args: list[str], env: dict[str, str], count: int) -> list[str]:
    """The ``count`` top-level imports that took longest (``-X importtime``), as lines."""
    result = subprocess.run(
        [python, "-X", "importtime", "-m", "acmecerts.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    rows: list[tuple[int, str]] = []
    total = 0
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|")
        if not name.startswith("  "):  # top level: its own cost includes its imports
            rows.append((int(cumulative), name.strip()))
            total += int(cumulative)
    rows.sort(reverse=True)
    lines = [f"    {us / 1000:7.1f} ms  {name}" for us, name in rows[:count]]
    return [*lines, f"    {total / 1000:7.1f} ms  all imports together"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="counted runs of each command")
    parser.add_argument("--warmup", type=int, default=2, help="runs of each not counted, first")
    parser.add_argument("--top", type=int, default=0, help="also the N slowest imports")
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout to time")
    parser.add_argument("--python", default=sys.executable, help="the interpreter")
    parser.add_argument("--no-compile", action="store_true", help="do not byte-compile first")
    options = parser.parse_args()

    source = options.source.resolve()
    if not (source / "acmecerts" / "cli").is_dir():
        parser.error(f"{source} has no acmecerts/cli package")
    if not options.no_compile:
        compileall.compile_dir(source / "acmecerts", quiet=1)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    # No configuration file or ACMECERTS_* setting from this machine changes what runs.
    env = {k: v for k, v in env.items() if not k.startswith("ACMECERTS_")}
    env["XDG_CONFIG_HOME"] = "/nonexistent"

    acmecerts = acmecerts_argv(options.python)
    commands = [
        Timings("acmecerts --version", [*acmecerts, "--version"]),
        Timings("acmecerts issue --help", [*acmecerts, "issue", "--help"]),
        Timings("python -c pass", [options.python, "-c", "pass"]),
        Timings("import the issue path", [options.python, "-c", ISSUE_PATH]),
    ]
    load_before = os.getloadavg()
    for index in range(options.warmup + options.runs):
        for command in commands:
            wall, cpu = run_once(command.argv, env, source)
            if index >= options.warmup:
                command.wall.append(wall)
                command.cpu.append(cpu)
    load_after = os.getloadavg()

    print(f"source {source}; {' '.join(acmecerts)}; {options.runs} runs each")
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"{'command':<26}{'median':>9}{'min':>9}{'max':>9}{'cpu':>9}  (seconds)")
    for command in commands:
        print(
            f"{command.label:<26}{statistics.median(command.wall):9.3f}"
            f"{min(command.wall):9.3f}{max(command.wall):9.3f}"
            f"{statistics.median(command.cpu):9.3f}"
        )
    if options.top:
        for args in (["--version"], ["issue", "--help"]):
            print(f"\nslowest imports of acmecerts {' '.join(args)} (one run, -X importtime):")
            print("\n".join(top_imports(options.python, args, env, options.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
