"""Stores for the storage tests.

``store_factory`` is parametrized over :data:`STORE_KINDS`: every test that uses it (the
contract suite in :mod:`tests.storage.contract`) runs once per kind of store. Each call
``await store_factory()`` returns a *new* store object sharing the same backing state as
the others made in that test (like replicas of one deployment); all are closed after
the test.

To add a kind of store: append its name to :data:`STORE_KINDS` and add one builder to
:data:`_BUILDERS` that returns the ``make`` coroutine function (it may request other
fixtures through ``request.getfixturevalue``, e.g. a session-scoped API server).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from acmecerts.storage import FileStorage, Storage
from tests.storage.contract import StoreFactory
from tests.storage.kube import KubeApiServer, KubeSetupError

#: Every kind of store the contract suite runs against.
STORE_KINDS: list[str] = ["filesystem", "kubernetes"]


def _filesystem(request: pytest.FixtureRequest) -> StoreFactory:
    root = request.getfixturevalue("tmp_path") / "store"

    async def make() -> Storage:
        return FileStorage(root)

    return make


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    """etcd + a real kube-apiserver on loopback, once per session (see tests/storage/kube.py).

    Without the binary (built by scripts/kube-apiserver.sh) this fails; it never skips.
    """
    try:
        server = KubeApiServer(tmp_path_factory.mktemp("kube"))
        server.start()
    except KubeSetupError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def _kubernetes(request: pytest.FixtureRequest) -> StoreFactory:
    from acmecerts.storage.kubernetes import KubernetesStorage

    api: KubeApiServer = request.getfixturevalue("kube_api")
    namespace = api.create_namespace("contract")  # fresh per test: nothing to clean up

    async def make() -> Storage:
        return KubernetesStorage(namespace, kubeconfig=str(api.kubeconfig))

    return make


#: How to build the ``make`` function of each kind in :data:`STORE_KINDS`.
_BUILDERS: dict[str, Callable[[pytest.FixtureRequest], StoreFactory]] = {
    "filesystem": _filesystem,
    "kubernetes": _kubernetes,
}


@pytest.fixture(params=STORE_KINDS)
async def store_factory(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    """Make stores of one kind that share their state; closed when the test ends."""
    make = _BUILDERS[request.param](request)
    made: list[Storage] = []

    async def factory() -> Storage:
        store = await make()
        made.append(store)
        return store

    try:
        yield factory
    finally:
        for store in made:
            await store.aclose()
