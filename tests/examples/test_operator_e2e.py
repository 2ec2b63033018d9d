"""Two replicas of the kopf example operator under churn, against kube-apiserver and Pebble.

Issue #14, item 8: the strongest test of the suite. Everything the operator keeps is in
the Kubernetes store (certificates, account, ledger, leases); two replicas share it.

What runs, all on 127.0.0.1 and started (and stopped by PID) by this test:

* etcd and kube-apiserver (``tests/storage/kube.py``) with an audit log, so requests are
  counted per client: the operator's service account, not this test's admin requests.
* Its own Pebble (``PEBBLE_VA_NOSLEEP=1``, no authorization reuse), behind a
  :class:`~tests.faults.proxy.FaultProxy` that records every request to the CA and its
  answer (newOrder payloads are decoded to know which certificate each order is for).
* A :class:`~tests.faults.router.ChallengeRouter` on Pebble's http-01 port, standing in
  for an ingress that routes ``/.well-known/acme-challenge/`` to the operator's pods: it
  asks each replica's ``Http01Server`` (each on its own port) and answers with the first
  200. It can *hold* the answers for chosen names, which makes "while validation is in
  flight" a state the test waits for instead of a race. A held answer is fetched when
  the request arrives (a replica that dies meanwhile does not change it).
* A :class:`~tests.faults.forwarder.TcpForwarder` in front of the API server: the
  replicas' kubeconfig points at it (TLS passes through; the API server's certificate is
  valid for 127.0.0.1), and cutting it makes the API server unreachable (connections
  reset, new ones refused).
* Two replicas: ``kopf run --standalone`` of ``examples/kopf_operator/operator.py`` as the
  operator's service account (so ``rbac.yaml`` is proven sufficient), each with its own
  http-01 port, a certificate lock lease of 9 s (so a killed replica's locks run out
  within the test), concurrency and renewal as shipped (Pebble's certificates last
  years: no renewal comes). Both watch every resource; kopf's progress annotations
  usually let one of them handle a given resource, so each manages part of the fleet,
  the store's lock keeps issuance single-flight when both do, and a deletion reaches
  both through raw events whichever ran the delete handler.

The script (40 resources in three waves, so that every held validation stays well within
Pebble's 15 s validation timeout):

1. Create 30 ``Certificate`` resources (one name each); the router holds the validation
   of 8 of them. The other 22 are issued.
2. Delete the 8 while Pebble's validation requests for them are held at the router.
   Their deactivations are held at the CA proxy until Pebble has finished validating,
   then let through: Pebble 2.4 leaks a read lock when it shows an authorization
   deactivated while its challenge is ``processing``, and the validation finishing
   afterwards deadlocks it (TESTBED.md; ``prepAuthorizationForDisplay`` skips
   ``RUnlock``). The client's behaviour is the same either way: it deactivates what it
   saw pending.
3. Create 6 more, held in validation. Kill -9 the replica that holds the locks of most of
   them (at least one), release their validations, start it again. Their orders are
   resumed from the store once the dead replica's leases have run out.
4. Create the last 4, held in validation; hold their order polls at the CA proxy and
   release the validations; cut the API server off, let the polls through (finalize and
   download happen, then the certificate must be saved while the store is unreachable),
   keep it cut for at least 3 s, restore it.
5. Add 2 resources with invalid names: ``*.wild...`` (a wildcard needs dns-01; the
   operator has http-01 only) and ``bad..e2e.example.test`` (malformed).
6. Delete 5 issued resources, wait until they and their Secrets are gone, apply them again.

Done means (each checked at the end, all reported together):

* every surviving resource (40 - 8) has its ``kubernetes.io/tls`` Secret, owned by the
  resource as it is now, whose chain verifies up to this Pebble's root, for its name, with
  a matching key;
* no newOrder for a deleted resource after its deletion was requested, and every
  authorization of the 8 deleted in flight was deactivated (200, ``deactivated``);
* each certificate ordered once: Pebble's log has 40 newOrders, and the decoded payloads
  name each of the 40 once;
* each invalid resource has exactly one ``CertificateFailed`` Event (the operator names
  the Event after the resource and the failure, so replicas reporting the same failure
  make one), nothing was ordered for it, and no replica lifetime reported it failing more
  than once (the operator logs every failure it reports);
* the 5 re-applied resources got their Secrets back with the same certificate (serial) and
  no new order;
* no replica exited and no manager stopped on its own;
* requests to the CA (counted at the proxy) and to the API server (the operator's service
  account, from the audit log) stay within the budgets below, which are counts per thing
  the script does.

Waits poll conditions, each with a limit and a message saying what it waited for (and
what it saw); all waits share one deadline that leaves room for the report. The counts
measured are printed (``E2E-SUMMARY``) and written with the CA's and the router's records
to the test's directory (``e2e-summary.json``, ``ca-requests.jsonl``,
``router-requests.jsonl``). Without the API server binary this test FAILS, naming the
script (it never skips).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import dataclasses
import importlib.util
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from acmecerts.testing import PebbleServer
from tests.cli_support import unmeasured
from tests.faults.forwarder import TcpForwarder
from tests.faults.proxy import Fault, FaultProxy, Hold, RecordedRequest
from tests.faults.router import ChallengeRouter
from tests.storage.kube import KubeApiServer, KubeSetupError

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "examples" / "kopf_operator"
GROUP = "acmecerts.example.com"
FIELD_MANAGER = "acmecerts-example-operator"
DOMAIN = "e2e.example.test"

NAMES = [f"r{i:02d}" for i in range(40)]
DELETED_IN_FLIGHT = NAMES[0:8]
IN_FLIGHT_AT_KILL = NAMES[8:14]
IN_FLIGHT_AT_OUTAGE = NAMES[14:18]
FIRST_WAVE = DELETED_IN_FLIGHT + NAMES[18:]
REAPPLIED = NAMES[30:35]
SURVIVORS = [n for n in NAMES if n not in DELETED_IN_FLIGHT]
INVALID = {"wild": f"*.wild.{DOMAIN}", "malformed": f"bad..{DOMAIN}"}

#: Seconds a certificate lock's lease lasts (a killed replica's locks run out after this).
LOCK_LEASE = 9
#: How long the API server stays unreachable, at least.
OUTAGE_SECONDS = 3.0
#: Pebble's VA asks three times per challenge (``concurrentValidations``).
VA_REQUESTS = 3
#: Everything must be done by then (pytest's timeout is a little later).
SCRIPT_SECONDS = 165.0

# -- budgets (counts per thing the script does, never time) -----------------------------
#: Requests to the CA per order: newOrder, authorization, challenge, finalize, certificate
#: and the order polls (Pebble answers ``pending`` and ``processing`` once each; a held
#: validation adds a few on the 0.25 s x 1.6^n schedule), plus a newNonce now and then.
#: Measured: 7.3 to 7.6 per order in all.
CA_PER_ORDER = 8
#: ...per deletion in flight: the authorization read and its deactivation.
CA_PER_DELETION = 2
#: ...per order resumed from the store (after the kill, after the outage): the order
#: read, a poll or finalize, the certificate downloaded again.
CA_PER_RESUMED = 4
#: ...per replica start: directory, newAccount (finding the stored account), newNonce.
CA_PER_START = 6
#: Requests to the API server per resource created, both replicas together: kopf's
#: finalizer and progress patches, the owner check, the lock (Lease create, release, a
#: heartbeat every 3 s while held), the store's reads (a missing key costs a ConfigMap
#: and a Secret GET) and writes (order record, certificate, key, meta, attempt state, the
#: store's TLS copy), the Secret and status the operator writes. Measured: about 46, and
#: about 66 with the rate-limit ledger and retention records in the store as well.
API_PER_RESOURCE = 80
#: ...per replica start: discovery, lists and watches, the account key and URL, the
#: lease polls of locks a killed replica left behind.
API_PER_START = 60

#: Not measured (neither this process's proxy and router threads nor the replicas): under
#: coverage on CI's 2-core machine the replicas ran slower than the script's waits allow.
pytestmark = [pytest.mark.timeout(180), pytest.mark.no_coverage]


# -- helpers: the API server (admin), the CA's records, Pebble's log --------------------


def ok(answer: Any, *codes: int) -> Any:
    assert answer.status_code in (codes or (200, 201)), f"{answer.status_code}: {answer.text}"
    return answer.json() if answer.content else None


def jws_payload(body: bytes) -> Any:
    """The decoded payload of a flattened JWS request body; ``None`` for POST-as-GET."""
    try:
        encoded = json.loads(body).get("payload")
    except (ValueError, AttributeError):
        return None
    if not isinstance(encoded, str) or not encoded:
        return None
    return json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))


def host_of(name: str) -> str:
    return f"{name}.{DOMAIN}"


@dataclasses.dataclass(frozen=True)
class NewOrder:
    """A newOrder the CA answered: when, for which names, and the order it created."""

    arrival: float
    names: frozenset[str]
    status: int | None
    order_path: str | None
    authorizations: tuple[str, ...]


def new_orders(proxy: FaultProxy) -> list[NewOrder]:
    orders = []
    for r in proxy.requests_to("/order-plz", "POST"):
        payload = jws_payload(r.body) or {}
        names = frozenset(i["value"] for i in payload.get("identifiers", []))
        location = dict((k.lower(), v) for k, v in r.response_headers).get("location")
        authzs: tuple[str, ...] = ()
        if r.status == 201 and r.response_body:
            authzs = tuple(_path(u) for u in json.loads(r.response_body).get("authorizations", []))
        orders.append(
            NewOrder(r.arrival, names, r.status, _path(location) if location else None, authzs)
        )
    return orders


def _path(url: str) -> str:
    return "/" + url.split("://", 1)[-1].split("/", 1)[-1]


def is_deactivation(r: RecordedRequest) -> bool:
    return (
        r.method == "POST"
        and r.path.startswith("/authZ/")
        and jws_payload(r.body) == {"status": "deactivated"}
    )


_VA_DONE = re.compile(r"authz (\S+) set (VALID|INVALID) by completed challenge")


def validated_authzs(pebble: PebbleServer) -> set[str]:
    """IDs of the authorizations whose validation Pebble finished (its log)."""
    text = pebble.log_path.read_text(encoding="utf-8", errors="replace")
    return {m[1] for m in _VA_DONE.finditer(text)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the replicas ---------------------------------------------------------------------


@dataclasses.dataclass
class Replica:
    """One operator process; started again after a kill with a new log."""

    name: str
    port: int
    env: dict[str, str]
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    logs: list[Path] = dataclasses.field(default_factory=list)

    def start(self, namespace: str) -> None:
        log = self.workdir / f"replica-{self.name}-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kopf",
                    "run",
                    "--standalone",
                    "--namespace",
                    namespace,
                    str(OPERATOR / "operator.py"),
                ],
                env=self.env,
                cwd=self.workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def text(self, run: int = -1) -> str:
        return self.logs[run].read_text(encoding="utf-8", errors="replace")

    def ready(self) -> bool:
        """The operator's startup handler finished (the manager runs, the account exists)."""
        return self.process is not None and "Activity 'start' succeeded" in self.text()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=15)

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


# -- the world: every server of the test ---------------------------------------------------


@dataclasses.dataclass
class World:
    kube: KubeApiServer
    pebble: PebbleServer
    proxy: FaultProxy
    router: ChallengeRouter
    forwarder: TcpForwarder
    namespace: str
    replicas: list[Replica]
    workdir: Path
    setup_seconds: float

    @property
    def certificates(self) -> str:
        return f"/apis/{GROUP}/v1/namespaces/{self.namespace}/certificates"

    def create(self, name: str, dns_names: list[str]) -> dict[str, Any]:
        manifest = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Certificate",
            "metadata": {"name": name},
            "spec": {"dnsNames": dns_names},
        }
        created: dict[str, Any] = ok(self.kube.request("POST", self.certificates, json=manifest))
        return created

    def delete(self, name: str) -> None:
        ok(self.kube.request("DELETE", f"{self.certificates}/{name}"))

    def resources(self) -> dict[str, dict[str, Any]]:
        items = ok(self.kube.request("GET", self.certificates))["items"]
        return {i["metadata"]["name"]: i for i in items}

    def tls_secrets(self) -> dict[str, dict[str, Any]]:
        """The operator's Secrets (``<name>-tls``) by resource name."""
        answer = self.kube.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/secrets",
            params={"labelSelector": f"app.kubernetes.io/managed-by={FIELD_MANAGER}"},
        )
        items = ok(answer)["items"]
        return {i["metadata"]["name"].removesuffix("-tls"): i for i in items}

    def failure_events(self) -> dict[str, list[dict[str, Any]]]:
        answer = self.kube.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/events",
            params={"fieldSelector": "reason=CertificateFailed"},
        )
        events: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for item in ok(answer)["items"]:
            events[item["involvedObject"]["name"]].append(item)
        return events

    def lock_holders(self, names: Iterable[str]) -> dict[str, int]:
        """For each certificate among ``names`` whose lock is held: the holder's PID."""
        answer = self.kube.request(
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
            params={"labelSelector": "acmecerts.io/role=lock"},
        )
        wanted = {f"{self.namespace}.{n}": n for n in names}
        holders = {}
        for lease in ok(answer)["items"]:
            lock = lease["metadata"].get("annotations", {}).get("acmecerts.io/lock", "")
            cert = lock.rsplit("/", 1)[-1]
            holder = lease.get("spec", {}).get("holderIdentity")
            if cert in wanted and holder:
                holders[wanted[cert]] = int(holder.split("/")[1])
        return holders

    def operator_requests(self) -> list[dict[str, Any]]:
        user = f"system:serviceaccount:{self.namespace}:acmecerts-operator"
        return [e for e in self.kube.audit_events() if e.get("user", {}).get("username") == user]


def apply_file(kube: KubeApiServer, name: str, namespace: str | None = None) -> None:
    """``kubectl apply -n namespace -f name`` (cluster-wide objects named per namespace)."""
    plurals = {
        "CustomResourceDefinition": "customresourcedefinitions",
        "ServiceAccount": "serviceaccounts",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
    }
    for obj in yaml.safe_load_all((OPERATOR / name).read_text()):
        cluster_wide = obj["kind"].startswith("Cluster") or obj["kind"].endswith("Definition")
        if cluster_wide and namespace is not None:
            obj["metadata"]["name"] += f"-{namespace}"
            if "roleRef" in obj:
                obj["roleRef"]["name"] += f"-{namespace}"
                for subject in obj["subjects"]:
                    subject["namespace"] = namespace
        version = obj["apiVersion"]
        base = f"/api/{version}" if "/" not in version else f"/apis/{version}"
        where = None if cluster_wide else namespace
        plural = plurals[obj["kind"]]
        path = f"{base}/namespaces/{where}/{plural}" if where else f"{base}/{plural}"
        ok(kube.request("POST", path, json=obj), 201, 409)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    missing = [name for name in ("kopf", "lightkube") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.fail(
            f"the operator example needs {' and '.join(missing)}: "
            "pip install kopf -e '.[kubernetes]' (see examples/kopf_operator/requirements.txt)",
            pytrace=False,
        )
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        problem = None
        try:
            kube = KubeApiServer(tmp_path / "kube", audit=True)
            stack.callback(kube.stop)
            kube.start()
        except KubeSetupError as exc:
            problem = str(exc)
        if problem is not None:  # fail, never skip: the test must be proven to run
            pytest.fail(f"this test needs a local kube-apiserver: {problem}", pytrace=False)
        pebble = PebbleServer(
            tmp_path / "pebble", va_nosleep=True, nonce_reject_percent=0, authz_reuse_percent=0
        )
        stack.callback(pebble.stop)
        pebble.start()
        proxy = FaultProxy(
            pebble.directory_url,
            certfile=pebble.tls_cert_path,
            keyfile=pebble.tls_key_path,
            upstream_ca=pebble.ca_bundle,
        )
        stack.enter_context(proxy)
        ports = [free_port(), free_port()]
        router = stack.enter_context(ChallengeRouter(pebble.http_port, backends=ports))
        forwarder = stack.enter_context(TcpForwarder(kube.port))

        apply_file(kube, "crd.yaml")
        namespace = kube.create_namespace("e2e")
        apply_file(kube, "rbac.yaml", namespace)
        token = ok(
            kube.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts/acmecerts-operator/token",
                json={
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "spec": {"expirationSeconds": 3600},
                },
            )
        )["status"]["token"]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "e2e",
                            "cluster": {
                                "server": f"https://127.0.0.1:{forwarder.port}",
                                "certificate-authority": str(kube.ca_file),
                            },
                        }
                    ],
                    "users": [{"name": "operator", "user": {"token": token}}],
                    "contexts": [
                        {
                            "name": "e2e",
                            "context": {
                                "cluster": "e2e",
                                "user": "operator",
                                "namespace": namespace,
                            },
                        }
                    ],
                    "current-context": "e2e",
                }
            )
        )
        base_env = {
            k: v
            for k, v in unmeasured(dict(os.environ)).items()
            if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "kubeconfig")
        }
        replicas = []
        for name, port in zip("ab", ports, strict=True):
            env = {
                **base_env,
                "PYTHONPATH": str(ROOT),
                "NO_PROXY": "127.0.0.1,localhost",
                "KUBECONFIG": str(kubeconfig),
                "ACMECERTS_DIRECTORY": proxy.directory_url,
                "ACMECERTS_CA_BUNDLE": str(pebble.ca_bundle),
                "ACMECERTS_HTTP_PORT": str(port),
                "ACMECERTS_LOCK_LEASE": str(LOCK_LEASE),
            }
            replica = Replica(name, port, env, tmp_path)
            stack.callback(replica.stop)
            replicas.append(replica)
        crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/certificates.{GROUP}"
        deadline = time.monotonic() + 30
        while not any(
            c["type"] == "Established" and c["status"] == "True"
            for c in ok(kube.request("GET", crd)).get("status", {}).get("conditions", [])
        ):
            assert time.monotonic() < deadline, "the CRD was not established within 30 s"
            time.sleep(0.1)
        yield World(
            kube,
            pebble,
            proxy,
            router,
            forwarder,
            namespace,
            replicas,
            tmp_path,
            time.monotonic() - began,
        )


# -- the script -----------------------------------------------------------------------------


class Script:
    """Condition waits under one deadline; a wait that times out is recorded, not fatal."""

    def __init__(self, world: World, seconds: float) -> None:
        self.world = world
        self.began = time.monotonic()
        self.deadline = self.began + seconds
        self.failures: list[str] = []
        self.marks: dict[str, float] = {}

    def mark(self, what: str) -> float:
        now = self.marks[what] = time.monotonic()
        return now

    def wait(
        self,
        what: str,
        check: Callable[[], Any],
        timeout: float,
        detail: Callable[[], object] | None = None,
    ) -> bool:
        """Poll ``check`` until true; on timeout record what was waited for (and ``detail``:
        what was seen), and go on."""
        limit = min(time.monotonic() + timeout, self.deadline)
        while True:
            if check():
                return True
            if time.monotonic() >= limit:
                break
            time.sleep(0.2)
        seconds = time.monotonic() - self.began
        seen = f" (saw: {detail()})" if detail is not None else ""
        self.failures.append(f"at {seconds:.0f} s: timed out waiting for {what}{seen}")
        return False

    def logs(self) -> str:
        parts = []
        for replica in self.world.replicas:
            for i, log in enumerate(replica.logs):
                lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
                parts.append(f"--- replica {replica.name} run {i} (last 40 lines)")
                parts.extend(lines[-40:])
        return "\n".join(parts)


def hold_matching(proxy: FaultProxy, match: Callable[[str, str, bytes], bool]) -> threading.Event:
    """Hold the requests ``match`` picks at the CA proxy until the returned event is set."""
    release = threading.Event()

    def hook(method: str, path: str, body: bytes) -> Fault | None:
        return Hold(release, timeout=12) if match(method, path, body) else None

    proxy.request_hook = hook
    return release


def test_two_replicas_under_churn(world: World) -> None:
    w = world
    s = Script(w, SCRIPT_SECONDS - w.setup_seconds)
    a, b = w.replicas
    secrets_before: dict[str, dict[str, Any]] = {}
    deleted_at: dict[str, float] = {}

    def held_at_router(names: list[str]) -> bool:
        waiting = w.router.waiting()
        return all(waiting.get(host_of(n), 0) >= VA_REQUESTS for n in names)

    def in_secrets(names: list[str]) -> Callable[[], bool]:
        return lambda: set(names) <= set(w.tls_secrets())

    # -- 0. both replicas up -------------------------------------------------------------
    a.start(w.namespace)
    b.start(w.namespace)
    s.wait("both replicas to finish starting", lambda: a.ready() and b.ready(), 60)
    s.mark("started")

    # -- 1. the first wave: 30, of which 8 are held in validation -------------------------
    w.router.hold(host_of(n) for n in DELETED_IN_FLIGHT)
    for name in FIRST_WAVE:
        w.create(name, [host_of(name)])
    s.mark("first wave created")
    s.wait(
        f"Pebble's validations of {len(DELETED_IN_FLIGHT)} certificates to be held at the router",
        lambda: held_at_router(DELETED_IN_FLIGHT),
        10,
        w.router.waiting,
    )

    # -- 2. delete 8 while their validation is in flight -----------------------------------
    release_deactivations = hold_matching(w.proxy, is_deactivation_of)
    for name in DELETED_IN_FLIGHT:
        deleted_at[name] = time.monotonic()
        w.delete(name)

    def held_deactivations() -> set[str]:
        return {
            r.path
            for r in w.proxy.requests
            if is_deactivation(r) and r.status is None and isinstance(r.fault, Hold)
        }

    s.wait(
        f"the deactivations of the {len(DELETED_IN_FLIGHT)} deleted to reach the CA proxy",
        lambda: len(held_deactivations()) >= len(DELETED_IN_FLIGHT),
        8,
        lambda: sorted(held_deactivations()),
    )
    held_ids = {p.rsplit("/", 1)[-1] for p in held_deactivations()}
    w.router.release(host_of(n) for n in DELETED_IN_FLIGHT)
    s.wait(
        "Pebble to finish validating the deleted ones' authorizations",
        lambda: held_ids <= validated_authzs(w.pebble),
        10,
    )
    w.proxy.request_hook = None
    release_deactivations.set()
    s.wait(
        "the deleted resources to be gone",
        lambda: not set(DELETED_IN_FLIGHT) & set(w.resources()),
        30,
    )
    s.mark("deleted in flight")
    first = [n for n in FIRST_WAVE if n not in DELETED_IN_FLIGHT]
    s.wait(f"the other {len(first)} of the first wave in Secrets", in_secrets(first), 60)
    s.mark("first wave issued")

    # -- 3. kill -9 a replica with orders in flight, start it again --------------------------
    w.router.hold(host_of(n) for n in IN_FLIGHT_AT_KILL)
    for name in IN_FLIGHT_AT_KILL:
        w.create(name, [host_of(name)])
    s.wait(
        f"Pebble's validations of {', '.join(IN_FLIGHT_AT_KILL)} to be held at the router",
        lambda: held_at_router(IN_FLIGHT_AT_KILL),
        10,
    )
    holders = w.lock_holders(IN_FLIGHT_AT_KILL)
    by_pid = collections.Counter(holders.values())
    victim = max(w.replicas, key=lambda r: by_pid.get(r.pid, 0))
    victim_locks = sorted(n for n, pid in holders.items() if pid == victim.pid)
    if not victim_locks:
        s.failures.append(f"no replica held a lock of {IN_FLIGHT_AT_KILL}: {holders}")
    victim.kill()
    s.mark("killed")
    w.router.release(host_of(n) for n in IN_FLIGHT_AT_KILL)
    victim.start(w.namespace)
    s.wait("the killed replica to start again", victim.ready, 60)
    s.wait(
        f"the certificates in flight at the kill ({', '.join(IN_FLIGHT_AT_KILL)}) in Secrets",
        in_secrets(IN_FLIGHT_AT_KILL),
        45,
    )
    s.mark("resumed after the kill")

    # -- 4. the API server unreachable while certificates are finalized -----------------------
    outage_hosts = {host_of(n) for n in IN_FLIGHT_AT_OUTAGE}
    w.router.hold(outage_hosts)
    for name in IN_FLIGHT_AT_OUTAGE:
        w.create(name, [host_of(name)])
    s.wait(
        f"Pebble's validations of {', '.join(IN_FLIGHT_AT_OUTAGE)} to be held at the router",
        lambda: held_at_router(IN_FLIGHT_AT_OUTAGE),
        10,
    )
    outage_orders = [o for o in new_orders(w.proxy) if o.names & outage_hosts and o.order_path]
    order_paths = {o.order_path for o in outage_orders}
    authz_ids = {a.rsplit("/", 1)[-1] for o in outage_orders for a in o.authorizations}
    release_polls = hold_matching(w.proxy, lambda m, p, b: m == "POST" and p in order_paths)
    w.router.release(outage_hosts)

    def held_polls() -> set[str | None]:
        return {
            r.path
            for r in w.proxy.requests
            if r.path in order_paths and r.status is None and isinstance(r.fault, Hold)
        }

    s.wait(
        "the validations to finish and an order poll of each to be held at the CA proxy",
        lambda: authz_ids <= validated_authzs(w.pebble) and held_polls() >= order_paths,
        10,
        lambda: (
            f"orders {sorted(map(str, order_paths))}, "
            f"authzs not validated {sorted(authz_ids - validated_authzs(w.pebble))}, "
            "order polls "
            + str([(r.path, r.status, r.fault) for r in w.proxy.requests if r.path in order_paths])
        ),
    )
    downloads_before = len(w.proxy.requests_to("/certZ/", "POST"))
    w.forwarder.cut()
    cut_at = s.mark("cut")
    w.proxy.request_hook = None
    release_polls.set()
    s.wait(
        "the certificates finalized during the outage to be downloaded",
        lambda: (
            len(w.proxy.requests_to("/certZ/", "POST"))
            >= downloads_before + len(IN_FLIGHT_AT_OUTAGE)
        ),
        10,
    )
    s.wait(
        f"{OUTAGE_SECONDS:g} s of outage",
        lambda: time.monotonic() - cut_at >= OUTAGE_SECONDS,
        OUTAGE_SECONDS + 1,
    )
    w.forwarder.restore()
    s.mark("restored")
    s.wait(
        f"the certificates downloaded during the outage ({', '.join(IN_FLIGHT_AT_OUTAGE)}) "
        "in Secrets",
        in_secrets(IN_FLIGHT_AT_OUTAGE),
        45,
    )
    s.mark("saved after the outage")

    # -- 5. two resources with invalid names ---------------------------------------------
    for name, dns_name in INVALID.items():
        w.create(name, [dns_name])
    s.wait(
        "a CertificateFailed event for each invalid resource",
        lambda: set(INVALID) <= set(w.failure_events()),
        20,
    )
    s.mark("invalid reported")

    # -- 6. delete 5 issued resources and apply them again ---------------------------------
    current = w.tls_secrets()
    secrets_before = {n: current[n] for n in REAPPLIED if n in current}
    orders_before_reapply = len(new_orders(w.proxy))
    for name in REAPPLIED:
        deleted_at[name] = time.monotonic()
        w.delete(name)
    s.wait(
        "the 5 deleted resources and their Secrets to be gone",
        lambda: not set(REAPPLIED) & (set(w.resources()) | set(w.tls_secrets())),
        30,
    )
    for name in REAPPLIED:
        w.create(name, [host_of(name)])
    s.wait("the re-applied resources' Secrets", in_secrets(REAPPLIED), 30)
    s.mark("reapplied")
    s.wait("every surviving resource's Secret", in_secrets(SURVIVORS), 20)
    s.mark("done")

    # -- the verdict ---------------------------------------------------------------------
    problems = list(s.failures)
    summary = verdict(w, s, secrets_before, deleted_at, orders_before_reapply, problems)
    summary["victim"] = {"replica": victim.name, "locks": victim_locks, "holders": holders}
    summary["problems"] = problems
    text = json.dumps(summary, indent=1, sort_keys=True)
    (w.workdir / "e2e-summary.json").write_text(text)
    dump_records(w, s)
    print("E2E-SUMMARY", text)
    if problems:
        pytest.fail("\n".join(["the end-to-end run fell short:", *problems, s.logs()]))


def dump_records(w: World, s: Script) -> None:
    """What the CA proxy and the router saw, one JSON line each, for a post-mortem."""
    with (w.workdir / "ca-requests.jsonl").open("w") as out:
        for r in w.proxy.requests:
            payload = jws_payload(r.body) if r.path == "/order-plz" else None
            line = {
                "t": round(r.arrival - s.began, 3),
                "done": None if r.responded is None else round(r.responded - s.began, 3),
                "method": r.method,
                "path": r.path,
                "status": r.status,
                "fault": type(r.fault).__name__ if r.fault else None,
                "connection": r.connection,
                "names": [i["value"] for i in payload["identifiers"]] if payload else None,
            }
            out.write(json.dumps(line) + "\n")
    with (w.workdir / "router-requests.jsonl").open("w") as out:
        for q in w.router.requests:
            line = {
                "t": round(q.arrival - s.began, 3),
                "done": None if q.answered is None else round(q.answered - s.began, 3),
                "host": q.host,
                "held": q.held,
                "status": q.status,
                "backend": q.backend,
            }
            out.write(json.dumps(line) + "\n")


def is_deactivation_of(method: str, path: str, body: bytes) -> bool:
    return (
        method == "POST"
        and path.startswith("/authZ/")
        and jws_payload(body) == {"status": "deactivated"}
    )


def verdict(
    w: World,
    s: Script,
    secrets_before: dict[str, dict[str, Any]],
    deleted_at: dict[str, float],
    orders_before_reapply: int,
    problems: list[str],
) -> dict[str, Any]:
    """Check every "done means" item; append what falls short to ``problems``."""
    resources = w.resources()
    secrets = w.tls_secrets()
    root = x509.load_pem_x509_certificate(w.pebble.root_pem().encode())

    # every surviving resource: its Secret, owned by it, a chain that verifies, its name
    for name in SURVIVORS:
        secret, resource = secrets.get(name), resources.get(name)
        if secret is None or resource is None:
            problems.append(f"{name}: no Secret (resource present: {resource is not None})")
            continue
        problems.extend(f"{name}: {p}" for p in check_secret(secret, resource, name, root))
    for name in [*DELETED_IN_FLIGHT, *INVALID]:
        if name in secrets:
            problems.append(f"{name}: has a Secret, but it was deleted in flight or is invalid")

    # orders: each certificate once, none after a deletion, none for the invalid names
    orders = new_orders(w.proxy)
    per_names = collections.Counter(o.names for o in orders)
    wanted = {frozenset({host_of(n)}) for n in NAMES}
    for names, count in per_names.items():
        if count != 1 or names not in wanted:
            problems.append(f"newOrder for {sorted(names)}: {count} (want 1, for a resource)")
    problems.extend(
        f"{sorted(n)[0]}: never ordered" for n in sorted(wanted - set(per_names), key=sorted)
    )
    pebble_orders = w.pebble.requests_seen().count(("POST", "/order-plz"))
    if pebble_orders != len(NAMES):
        problems.append(f"Pebble's log has {pebble_orders} newOrders, want {len(NAMES)}")
    for name, when in deleted_at.items():
        late = [o for o in orders if host_of(name) in o.names and o.arrival >= when]
        if late:
            problems.append(f"{name}: {len(late)} newOrder after its deletion was requested")
    reorders = len(orders) - orders_before_reapply
    if reorders:
        problems.append(f"{reorders} newOrder after the 5 were deleted and re-applied")

    # the deleted in flight: every authorization of their orders deactivated
    deactivated = {
        r.path: r
        for r in w.proxy.requests
        if is_deactivation(r)
        and r.status == 200
        and json.loads(r.response_body).get("status") == "deactivated"
    }
    for name in DELETED_IN_FLIGHT:
        authzs = [a for o in orders if host_of(name) in o.names for a in o.authorizations]
        missing = [a for a in authzs if a not in deactivated]
        if not authzs or missing:
            problems.append(f"{name}: authorizations not deactivated: {missing or 'no order'}")

    # invalid names: one failure event, no order, at most one attempt per manager lifetime
    events = w.failure_events()
    attempts: dict[str, list[int]] = {}
    for name in INVALID:
        if len(events.get(name, [])) != 1:
            problems.append(f"{name}: {len(events.get(name, []))} CertificateFailed events")
        marker = f"{w.namespace}.{name}: failed:"
        attempts[name] = [r.text(i).count(marker) for r in w.replicas for i in range(len(r.logs))]
        if max(attempts[name], default=0) > 1 or sum(attempts[name]) == 0:
            problems.append(f"{name}: failures per replica lifetime {attempts[name]} (want <= 1)")

    # re-applied: the same certificate back
    for name, before in secrets_before.items():
        after = secrets.get(name)
        if after is None:
            continue  # reported above
        if leaf_serial(after) != leaf_serial(before):
            problems.append(f"{name}: re-applied with a different certificate")
    if len(secrets_before) != len(REAPPLIED):
        problems.append(f"only {sorted(secrets_before)} of {REAPPLIED} were issued before")

    # the replicas: alive, and their managers never stopped on their own
    for replica in w.replicas:
        if not replica.alive():
            problems.append(f"replica {replica.name} exited: {replica.process}")
        for i in range(len(replica.logs)):
            for line in replica.text(i).splitlines():
                if "the certificate manager stopped" in line:
                    problems.append(f"replica {replica.name} run {i}: {line[-300:]}")

    # budgets
    ca_requests = w.proxy.requests
    starts = sum(len(r.logs) for r in w.replicas)
    ca_budget = (
        CA_PER_ORDER * len(orders)
        + CA_PER_DELETION * len(DELETED_IN_FLIGHT)
        + CA_PER_RESUMED * (len(IN_FLIGHT_AT_KILL) + len(IN_FLIGHT_AT_OUTAGE))
        + CA_PER_START * starts
    )
    if len(ca_requests) > ca_budget:
        problems.append(f"{len(ca_requests)} requests to the CA, budget {ca_budget}")
    api = w.operator_requests()
    created = len(NAMES) + len(INVALID) + len(REAPPLIED)
    api_budget = API_PER_RESOURCE * created + API_PER_START * starts
    if len(api) > api_budget:
        problems.append(f"{len(api)} requests to the API server, budget {api_budget}")

    by_path = collections.Counter(_kind(r.method, r.path) for r in ca_requests)
    by_verb = collections.Counter(
        f"{e.get('verb')} {e.get('objectRef', {}).get('resource', e.get('requestURI', '?'))}"
        for e in api
    )
    return {
        "wall_seconds": round(time.monotonic() - s.began + w.setup_seconds, 1),
        "setup_seconds": round(w.setup_seconds, 1),
        "phases": {k: round(v - s.began, 1) for k, v in s.marks.items()},
        "orders": {"proxy": len(orders), "pebble_log": pebble_orders},
        "ca_requests": {
            "total": len(ca_requests),
            "budget": ca_budget,
            "per_order": round(len(ca_requests) / max(1, len(orders)), 2),
            "by": dict(by_path),
        },
        "api_requests": {
            "total": len(api),
            "budget": api_budget,
            "per_resource": round(len(api) / created, 1),
            "by": dict(by_verb),
        },
        "replica_starts": starts,
        "invalid_attempts": attempts,
        "deactivated": len(deactivated),
        "secrets": len(secrets),
    }


def _kind(method: str, path: str) -> str:
    prefix = path if path.count("/") < 2 else path[: path.index("/", 1) + 1]
    return f"{method} {prefix}"


def leaf_serial(secret: dict[str, Any]) -> int:
    chain = x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["tls.crt"]))
    return chain[0].serial_number


def check_secret(
    secret: dict[str, Any], resource: dict[str, Any], name: str, root: x509.Certificate
) -> list[str]:
    """What is wrong with a resource's TLS Secret (nothing: an empty list)."""
    problems = []
    if secret.get("type") != "kubernetes.io/tls":
        problems.append(f"Secret type {secret.get('type')!r}")
    owners = [o.get("uid") for o in secret["metadata"].get("ownerReferences", [])]
    if owners != [resource["metadata"]["uid"]]:
        problems.append(f"Secret owned by {owners}, not the resource as it is now")
    chain = x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["tls.crt"]))
    try:
        for child, parent in itertools.pairwise(chain):
            child.verify_directly_issued_by(parent)
        chain[-1].verify_directly_issued_by(root)
    except (InvalidSignature, ValueError, TypeError) as exc:
        problems.append(f"chain does not verify: {exc!r}")
    sans = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    if sans.get_values_for_type(x509.DNSName) != [host_of(name)]:
        problems.append(f"names {sans.get_values_for_type(x509.DNSName)}")
    key = serialization.load_pem_private_key(base64.b64decode(secret["data"]["tls.key"]), None)
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    pem = serialization.Encoding.PEM
    if key.public_key().public_bytes(pem, public) != chain[0].public_key().public_bytes(
        pem, public
    ):
        problems.append("tls.key does not match the certificate")
    return problems
