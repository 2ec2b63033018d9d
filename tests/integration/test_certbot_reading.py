"""certbot's state read by the library (``acmecerts.storage.certbot``), from a certificate
Pebble issued and laid out as certbot keeps it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acmecerts import AcmeClient, Http01Server, InvalidInput, KeyType
from acmecerts.storage.certbot import read_account, read_lineage, renewal_confs
from acmecerts.testing import PebbleServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

NAME = "certbot-reading.example.test"


def lay_out(root: Path, server: str, fullchain: str, key: str, params: str) -> Path:
    """``root`` as certbot leaves it for one lineage: live files and renewal/NAME.conf."""
    live = root / "live" / NAME
    live.mkdir(parents=True)
    (live / "fullchain.pem").write_text(fullchain)
    (live / "privkey.pem").write_text(key)
    (root / "renewal").mkdir()
    conf = root / "renewal" / f"{NAME}.conf"
    conf.write_text(
        f"# renew_before_expiry = 30 days\nversion = 2.11.0\n"
        f"fullchain = {live / 'fullchain.pem'}\nprivkey = {live / 'privkey.pem'}\n\n"
        f"[renewalparams]\nserver = {server}\naccount = 0123abcd\n{params}"
    )
    return conf


async def test_a_lineage_and_its_account_are_read_and_checked(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server, tmp_path: Path
) -> None:
    issued = await client.issue([NAME], solver=http01, key_type=KeyType.EC256)
    assert issued.private_key_pem is not None
    conf = lay_out(
        tmp_path,
        pebble.directory_url,
        issued.chain.pem,
        issued.private_key_pem,
        "authenticator = standalone\nhttp01_port = 8080\nkey_type = ecdsa\n"
        "pre_hook = systemctl stop web\nrenew_hook = systemctl reload web\n",
    )
    assert renewal_confs(tmp_path) == [conf]
    lineage = read_lineage(conf)
    assert lineage.name == NAME
    assert [i.value for i in lineage.identifiers] == [NAME]
    assert lineage.chain.pem == issued.chain.pem
    assert lineage.key_type is KeyType.EC256
    assert (lineage.webroot, lineage.http_01_listen) == (None, "[::]:8080")
    assert (lineage.pre_hook, lineage.deploy_hook) == ("systemctl stop web", "systemctl reload web")
    assert lineage.account_id == "0123abcd"

    # the account: certbot's JWK and regr.json, under the server's host and path
    parts = pebble.directory_url.split("/", 3)
    folder = tmp_path / "accounts" / parts[2] / parts[3] / "0123abcd"
    folder.mkdir(parents=True)
    (folder / "private_key.json").write_text(json.dumps(client.account_key.jwk.to_json()))
    (folder / "regr.json").write_text(json.dumps({"uri": client.account_url}))
    key, url = read_account(tmp_path, lineage.server, "0123abcd")
    assert (key, url) == (client.account_key, client.account_url)


async def test_a_key_that_is_not_the_certificates_is_refused_naming_the_file(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server, tmp_path: Path
) -> None:
    issued = await client.issue([NAME], solver=http01)
    other = await client.issue([NAME], solver=http01)  # same name, another key
    assert other.private_key_pem is not None
    conf = lay_out(
        tmp_path,
        pebble.directory_url,
        issued.chain.pem,
        other.private_key_pem,
        "authenticator = webroot\nwebroot_path = /srv/www,\n",
    )
    with pytest.raises(InvalidInput, match=f"certbot file {conf}: its certificate"):
        read_lineage(conf)
