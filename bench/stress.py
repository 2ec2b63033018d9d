"""Run the test suite (or any command) while a CPU and loopback load runs beside it.

A suite that passes only on a quiet machine fails by chance on a busy one (CI shares its
cores; a developer runs a build beside it). This puts the suite under that load on
purpose, so that a test that depends on speed fails here, every time, instead:

* ``--cpu N`` busy-looping processes (default: one per core), at the suite's priority;
* ``--issuers K`` loops of the issuance benchmark (``bench/issue_bench.py``: its own
  Pebble, 7 HTTPS requests per certificate on loopback, an http-01 server that Pebble
  validates against), default 1. Each loop runs rounds of ``--batch`` certificates and
  starts a fresh benchmark (and Pebble) every ``--rounds`` rounds; a round that fails or
  hangs (Pebble 2.4 can deadlock under load) is logged and the loop goes on.

::

    python bench/stress.py                       # the suite (pytest)
    python bench/stress.py -- tests/cli/test_cli.py  # pytest with these arguments
    python bench/stress.py --seconds 600         # only the load, for 10 minutes
    python bench/stress.py --cmd -- bash .ci/run # another command beside the load

The exit status is the command's. The load stops when the command ends (or on Ctrl-C);
the benchmark loops are stopped with SIGINT so that each stops its own Pebble.
``nox -s stress`` runs the suite this way, in random order (pytest-randomly).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: How long the load runs before the command starts (the benchmark's Pebble comes up).
WARM_UP_SECONDS = 3.0
#: How long a benchmark loop gets to stop its Pebble after SIGINT before it is killed.
STOP_GRACE_SECONDS = 20.0


class Load:
    """The CPU burners and the issuance loops; ``stop()`` ends them all."""

    def __init__(self, *, cpu: int, issuers: int, batch: int, rounds: int, logdir: Path):
        self.cpu = cpu
        self.issuers = issuers
        self.batch = batch
        self.rounds = rounds
        self.logdir = logdir
        self._burners: list[subprocess.Popen[bytes]] = []
        self._benches: dict[int, subprocess.Popen[bytes]] = {}
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        #: Benchmark processes started, and those that ended with a non-zero status.
        self.runs = 0
        self.failed_runs = 0

    def start(self) -> None:
        for _ in range(self.cpu):
            self._burners.append(
                subprocess.Popen(
                    [sys.executable, "-c", "while True: pass"],
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # a Ctrl-C in the terminal goes to the command
                )
            )
        for index in range(self.issuers):
            thread = threading.Thread(target=self._issue_loop, args=(index,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _issue_loop(self, index: int) -> None:
        log_path = self.logdir / f"issuer-{index}.log"
        sizes = [str(self.batch)] * self.rounds
        with log_path.open("ab") as log:
            while not self._stopping.is_set():
                with self._lock:
                    if self._stopping.is_set():
                        return
                    proc = subprocess.Popen(
                        [sys.executable, "bench/issue_bench.py", *sizes, "--timeout", "120"],
                        cwd=REPO,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                    self._benches[index] = proc
                    self.runs += 1
                status = proc.wait()
                if status != 0 and not self._stopping.is_set():
                    self.failed_runs += 1
                    log.write(f"stress: benchmark run ended with status {status}\n".encode())
                    log.flush()
                    # a broken set-up must not become a tight loop of failing starts
                    self._stopping.wait(5.0)

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            benches = list(self._benches.values())
        for proc in benches:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # the benchmark stops its Pebble on the way out
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for proc in benches:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for proc in self._burners:
            proc.kill()
            proc.wait()
        for thread in self._threads:
            thread.join(timeout=STOP_GRACE_SECONDS)

    def summary(self) -> str:
        return (
            f"{self.cpu} CPU burner(s), {self.issuers} issuance loop(s) of {self.batch} "
            f"certificates a round: {self.runs} benchmark run(s), {self.failed_runs} failed "
            f"(logs: {self.logdir})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after -- go to pytest (or, with --cmd, are the command).",
    )
    parser.add_argument("--cpu", type=int, default=os.cpu_count() or 2, help="busy processes")
    parser.add_argument("--issuers", type=int, default=1, help="issuance benchmark loops")
    parser.add_argument("--batch", type=int, default=50, help="certificates per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per benchmark run")
    parser.add_argument("--seconds", type=float, help="only run the load, this long")
    parser.add_argument("--cmd", action="store_true", help="run the arguments, not pytest")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    rest = options.args[1:] if options.args[:1] == ["--"] else options.args
    if options.cmd and not rest:
        parser.error("--cmd needs a command after --")
    if options.seconds is None:
        command = rest if options.cmd else [sys.executable, "-m", "pytest", *rest]
    logdir = Path(tempfile.mkdtemp(prefix="acmecerts-stress-"))
    load = Load(
        cpu=options.cpu,
        issuers=options.issuers,
        batch=options.batch,
        rounds=options.rounds,
        logdir=logdir,
    )
    print(f"stress: starting the load: {load.summary()}", flush=True)
    load.start()
    status = 0
    try:
        time.sleep(WARM_UP_SECONDS)
        if options.seconds is not None:
            time.sleep(max(0.0, options.seconds - WARM_UP_SECONDS))
        else:
            print(f"stress: running {' '.join(command)}", flush=True)
            status = subprocess.call(command, cwd=REPO)
    except KeyboardInterrupt:
        status = 130
    finally:
        load.stop()
        print(f"stress: load stopped: {load.summary()}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
