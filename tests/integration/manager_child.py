"""A manager process for the multi-process tests (run as a script, not collected).

    python tests/integration/manager_child.py --directory URL --ca-bundle PEM \
        --state DIR --challtestsrv URL [--block] [--force] NAME...

Loads (or creates, under the store's lock) the one account key of the store, then asks a
``CertificateManager`` sharing ``--state`` to issue a certificate per NAME with dns-01
through pebble-challtestsrv, and prints one JSON line per result. ``--block`` makes the
solver hang after the order was created (so the parent can kill -9 the process
mid-order). ``--force`` issues even when a current certificate is stored (a renewal).

Crash points (tests/crash/): with ``ACMECERTS_TEST_CRASH_AT=<step>`` in the environment
the process kills itself with SIGKILL at that step of the issuance. Only this driver
reads the variable (the library knows nothing of it); it wraps the transport (request
and response hooks), the solver and the store. The steps, in the order an issuance
passes them, are in :data:`CRASH_POINTS`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import urllib.parse
import urllib.request
from typing import Any

import anyio

from acmecerts import AcmeClient, DnsHookSolver
from acmecerts.manager import CertificateManager, IssuedResult
from acmecerts.storage import (
    FileStorage,
    KeyLayout,
    load_account_url,
    load_or_create_account_key,
    save_account_url,
)
from acmecerts.transport import RequestSent, ResponseReceived

CRASH_ENV = "ACMECERTS_TEST_CRASH_AT"

#: Where the process can be told to die, in issuance order (Pebble's resource paths).
CRASH_POINTS = {
    # account creation
    "account-key-write": "the account key's temp file is written, not yet renamed",
    "account-url-write": "the account is registered, its URL not yet stored",
    # the order
    "neworder-sent": "newOrder is about to be sent",
    "neworder-answered": "the CA answered newOrder (201), the order is not yet recorded",
    "order-saved": "the order record (orders/<name>.json) was just written",
    # validation
    "presenting": "the solver is asked to present the challenge response",
    "challenge-answered": "the CA accepted the challenge answer and validates",
    # finalization
    "finalize-sent": "the order is ready, finalize is about to be sent",
    "finalize-answered": "the CA answered finalize (the order is processing or valid)",
    # download and save
    "download-answered": "the certificate was downloaded, nothing of it saved",
    "cert-half-written": "half of certificate.json's temp file (the record) is written",
    "cert-tmp-written": "certificate.json's temp file is complete and fsynced, not yet renamed",
    "record-write": "the certificate's record (certificate.json) is about to be stored",
    "record-saved": "the certificate's record is stored; its order record stays (finished)",
}


def crash(step: str) -> None:
    """Die at once, as a power cut or the OOM killer would: no cleanup, no flush."""
    print(json.dumps({"crashing": step}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def _path(url: str) -> str:
    return urllib.parse.urlsplit(url).path


def _install_os_crashes(step: str) -> None:
    """Crash inside FileStorage's atomic write (os.write / os.replace), by file name."""
    if step == "account-key-write":
        real_replace = os.replace

        def replace(src: Any, dst: Any, **kwargs: Any) -> None:
            if os.fspath(dst).endswith("/key.pem"):
                crash(step)
            real_replace(src, dst, **kwargs)

        os.replace = replace  # type: ignore[assignment]
    elif step == "cert-tmp-written":
        real_replace = os.replace

        def replace(src: Any, dst: Any, **kwargs: Any) -> None:
            if os.fspath(dst).endswith("/certificate.json"):
                crash(step)
            real_replace(src, dst, **kwargs)

        os.replace = replace  # type: ignore[assignment]
    elif step == "cert-half-written":
        real_write = os.write

        def write(fd: int, data: Any) -> int:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.endswith("/.certificate.json.tmp") and len(data) > 1:
                real_write(fd, bytes(data[: len(data) // 2]))
                crash(step)
            return real_write(fd, data)

        os.write = write


class CrashingStorage(FileStorage):
    """A FileStorage that dies before or after chosen writes (only in this driver)."""

    def __init__(self, root: str, *, step: str | None, layout: KeyLayout, names: list[str]):
        super().__init__(root)
        self._step = step
        self._orders = {layout.order(n) for n in names}
        self._records = {layout.certificate(n).record for n in names}
        self._account_meta = layout.account_meta()

    async def store(self, key: str, data: bytes, **kwargs: Any) -> str:
        if self._step == "record-write" and key in self._records:
            crash(self._step)
        if self._step == "account-url-write" and key == self._account_meta:
            crash(self._step)
        version = await super().store(key, data, **kwargs)
        if self._step == "record-saved" and key in self._records:
            # the order record is kept, finished by rule (it names this record's order)
            crash(self._step)
        # the record with the order's URL, not the intent written before newOrder
        recorded = key in self._orders and json.loads(data)["order_url"] is not None
        if self._step == "order-saved" and recorded:
            crash(self._step)
        return version


def _post(url: str, payload: dict[str, str]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


async def issue(
    *,
    directory: str,
    ca_bundle: str,
    state: str,
    challtestsrv: str,
    names: list[str],
    block: bool = False,
    force: bool = False,
    step: str | None = None,
    kube_namespace: str | None = None,
    kube_config: str | None = None,
) -> list[dict[str, Any]]:
    """Issue ``names`` with a manager on the store at ``state``; one summary per name.

    Also usable in-process (the crash tests restart here, without a crash point).
    """

    async def set_record(name: str, value: str) -> None:
        if step == "presenting":
            crash(step)
        if block:
            print(json.dumps({"presenting": name}), flush=True)
            await anyio.sleep_forever()
        await anyio.to_thread.run_sync(
            _post, f"{challtestsrv}/set-txt", {"host": name + ".", "value": value}
        )

    async def clear_record(name: str, value: str) -> None:
        await anyio.to_thread.run_sync(_post, f"{challtestsrv}/clear-txt", {"host": name + "."})

    # Pebble's routes (see PebbleServer.requests_seen): a request about to be sent ...
    before_request = {"neworder-sent": "/order-plz", "finalize-sent": "/finalize-order/"}
    # ... and a 2xx answer received, before the client looks at it
    after_response = {
        "neworder-answered": "/order-plz",
        "challenge-answered": "/chalZ/",
        "finalize-answered": "/finalize-order/",
        "download-answered": "/certZ/",
    }

    def on_request(method: str, url: str) -> None:
        route = before_request.get(step or "")
        if route is not None and method == "POST" and _path(url).startswith(route):
            crash(step or "")

    def on_response(method: str, url: str, status: int) -> None:
        route = after_response.get(step or "")
        posted = route is not None and method == "POST" and _path(url).startswith(route)
        if posted and 200 <= status < 300:
            crash(step or "")

    def crash_at_step(event: object) -> None:
        if isinstance(event, RequestSent):
            on_request(event.method, event.url)
        elif isinstance(event, ResponseReceived):
            on_response(event.method, event.url, event.status)

    solver = DnsHookSolver(set_record, clear_record, propagation=None)
    layout = KeyLayout(directory)
    store: Any
    if kube_namespace is not None:
        from acmecerts.storage.kubernetes import KubernetesStorage

        store = KubernetesStorage(kube_namespace, kubeconfig=kube_config)
    else:
        store = CrashingStorage(state, step=step, layout=layout, names=names)
    async with store as storage:
        key = await load_or_create_account_key(storage, layout)
        url = await load_account_url(storage, layout, account_key=key)
        async with AcmeClient(
            directory,
            ca_bundle=ca_bundle,
            account_key=key,
            account_url=url,
        ) as client:
            if step:
                client.subscribe(crash_at_step)
            if url is None:
                await client.register()
                assert client.account_url is not None
                await save_account_url(storage, layout, client.account_url, account_key=key)
            manager = CertificateManager(client, solvers=[solver], storage=storage, concurrency=8)
            results = await manager.issue_many(names, force=force)
    lines: list[dict[str, Any]] = []
    for result in results:
        line: dict[str, Any] = {"name": result.name, "kind": type(result).__name__}
        if isinstance(result, IssuedResult):
            line["serial"] = result.certificate.serial
            line["order_url"] = result.certificate.order_url
        else:
            line["detail"] = repr(result)
        lines.append(line)
    return lines


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", required=True)
    parser.add_argument("--ca-bundle", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--challtestsrv", required=True)
    parser.add_argument("--block", action="store_true")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--kube-namespace", help="use the Kubernetes store in this namespace")
    parser.add_argument("--kube-config", help="kubeconfig for --kube-namespace")
    parser.add_argument("names", nargs="+")
    args = parser.parse_args()
    step = os.environ.get(CRASH_ENV) or None
    if step is not None and step not in CRASH_POINTS:
        parser.error(f"unknown {CRASH_ENV}={step!r}; known: {', '.join(CRASH_POINTS)}")
    if step is not None:
        _install_os_crashes(step)
    lines = await issue(
        directory=args.directory,
        ca_bundle=args.ca_bundle,
        state=args.state,
        challtestsrv=args.challtestsrv,
        names=args.names,
        block=args.block,
        force=args.force,
        step=step,
        kube_namespace=args.kube_namespace,
        kube_config=args.kube_config,
    )
    for line in lines:
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
