"""Three manager processes sharing one Kubernetes store issue 30 certificates against Pebble.

The certificate lock is a Lease, certificates are Secrets (and ``kubernetes.io/tls``
copies), and no certificate is ordered twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acmecerts.testing import PebbleServer

from .kube import KubeApiServer

CHILD = Path(__file__).resolve().parents[1] / "integration" / "manager_child.py"
ROOT = Path(__file__).resolve().parents[2]


def _orders(pebble: PebbleServer) -> int:
    return sum(1 for entry in pebble.requests_seen() if entry == ("POST", "/order-plz"))


@pytest.mark.timeout(300)
def test_three_manager_processes_on_one_kubernetes_store_order_each_certificate_once(
    pebble: PebbleServer, kube_api: KubeApiServer, tmp_path: Path
) -> None:
    assert pebble.challtestsrv_url is not None
    namespace = kube_api.create_namespace("managers")
    names = [f"kube{i}.example.test" for i in range(30)]
    command = [
        sys.executable,
        str(CHILD),
        "--directory",
        pebble.directory_url,
        "--ca-bundle",
        str(pebble.ca_bundle),
        "--state",
        str(tmp_path / "unused"),
        "--challtestsrv",
        pebble.challtestsrv_url,
        "--kube-namespace",
        namespace,
        "--kube-config",
        str(kube_api.kubeconfig),
        *names,
    ]
    before = _orders(pebble)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    results = [[json.loads(line) for line in out.splitlines()] for out, _ in outputs]
    assert _orders(pebble) - before == 30  # no certificate was ordered twice
    for lines in results:
        assert [line["kind"] for line in lines] == ["IssuedResult"] * 30
    for i in range(30):
        assert len({lines[i]["serial"] for lines in results}) == 1
    # every certificate is also a kubernetes.io/tls Secret an Ingress can mount
    answer = kube_api.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/secrets",
        params={"labelSelector": "app.kubernetes.io/managed-by=acmecerts"},
    )
    secrets = answer.json()["items"]
    tls = [s for s in secrets if s["type"] == "kubernetes.io/tls"]
    assert len(tls) == 30
    # one account key for the three processes
    keys = [
        s
        for s in secrets
        if s["type"] == "Opaque"
        and s["metadata"]["annotations"]["acmecerts.io/key"].endswith("/key.pem")
    ]
    assert len(keys) == 1
