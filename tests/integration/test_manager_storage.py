"""The manager with a shared FileStorage: persistence, several processes, resume after kill -9."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from waits import finish

from acmecerts import AcmeClient, Http01Server
from acmecerts.manager import CertificateLoaded, CertificateManager, IssuedResult
from acmecerts.manager._persist import CertificateStore
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.testing import PebbleServer

from .conftest import assert_valid_chain

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).with_name("manager_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _orders(pebble: PebbleServer) -> int:
    return sum(
        1 for method, path in pebble.requests_seen() if (method, path) == ("POST", "/order-plz")
    )


def _child(
    pebble: PebbleServer, state: Path, names: list[str], *, block: bool = False
) -> list[str]:
    assert pebble.challtestsrv_url is not None
    return [
        sys.executable,
        str(CHILD),
        "--directory",
        pebble.directory_url,
        "--ca-bundle",
        str(pebble.ca_bundle),
        "--state",
        str(state),
        "--challtestsrv",
        pebble.challtestsrv_url,
        *(["--block"] if block else []),
        *names,
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


async def test_certificates_survive_a_restart_without_a_new_order(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    names = ["persist1.example.test", "persist2.example.test"]
    async with FileStorage(tmp_path) as storage:
        async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
            manager = CertificateManager(client, solvers=[http01], storage=storage)
            first = await manager.issue_many(names)
        before = _orders(pebble)
        async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
            restarted = CertificateManager(client, solvers=[http01], storage=storage)
            second = await restarted.issue_many(names)
            assert restarted.get(names[0]) is not None
        layout = KeyLayout(pebble.directory_url)
        keys = layout.certificate(names[0])
        mode = (tmp_path / keys.record).stat().st_mode & 0o777
    assert _orders(pebble) == before
    for a, b in zip(first, second, strict=True):
        assert isinstance(a, IssuedResult)
        assert isinstance(b, IssuedResult)
        assert a.certificate.serial == b.certificate.serial
        assert_valid_chain(b.certificate, pebble, [b.name])
    assert mode == 0o600


@pytest.mark.timeout(240)
def test_three_processes_sharing_a_store_order_each_certificate_once(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    names = [f"shared{i}.example.test" for i in range(30)]
    before = _orders(pebble)
    with contextlib.ExitStack() as running:
        procs = [
            running.enter_context(
                subprocess.Popen(
                    _child(pebble, tmp_path, names),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=_env(),
                )
            )
            for _ in range(3)
        ]
        # on any failure, the others are killed before their pipes are closed
        running.callback(lambda: [p.kill() for p in procs if p.poll() is None])
        outputs = [
            finish(p, timeout=200, waiting_for=f"manager process {i} to issue 30 certificates")
            for i, p in enumerate(procs)
        ]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
    results = [[json.loads(line) for line in out.splitlines()] for out, _ in outputs]
    assert _orders(pebble) - before == 30  # no certificate was ordered twice
    for lines in results:
        assert len(lines) == 30
        assert all(line["kind"] == "IssuedResult" for line in lines)
    # every process ended with the same certificate for each name
    for i in range(30):
        assert len({lines[i]["serial"] for lines in results}) == 1
    # and exactly one account was registered for the store
    accounts = list((tmp_path).rglob("key.pem"))
    assert len(accounts) == 1


@pytest.mark.timeout(120)
async def test_kill_9_mid_order_then_restart_resumes_the_same_order(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    name = "resume.example.test"
    before = _orders(pebble)
    proc = subprocess.Popen(
        _child(pebble, tmp_path, [name], block=True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert proc.stdout is not None
    line = await anyio.to_thread.run_sync(proc.stdout.readline)
    assert json.loads(line) == {"presenting": f"_acme-challenge.{name}"}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    assert proc.stderr is not None
    proc.stderr.close()
    assert _orders(pebble) - before == 1
    layout = KeyLayout(pebble.directory_url)
    async with FileStorage(tmp_path) as storage:
        assert await storage.load(layout.order(name)) is not None  # the order was recorded
        from acmecerts.storage import load_account_url, load_or_create_account_key

        key = await load_or_create_account_key(storage, layout)
        url = await load_account_url(storage, layout, account_key=key)
        start = time.monotonic()
        async with AcmeClient(
            pebble.directory_url, ca_bundle=pebble.ca_bundle, account_key=key, account_url=url
        ) as client:
            manager = CertificateManager(client, solvers=[http01], storage=storage)
            [result] = await manager.issue_many([name])
        assert isinstance(result, IssuedResult)
        # done: the record stays, finished (it names the saved certificate's order)
        stored = CertificateStore(storage, layout)
        assert await stored.load_order(name) is not None
        finished = result.certificate.order_url
        assert await stored.load_order(name, finished=finished) is None
    assert_valid_chain(result.certificate, pebble, [name])
    assert _orders(pebble) - before == 1  # resumed: no second newOrder
    assert time.monotonic() - start < 60


async def test_a_restarted_manager_loads_its_certificates_in_the_background_without_orders(
    pebble: PebbleServer, http01: Http01Server, tmp_path: Path
) -> None:
    names = [f"restart{i}.example.test" for i in range(5)]
    async with FileStorage(tmp_path) as storage:
        async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
            first = await CertificateManager(client, solvers=[http01], storage=storage).issue_many(
                names
            )
        before = _orders(pebble)
        async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
            restarted = CertificateManager(client, solvers=[http01], storage=storage)
            events: list[object] = []
            restarted.subscribe(events.append)
            for name in names:
                restarted.manage(name)
            async with restarted:
                for _ in range(3000):  # the scheduler reads the store: up to 30 s
                    if len(events) >= len(names) and all(
                        restarted.renewal_at(name) is not None for name in names
                    ):
                        break
                    await anyio.sleep(0.01)
                else:
                    raise AssertionError(f"30 s and only {len(events)} events: {events}")
                await anyio.sleep(0.2)  # room for an event too many
    assert _orders(pebble) == before
    # nothing was attempted; publishers heard of every stored certificate, once
    loaded_events = [event for event in events if isinstance(event, CertificateLoaded)]
    assert loaded_events == events, events
    assert sorted(event.name for event in loaded_events) == sorted(names)
    for event in loaded_events:
        assert isinstance(event, CertificateLoaded)
        assert event.certificate is not None
        assert event.certificate == restarted.get(event.name)
        assert event.renew_at == restarted.renewal_at(event.name)
    for result in first:
        assert isinstance(result, IssuedResult)
        loaded = restarted.get(result.name)
        assert loaded is not None
        assert loaded == result.certificate
        assert loaded.fullchain_pem == result.certificate.fullchain_pem
        renew_at = restarted.renewal_at(result.name)
        assert renew_at is not None
        assert loaded.not_before < renew_at < loaded.not_after
