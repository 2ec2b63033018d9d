"""``acmecerts`` (the CLI) under cProfile with a CPU-time timer, the whole process.

    python bench/clients/cli_profiled.py OUT.prof issue --from-file names.txt ...

Run by ``bench/run.py --profile-dir`` for the ``acmecerts-cli`` row; the profile starts
before the CLI is imported, so imports, account set-up and exports are in it
(``python bench/profile_report.py OUT.prof``).
"""

from __future__ import annotations

import cProfile
import sys
import time


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        from acmecerts.cli import main as cli_main

        code = cli_main(argv)
    finally:
        profiler.disable()
        profiler.dump_stats(out)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
