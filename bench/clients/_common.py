"""What every benchmark client shares (standard library only: peers import it from their venvs).

A client is a script run by ``bench/run.py`` in its own process (its own venv's python for
peers) with the same command line::

    python CLIENT.py --directory URL --ca PEM --http-port P --count N --names K --label L

It prepares (imports, directory, account registration, its http-01 responder), prints one
JSON line ``{"event": "ready", ...}``, waits for a line ``go`` on stdin, issues ``N``
certificates of ``K`` names each concurrently, and prints ``{"event": "done", ...}`` with the
wall time and its own CPU time for that phase only (``getrusage`` of itself plus its waited-for
children), the certificates issued, and its resident memory (``VmRSS`` at ready, ``VmHWM`` at
the end). Warm-up requests (directory, nonce, account) happen before ``go`` and are therefore
excluded from both the timing and the request counts of every client alike. With
``BENCH_NO_GO=1`` in its environment a client does not wait for ``go``: run.py then times
it from process start to exit (the ``certbot-acme-process`` row).

:class:`ChallengeResponder` is the tiny http-01 server the peers share (acmecerts uses its
own ``Http01Server``): asyncio, HTTP/1.1 with keep-alive, tokens from a dict or a webroot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WELL_KNOWN = "/.well-known/acme-challenge/"


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--directory", required=True, help="ACME directory URL")
    parser.add_argument("--ca", required=True, help="PEM bundle that signs the CA's HTTPS cert")
    parser.add_argument("--http-port", type=int, required=True, help="where the VA checks")
    parser.add_argument("--count", type=int, default=1, help="certificates to issue")
    parser.add_argument("--names", type=int, default=1, help="names per certificate")
    parser.add_argument("--label", default="r0", help="makes names unique across runs")
    parser.add_argument("--workdir", default=None, help="scratch directory (lego)")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def names_for(args: argparse.Namespace, i: int) -> list[str]:
    return [f"c{i}-{j}.{args.label}.bench.test" for j in range(args.names)]


def cpu_times() -> tuple[float, float]:
    """(user, system) CPU of this process plus its terminated, waited-for children (lego)."""
    user = system = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        user += usage.ru_utime
        system += usage.ru_stime
    return user, system


def cpu_seconds() -> float:
    return sum(cpu_times())


def proc_status_kib(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of this process in KiB (0 when /proc is unavailable)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


class Phase:
    """``ready`` → wait for ``go`` → measure → ``done``."""

    def __init__(self) -> None:
        self.ready_rss_kib = 0
        #: CPU seconds of the benchmark's own helpers (lego's RSS sampler), not the client's
        self.exclude_user_s = self.exclude_sys_s = 0.0
        self._user0 = self._sys0 = 0.0
        self._t0 = 0.0

    def ready_and_wait(self, **fields: Any) -> None:
        self.ready_rss_kib = proc_status_kib("VmRSS")
        emit("ready", rss_kib=self.ready_rss_kib, **fields)
        if os.environ.get("BENCH_NO_GO") != "1":  # else: timed from process start to exit
            line = sys.stdin.readline()
            if line.strip() != "go":
                raise SystemExit(f"expected 'go' on stdin, got {line!r}")
        self._user0, self._sys0 = cpu_times()
        self._t0 = time.perf_counter()

    def done(self, *, issued: int, errors: list[str], **fields: Any) -> None:
        wall = time.perf_counter() - self._t0
        user, system = cpu_times()
        user -= self._user0 + self.exclude_user_s
        system -= self._sys0 + self.exclude_sys_s
        emit(
            "done",
            wall_s=wall,
            cpu_s=user + system,
            user_s=user,
            sys_s=system,
            issued=issued,
            failed=len(errors),
            errors=errors[:5],
            ready_rss_kib=self.ready_rss_kib,
            peak_rss_kib=fields.pop("peak_rss_kib", None) or proc_status_kib("VmHWM"),
            **fields,
        )


class LoopLag:
    """How late a 20 ms asyncio timer fires: the longest stretch the event loop was busy.

    A large lag means everything on the loop waits that long, including an in-process
    http-01 server the CA's validation is waiting for.
    """

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.max_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(self.interval)
            self.max_s = max(self.max_s, loop.time() - t0 - self.interval)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> dict[str, float]:
        if self._task is not None:
            self._task.cancel()
        return {"loop_lag_max_ms": round(1000 * self.max_s, 1)}


def count_certificates(pem: str | bytes) -> int:
    marker = "-----BEGIN CERTIFICATE-----"
    text = pem.decode("ascii", "replace") if isinstance(pem, bytes) else pem
    return text.count(marker)


class ChallengeResponder:
    """A minimal asyncio HTTP/1.1 server for http-01 tokens (keep-alive, GET/HEAD).

    ``tokens`` maps token → key authorization; with ``webroot`` a missing token is looked up
    as the file ``webroot/.well-known/acme-challenge/<token>`` (lego ``--http.webroot``).
    Use :meth:`start` inside a running loop or :meth:`start_in_thread` from threaded code.
    """

    def __init__(self, port: int, *, host: str = "127.0.0.1", webroot: str | None = None) -> None:
        self.host = host
        self.port = port
        self.webroot = Path(webroot) if webroot else None
        self.tokens: dict[str, str] = {}
        self.served = 0
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True, backlog=1024
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def start_in_thread(self) -> None:
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self.start())
            started.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="http01", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("http-01 responder did not start")

    def _lookup(self, token: str) -> bytes | None:
        value = self.tokens.get(token)
        if value is not None:
            return value.encode("ascii")
        if self.webroot is not None and "/" not in token and token not in ("", ".", ".."):
            try:
                return (self.webroot / ".well-known" / "acme-challenge" / token).read_bytes()
            except OSError:
                return None
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                request_line, _, rest = head.partition(b"\r\n")
                parts = request_line.split(b" ")
                method, path = (parts[0], parts[1]) if len(parts) == 3 else (b"", b"")
                close = b"connection: close" in rest.lower()
                body = None
                if path.startswith(WELL_KNOWN.encode()):
                    body = self._lookup(path[len(WELL_KNOWN) :].decode("ascii", "replace"))
                if body is None or method not in (b"GET", b"HEAD"):
                    status, body = b"404 Not Found", b"not found\n"
                else:
                    status = b"200 OK"
                    self.served += 1
                writer.write(
                    b"HTTP/1.1 "
                    + status
                    + b"\r\nContent-Type: application/octet-stream\r\nContent-Length: "
                    + str(len(body)).encode()
                    + (b"\r\nConnection: close" if close else b"")
                    + b"\r\n\r\n"
                    + (body if method != b"HEAD" else b"")
                )
                await writer.drain()
                if close:
                    return
        except (ConnectionError, OSError):
            return
        finally:
            writer.close()
