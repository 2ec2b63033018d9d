"""lego (Debian's Go binary): N ``lego run`` processes in parallel, one certificate each.

lego is a command-line client, so concurrency is one process per certificate, all sharing one
account (registered by a warm-up ``lego run`` before the measured phase, in a shared
``--path``). lego's built-in http-01 server cannot share one port between processes, so every
process uses ``--http.webroot`` and this wrapper serves that webroot on the VA's port with the
shared ``ChallengeResponder`` (its CPU is counted with lego's; a built-in server would cost
lego about the same). Keys are ec256 (lego's default, as for every client). The Pebble HTTPS
CA is trusted through ``LEGO_CA_CERTIFICATES``.

CPU is ``getrusage`` of this wrapper plus its waited-for lego children, minus the memory
sampler's own thread time. Peak RSS is the largest *sum* of the live lego processes' RSS seen by
a sampler (every 50 ms) plus this wrapper's own RSS: the processes run at the same time, so the
sum is what the machine must hold.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    ChallengeResponder,
    Phase,
    count_certificates,
    names_for,
    parse_args,
    proc_status_kib,
)

_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def _extra(parser) -> None:
    parser.add_argument("--lego", default=shutil.which("lego") or "lego", help="lego binary")


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * _PAGE_KIB
    except (OSError, ValueError, IndexError):
        return 0


class _Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pids: list[int] = []
        self.peak_sum_kib = 0
        self.peak_one_kib = 0
        self.user_s = self.sys_s = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        r0 = resource.getrusage(resource.RUSAGE_THREAD)
        while not self._halt.wait(0.05):
            sizes = [_rss_kib(pid) for pid in list(self.pids)]
            self.peak_sum_kib = max(self.peak_sum_kib, sum(sizes))
            self.peak_one_kib = max(self.peak_one_kib, max(sizes, default=0))
        r1 = resource.getrusage(resource.RUSAGE_THREAD)
        self.user_s = r1.ru_utime - r0.ru_utime
        self.sys_s = r1.ru_stime - r0.ru_stime

    def stop(self) -> None:
        self._halt.set()
        self.join()


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], _extra)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-lego-"))
    webroot = work / "webroot"
    (webroot / ".well-known" / "acme-challenge").mkdir(parents=True, exist_ok=True)
    state = work / "lego"
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    responder = ChallengeResponder(args.http_port, webroot=str(webroot))
    responder.start_in_thread()
    env = {**os.environ, "LEGO_CA_CERTIFICATES": args.ca}

    def command(names: list[str]) -> list[str]:
        argv = [
            args.lego,
            "--accept-tos",
            "--email",
            "bench@example.com",
            "--server",
            args.directory,
            "--path",
            str(state),
            "--key-type",
            "ec256",
            "--http",
            "--http.webroot",
            str(webroot),
        ]
        for name in names:
            argv += ["--domains", name]
        return [*argv, "run", "--no-bundle"]

    # warm-up: registers the shared account (and issues one certificate, not measured)
    warm = subprocess.run(
        command([f"warmup.{args.label}.bench.test"]),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if warm.returncode != 0:
        raise SystemExit(f"lego warm-up failed:\n{warm.stderr.decode(errors='replace')[-2000:]}")

    phase = Phase()
    phase.ready_and_wait()
    sampler = _Sampler()
    sampler.start()
    procs = []
    for i in range(args.count):
        names = names_for(args, i)
        log = (logs / f"{i}.log").open("wb")
        proc = subprocess.Popen(
            command(names), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
        log.close()
        procs.append((names, proc))
        sampler.pids.append(proc.pid)
    errors: list[str] = []
    issued = 0
    for i, (names, proc) in enumerate(procs):
        if proc.wait() != 0:
            tail = (logs / f"{i}.log").read_text(errors="replace").strip().splitlines()[-1:]
            errors.append(f"lego exit {proc.returncode}: {' '.join(tail)}")
            continue
        crt = state / "certificates" / f"{names[0]}.crt"
        try:
            issued += count_certificates(crt.read_bytes()) > 0
        except OSError as exc:
            errors.append(f"no certificate: {exc}")
    sampler.stop()
    # the sampler is the benchmark's, not lego's
    phase.exclude_user_s, phase.exclude_sys_s = sampler.user_s, sampler.sys_s
    phase.done(
        issued=issued,
        errors=errors,
        peak_rss_kib=sampler.peak_sum_kib + proc_status_kib("VmHWM"),
        peak_rss_one_process_kib=sampler.peak_one_kib,
        processes=args.count,
    )
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
