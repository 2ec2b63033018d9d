"""The kopf operator of examples/kopf_operator against a real API server and Pebble.

etcd and kube-apiserver run on loopback (``tests/storage/kube.py``; the binary is built
once by ``bash scripts/kube-apiserver.sh``). The test applies the CRD and the operator's
RBAC, runs ``kopf run --standalone`` as the operator's service account (so the Role in
``rbac.yaml`` is proven sufficient), creates a ``Certificate``, waits for its
``kubernetes.io/tls`` Secret, sees the manager renew it in the background, deletes the
resource, and checks that the operator cancelled: the Secret is gone, the cancellation
hook ran, and Pebble receives no further order.

Without the API server binary this test FAILS (it never skips), naming the script.
"""

from __future__ import annotations

import base64
import importlib.util
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import kopf
import pytest
import yaml
from cryptography import x509

from acmecerts import AcmeClient, Http01Server
from acmecerts.manager import CertificateManager
from acmecerts.testing import PebbleServer
from tests.cli_support import unmeasured
from tests.held_storage import HeldLoad
from tests.storage.kube import KubeApiServer, KubeSetupError

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "examples" / "kopf_operator"
GROUP = "acmecerts.example.com"

#: Not measured: the operator's renewals every ~2 s and the test's waits are timed, and
#: coverage slowed them (both this process and the operator, a child) on CI's machine.
pytestmark = [pytest.mark.timeout(300), pytest.mark.no_coverage]


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    problem = None
    try:
        server = KubeApiServer(tmp_path_factory.mktemp("kube-operator"))
        server.start()
    except KubeSetupError as exc:
        problem = str(exc)
    if problem is not None:  # fail, never skip: the example must be proven to run
        pytest.fail(f"the operator example needs a local kube-apiserver: {problem}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def ok(answer: Any, *codes: int) -> Any:
    assert answer.status_code in (codes or (200, 201)), f"{answer.status_code}: {answer.text}"
    return answer.json() if answer.content else None


def api_path(obj: dict[str, Any], namespace: str | None) -> str:
    """The collection URL of a manifest's kind."""
    version, kind = obj["apiVersion"], obj["kind"]
    plural = {
        "CustomResourceDefinition": "customresourcedefinitions",
        "ServiceAccount": "serviceaccounts",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Certificate": "certificates",
    }[kind]
    base = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def apply_file(kube: KubeApiServer, name: str, namespace: str | None = None) -> None:
    """``kubectl apply -n namespace -f name`` (cluster-wide objects named per namespace)."""
    for obj in yaml.safe_load_all((OPERATOR / name).read_text()):
        cluster_wide = obj["kind"].startswith("Cluster") or obj["kind"].endswith("Definition")
        if cluster_wide and namespace is not None:
            obj["metadata"]["name"] += f"-{namespace}"
            if "roleRef" in obj:
                obj["roleRef"]["name"] += f"-{namespace}"
                for subject in obj["subjects"]:
                    subject["namespace"] = namespace
        where = None if cluster_wide else namespace
        ok(kube.request("POST", api_path(obj, where), json=obj), 201, 409)


def wait_for(what: str, check: Callable[[], Any], timeout: float, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.25)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:]) if log.exists() else ""
    pytest.fail(f"timed out waiting for {what}; the operator's log ends with:\n{tail}")


def service_account_kubeconfig(kube: KubeApiServer, namespace: str, path: Path) -> Path:
    """A kubeconfig with a token of the operator's service account (TokenRequest API)."""
    answer = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/acmecerts-operator/token",
        json={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    token = ok(answer)["status"]["token"]
    return kube.write_kubeconfig(path, token, namespace=namespace)


def leaf_of(secret: dict[str, Any]) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["tls.crt"]))


def new_orders(pebble: PebbleServer) -> int:
    return pebble.requests_seen().count(("POST", "/order-plz"))


@pytest.fixture
def operator_process(
    kube: KubeApiServer, pebble_2_4: PebbleServer, tmp_path: Path
) -> Iterator[Callable[[str], tuple[subprocess.Popen[bytes], Path]]]:
    # Pebble 2.4: no ARI, so the renewal fraction below decides (five-year certificates)
    pebble = pebble_2_4
    missing = [name for name in ("kopf", "lightkube") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.fail(
            f"the operator example needs {' and '.join(missing)}: "
            "pip install kopf -e '.[kubernetes]' (see examples/kopf_operator/requirements.txt)",
            pytrace=False,
        )
    started: list[subprocess.Popen[bytes]] = []

    def start(namespace: str) -> tuple[subprocess.Popen[bytes], Path]:
        kubeconfig = service_account_kubeconfig(kube, namespace, tmp_path / "kubeconfig")
        log = tmp_path / "operator.log"
        env = {
            **unmeasured(dict(os.environ)),
            "KUBECONFIG": str(kubeconfig),
            "ACMECERTS_DIRECTORY": pebble.directory_url,
            "ACMECERTS_CA_BUNDLE": str(pebble.ca_bundle),
            "ACMECERTS_HTTP_PORT": str(pebble.http_port),
            # Pebble's certificates last five years: renew when all but ~2 s remain, so
            # that renewals come every few seconds and their stopping can be seen.
            "ACMECERTS_RENEWAL_FRACTION": "0.99999999",
        }
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kopf",
                    "run",
                    "--standalone",
                    "--namespace",
                    namespace,
                    "--verbose",
                    str(OPERATOR / "operator.py"),
                ],
                env=env,
                cwd=tmp_path,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(process)
        return process, log

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=15)


def test_operator_issues_renews_and_cancels_on_deletion(
    kube: KubeApiServer,
    pebble_2_4: PebbleServer,
    operator_process: Callable[[str], tuple[subprocess.Popen[bytes], Path]],
) -> None:
    pebble = pebble_2_4  # the operator's CA (see operator_process)
    apply_file(kube, "crd.yaml")
    crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/certificates.{GROUP}"

    def established() -> bool:
        conditions = ok(kube.request("GET", crd)).get("status", {}).get("conditions", [])
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    namespace = kube.create_namespace("operator")
    apply_file(kube, "rbac.yaml", namespace)
    process, log = operator_process(namespace)
    wait_for("the CRD to be established", established, 30, log)

    manifest = yaml.safe_load((OPERATOR / "certificate.yaml").read_text())
    manifest["metadata"]["name"] = "demo"
    manifest["spec"] = {"dnsNames": ["demo.example.test", "www.demo.example.test"]}
    certificates = f"/apis/{GROUP}/v1/namespaces/{namespace}/certificates"
    ok(kube.request("POST", certificates, json=manifest))

    secret_url = f"/api/v1/namespaces/{namespace}/secrets/demo-tls"

    def secret() -> dict[str, Any] | None:
        answer = kube.request("GET", secret_url)
        return answer.json() if answer.status_code == 200 else None

    first = wait_for("the Secret demo-tls", secret, 90, log)
    assert first["type"] == "kubernetes.io/tls"
    [owner] = first["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Certificate", "demo")
    chain = leaf_of(first)
    sans = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == [
        "demo.example.test",
        "www.demo.example.test",
    ]
    for child, parent in itertools.pairwise(chain):
        child.verify_directly_issued_by(parent)
    root = x509.load_pem_x509_certificate(pebble.root_pem().encode())
    chain[-1].verify_directly_issued_by(root)
    assert base64.b64decode(first["data"]["tls.key"]).startswith(b"-----BEGIN PRIVATE KEY")

    # the manager renews in the background, and each renewal reaches the Secret and status
    serial = chain[0].serial_number

    def renewed() -> bool:
        current = secret()
        return current is not None and leaf_of(current)[0].serial_number != serial

    wait_for("a renewal in the Secret", renewed, 60, log)
    status = ok(kube.request("GET", f"{certificates}/demo")).get("status", {})
    assert status["certificate"]["secretName"] == "demo-tls"

    # deletion: kopf's finalizer holds the resource until the delete handler returned,
    # that is until manager.unmanage() returned: nothing more is sent after that
    ok(kube.request("DELETE", f"{certificates}/demo"))

    def gone() -> bool:
        return kube.request("GET", f"{certificates}/demo").status_code == 404

    wait_for("the Certificate to be deleted", gone, 60, log)
    orders_at_deletion = new_orders(pebble)
    time.sleep(8)  # several renewal periods
    assert new_orders(pebble) == orders_at_deletion, "an order was sent after deletion"
    assert kube.request("GET", secret_url).status_code == 404
    text = log.read_text(errors="replace")
    # the cancellation hook ran: for the delete handler ("unmanaged"), or, when a renewal
    # started between the deletion's timestamp and the handler, for the owner guard that
    # saw the timestamp ("owner gone"; unmanage() then finds it cancelled already)
    cancelled = re.findall(rf"cancelled {re.escape(namespace)}\.demo: (unmanaged|owner gone)", text)
    assert cancelled, text[-3000:]

    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0, log.read_text(errors="replace")[-3000:]
    # the store kept what a restarted replica needs, in the namespace
    configmaps = ok(
        kube.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/configmaps",
            params={"labelSelector": "app.kubernetes.io/managed-by=acmecerts"},
        )
    )
    keys = [c["metadata"]["annotations"]["acmecerts.io/key"] for c in configmaps["items"]]
    assert any(key.endswith("/account.json") for key in keys), json.dumps(keys)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_resource_applied_again_while_the_old_one_is_unmanaged_keeps_its_owner(
    pebble: PebbleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kopf handles the old object's DELETED event and the new object on their own.

    While ``deleted_anywhere`` waits for the manager to unmanage the old resource, the
    new one of the same name is managed (its owner recorded); the old handler must not
    forget the new owner afterwards, else the new certificate never reaches its Secret.
    """
    spec = importlib.util.spec_from_file_location("kopf_operator_example", OPERATOR / "operator.py")
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, example)  # its dataclasses look it up
    spec.loader.exec_module(example)
    async with (
        HeldLoad(tmp_path) as storage,
        AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client,
    ):
        # never started: nothing is issued here (the manager's scheduler does not run)
        manager = CertificateManager(client, solvers=[Http01Server(port=0)], storage=storage)
        operator = example.Operator(kube=None, manager=manager)
        memo = kopf.Memo(operator=operator)
        cert_name = example.certificate_name("ns", "web")
        old = example.Owner("ns", "web", "uid-old", "web-tls")
        operator.owners[cert_name] = old
        manager.manage(cert_name, ["web.example.test"])
        gone = {"type": "DELETED", "object": {"metadata": {"name": "web", "uid": "uid-old"}}}
        storage.armed = True  # the retirement's first read waits
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: example.deleted_anywhere(event=gone, name="web", namespace="ns", memo=memo)
            )
            with anyio.fail_after(10):
                await storage.held.wait()
            new = example.Owner("ns", "web", "uid-new", "web-tls")
            operator.owners[cert_name] = new  # what manage() does for the new resource
            manager.manage(cert_name, ["web.example.test"])
            storage.release.set()
        assert operator.owners.get(cert_name) is new
        assert [s.name for s in manager.managed()] == [cert_name]
