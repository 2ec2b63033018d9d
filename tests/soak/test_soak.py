"""Fault soak: issue certificates non-stop through a proxy that injects random faults.

Not in the default suite (marker ``soak``, deselected by ``addopts``); run it with
``nox -s soak`` or ``pytest tests/soak -m soak``. Knobs (environment):

* ``ACMECERTS_SOAK_SECONDS`` (default 60, at most 3600): how long new certificates are
  started; the ones in flight then finish (one more attempt at most);
* ``ACMECERTS_SOAK_FAULT_RATE`` (default 0.15): the share of requests disturbed;
* ``ACMECERTS_SOAK_CONCURRENCY`` (default 8): the manager's concurrency;
* ``ACMECERTS_SOAK_SEED``: the proxy's random seed (printed, to replay a run).

The proxy (``proxy_child.py``, its own process) answers at random with 500, 503 +
``Retry-After``, 429 + ``Retry-After`` (seconds and HTTP-date), ``badNonce``, resets,
stalls (some longer than the request timeout), slow bodies and truncated bodies. A
``CertificateManager`` with a ``FileStorage`` and the http-01 solver issues one
certificate after another, 2 x concurrency at a time, each with up to four attempts
(1, 2, 4 s apart), and forgets it once done (as a fleet would keep its working set
bounded). At the end:

* every certificate was issued, or reported with a typed error (an ``AcmeCertsError``
  subclass with a kind and a message) or a deferral with its reason;
* no task and no socket leaked (asyncio tasks and ``/proc/self/fd`` sockets, before and
  after);
* memory is flat: traced Python memory (tracemalloc) grows by less than a bound from
  the middle of the run to its end, and from the first quarter to the third;
* the request rate obeys the backoff, from the proxy's arrival times: after a failed
  request (5xx, 429, reset, truncation, a stall past the request timeout) the same
  request (method, URL and JWS payload) comes back no sooner than the retry floor, and
  never before the ``Retry-After`` instant; ``badNonce`` alone is replayed at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import gc
import itertools
import json
import logging
import os
import random
import subprocess
import sys
import tracemalloc
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from acmecerts import AcmeClient, Http01Server
from acmecerts.errors import AcmeCertsError
from acmecerts.manager import (
    CancelledResult,
    CertificateManager,
    DeferredResult,
    FailedResult,
    IssuedResult,
)
from acmecerts.retry import AttemptSchedule, RequestRetry
from acmecerts.storage import FileStorage, KeyLayout, load_or_create_account_key
from acmecerts.testing import PebbleServer

REPO = Path(__file__).resolve().parents[2]
SECONDS = min(3600.0, max(5.0, float(os.environ.get("ACMECERTS_SOAK_SECONDS", "60"))))
FAULT_RATE = float(os.environ.get("ACMECERTS_SOAK_FAULT_RATE", "0.15"))
CONCURRENCY = int(os.environ.get("ACMECERTS_SOAK_CONCURRENCY", "8"))
SEED = int(os.environ.get("ACMECERTS_SOAK_SEED", str(random.SystemRandom().randrange(1 << 31))))

#: The client's settings the rate checks hold it to.
RETRY = RequestRetry(floor=0.5, cap=8.0, max_attempts=5)
REQUEST_TIMEOUT = 3.0
ATTEMPT_TIMEOUT = 45.0
SCHEDULE = AttemptSchedule.from_delays([1.0, 2.0, 4.0], repeat_last=False)
#: Traced memory may grow by this much between the samples compared.
MEMORY_BOUND = 4 * 1024 * 1024
#: Resources several certificates' flows read (their requests cannot be told apart):
#: nonces, the directory, the account, its orders list.
SHARED = ("/nonce-plz", "/dir", "/my-account/", "/list-orderz/", "/sign-me-up")
#: Clock granularity and scheduling slack allowed in the rate checks (seconds).
SLACK = 0.02

pytestmark = [
    pytest.mark.soak,
    pytest.mark.anyio,
    pytest.mark.timeout(int(SECONDS) + 300),
]


@dataclasses.dataclass
class Outcome:
    name: str
    kind: str  # issued, failed, deferred, cancelled
    attempts: int
    error: BaseException | None = None
    detail: str = ""


@dataclasses.dataclass
class Soak:
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    memory: dict[float, int] = dataclasses.field(default_factory=dict)
    snapshots: dict[float, tracemalloc.Snapshot] = dataclasses.field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0


class LogTally(logging.Handler):
    """Counts acmecerts' log records and keeps the last few as text.

    It stands in for pytest's log capture during the soak: that keeps every record, and
    a record keeps its arguments (errors, their tracebacks and every frame's locals)
    alive, which would read as a leak.
    """

    def __init__(self) -> None:
        super().__init__()
        self.levels: Counter[str] = Counter()
        self.last: deque[str] = deque(maxlen=10)

    def emit(self, record: logging.LogRecord) -> None:
        self.levels[record.levelname] += 1
        self.last.append(f"{record.levelname} {record.name}: {record.getMessage()}")


def open_sockets() -> int:
    """Sockets open in this process."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


async def drive(manager: CertificateManager, name: str, deadline: float) -> Outcome:
    """Issue ``name`` until it is issued, the schedule gives up, or the soak is over."""
    attempts = 0
    try:
        while True:
            attempts += 1
            [result] = await manager.issue_many([name])
            now = manager.clock.now()
            if isinstance(result, IssuedResult):
                assert list(result.certificate.names) == [name]
                return Outcome(name, "issued", attempts)
            if isinstance(result, CancelledResult):
                return Outcome(name, "cancelled", attempts, detail=result.reason)
            if isinstance(result, FailedResult):
                until = result.next_attempt_at
                if until is None or anyio.current_time() >= deadline:
                    return Outcome(name, "failed", attempts, error=result.error)
            else:
                assert isinstance(result, DeferredResult)
                until = result.until
                if anyio.current_time() >= deadline:
                    return Outcome(name, "deferred", attempts, detail=result.reason)
            await anyio.sleep(min(30.0, max(0.0, (until - now).total_seconds())))
    finally:
        await manager.unmanage(name)  # a fleet's working set stays bounded


async def soak(
    directory: str, ca_bundle: Path, http_port: int, state: Path, start_faults: Callable[[], None]
) -> Soak:
    result = Soak()
    names = itertools.count()
    layout = KeyLayout(directory)
    async with FileStorage(state) as storage:
        key = await load_or_create_account_key(storage, layout)
        async with (
            Http01Server(host="127.0.0.1", port=http_port) as http01,
            AcmeClient(
                directory,
                ca_bundle=ca_bundle,
                account_key=key,
                request_timeout=REQUEST_TIMEOUT,
                request_retry=RETRY,
                attempt_timeout=ATTEMPT_TIMEOUT,
            ) as client,
        ):
            await client.register()
            manager = CertificateManager(
                client,
                solvers=[http01],
                storage=storage,
                concurrency=CONCURRENCY,
                schedule=SCHEDULE,
            )
            start_faults()
            result.started = anyio.current_time()
            deadline = result.started + SECONDS

            async def worker() -> None:
                while anyio.current_time() < deadline:
                    name = f"soak{next(names)}-{SEED}.example.test"
                    result.outcomes.append(await drive(manager, name, deadline))

            async def sample_memory() -> None:
                for quarter in (0.25, 0.5, 0.75, 1.0):
                    at = result.started + quarter * SECONDS
                    await anyio.sleep(max(0.0, at - anyio.current_time()))
                    gc.collect()
                    result.memory[quarter] = tracemalloc.get_traced_memory()[0]
                    if quarter in (0.5, 1.0):
                        result.snapshots[quarter] = tracemalloc.take_snapshot()

            async with anyio.create_task_group() as tg:
                for _ in range(2 * CONCURRENCY):
                    tg.start_soon(worker)
                tg.start_soon(sample_memory)
            result.ended = anyio.current_time()
    return result


@dataclasses.dataclass
class RateReport:
    requests: int
    faults: Counter[str]
    #: Error answers the CA itself gave (not injected), by method, route and status.
    ca_errors: Counter[str]
    checked: int
    violations: list[str]
    min_gap: float
    min_retry_after_margin: float
    peak_per_second: int


def _retry_after_instant(record: dict[str, Any]) -> float | None:
    """The wall-clock instant a Retry-After header named (None: none sent)."""
    value = record["retry_after"]
    if value is None:
        return None
    if value.isdigit():  # seconds after the answer was sent
        sent = float(record["wall"]) + float(record["responded"]) - float(record["arrival"])
        return sent + int(value)
    return email.utils.parsedate_to_datetime(value).timestamp()


def analyse(records: list[dict[str, Any]]) -> RateReport:
    """Check the spacing of retried requests against the floor and Retry-After."""
    records = sorted(records, key=lambda r: r["arrival"])
    faults = Counter(
        (r["fault"] if r["fault_status"] is None else f"{r['fault']} {r['fault_status']}")
        for r in records
        if r["fault"] is not None
    )
    scans = [r["arrival"] for r in records if r["path"].startswith("/list-orderz/")]
    by_request: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if not r["path"].startswith(SHARED):
            by_request[(r["method"], r["path"], r["payload"])].append(r)
    floor = float(RETRY.floor)  # type: ignore[arg-type]
    violations: list[str] = []
    checked = 0
    min_gap = float("inf")
    min_margin = float("inf")
    for (method, path, _), sent in by_request.items():
        for prev, nxt in itertools.pairwise(sent):
            fault = prev["fault"]
            if fault in (None, "BadNonce", "SlowBody"):
                continue  # answered (late, slowly), or replayed at once by design
            if fault == "Stall":
                if prev["stall"] < REQUEST_TIMEOUT:
                    continue  # answered, late
                failed_at = prev["arrival"] + REQUEST_TIMEOUT  # the client gave up then
            else:
                failed_at = prev["responded"] or prev["arrival"]
            if path.startswith("/my-order/") and any(
                prev["arrival"] - 10 <= t <= nxt["arrival"] for t in scans
            ):
                continue  # another certificate's recovery may have read this order
            checked += 1
            gap = nxt["arrival"] - failed_at
            min_gap = min(min_gap, gap)
            if gap < floor - SLACK:
                violations.append(f"{method} {path}: again {gap:.3f}s after a {fault}")
            instant = _retry_after_instant(prev)
            if instant is not None:
                margin = nxt["wall"] - instant
                min_margin = min(min_margin, margin)
                if margin < -SLACK:
                    violations.append(
                        f"{method} {path}: {-margin:.3f}s before Retry-After {prev['retry_after']}"
                    )
    per_second = Counter(int(r["arrival"]) for r in records)
    ca_errors = Counter(
        f"{r['method']} {'/'.join(r['path'].split('/')[:2])}/ {r['status']}"
        for r in records
        if r["fault"] is None and r["status"] is not None and r["status"] >= 400
    )
    return RateReport(
        requests=len(records),
        faults=faults,
        ca_errors=ca_errors,
        checked=checked,
        violations=violations,
        min_gap=min_gap,
        min_retry_after_margin=min_margin,
        peak_per_second=max(per_second.values(), default=0),
    )


def typed(outcome: Outcome) -> bool:
    """A clear report: an acmecerts error subclass with a kind and a message."""
    error = outcome.error
    return (
        isinstance(error, AcmeCertsError)
        and type(error) is not AcmeCertsError
        and bool(str(error).strip())
        and error.kind is not None
    )


async def test_soak(pebble: PebbleServer, tmp_path: Path) -> None:
    records_path = tmp_path / "requests.json"
    proxy = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tests" / "soak" / "proxy_child.py"),
            "--upstream",
            pebble.directory_url,
            "--cert",
            str(pebble.tls_cert_path),
            "--key",
            str(pebble.tls_key_path),
            "--ca",
            str(pebble.ca_bundle),
            "--rate",
            str(FAULT_RATE),
            "--seed",
            str(SEED),
            "--records",
            str(records_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proxy.stdin is not None
    assert proxy.stdout is not None
    stdin = proxy.stdin
    tally = LogTally()

    def start_faults() -> None:
        stdin.write("go\n")
        stdin.flush()

    try:
        line = await anyio.to_thread.run_sync(proxy.stdout.readline)
        directory = json.loads(line)["directory"]
        tasks_before = len(asyncio.all_tasks())
        sockets_before = open_sockets()
        logger = logging.getLogger("acmecerts")
        propagate, logger.propagate = logger.propagate, False
        logger.addHandler(tally)
        tracemalloc.start()
        try:
            result = await soak(
                directory, pebble.ca_bundle, pebble.http_port, tmp_path / "state", start_faults
            )
        finally:
            tracemalloc.stop()
            logger.removeHandler(tally)
            logger.propagate = propagate
        for _ in range(50):  # closed sockets may take a moment to go
            if open_sockets() <= sockets_before:
                break
            await anyio.sleep(0.1)
        sockets_after = open_sockets()
        tasks_after = len(asyncio.all_tasks())
    finally:
        stdin.close()
        await anyio.to_thread.run_sync(proxy.wait, 60)
        proxy.stdout.close()
    records = json.loads(records_path.read_text())
    report = analyse(records)

    outcomes = Counter(o.kind for o in result.outcomes)
    errors = Counter(type(o.error).__name__ for o in result.outcomes if o.error is not None)
    attempts = Counter(o.attempts for o in result.outcomes if o.kind == "issued")
    elapsed = result.ended - result.started
    memory = {q: round(v / 1e6, 2) for q, v in result.memory.items()}
    print(
        "\n".join(
            [
                "",
                f"soak: {SECONDS:g}s (+{elapsed - SECONDS:.1f}s to finish), seed {SEED}, "
                f"fault rate {FAULT_RATE}, concurrency {CONCURRENCY}",
                f"certificates: {len(result.outcomes)} {dict(outcomes)}; "
                f"issued after n attempts: {dict(sorted(attempts.items()))}",
                f"errors reported: {dict(errors)}",
                f"requests: {report.requests} ({report.requests / elapsed:.1f}/s, "
                f"peak {report.peak_per_second} in one second); "
                f"faults injected: {sum(report.faults.values())} {dict(report.faults)}",
                f"error answers from the CA itself: {dict(report.ca_errors)}",
                f"retries checked: {report.checked}, shortest gap after a fault "
                f"{report.min_gap:.3f}s (floor {RETRY.floor}s), closest to a Retry-After "
                f"instant {report.min_retry_after_margin:+.3f}s",
                f"tasks {tasks_before}->{tasks_after}, sockets {sockets_before}->{sockets_after}, "
                f"traced memory MB by quarter {memory}",
                f"log records: {dict(tally.levels)}; the last ones:",
                *(f"  {line}" for line in tally.last),
            ]
        )
    )

    for o in [o for o in result.outcomes if o.kind != "issued"][:10]:
        where = getattr(o.error, "url", None) or ""
        print(f"  {o.name}: {o.kind} after {o.attempts} attempt(s): {o.error!r} {where} {o.detail}")
    growth_by_line = result.snapshots[1.0].compare_to(result.snapshots[0.5], "lineno")
    for stat in growth_by_line[:5]:
        print(f"  memory: {stat}")

    # every certificate was issued or reported with a clear, typed error
    assert result.outcomes
    assert outcomes["issued"] > 0
    assert outcomes["cancelled"] == 0, [o for o in result.outcomes if o.kind == "cancelled"]
    unclear = [o for o in result.outcomes if o.kind == "failed" and not typed(o)]
    assert unclear == [], [repr(o.error) for o in unclear]
    assert all(o.detail for o in result.outcomes if o.kind == "deferred")
    # no leaks
    assert tasks_after == tasks_before
    assert sockets_after <= sockets_before
    # memory flat
    growth = result.memory[1.0] - result.memory[0.5]
    early_growth = result.memory[0.75] - result.memory[0.25]
    if growth > MEMORY_BOUND or early_growth > MEMORY_BOUND:
        top = growth_by_line[:15]
        pytest.fail("traced memory grows:\n" + "\n".join(str(s) for s in top))
    # never faster than the backoff allows
    assert report.faults, "no fault was injected"
    assert report.checked > 0
    assert report.violations == []
