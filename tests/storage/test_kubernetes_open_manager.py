"""``open_manager`` on the Kubernetes store: two replicas, one account, one ledger.

A real kube-apiserver (``tests/storage/kube.py``) and the session Pebble.
"""

from __future__ import annotations

import anyio
import pytest
from requests_seen import on_requests

from acmecerts import Http01Server
from acmecerts.manager import IssuedResult, open_manager
from acmecerts.ratelimit import LETS_ENCRYPT
from acmecerts.storage import KeyLayout
from acmecerts.storage.kubernetes import KubernetesStorage
from acmecerts.testing import PebbleServer
from acmecerts.transport import AcmeTransport

from .kube import KubeApiServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


async def test_two_replicas_open_one_account_and_one_ledger_in_kubernetes(
    pebble: PebbleServer, kube_api: KubeApiServer
) -> None:
    namespace = kube_api.create_namespace("open-manager")
    name = "kube.open-manager.example.test"
    new_account: list[str] = []
    account_urls: list[str | None] = []
    serials: list[str] = []

    def on_request(method: str, url: str) -> None:
        if method == "POST" and url.endswith("/sign-me-up"):
            new_account.append(url)

    async def replica(solver: Http01Server) -> None:
        # the account is registered while the manager opens: watch its transport from the start
        transport = AcmeTransport(
            pebble.directory_url,
            ca_bundle=pebble.ca_bundle,
            request_rates=LETS_ENCRYPT.request_rates,  # what the client took from the ledger
        )
        transport.subscribe(on_requests(on_request))
        async with (
            KubernetesStorage(namespace, kubeconfig=str(kube_api.kubeconfig)) as storage,
            open_manager(
                storage,
                pebble.directory_url,
                solvers=[solver],
                rate_limits=LETS_ENCRYPT,
                transport=transport,
            ) as manager,
        ):
            account_urls.append(manager.client.account_url)
            [result] = await manager.issue_many([name])
            assert isinstance(result, IssuedResult), result
            serials.append(result.certificate.serial)

    async with (
        Http01Server(host="127.0.0.1", port=pebble.http_port) as solver,
        anyio.create_task_group() as replicas,
    ):
        replicas.start_soon(replica, solver)
        replicas.start_soon(replica, solver)

    assert len(new_account) == 1  # the second replica found the stored account
    assert len(account_urls) == 2
    assert account_urls[0] is not None
    assert account_urls[0] == account_urls[1]
    assert len(serials) == 2
    assert serials[0] == serials[1]
    layout = KeyLayout(pebble.directory_url)
    async with KubernetesStorage(namespace, kubeconfig=str(kube_api.kubeconfig)) as storage:
        assert await storage.load(layout.account_key()) is not None
        assert await storage.load(layout.account_meta()) is not None
        assert await storage.load(layout.ledger()) is not None
