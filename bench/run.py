"""Side-by-side issuance benchmark: acmecerts against its peers on one local Pebble.

    python bench/run.py                 # N = 1, 10, 50, 200 and one 10-name order
    python bench/run.py --quick         # N = 1, 10 and the 10-name order (< 3 minutes)
    python bench/run.py --sizes 200 --clients acmecerts,raw --repeat 3
    nox -s bench -- --quick

Every client runs in its own process (peers in their own venvs, installed by
``bench/setup_peers.sh``, which this script calls when one is missing) against a freshly
started Pebble (``PEBBLE_VA_NOSLEEP=1``, no authorization reuse, no nonce rejection) and issues
N single-name P-256 certificates concurrently; each reports the wall time and its own CPU time
of that phase only (after its warm-up: directory, account). The driver counts the ACME requests
Pebble handled during the phase from Pebble's log (or through ``bench/counting_proxy.py`` with
``--count proxy``), reads Pebble's CPU from ``/proc``, and the CPU the rest of the machine spent
meanwhile (other people's jobs on a shared machine). Every run has a timeout; a run that times
out or loses certificates (Pebble 2.4 deadlocks now and then under heavy concurrency: POSTs stop
being answered) is retried once on a fresh Pebble, and the failed attempt is kept in the JSON.
``--quick`` leaves out lego's 10-name order (lego solves authorizations one after the other with
a 5 s poll: about 50 s); ``--py-spy DIR`` / ``--profile-dir DIR`` profile the acmecerts runs
(``bench/profile_report.py`` summarises them).

Columns: wall s, certs/s, client CPU ms/cert, peak RSS MiB (and its growth over the RSS at
ready), ACME requests/cert, Pebble CPU ms/cert, the rest of the machine's CPU (% of all cores),
and for acmecerts rows the ratios against the best peer (highest certs/s; lowest CPU/cert) and
the raw client of the same N.
"""

from __future__ import annotations

import argparse
import collections
import compileall
import contextlib
import dataclasses
import http.client
import json
import os
import platform
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from acmecerts.testing import PebbleServer  # noqa: E402

CLIENTS_DIR = HERE / "clients"
PEERS_DIR = Path(os.environ.get("ACMECERTS_CACHE", Path.home() / ".cache" / "acmecerts")) / (
    "bench-peers"
)
TICK = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Client:
    name: str
    script: str
    venv: str | None = None  # None: this interpreter (acmecerts, raw, the lego wrapper)
    args: tuple[str, ...] = ()
    peer: bool = False
    #: "phase": timed from ``go`` to ``done`` (after its warm-up), like every peer;
    #: "process": from process start to exit (imports, account, exports included)
    timing: str = "phase"
    #: The row of the same N this one's ``vs_base_*`` ratios are taken against.
    baseline: str | None = None
    #: Where its ``acmecerts`` is imported from (``None``: this tree). ``--before DIR``
    #: adds a ``NAME@before`` twin of each of ours that imports the package from DIR.
    source: Path | None = None

    @property
    def kind(self) -> str:
        """Its name without an ``@before`` suffix: what it runs."""
        return self.name.partition("@")[0]

    @property
    def pythonpath(self) -> str:
        """The ``PYTHONPATH`` its process runs with (empty for a peer's own venv)."""
        if self.venv is not None:
            return ""
        return str(self.source or ROOT)

    @property
    def python(self) -> str:
        return str(PEERS_DIR / self.venv / "bin" / "python") if self.venv else sys.executable

    def available(self) -> bool:
        if self.name == "lego" and shutil.which("lego") is None:
            return False
        return Path(self.python).exists()


CLIENTS = {
    c.name: c
    for c in (
        Client("acmecerts", "acmecerts_client.py"),
        Client("acmecerts-h2", "acmecerts_client.py", args=("--http2",)),
        Client("acmecerts-manager", "acmecerts_manager_client.py", baseline="acmecerts"),
        # the manager without a store: what the manager costs apart from FileStorage
        Client(
            "acmecerts-manager-nostore",
            "acmecerts_manager_client.py",
            args=("--no-store",),
            baseline="acmecerts",
        ),
        Client("acmecerts-cli", "", timing="process", baseline="certbot-acme-process"),
        Client("raw", "raw_client.py"),
        Client("certbot-acme", "certbot_acme_client.py", venv="certbot-acme", peer=True),
        # the same driver, timed from its process start to exit (the CLI's comparison)
        Client(
            "certbot-acme-process", "certbot_acme_client.py", venv="certbot-acme", timing="process"
        ),
        Client("aioacme", "aioacme_client.py", venv="aioacme", peer=True),
        Client("lego", "lego_client.py", peer=True),
    )
}
#: The suffix of the twins ``--before DIR`` adds: the same client, the package from DIR.
BEFORE = "@before"
OURS = (
    "acmecerts",
    "acmecerts-h2",
    "acmecerts-manager",
    "acmecerts-manager-nostore",
    "acmecerts-cli",
)


# -- measuring helpers --------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a live process from /proc/<pid>/stat (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def system_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    steal = values[7] if len(values) > 7 else 0
    return (sum(values[:8]) - idle - steal) / TICK


class ProxyProcess:
    """bench/counting_proxy.py in a subprocess in front of one Pebble."""

    def __init__(self, pebble: PebbleServer) -> None:
        self.pebble = pebble
        upstream = pebble.directory_url.split("/")[2]
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "counting_proxy.py"),
                "--upstream",
                upstream,
                "--cert",
                str(pebble.tls_cert_path),
                "--key",
                str(pebble.tls_key_path),
                "--ca",
                str(pebble.ca_bundle),
            ],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = json.loads(self.proc.stdout.readline())["port"]
        self._ctx = ssl.create_default_context(cafile=str(pebble.ca_bundle))

    @property
    def directory_url(self) -> str:
        return f"https://127.0.0.1:{self.port}/dir"

    def counts(self) -> collections.Counter[str]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self._ctx, timeout=10)
        try:
            conn.request("GET", "/__bench/counts")
            return collections.Counter(json.loads(conn.getresponse().read()))
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def pebble_counts(pebble: PebbleServer) -> collections.Counter[str]:
    return collections.Counter(f"{m} {p}" for m, p in pebble.requests_seen())


# -- one measurement ----------------------------------------------------------------------


class RunFailed(Exception):
    pass


def _read_event(proc: subprocess.Popen[str], deadline: float) -> dict[str, Any]:
    """The next JSON event line of a client, or RunFailed at the deadline / on exit."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunFailed("timeout")
            if not sel.select(timeout=min(left, 1.0)):
                continue
            line = proc.stdout.readline()
            if not line:
                raise RunFailed(f"client exited with status {proc.wait()}")
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and "event" in event:
                    return event


def _start_py_spy(
    pid: int, client: Client, label: str, args: argparse.Namespace
) -> subprocess.Popen[bytes] | None:
    """Sample an acmecerts client with py-spy (collapsed stacks) during its measured phase."""
    if not args.py_spy or client.name not in OURS:
        return None
    py_spy = shutil.which("py-spy") or str(PEERS_DIR.parent / "bench-tools" / "bin" / "py-spy")
    out = Path(args.py_spy) / f"{client.name}-{label}.txt"
    spy = subprocess.Popen(
        [
            *(py_spy, "record", "--pid", str(pid), "--rate", "250", "--nonblocking"),
            *("--format", "raw", "--output", str(out)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # let it attach
    return spy


def _signal_group(pid: int) -> None:
    """SIGKILL a client's process group (from a timer: the main thread reaps it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """Stop a client and whatever it started (it leads its own process group)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def measure(
    client: Client,
    n: int,
    names: int,
    label: str,
    args: argparse.Namespace,
    workdir: Path,
) -> dict[str, Any]:
    """Fresh Pebble (and proxy), one client run, everything measured."""
    pebble_dir = workdir / f"pebble-{label}"
    with PebbleServer(
        pebble_dir, va_nosleep=True, authz_reuse_percent=0, nonce_reject_percent=0
    ) as pebble:
        proxy = ProxyProcess(pebble) if args.count == "proxy" else None
        try:
            return _measure_on(client, n, names, label, args, workdir, pebble, proxy)
        finally:
            if proxy is not None:
                proxy.stop()


def _measure_on(
    client: Client,
    n: int,
    names: int,
    label: str,
    args: argparse.Namespace,
    workdir: Path,
    pebble: PebbleServer,
    proxy: ProxyProcess | None,
) -> dict[str, Any]:
    directory = proxy.directory_url if proxy else pebble.directory_url
    if client.timing == "process":
        return _measure_process(client, n, names, label, args, workdir, pebble, proxy)
    argv = [
        client.python,
        str(CLIENTS_DIR / client.script),
        "--directory",
        directory,
        "--ca",
        str(pebble.ca_bundle),
        "--http-port",
        str(pebble.http_port),
        "--count",
        str(n),
        "--names",
        str(names),
        "--label",
        label,
        "--workdir",
        str(workdir / f"client-{label}"),
        *client.args,
    ]
    if client.kind in OURS and args.profile_dir:
        argv += ["--profile", str(Path(args.profile_dir) / f"{client.name}-{label}.prof")]
    timeout = args.timeout or max(90.0, 30.0 + 0.6 * n * max(1, names // 2))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = client.pythonpath
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if args.quiet_clients else None,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: lego children die with it
    )
    assert proc.stdin is not None
    try:
        deadline = time.monotonic() + 120  # imports, account registration, lego warm-up
        ready = _read_event(proc, deadline)
        counts0 = proxy.counts() if proxy else pebble_counts(pebble)
        log0 = pebble_counts(pebble) if proxy else counts0
        pids = pebble.pids
        server0 = sum(proc_cpu_s(p) for p in pids)
        proxy0 = proc_cpu_s(proxy.proc.pid) if proxy else 0.0
        busy0 = system_busy_s()
        load = os.getloadavg()[0]
        spy = _start_py_spy(proc.pid, client, label, args)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        done = _read_event(proc, time.monotonic() + timeout)
        busy = system_busy_s() - busy0
        server_cpu = sum(proc_cpu_s(p) for p in pids) - server0
        proxy_cpu = (proc_cpu_s(proxy.proc.pid) - proxy0) if proxy else 0.0
        counts = (proxy.counts() if proxy else pebble_counts(pebble)) - counts0
        log_counts = (pebble_counts(pebble) - log0) if proxy else counts
        proc.stdin.close()
        _, status, rusage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if spy is not None:
            spy.wait(30)
    except BaseException:
        _kill_group(proc)
        raise
    if done.get("event") != "done":
        raise RunFailed(f"unexpected event {done}")
    wall, cpu = done["wall_s"], done["cpu_s"]
    requests = sum(counts.values())
    others = max(0.0, busy - cpu - server_cpu - proxy_cpu)
    peak_kib = done.get("peak_rss_kib") or rusage.ru_maxrss
    return {
        "client": client.name,
        "timing": "phase",
        "n": n,
        "names": names,
        "label": label,
        "wall_s": wall,
        "certs_per_s": n / wall,
        "cpu_ms_per_cert": 1000 * cpu / n,
        "user_ms_per_cert": 1000 * done.get("user_s", cpu) / n,
        "sys_ms_per_cert": 1000 * done.get("sys_s", 0.0) / n,
        "peak_rss_mib": peak_kib / 1024,
        "rss_growth_mib": max(0, peak_kib - ready.get("rss_kib", 0)) / 1024,
        "requests": requests,
        "requests_per_cert": requests / n,
        "requests_by_route": dict(sorted(counts.items())),
        "pebble_log_requests": sum(log_counts.values()),
        "server_cpu_ms_per_cert": 1000 * server_cpu / n,
        "proxy_cpu_ms_per_cert": 1000 * proxy_cpu / n,
        "others_cpu_pct": 100 * others / (wall * (os.cpu_count() or 1)),
        "load1_at_start": load,
        "issued": done["issued"],
        "failed": done["failed"],
        "errors": done.get("errors", []),
        "client_extra": {
            k: v
            for k, v in done.items()
            if k not in {"event", "wall_s", "cpu_s", "issued", "failed", "errors", "peak_rss_kib"}
        },
    }


def _cli_argv(
    n: int, names: int, label: str, directory: str, pebble: PebbleServer, scratch: Path
) -> list[str]:
    """``acmecerts issue --from-file`` of N certificates, as an operator would run it."""
    names_file = scratch / "names.txt"
    names_file.write_text(
        "".join(
            " ".join(f"c{i}-{j}.{label}.bench.test" for j in range(names)) + "\n" for i in range(n)
        ),
        encoding="ascii",
    )
    return [
        *("issue", "--from-file", str(names_file)),
        *("--directory", directory, "--ca-bundle", str(pebble.ca_bundle)),
        *("--state-dir", str(scratch / "state"), "--out", str(scratch / "out")),
        *("--http-01-listen", f"127.0.0.1:{pebble.http_port}"),
        *("--concurrency", str(n)),
    ]


def _issued_files(out: Path) -> int:
    """Certificates the CLI exported: ``out/NAME/fullchain.pem`` holding a certificate."""
    return sum(
        b"-----BEGIN CERTIFICATE-----" in p.read_bytes() for p in out.glob("*/fullchain.pem")
    )


def _measure_process(
    client: Client,
    n: int,
    names: int,
    label: str,
    args: argparse.Namespace,
    workdir: Path,
    pebble: PebbleServer,
    proxy: ProxyProcess | None,
) -> dict[str, Any]:
    """Time a client from process start to exit: imports, account, exports included.

    CPU and peak RSS come from ``wait4``'s rusage of the process (its waited-for
    children included); requests, Pebble's CPU and the machine's from the same sources
    as a phase-timed run, taken just before the process starts and after it exits.
    """
    directory = proxy.directory_url if proxy else pebble.directory_url
    scratch = workdir / f"client-{label}"
    scratch.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if client.kind == "acmecerts-cli":
        env = {k: v for k, v in env.items() if not k.startswith("ACMECERTS_")}
        env.update(
            PYTHONPATH=client.pythonpath,
            XDG_CONFIG_HOME=str(scratch / "xdg-config"),  # no config file from the machine
            ACMECERTS_AGREE_TOS="1",
        )
        cli_args = _cli_argv(n, names, label, directory, pebble, scratch)
        if args.profile_dir:
            out = Path(args.profile_dir) / f"{client.name}-{label}.prof"
            argv = [sys.executable, str(CLIENTS_DIR / "cli_profiled.py"), str(out), *cli_args]
        else:
            argv = [sys.executable, "-m", "acmecerts.cli", *cli_args]
    else:
        env.update(PYTHONPATH=client.pythonpath, BENCH_NO_GO="1")
        argv = [
            client.python,
            str(CLIENTS_DIR / client.script),
            *("--directory", directory, "--ca", str(pebble.ca_bundle)),
            *("--http-port", str(pebble.http_port), "--count", str(n), "--names", str(names)),
            *("--label", label, "--workdir", str(scratch), *client.args),
        ]
    if args.py_spy and client.kind in OURS:
        py_spy = shutil.which("py-spy") or str(PEERS_DIR.parent / "bench-tools" / "bin" / "py-spy")
        out = Path(args.py_spy) / f"{client.name}-{label}.txt"
        argv = [
            *(py_spy, "record", "--rate", "250", "--nonblocking", "--format", "raw"),
            *("--output", str(out), "--", *argv),
        ]
    timeout = args.timeout or max(90.0, 30.0 + 0.6 * n * max(1, names // 2))
    counts0 = proxy.counts() if proxy else pebble_counts(pebble)
    pids = pebble.pids
    server0 = sum(proc_cpu_s(p) for p in pids)
    proxy0 = proc_cpu_s(proxy.proc.pid) if proxy else 0.0
    load = os.getloadavg()[0]
    stdout_path, stderr_path = scratch / "stdout.txt", scratch / "stderr.txt"
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        busy0 = system_busy_s()
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=env,
            cwd=scratch,
            start_new_session=True,
        )
        timer = threading.Timer(timeout, _signal_group, (proc.pid,))
        timer.start()
        try:
            _, status, rusage = os.wait4(proc.pid, 0)
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        busy = system_busy_s() - busy0
    proc.returncode = os.waitstatus_to_exitcode(status)
    server_cpu = sum(proc_cpu_s(p) for p in pids) - server0
    proxy_cpu = (proc_cpu_s(proxy.proc.pid) - proxy0) if proxy else 0.0
    counts = (proxy.counts() if proxy else pebble_counts(pebble)) - counts0
    stdout_text = stdout_path.read_text(errors="replace")
    if not args.quiet_clients:
        sys.stderr.write(stderr_path.read_text(errors="replace")[-2000:])
    done: dict[str, Any] = {}
    for line in stdout_text.splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("event") == "done":
                done = event
    if client.kind == "acmecerts-cli":
        issued = _issued_files(scratch / "out")
        errors = [] if proc.returncode == 0 else [f"exit status {proc.returncode}"]
        done = {"issued": issued, "failed": n - issued, "errors": errors, "exit": proc.returncode}
    elif not done:
        raise RunFailed(f"{client.name} exited with status {proc.returncode} and no result")
    if proc.returncode < 0 and not done.get("issued"):
        raise RunFailed(f"{client.name} killed (signal {-proc.returncode}): timeout?")
    cpu = rusage.ru_utime + rusage.ru_stime
    requests = sum(counts.values())
    others = max(0.0, busy - cpu - server_cpu - proxy_cpu)
    peak_kib = rusage.ru_maxrss
    return {
        "client": client.name,
        "timing": "process",
        "n": n,
        "names": names,
        "label": label,
        "wall_s": wall,
        "certs_per_s": n / wall,
        "cpu_ms_per_cert": 1000 * cpu / n,
        "user_ms_per_cert": 1000 * rusage.ru_utime / n,
        "sys_ms_per_cert": 1000 * rusage.ru_stime / n,
        "peak_rss_mib": peak_kib / 1024,
        "rss_growth_mib": 0.0,
        "requests": requests,
        "requests_per_cert": requests / n,
        "requests_by_route": dict(sorted(counts.items())),
        "pebble_log_requests": requests,
        "server_cpu_ms_per_cert": 1000 * server_cpu / n,
        "proxy_cpu_ms_per_cert": 1000 * proxy_cpu / n,
        "others_cpu_pct": 100 * others / (wall * (os.cpu_count() or 1)),
        "load1_at_start": load,
        "issued": done["issued"],
        "failed": done["failed"],
        "errors": done.get("errors", []),
        "client_extra": {
            k: v
            for k, v in done.items()
            if k not in {"event", "wall_s", "cpu_s", "issued", "failed", "errors", "peak_rss_kib"}
        },
    }


# -- the table ----------------------------------------------------------------------------


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if len(rows) == 1:
        return rows[0]
    merged = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "n":
            merged[key] = statistics.median(r[key] for r in rows)
    merged["repeats"] = len(rows)
    return merged


def _size_key(row: dict[str, Any]) -> str:
    return f"{row['n']}" if row["names"] == 1 else f"{row['n']}x{row['names']}"


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median over repeats per (client, size), then ratios for acmecerts rows."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for row in rows:
        groups[(row["client"], _size_key(row))].append(row)
    # a run that lost certificates twice (Pebble stuck both times) stays out of the median
    # when another round of that cell succeeded
    table = [_median_row([r for r in g if not r["failed"]] or g) for g in groups.values()]
    by_size: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for row in table:
        by_size[_size_key(row)].append(row)
    for size_rows in by_size.values():
        peers = [r for r in size_rows if CLIENTS[r["client"]].peer and not r["failed"]]
        raw = next((r for r in size_rows if r["client"] == "raw" and not r["failed"]), None)
        best_rate = max(peers, key=lambda r: r["certs_per_s"], default=None)
        best_cpu = min(peers, key=lambda r: r["cpu_ms_per_cert"], default=None)
        for row in size_rows:
            if best_rate:
                row["vs_best_peer_rate"] = row["certs_per_s"] / best_rate["certs_per_s"]
                row["best_peer_rate"] = best_rate["client"]
            if best_cpu:
                row["vs_best_peer_cpu"] = row["cpu_ms_per_cert"] / best_cpu["cpu_ms_per_cert"]
                row["best_peer_cpu"] = best_cpu["client"]
            if raw:
                row["vs_raw_rate"] = row["certs_per_s"] / raw["certs_per_s"]
                row["vs_raw_cpu"] = row["cpu_ms_per_cert"] / raw["cpu_ms_per_cert"]
            base = next(
                (
                    r
                    for r in size_rows
                    if r["client"] == CLIENTS[row["client"]].baseline and not r["failed"]
                ),
                None,
            )
            before = next(
                (
                    r
                    for r in size_rows
                    if r["client"] == f"{row['client']}{BEFORE}" and not r["failed"]
                ),
                None,
            )
            if before:
                row["vs_before_rate"] = row["certs_per_s"] / before["certs_per_s"]
                row["vs_before_cpu"] = row["cpu_ms_per_cert"] / before["cpu_ms_per_cert"]
            if base:
                row["baseline"] = base["client"]
                row["baseline_wall_s"] = base["wall_s"]
                row["vs_base_rate"] = row["certs_per_s"] / base["certs_per_s"]
                row["vs_base_cpu"] = row["cpu_ms_per_cert"] / base["cpu_ms_per_cert"]
    order = list(CLIENTS)
    table.sort(key=lambda r: (r["names"], r["n"], order.index(r["client"])))
    return table


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(table: list[dict[str, Any]]) -> str:
    header = (
        "| client | N | wall s | certs/s | CPU ms/cert | peak RSS MiB (growth) | req/cert "
        "| Pebble CPU ms/cert | others' CPU % | rate xbest peer | CPU xbest peer "
        "| rate xraw | CPU xraw | rate xbase | CPU xbase | failed |"
    )
    lines = [header, header_rule(header)]
    for r in table:
        lines.append(
            f"| {r['client']} | {_size_key(r)} | {r['wall_s']:.2f} | {r['certs_per_s']:.1f} "
            f"| {r['cpu_ms_per_cert']:.1f} | {r['peak_rss_mib']:.0f} ({r['rss_growth_mib']:.1f}) "
            f"| {r['requests_per_cert']:.2f} | {r['server_cpu_ms_per_cert']:.1f} "
            f"| {r['others_cpu_pct']:.0f} "
            f"| {_fmt(r.get('vs_best_peer_rate'), '.2f')} "
            f"| {_fmt(r.get('vs_best_peer_cpu'), '.2f')} "
            f"| {_fmt(r.get('vs_raw_rate'), '.2f')} | {_fmt(r.get('vs_raw_cpu'), '.2f')} "
            f"| {_fmt(r.get('vs_base_rate'), '.2f')} | {_fmt(r.get('vs_base_cpu'), '.2f')} "
            f"| {r['failed'] or ''} |"
        )
    return "\n".join(lines)


def header_rule(header: str) -> str:
    cells = header.count("|") - 1
    return "|" + "---|" * cells


def targets(table: list[dict[str, Any]], client: str) -> list[tuple[str, str, bool | None]]:
    """The issue's targets for one of our clients: (target, measured, met)."""
    rows = {_size_key(r): r for r in table if r["client"] == client}
    out: list[tuple[str, str, bool | None]] = []
    singles = [r for r in rows.values() if r["names"] == 1]
    if not singles:
        return out
    big = max(singles, key=lambda r: r["n"])  # N=200 in a full run
    size = _size_key(big)
    if "vs_best_peer_rate" in big:
        v = big["vs_best_peer_rate"]
        out.append(
            (f"N={size}: ≥ 2x best peer's certs/s", f"{v:.2f}x ({big['best_peer_rate']})", v >= 2)
        )
    if "vs_raw_rate" in big:
        v = big["vs_raw_rate"]
        out.append((f"N={size}: ≥ 0.9x raw client's certs/s", f"{v:.2f}x", v >= 0.9))
    if "vs_best_peer_cpu" in big:
        v = big["vs_best_peer_cpu"]
        out.append(
            (
                f"N={size}: CPU/cert ≤ ⅓ best peer's",
                f"{v:.2f}x ({big['best_peer_cpu']})",
                v <= 1 / 3,
            )
        )
    v = big["requests_per_cert"]
    out.append((f"N={size}: ACME requests/cert ≤ 7.2", f"{v:.2f}", v <= 7.2))
    multi = next((r for k, r in rows.items() if r["names"] > 1), None)
    if multi is not None:
        per_name = multi["requests_per_cert"] / multi["names"]
        out.append(
            (f"{multi['names']}-name order: ≤ 3 requests/name", f"{per_name:.2f}", per_name <= 3)
        )
        single = rows.get("1")
        if single is not None:
            v = multi["wall_s"] / single["wall_s"]
            out.append(
                (
                    f"{multi['names']}-name order ≤ 1.5x a single-name order's time",
                    f"{v:.2f}x ({multi['wall_s']:.2f} s vs {single['wall_s']:.2f} s)",
                    v <= 1.5,
                )
            )
    growth_kib = 1024 * big["rss_growth_mib"] / big["n"]
    base = big["peak_rss_mib"] - big["rss_growth_mib"]
    projected = base + 1000 * growth_kib / 1024
    out.append(
        (
            "1,000 concurrent orders fit in 200 MiB",
            f"{growth_kib:.0f} KiB/order in flight → ~{projected:.0f} MiB (base {base:.0f} MiB)",
            projected <= 200,
        )
    )
    return out


def path_targets(table: list[dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """Issue #17's targets for the paths people run: the manager with its store, the CLI."""
    out: list[tuple[str, str, bool | None]] = []
    for r in table:
        if r["names"] != 1 or "vs_base_rate" not in r:
            continue
        size, rate, cpu = r["n"], r["vs_base_rate"], r["vs_base_cpu"]
        if r["client"] == "acmecerts-manager" and size >= 200:
            out.append(
                (
                    f"manager N={size}: ≥ 0.8x the bare client's certs/s",
                    f"{rate:.2f}x ({r['certs_per_s']:.1f}/s)",
                    rate >= 0.8,
                )
            )
            out.append(
                (
                    f"manager N={size}: CPU/cert ≤ 1.5x the bare client's",
                    f"{cpu:.2f}x ({r['cpu_ms_per_cert']:.1f} ms)",
                    cpu <= 1.5,
                )
            )
        if r["client"] == "acmecerts-cli" and size >= 100:
            out.append(
                (
                    f"CLI N={size}: ≥ 2x certbot's acme, process start to exit",
                    f"{rate:.2f}x ({r['wall_s']:.2f} s vs {r['baseline_wall_s']:.2f} s)",
                    rate >= 2,
                )
            )
    return out


def before_targets(table: list[dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """Issue #18's target: each of ours within 5 % of the tree before (``--before``)."""
    out: list[tuple[str, str, bool | None]] = []
    for r in table:
        if "vs_before_cpu" not in r:
            continue
        cpu, rate = r["vs_before_cpu"], r["vs_before_rate"]
        out.append(
            (
                f"{r['client']} N={_size_key(r)}: CPU/cert within 5 % of before",
                f"{cpu:.3f}x ({r['cpu_ms_per_cert']:.2f} ms), certs/s {rate:.3f}x",
                cpu <= 1.05,
            )
        )
    return out


def _target_lines(title: str, found: list[tuple[str, str, bool | None]]) -> list[str]:
    """A titled block of targets, one line each: met, NOT met, or ? (not measurable)."""
    if not found:
        return []
    lines = [f"\n{title}:"]
    for name, measured, met in found:
        mark = "met" if met else ("NOT met" if met is not None else "?")
        lines.append(f"  {mark:8} {name}: {measured}")
    return lines


def format_targets(table: list[dict[str, Any]]) -> str:
    lines = _target_lines("Against the tree before (--before)", before_targets(table))
    lines += _target_lines("Targets for the manager and the CLI", path_targets(table))
    for client in ("acmecerts", "acmecerts-h2"):
        lines += _target_lines(f"Targets for {client}", targets(table, client))
    return "\n".join(lines)


# -- main ---------------------------------------------------------------------------------


def _progress(row: dict[str, Any], args: argparse.Namespace) -> str:
    line = (
        f"# {row['client']:13} N={_size_key(row):6} {row['wall_s']:7.2f} s "
        f"{row['certs_per_s']:6.1f}/s {row['cpu_ms_per_cert']:6.1f} ms/cert "
        f"(usr {row['user_ms_per_cert']:.1f} sys {row['sys_ms_per_cert']:.1f}) "
        f"{row['requests_per_cert']:5.2f} req/cert rss {row['peak_rss_mib']:.0f} MiB "
        f"others {row['others_cpu_pct']:.0f}% load {row['load1_at_start']:.1f}"
    )
    if args.count == "proxy":
        line += (
            f" proxy {row['proxy_cpu_ms_per_cert']:.1f} ms/cert (Pebble log:"
            f" {row['pebble_log_requests']} requests, proxy: {row['requests']})"
        )
    if "loop_lag_max_ms" in row["client_extra"]:
        line += f" lag {row['client_extra']['loop_lag_max_ms']:.0f} ms"
    if row["failed"]:
        line += f" FAILED {row['failed']}: {row['errors'][:1]}"
    return line


def machine() -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="ascii") as f:
        mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.1f} GiB"
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def _with_before_twins(names: list[str], before_root: Path) -> list[str]:
    """``names`` with a ``NAME@before`` twin right after each of ours (registered in CLIENTS)."""
    out: list[str] = []
    for name in names:
        out.append(name)
        if name not in OURS:
            continue
        client = CLIENTS[name]
        baseline = client.baseline
        if baseline in OURS:
            baseline = f"{baseline}{BEFORE}"
        twin = dataclasses.replace(
            client, name=f"{name}{BEFORE}", source=before_root, baseline=baseline
        )
        CLIENTS[twin.name] = twin
        out.append(twin.name)
    return out


def _run_order(names: list[str], rep: int) -> list[str]:
    """On odd repeats each client runs before its ``@before`` twin, on even ones after.

    The twin goes first on even repeats, so neither tree always pays for what the other
    left behind (a later run on a journal-less file system pays for the earlier's inodes).
    """
    out = list(names)
    for i, name in enumerate(out):
        if name.endswith(BEFORE) and i > 0 and rep % 2 == 0:
            out[i - 1], out[i] = out[i], out[i - 1]
    return out


def compile_tree(root: Path) -> None:
    """Byte-compile ``root``'s package, so no run pays for compiling it.

    A process-timed client (the CLI) counts its imports; without ``.pyc`` files (a fresh
    checkout, and ``PYTHONDONTWRITEBYTECODE`` set) every run would compile every module
    again, and a tree that has them would look faster than one that has not.
    """
    compileall.compile_dir(str(root / "acmecerts"), quiet=1)


def ensure_peers(names: list[str], no_setup: bool) -> list[str]:
    missing = [n for n in names if not CLIENTS[n].available()]
    if missing and not no_setup:
        print(f"# installing peers ({', '.join(missing)}): bash bench/setup_peers.sh", flush=True)
        subprocess.run(["bash", str(HERE / "setup_peers.sh")], check=False)
    usable = [n for n in names if CLIENTS[n].available()]
    for n in sorted(set(names) - set(usable)):
        print(f"# skipping {n}: not installed (bash bench/setup_peers.sh)", flush=True)
    return usable


def wait_for_load(max_load: float, wait_s: float) -> float:
    deadline = time.monotonic() + wait_s
    load = os.getloadavg()[0]
    while load > max_load and time.monotonic() < deadline:
        print(f"# load average {load:.2f} > {max_load}: waiting", flush=True)
        time.sleep(30)
        load = os.getloadavg()[0]
    return load


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="N = 1, 10 and the 10-name order")
    parser.add_argument("--sizes", default=None, help="comma-separated N (default 1,10,50,200)")
    parser.add_argument(
        "--multi", type=int, default=10, help="names of the multi-name order (0: none)"
    )
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated clients")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell (median reported)")
    parser.add_argument(
        "--count",
        choices=("pebble", "proxy"),
        default="pebble",
        help="count requests from Pebble's log or through counting_proxy.py",
    )
    parser.add_argument("--timeout", type=float, default=0, help="per run (default from N)")
    parser.add_argument(
        "--max-load",
        type=float,
        default=0,
        help="wait (up to --load-wait s) until the 1-min load is below this",
    )
    parser.add_argument("--load-wait", type=float, default=1200)
    parser.add_argument("--json", default=None, help="write every run and the table here")
    parser.add_argument("--profile-dir", default=None, help="cProfile acmecerts runs into DIR")
    parser.add_argument(
        "--py-spy", default=None, help="sample acmecerts runs with py-spy into DIR (raw stacks)"
    )
    parser.add_argument("--no-setup", action="store_true", help="do not install missing peers")
    parser.add_argument("--quiet-clients", action="store_true", help="hide clients' stderr")
    parser.add_argument(
        "--scratch-dir",
        default=None,
        help="where the clients' scratch directories go: the manager's FileStorage, the "
        "CLI's state and exports (default: the temp directory, $TMPDIR or /tmp)",
    )
    parser.add_argument(
        "--before",
        default=None,
        metavar="DIR",
        help="a checkout of an earlier acmecerts (e.g. a git worktree): each of our clients "
        "also runs as NAME@before with the package from DIR, interleaved in the same run "
        "(the order alternates per repeat), and the table gives the ratios",
    )
    args = parser.parse_args()

    sizes = [1, 10] if args.quick else [1, 10, 50, 200]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    cells = [(n, 1) for n in sizes] + ([(1, args.multi)] if args.multi > 1 else [])
    names = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(names) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; choose from {list(CLIENTS)}")
    names = ensure_peers(names, args.no_setup)
    if args.before:
        before_root = Path(args.before).resolve()
        if not (before_root / "acmecerts" / "__init__.py").is_file():
            parser.error(f"--before {args.before}: no acmecerts package there")
        names = _with_before_twins(names, before_root)
    for out_dir in (args.profile_dir, args.py_spy):
        if out_dir:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
    if args.max_load:
        wait_for_load(args.max_load, args.load_wait)

    for source in {CLIENTS[name].source or ROOT for name in names}:
        compile_tree(source)
    info = machine()
    print(
        f"# {info['cpus']} x {info['cpu_model']}, {info['memory']}, Python {info['python']}; "
        f"load {os.getloadavg()[0]:.2f}; counting from {args.count}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    discarded: list[dict[str, Any]] = []  # failed first attempts that were retried
    started = time.monotonic()
    scratch_base = args.scratch_dir or tempfile.gettempdir()
    info["scratch_dir"] = scratch_base
    print(f"# scratch directories in {scratch_base}", flush=True)
    with tempfile.TemporaryDirectory(prefix="acmecerts-bench-", dir=scratch_base) as tmp:
        workdir = Path(tmp)
        run_no = 0
        for rep in range(args.repeat):
            for n, k in cells:
                for name in _run_order(names, rep):
                    if args.quick and name == "lego" and k > 1:
                        # lego solves authorizations one after the other, polling every 5 s:
                        # its 10-name order alone takes ~50 s (it is in the full run)
                        continue
                    run_no += 1
                    label = f"r{run_no}"
                    for attempt in (1, 2):
                        try:
                            row = measure(CLIENTS[name], n, k, label, args, workdir)
                        except (RunFailed, RuntimeError) as exc:
                            print(f"# {name} N={n}x{k}: {exc} (attempt {attempt})", flush=True)
                            label += "b"
                            continue
                        row["repeat"] = rep
                        row["attempt"] = attempt
                        print(_progress(row, args), flush=True)
                        if row["failed"] and attempt == 1:
                            # e.g. Pebble 2.4's deadlock under load: once more, fresh Pebble
                            discarded.append(row)
                            label += "b"
                            continue
                        rows.append(row)
                        break
    table = summarise(rows)
    print()
    print(format_table(table))
    print(format_targets(table))
    print(
        f"\n# {time.monotonic() - started:.0f} s; load average now "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "machine": info,
                    "argv": sys.argv,
                    "runs": rows,
                    "discarded": discarded,
                    "table": table,
                },
                indent=1,
            )
            + "\n",
            encoding="utf-8",
        )
    return 0 if all(not r["failed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
