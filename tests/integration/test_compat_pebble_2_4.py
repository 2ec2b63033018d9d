"""The compatibility set: a CA without profiles, ARI or ``Retry-After`` (Debian's Pebble 2.4).

Most private ACME servers are still like it. The rest of the suite runs against Pebble 2.10;
these tests keep the paths a CA of the older kind takes working: issuance without a profile
in the order, renewal information refused before any request, revocation, and the CLI's
issue and renew from the state it stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acmecerts import AcmeClient, Http01Server, InvalidInput
from acmecerts.testing import PebbleServer
from tests.cli_support import cli_env, run_cli

from .conftest import assert_valid_chain

pytestmark = pytest.mark.anyio


async def test_issues_without_a_profile_in_the_order(pebble_2_4: PebbleServer) -> None:
    async with (
        AcmeClient(pebble_2_4.directory_url, ca_bundle=pebble_2_4.ca_bundle) as client,
        Http01Server(host="127.0.0.1", port=pebble_2_4.http_port) as solver,
    ):
        before = pebble_2_4.requests_seen().count(("POST", "/order-plz"))
        names = ["compat.example.test", "www.compat.example.test"]
        issued = await client.issue(names, solver=solver)
    assert_valid_chain(issued, pebble_2_4, names)
    assert pebble_2_4.requests_seen().count(("POST", "/order-plz")) == before + 1


async def test_renewal_information_is_refused_before_any_request(
    pebble_2_4: PebbleServer,
) -> None:
    async with (
        AcmeClient(pebble_2_4.directory_url, ca_bundle=pebble_2_4.ca_bundle) as client,
        Http01Server(host="127.0.0.1", port=pebble_2_4.http_port) as solver,
    ):
        issued = await client.issue(["ari.compat.example.test"], solver=solver)
        before = len(pebble_2_4.requests_seen())
        with pytest.raises(InvalidInput, match="renewalInfo"):
            await client.renewal_info(issued.fullchain_pem)
        assert len(pebble_2_4.requests_seen()) == before
        await client.revoke(issued.fullchain_pem)
    assert ("POST", "/revoke-cert") in pebble_2_4.requests_seen()


@pytest.mark.timeout(180)
def test_the_cli_issues_and_renews_on_a_ca_without_profiles_or_ari(
    pebble_2_4: PebbleServer, tmp_path: Path
) -> None:
    env = cli_env()
    env.update(
        ACMECERTS_DIRECTORY=pebble_2_4.directory_url,
        ACMECERTS_CA_BUNDLE=str(pebble_2_4.ca_bundle),
        ACMECERTS_STATE_DIR=str(tmp_path / "state"),
        ACMECERTS_HTTP_01_LISTEN=f"127.0.0.1:{pebble_2_4.http_port}",
    )
    issued = run_cli(
        "issue", "--json", "--out", str(tmp_path / "out"), "cli.compat.example.test", env=env
    )
    assert issued.returncode == 0, issued.stderr
    first = (tmp_path / "out" / "cert.pem").read_text()
    renewed = run_cli("renew", "--force", "--json", env=env)
    assert renewed.returncode == 0, renewed.stderr
    assert json.loads(renewed.stdout)
    assert (tmp_path / "out" / "cert.pem").read_text() != first
