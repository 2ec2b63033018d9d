"""Run one kill -9 scenario and record what happened (the tests assert on the record).

Each scenario has its own state directory and its own :class:`FaultProxy` (no faults,
just recording) in front of the session Pebble, so the requests of one scenario are
counted apart from the others and scenarios can run at the same time.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from cryptography.hazmat.primitives import serialization

from acmecerts import AcmeClient
from acmecerts.errors import AcmeCertsError, StorageError
from acmecerts.manager._persist import CertificateStore
from acmecerts.protocol.keys import AccountKey, load_private_key
from acmecerts.storage import (
    FileStorage,
    KeyLayout,
    load_or_create_account_key,
    save_account_url,
)
from acmecerts.storage._files import decode as _decode
from acmecerts.testing import PebbleServer
from tests.faults.proxy import FaultProxy, RecordedRequest
from tests.integration.manager_child import CRASH_ENV, issue

ROOT = Path(__file__).resolve().parents[2]
CHILD = ROOT / "tests" / "integration" / "manager_child.py"

#: Steps that happen before the account exists: they start from an empty store.
ACCOUNT_STEPS = frozenset({"account-key-write", "account-url-write"})

#: Pebble's routes, by what the tests count.
ROUTES = {
    "/order-plz": "newOrder",
    "/list-orderz/": "ordersList",
    "/finalize-order/": "finalize",
    "/certZ/": "download",
    "/chalZ/": "challenge",
    "/sign-me-up": "newAccount",
}


@dataclasses.dataclass
class ChildRun:
    """One process's life: exit code, JSON lines printed, stderr (or traceback), requests
    it sent. A restart runs in the test's process: code 0, or 1 if it raised."""

    code: int
    lines: list[dict[str, object]]
    stderr: str
    requests: Counter[str]
    #: Problems found in the state directory afterwards (empty: intact).
    problems: list[str]
    #: Temp files left in the state directory afterwards.
    temps: list[str]
    thumbprint: str | None


@dataclasses.dataclass
class Scenario:
    step: str
    thumbprint_before: str | None
    crashed: ChildRun
    restarted: ChildRun
    #: The stored certificate's serial and whether an order record is left that is not
    #: finished (a finished one names the stored certificate's order), after restart.
    stored_serial: str | None = None
    order_record_left: bool = True
    #: The order record the crash left: its URL (``None``: an intent) and key (SPKI hex).
    record_after_crash: tuple[str | None, str] | None = None
    #: The public key (SPKI hex) of the certificate stored after the restart.
    certified_key: str | None = None
    #: For ``record-saved``: a forced renewal after the restart.
    renewed: ChildRun | None = None


def count(requests: list[RecordedRequest]) -> Counter[str]:
    """Requests by route; ``newOrder`` only counts orders the CA created (201)."""
    counts: Counter[str] = Counter()
    for request in requests:
        if request.method != "POST":
            continue
        for prefix, what in ROUTES.items():
            if request.path.startswith(prefix):
                if what == "newOrder" and request.status != 201:
                    counts["newOrder refused"] += 1
                else:
                    counts[what] += 1
    return counts


def hidden_files(state: Path) -> tuple[list[str], list[str]]:
    """Temp files and lock files under ``state`` (names starting with ``.``)."""
    temps, locks = [], []
    for path in state.rglob("*"):
        rel = path.relative_to(state)
        if path.is_file() and any(part.startswith(".") for part in rel.parts):
            (locks if rel.parts[0] == ".locks" else temps).append(str(rel))
    return sorted(temps), sorted(locks)


async def value_problems(state: Path) -> list[str]:
    """Stored values that do not load (corrupt, truncated, half-written)."""
    problems: list[str] = []
    async with FileStorage(state) as storage:
        for key in await storage.list(""):
            try:
                if await storage.load(key) is None:
                    problems.append(f"{key}: listed but not loadable")
            except StorageError as exc:
                problems.append(f"{key}: {exc}")
    return problems


def store_problems(state: Path) -> list[str]:
    """What is wrong with the store: corrupt values, odd hidden files, wrong modes."""
    problems = anyio.run(value_problems, state)
    temps, locks = hidden_files(state)
    for temp in temps:
        name = Path(temp).name
        if not (name.startswith(".") and name.endswith(".tmp")):
            problems.append(f"{temp}: a hidden file that is no temp file")
    for lock in locks:
        try:  # a lease file is written atomically too
            _decode((state / lock).read_bytes(), lock, str(state / lock))
        except StorageError as exc:
            problems.append(f"{lock}: {exc}")
    for path in [state, *state.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        if mode != (0o700 if path.is_dir() else 0o600):
            problems.append(f"{path.relative_to(state)}: mode {oct(mode)}")
    return problems


def thumbprint(state: Path, layout: KeyLayout) -> str | None:
    """The stored account key's thumbprint (``None``: no key stored)."""
    path = state.joinpath(*layout.account_key().split("/"))
    if not path.exists():
        return None
    value = _decode(path.read_bytes(), layout.account_key(), str(path))
    return AccountKey.from_pem(value.data).thumbprint


async def create_account(directory_url: str, ca_bundle: Path, state: Path) -> None:
    layout = KeyLayout(directory_url)
    async with FileStorage(state) as storage:
        key = await load_or_create_account_key(storage, layout)
        async with AcmeClient(directory_url, ca_bundle=ca_bundle, account_key=key) as client:
            await client.register()
            assert client.account_url is not None
            await save_account_url(storage, layout, client.account_url, account_key=key)


def run_child(
    pebble: PebbleServer, proxy: FaultProxy, state: Path, name: str, *, crash_at: str
) -> ChildRun:
    """Run the manager child through ``proxy`` until it kills itself at ``crash_at``."""
    assert pebble.challtestsrv_url is not None
    env = {**os.environ, "PYTHONPATH": str(ROOT), CRASH_ENV: crash_at}
    argv = [
        sys.executable,
        str(CHILD),
        "--directory",
        proxy.directory_url,
        "--ca-bundle",
        str(pebble.ca_bundle),
        "--state",
        str(state),
        "--challtestsrv",
        pebble.challtestsrv_url,
        name,
    ]
    proxy.clear_requests()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=50)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return _record(proc.returncode, lines, proc.stderr, proxy, state)


def run_restart(
    pebble: PebbleServer, proxy: FaultProxy, state: Path, name: str, *, force: bool = False
) -> ChildRun:
    """The restarted manager, in this process (a fresh client, store and manager)."""
    assert pebble.challtestsrv_url is not None
    proxy.clear_requests()
    code, stderr = 0, ""
    try:
        lines = anyio.run(
            functools.partial(
                issue,
                directory=proxy.directory_url,
                ca_bundle=str(pebble.ca_bundle),
                state=str(state),
                challtestsrv=pebble.challtestsrv_url,
                names=[name],
                force=force,
            )
        )
    except Exception:
        code, stderr, lines = 1, traceback.format_exc(), []
    return _record(code, lines, stderr, proxy, state)


def _record(
    code: int, lines: list[dict[str, object]], stderr: str, proxy: FaultProxy, state: Path
) -> ChildRun:
    requests = count(proxy.requests)
    problems = store_problems(state)
    temps, _ = hidden_files(state)
    return ChildRun(
        code=code,
        lines=lines,
        stderr=stderr,
        requests=requests,
        problems=problems,
        temps=temps,
        thumbprint=thumbprint(state, KeyLayout(proxy.directory_url)),
    )


def spki(public_key: Any) -> str:
    return bytes(
        public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    ).hex()


async def order_record(state: Path, layout: KeyLayout, name: str) -> tuple[str | None, str] | None:
    """The order record of ``name``: its URL and its key's public half, if there is one."""
    async with FileStorage(state) as storage:
        record = await CertificateStore(storage, layout).load_order(name)
    if record is None:
        return None
    key = load_private_key(record.private_key_pem.encode("ascii"))
    return record.order_url, spki(key.public_key())


def run_scenario(pebble: PebbleServer, step: str, workdir: Path) -> Scenario:
    """Kill the manager at ``step``, restart it on the same state, record everything."""
    state = workdir / step
    state.mkdir(mode=0o700)
    name = f"{step}.crash.example.test"
    with FaultProxy(
        pebble.directory_url,
        certfile=pebble.tls_cert_path,
        keyfile=pebble.tls_key_path,
        upstream_ca=pebble.ca_bundle,
    ) as proxy:
        layout = KeyLayout(proxy.directory_url)
        if step not in ACCOUNT_STEPS:
            anyio.run(create_account, proxy.directory_url, pebble.ca_bundle, state)
        before = thumbprint(state, layout)
        crashed = run_child(pebble, proxy, state, name, crash_at=step)
        record = anyio.run(order_record, state, layout, name)
        restarted = run_restart(pebble, proxy, state, name)
        scenario = Scenario(step, before, crashed, restarted, record_after_crash=record)

        async def stored() -> None:
            async with FileStorage(state) as storage:
                certificates = CertificateStore(storage, layout)
                try:
                    issued = await certificates.load_certificate(name)
                except AcmeCertsError as exc:
                    scenario.restarted.problems.append(f"certificate unusable: {exc}")
                    return
                scenario.stored_serial = None if issued is None else issued.serial
                if issued is not None:
                    scenario.certified_key = spki(issued.chain.leaf.public_key())
                finished = None if issued is None else issued.order_url
                left = await certificates.load_order(name, finished=finished)
                scenario.order_record_left = left is not None

        anyio.run(stored)
        if step == "record-saved":
            scenario.renewed = run_restart(pebble, proxy, state, name, force=True)
    return scenario
