"""A manager process for the multi-process tests (run as a script, not collected).

    python tests/integration/manager_child.py --directory URL --ca-bundle PEM \
        --state DIR --challtestsrv URL [--block] NAME...

Loads (or creates, under the store's lock) the one account key of the store, then asks a
``CertificateManager`` sharing ``--state`` to issue a certificate per NAME with dns-01
through pebble-challtestsrv, and prints one JSON line per result. ``--block`` makes the
solver hang after the order was created (so the parent can kill -9 the process
mid-order).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request

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


def _post(url: str, payload: dict[str, str]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", required=True)
    parser.add_argument("--ca-bundle", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--challtestsrv", required=True)
    parser.add_argument("--block", action="store_true")
    parser.add_argument("names", nargs="+")
    args = parser.parse_args()

    async def set_record(name: str, value: str) -> None:
        if args.block:
            print(json.dumps({"presenting": name}), flush=True)
            await anyio.sleep_forever()
        await anyio.to_thread.run_sync(
            _post, f"{args.challtestsrv}/set-txt", {"host": name + ".", "value": value}
        )

    async def clear_record(name: str, value: str) -> None:
        await anyio.to_thread.run_sync(
            _post, f"{args.challtestsrv}/clear-txt", {"host": name + "."}
        )

    solver = DnsHookSolver(set_record, clear_record, propagation=None)
    async with FileStorage(args.state) as storage:
        layout = KeyLayout(args.directory)
        key = await load_or_create_account_key(storage, layout)
        url = await load_account_url(storage, layout, account_key=key)
        async with AcmeClient(
            args.directory, ca_bundle=args.ca_bundle, account_key=key, account_url=url
        ) as client:
            if url is None:
                await client.register()
                assert client.account_url is not None
                await save_account_url(storage, layout, client.account_url, account_key=key)
            manager = CertificateManager(client, solvers=[solver], storage=storage, concurrency=8)
            results = await manager.issue_many(args.names)
    for result in results:
        line = {"name": result.name, "kind": type(result).__name__}
        if isinstance(result, IssuedResult):
            line["serial"] = result.certificate.serial
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
