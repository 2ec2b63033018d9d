"""The Kubernetes store against a real kube-apiserver (the contract suite runs too).

What is specific to Kubernetes: which objects hold what (labels, Secrets vs ConfigMaps,
``kubernetes.io/tls`` mirrors), compare-and-swap on ``resourceVersion`` (409 Conflict),
Lease-based locks across tasks and processes, and clear errors for bad credentials.
Every test works in a fresh namespace (namespaces never finish deleting here).
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
import re
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import lightkube
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts.errors import StorageError
from acmecerts.storage import KeyLayout, LockTimeout, VersionConflict
from acmecerts.storage.kubernetes import KubernetesStorage, object_name
from tests.storage.kube import KubeApiServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

MANAGED = "app.kubernetes.io/managed-by=acmecerts"
DIRECTORY = "https://ca.test/directory"
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

StoreMaker = Callable[..., Awaitable[KubernetesStorage]]


@pytest.fixture
def namespace(kube_api: KubeApiServer) -> str:
    return kube_api.create_namespace("kube")


@pytest.fixture
async def make_store(kube_api: KubeApiServer, namespace: str) -> AsyncIterator[StoreMaker]:
    """``await make_store()``: a new client (a "replica") on the test's namespace."""
    made: list[KubernetesStorage] = []

    async def make(**kwargs: Any) -> KubernetesStorage:
        store = KubernetesStorage(namespace, kubeconfig=str(kube_api.kubeconfig), **kwargs)
        made.append(store)
        return store

    try:
        yield make
    finally:
        for store in made:
            await store.aclose()


def _items(api: KubeApiServer, namespace: str, plural: str, group: str = "api/v1") -> Any:
    answer = api.request(
        "GET", f"/{group}/namespaces/{namespace}/{plural}", params={"labelSelector": MANAGED}
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["items"]


def _self_signed(name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _dt.datetime.now(_dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


# -- object names ----------------------------------------------------------------------


def test_object_names_are_dns_subdomains_and_distinct() -> None:
    keys = [
        "a",
        "ca-1234/accounts/default/key.pem",
        "ca-1234/accounts/default/key_pem",
        "x/" + "y" * 199 + "/" + "z" * 199 + "/" + "w" * 199 + "/" + "v" * 199,
        "_wildcard_.example.com/cert.pem",
    ]
    names = [object_name("acmecerts", key) for key in keys]
    assert len(set(names)) == len(keys)
    for name in names:
        assert len(name) <= 253
        assert DNS_SUBDOMAIN.fullmatch(name), name
        assert name.startswith("acmecerts-")


# -- what lives where ------------------------------------------------------------------


async def test_objects_carry_the_managed_by_label(
    make_store: StoreMaker, kube_api: KubeApiServer, namespace: str
) -> None:
    store = await make_store()
    await store.store("ca/ledger.json", b"{}")
    await store.store("ca/accounts/default/key.pem", b"secret", secret=True)
    async with store.lock("ca/accounts/default/account", lease=5):
        pass

    configmaps = _items(kube_api, namespace, "configmaps")
    secrets = _items(kube_api, namespace, "secrets")
    leases = _items(kube_api, namespace, "leases", "apis/coordination.k8s.io/v1")
    assert [o["metadata"]["annotations"]["acmecerts.io/key"] for o in configmaps] == [
        "ca/ledger.json"
    ]
    assert [o["metadata"]["annotations"]["acmecerts.io/key"] for o in secrets] == [
        "ca/accounts/default/key.pem"
    ]
    assert [o["metadata"]["annotations"]["acmecerts.io/lock"] for o in leases] == [
        "ca/accounts/default/account"
    ]
    for obj in [*configmaps, *secrets, *leases]:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "acmecerts"
        assert labels["acmecerts.io/store"] == "acmecerts"


async def test_secret_values_are_secrets_and_others_configmaps(
    make_store: StoreMaker, kube_api: KubeApiServer, namespace: str
) -> None:
    store = await make_store()
    await store.store("ca/accounts/default/key.pem", b"PRIVATE", secret=True)
    await store.store("ca/accounts/default/account.json", b'{"url": "x"}')

    (secret,) = _items(kube_api, namespace, "secrets")
    assert secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["value"]) == b"PRIVATE"
    (configmap,) = _items(kube_api, namespace, "configmaps")
    assert base64.b64decode(configmap["binaryData"]["value"]) == b'{"url": "x"}'
    assert b"PRIVATE" not in json.dumps(configmap).encode()

    # A fresh replica (no cache of where keys live) reads both back.
    other = await make_store()
    value = await other.load("ca/accounts/default/key.pem")
    assert value is not None
    assert value.data == b"PRIVATE"
    assert value.version == secret["metadata"]["resourceVersion"]
    assert await other.list("ca/accounts/") == [
        "ca/accounts/default/account.json",
        "ca/accounts/default/key.pem",
    ]


async def test_changing_secret_moves_the_key(
    make_store: StoreMaker, kube_api: KubeApiServer, namespace: str
) -> None:
    store = await make_store()
    version = await store.store("ca/state.json", b"public")
    await store.store("ca/state.json", b"now private", secret=True, expect_version=version)
    assert _items(kube_api, namespace, "configmaps") == []
    assert len(_items(kube_api, namespace, "secrets")) == 1
    value = await (await make_store()).load("ca/state.json")
    assert value is not None
    assert value.data == b"now private"


async def test_certificates_are_mirrored_as_kubernetes_tls_secrets(
    make_store: StoreMaker, kube_api: KubeApiServer, namespace: str
) -> None:
    store = await make_store()
    keys = KeyLayout(DIRECTORY).certificate("*.example.com")
    name = store.tls_secret_name("*.example.com")
    assert name == "acmecerts-wildcard.example.com-tls"

    cert, key = _self_signed("*.example.com")
    await store.store(keys.privkey, key, secret=True)
    assert await store.load_tls_secret("*.example.com") is None  # no certificate yet
    await store.store(keys.cert, cert)

    answer = kube_api.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    assert answer.status_code == 200
    secret = answer.json()
    assert secret["type"] == "kubernetes.io/tls"
    assert base64.b64decode(secret["data"]["tls.crt"]) == cert
    assert base64.b64decode(secret["data"]["tls.key"]) == key
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "acmecerts"
    assert secret["metadata"]["labels"]["acmecerts.io/role"] == "tls"

    # Renewal: a new key alone does not break the published pair; the new cert updates it.
    new_cert, new_key = _self_signed("*.example.com")
    await store.store(keys.privkey, new_key, secret=True)
    assert await store.load_tls_secret("*.example.com") == (cert, key)
    await store.store(keys.cert, new_cert)
    assert await store.load_tls_secret("*.example.com") == (new_cert, new_key)

    # The mirror is not a stored key, and it goes away with the certificate.
    assert await store.list("") == [keys.cert, keys.privkey]
    assert await store.delete(keys.cert)
    assert await store.load_tls_secret("*.example.com") is None


async def test_store_tls_secret_publishes_any_pair(make_store: StoreMaker) -> None:
    store = await make_store()
    cert, key = _self_signed("shop.example")
    await store.store_tls_secret("shop.example", cert, key)
    await store.store_tls_secret("shop.example", cert, key)  # idempotent update
    assert await store.load_tls_secret("shop.example") == (cert, key)
    assert await store.list("") == []


# -- compare-and-swap ------------------------------------------------------------------


async def test_stale_compare_and_swap_gets_409_then_retry_succeeds(
    make_store: StoreMaker,
) -> None:
    alice, bob = await make_store(), await make_store()
    first = await alice.store("ca/ledger.json", b"1")
    read = await bob.load("ca/ledger.json")
    assert read is not None
    assert read.version == first
    second = await alice.store("ca/ledger.json", b"2", expect_version=first)

    with pytest.raises(VersionConflict) as caught:
        await bob.store("ca/ledger.json", b"bob", expect_version=read.version)
    cause = caught.value.__cause__
    assert isinstance(cause, lightkube.ApiError)
    assert cause.status.code == 409

    fresh = await bob.load("ca/ledger.json")
    assert fresh is not None
    assert (fresh.data, fresh.version) == (b"2", second)
    await bob.store("ca/ledger.json", b"2+bob", expect_version=fresh.version)
    final = await alice.load("ca/ledger.json")
    assert final is not None
    assert final.data == b"2+bob"

    with pytest.raises(VersionConflict):
        await alice.delete("ca/ledger.json", expect_version=second)
    assert await alice.delete("ca/ledger.json", expect_version=final.version)
    with pytest.raises(VersionConflict):
        await alice.store("ca/ledger.json", b"x", expect_version=final.version)


async def test_eight_concurrent_writers_with_cas_retry_lose_nothing(
    make_store: StoreMaker,
) -> None:
    stores = [await make_store() for _ in range(8)]
    key = "ca/ledger.json"
    conflicts = 0

    async def writer(store: KubernetesStorage, n: int) -> None:
        nonlocal conflicts
        for i in range(6):
            while True:
                current = await store.load(key)
                entries = json.loads(current.data) if current else []
                entries.append(f"{n}-{i}")
                try:
                    await store.store(
                        key,
                        json.dumps(entries).encode(),
                        expect_version=current.version if current else None,
                    )
                    break
                except VersionConflict:
                    conflicts += 1

    async with anyio.create_task_group() as tg:
        for n, store in enumerate(stores):
            tg.start_soon(writer, store, n)

    final = await stores[0].load(key)
    assert final is not None
    assert sorted(json.loads(final.data)) == sorted(f"{n}-{i}" for n in range(8) for i in range(6))
    assert conflicts > 0  # the writers did race


# -- locks -----------------------------------------------------------------------------


async def test_twenty_contenders_one_holder_at_a_time(make_store: StoreMaker) -> None:
    stores = [await make_store() for _ in range(4)]
    holders = 0
    most = 0
    order: list[int] = []

    async def contender(n: int) -> None:
        nonlocal holders, most
        async with stores[n % 4].lock("ca/accounts/default/account", lease=5, timeout=25):
            holders += 1
            most = max(most, holders)
            order.append(n)
            await anyio.sleep(0.02)
            holders -= 1

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(contender, n)
    assert most == 1
    assert sorted(order) == list(range(20))


async def test_heartbeat_keeps_a_live_holder(make_store: StoreMaker) -> None:
    holder, waiter = await make_store(), await make_store()
    async with holder.lock("jobs/renew", lease=1) as lease:
        first_expiry = lease.expires_at
        with pytest.raises(LockTimeout):
            async with waiter.lock("jobs/renew", lease=1, timeout=2.5):
                pytest.fail("acquired a lock that is held and renewed")
        assert not lease.lost
        assert lease.expires_at > first_expiry
    async with waiter.lock("jobs/renew", lease=1, timeout=2):
        pass


_HOLD_AND_DIE = textwrap.dedent(
    """
    import os, sys, anyio
    from acmecerts.storage.kubernetes import KubernetesStorage

    async def main() -> None:
        store = KubernetesStorage(sys.argv[1], kubeconfig=sys.argv[2])
        async with store.lock("jobs/dead", lease=2):
            print("held", flush=True)
            os._exit(0)  # dies holding the lock: no release, no more heartbeats

    anyio.run(main)
    """
)


async def test_a_dead_holders_lease_expires_and_is_taken_over(
    make_store: StoreMaker, kube_api: KubeApiServer, namespace: str
) -> None:
    done = await anyio.run_process(
        [sys.executable, "-c", _HOLD_AND_DIE, namespace, str(kube_api.kubeconfig)],
        check=False,
    )
    assert done.stdout.decode().strip() == "held", done.stderr.decode()
    died = time.monotonic()

    store = await make_store()
    async with store.lock("jobs/dead", lease=5, timeout=15):
        waited = time.monotonic() - died
    assert waited < 8
    (lease,) = _items(kube_api, namespace, "leases", "apis/coordination.k8s.io/v1")
    assert lease["spec"]["leaseTransitions"] == 1
    assert "holderIdentity" not in lease["spec"]  # released on the way out


_CREATE_ACCOUNT_KEY = textwrap.dedent(
    """
    import sys, time, anyio
    from acmecerts.storage import KeyLayout, load_or_create_account_key
    from acmecerts.storage.kubernetes import KubernetesStorage

    async def main() -> None:
        namespace, kubeconfig, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
        async with KubernetesStorage(namespace, kubeconfig=kubeconfig) as store:
            await anyio.sleep(max(0.0, start - time.time()))
            key = await load_or_create_account_key(store, KeyLayout(sys.argv[4]))
            print(key.thumbprint, flush=True)

    anyio.run(main)
    """
)


async def test_three_processes_racing_create_exactly_one_account_key(
    kube_api: KubeApiServer, namespace: str
) -> None:
    start = time.time() + 3  # after every interpreter has imported everything
    args = [namespace, str(kube_api.kubeconfig), str(start), DIRECTORY]
    results: list[str] = []

    async def run() -> None:
        done = await anyio.run_process(
            [sys.executable, "-c", _CREATE_ACCOUNT_KEY, *args], check=False
        )
        assert done.returncode == 0, done.stderr.decode()
        results.append(done.stdout.decode().strip())

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(run)

    assert len(results) == 3
    assert len(set(results)) == 1, results
    secrets = _items(kube_api, namespace, "secrets")
    assert [s["metadata"]["annotations"]["acmecerts.io/key"] for s in secrets] == [
        KeyLayout(DIRECTORY).account_key()
    ]


# -- errors ----------------------------------------------------------------------------


async def test_a_wrong_token_is_a_clear_storage_error(
    kube_api: KubeApiServer, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "bad", "not-the-token")
    async with KubernetesStorage(namespace, kubeconfig=str(kubeconfig)) as store:
        with pytest.raises(StorageError, match=r"401 Unauthorized.*token") as caught:
            await store.load("ca/ledger.json")
        assert kube_api.server in str(caught.value)
        with pytest.raises(StorageError, match="401"):
            async with store.lock("jobs/x", timeout=1):
                pass


async def test_missing_permissions_are_a_clear_storage_error(
    kube_api: KubeApiServer, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "nobody", kube_api.unprivileged_token)
    async with KubernetesStorage(namespace, kubeconfig=str(kubeconfig)) as store:
        with pytest.raises(StorageError, match=r"403 Forbidden.*secrets.*configmaps"):
            await store.store("ca/ledger.json", b"{}")


async def test_an_unreachable_server_is_a_storage_error(
    kube_api: KubeApiServer, tmp_path: Path
) -> None:
    config = kube_api.write_kubeconfig(tmp_path / "kc", kube_api.token)
    config.write_text(config.read_text().replace(kube_api.server, "https://127.0.0.1:1"))
    async with KubernetesStorage("default", kubeconfig=str(config), timeout=3) as store:
        with pytest.raises(StorageError, match="cannot reach the Kubernetes API"):
            await store.list("")


def test_a_missing_kubeconfig_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot load a Kubernetes configuration"):
        KubernetesStorage("default", kubeconfig=str(tmp_path / "nope"))


def test_namespace_defaults_to_the_contexts(kube_api: KubeApiServer, tmp_path: Path) -> None:
    config = kube_api.write_kubeconfig(tmp_path / "kc", kube_api.token, namespace="team-a")
    store = KubernetesStorage(kubeconfig=os.fspath(config))
    assert store.namespace == "team-a"
    assert "team-a" in repr(store)
    assert kube_api.token not in repr(store)


async def test_a_corrupt_object_is_an_error_naming_the_key(
    make_store: StoreMaker, kube_api: KubeApiServer, namespace: str
) -> None:
    store = await make_store()
    await store.store("ca/ledger.json", b"{}")
    await store.store("ca/other.json", b"[]")
    path = f"/api/v1/namespaces/{namespace}/configmaps/{store.object_name('ca/ledger.json')}"
    obj = kube_api.request("GET", path).json()
    obj["binaryData"] = {"truncated": ""}  # someone edited it by hand
    assert kube_api.request("PUT", path, json=obj).status_code == 200

    with pytest.raises(StorageError, match=r"'ca/ledger\.json'.*corrupt"):
        await (await make_store()).load("ca/ledger.json")
    other = await store.load("ca/other.json")
    assert other is not None
    assert other.data == b"[]"
