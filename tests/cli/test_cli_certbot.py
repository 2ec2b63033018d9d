"""``acmecerts import certbot``: a real certbot's lineages, imported, then renewed by acmecerts.

certbot (from PyPI, in its own venv: tests/servers/certbot.py) issues two lineages from the
session Pebble 2.10 through the fault proxy (which records every request): one answered
standalone (ECDSA), one from a webroot (RSA 2048), served on Pebble's http-01 port by a
small HTTP server of the test. They are imported with certbot's account; ``acmecerts renew
--force`` then renews both, and each renewal's newOrder names the certificate it replaces.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from acmecerts.protocol.ari import cert_id
from acmecerts.protocol.certificate import certificate_info, parse_pem_chain
from acmecerts.testing import PebbleServer
from tests.cli_support import cli_env, run_cli
from tests.faults.proxy import FaultProxy, told
from tests.pebble_quirks import REFUSAL_DETAIL, pebble_refuses_replaces_of
from tests.servers.certbot import ensure_certbot_venv, run_certbot

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


@pytest.fixture(scope="session")
def certbot() -> Path:
    return ensure_certbot_venv()


@pytest.fixture
def proxy(pebble: PebbleServer) -> Iterator[FaultProxy]:
    with FaultProxy(
        pebble.directory_url,
        certfile=pebble.tls_cert_path,
        keyfile=pebble.tls_key_path,
        upstream_ca=pebble.ca_bundle,
    ) as running:
        yield running


def renew(state: Path, env: dict[str, str], name: str) -> dict[str, str]:
    """``acmecerts renew --force NAME``: the status of each certificate."""
    done = run_cli(
        "renew", "--force", name, "--state-dir", str(state), "--json", env=env, timeout=120
    )
    certificates = json.loads(done.stdout)["certificates"]
    statuses = {c["name"]: c["status"] for c in certificates}
    assert done.returncode == 0, [(c["name"], c["status"], c.get("error")) for c in certificates]
    return statuses


def _leaf(path: Path) -> object:
    return parse_pem_chain(path.read_bytes()).leaf


def test_certbot_lineages_are_imported_and_renewed_with_replaces(
    certbot: Path, pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    base = tmp_path / "certbot"
    common = {"server": proxy.directory_url, "ca_bundle": Path(pebble.ca_bundle)}
    standalone = "cb-standalone.example.test"
    run_certbot(
        certbot,
        base,
        ["certonly", "--standalone", "--http-01-port", str(pebble.http_port),
         "--http-01-address", "127.0.0.1", "-d", standalone, "-d", f"www.{standalone}"],
        **common,
    )  # fmt: skip
    webroot = tmp_path / "www"
    webroot.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(webroot))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", pebble.http_port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with_root = "cb-webroot.example.test"
        run_certbot(
            certbot,
            base,
            ["certonly", "--webroot", "-w", str(webroot), "--key-type", "rsa",
             "--rsa-key-size", "2048", "-d", with_root],
            **common,
        )  # fmt: skip
        config = base / "config"
        first = {
            name: certificate_info(_leaf(config / "live" / name / "cert.pem"))  # type: ignore[arg-type]
            for name in (standalone, with_root)
        }
        state = tmp_path / "state"
        env = cli_env(tmp_path)
        imported = run_cli(
            "import", "certbot", str(config), "--account", "--state-dir", str(state),
            "--ca-bundle", str(pebble.ca_bundle), "--json", env=env,
        )  # fmt: skip
        assert imported.returncode == 0, imported.stderr
        document = json.loads(imported.stdout)
        assert sorted(i["name"] for i in document["imported"]) == sorted([with_root, standalone])
        assert document["failed"] == []

        status = run_cli("status", "--state-dir", str(state), "--json", env=env)
        assert status.returncode == 0, status.stderr
        assert standalone in status.stdout
        assert with_root in status.stdout

        seen = len(proxy.requests)
        # the webroot's server holds the http-01 port: the standalone lineage after it
        by_webroot = renew(state, env, with_root)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    by_standalone = renew(state, env, standalone)
    results = {**by_webroot, **by_standalone}
    assert results == {standalone: "renewed", with_root: "renewed"}
    sent = [r for r in proxy.requests[seen:] if r.method == "POST" and r.path == "/order-plz"]
    answers = told(sent)
    orders = [r.payload for r in sent if r.status == 201]
    assert len(orders) == 2, answers
    # each renewal named the certbot certificate it replaces (the same account ordered it),
    # accepted; except a certificate whose serial Pebble cannot find (its serial-encoding
    # bug, tests/pebble_quirks.py): that replaces is refused with Pebble's 500, and the
    # client orders once more without it
    ids = {
        name: cert_id(_leaf(config / "live" / name / "cert.pem"))  # type: ignore[arg-type]
        for name in (standalone, with_root)
    }
    unfound = sorted(n for n in ids if pebble_refuses_replaces_of(first[n].serial))
    refused = [r for r in sent if r.status != 201]
    refused_ids = sorted(r.payload.get("replaces") for r in refused)
    assert refused_ids == sorted(ids[n] for n in unfound), answers
    for r in refused:
        assert r.status == 500, answers
        assert REFUSAL_DETAIL.encode() in r.response_body, answers
    replaced = sorted(o["replaces"] for o in orders if "replaces" in o)
    wanted = sorted(ids[n] for n in ids if n not in unfound)
    assert replaced == wanted, answers
    # the renewed files: a new certificate, the key type certbot had
    for name, key_marker in ((standalone, b"PRIVATE KEY"), (with_root, b"PRIVATE KEY")):
        out = state / "certificates" / name
        leaf = certificate_info(_leaf(out / "cert.pem"))  # type: ignore[arg-type]
        assert leaf.serial != first[name].serial
        assert key_marker in (out / "privkey.pem").read_bytes()
    rsa_key = (state / "certificates" / with_root / "privkey.pem").read_bytes()
    from acmecerts.protocol.keys import load_private_key

    assert load_private_key(rsa_key).key_size == 2048  # type: ignore[union-attr]


def test_a_corrupt_lineage_is_named_and_not_imported(tmp_path: Path) -> None:
    config = tmp_path / "letsencrypt"
    (config / "renewal").mkdir(parents=True)
    bad = config / "renewal" / "broken.example.test.conf"
    bad.write_text("version = 5.8.0\n[renewalparams\nserver = https://ca.test/dir\n")
    missing = config / "renewal" / "gone.example.test.conf"
    missing.write_text(
        f"fullchain = {config}/live/gone/fullchain.pem\nprivkey = {config}/live/gone/privkey.pem\n"
        "[renewalparams]\nserver = https://ca.test/dir\nauthenticator = standalone\n"
    )
    state = tmp_path / "state"
    result = run_cli(
        "import", "certbot", str(config), "--state-dir", str(state), env=cli_env(tmp_path)
    )
    assert result.returncode == 1, result.stderr
    assert f"certbot file {bad}: line 2 is not a section header" in result.stderr
    assert f"certbot file {missing}: cannot read its fullchain" in result.stderr
    assert "0 imported, 2 failed" in result.stdout
    assert not state.exists() or not any(state.rglob("certificate.json"))
