"""The CLI's ``--dns-provider``: dns-01 through dns-lexicon, against PowerDNS and Pebble 2.10.

``issue`` takes the provider's credentials from lexicon's environment variables, stores the
provider name with the certificate (never a credential), and ``renew`` answers alike with
the credentials from the configuration file (``dns-provider-option``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from cli_support import ca_args, check_certificate, cli_env, one_json, run_cli

from acmecerts.testing import PebbleServer
from tests.servers.powerdns import PowerDnsServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.timeout(120)

NAMES = ("cli-provider.example.test", "*.cli-provider.example.test")


@pytest.fixture(scope="module")
def pdns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PowerDnsServer]:
    with PowerDnsServer(tmp_path_factory.mktemp("pdns-cli")) as server:
        yield server


@pytest.fixture(scope="module")
def ca(pdns: PowerDnsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PebbleServer]:
    with PebbleServer(
        tmp_path_factory.mktemp("pebble-cli-provider"),
        dns_server=pdns.address,
        authz_reuse_percent=0,
        release="2.10",
    ) as server:
        yield server


def test_issue_with_env_credentials_then_renew_with_config_file_credentials(
    pdns: PowerDnsServer, ca: PebbleServer, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    check = ["--dns-propagation-nameserver", pdns.address, "--dns-propagation-timeout", "10"]
    env = cli_env(
        tmp_path,
        LEXICON_POWERDNS_AUTH_TOKEN=pdns.api_key,
        LEXICON_POWERDNS_PDNS_SERVER=pdns.api_url,
    )
    issued = run_cli(
        "issue",
        "--challenge",
        "dns-01",
        "--dns-provider",
        "powerdns",
        *check,
        "--out",
        str(tmp_path / "out"),
        "--json",
        *ca_args(ca, state),
        *NAMES,
        env=env,
    )
    assert issued.returncode == 0, issued.stderr
    assert one_json(issued)["certificates"][0]["status"] == "issued"
    check_certificate(tmp_path / "out", set(NAMES), ca.root_pem())
    assert pdns.txt_values("_acme-challenge.cli-provider.example.test") == set()

    # The provider's name is stored with the certificate; its credentials nowhere.
    stored = [p.read_bytes() for p in state.rglob("*") if p.is_file()]
    assert any(b'"dns_provider": "powerdns"' in data for data in stored)
    assert not any(pdns.api_key.encode() in data for data in stored)

    # renew: no LEXICON_* variables; the credentials come from the configuration file.
    config = tmp_path / "xdg-config" / "acmecerts" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'dns-provider-option = ["auth_token={pdns.api_key}", "pdns_server={pdns.api_url}"]\n',
        encoding="utf-8",
    )
    renew_env = cli_env(tmp_path)
    renewed = run_cli("renew", "--force", "--json", "--state-dir", str(state), env=renew_env)
    assert renewed.returncode == 0, renewed.stderr
    assert one_json(renewed)["certificates"][0]["status"] == "renewed"
    assert pdns.txt_values("_acme-challenge.cli-provider.example.test") == set()

    # Without any credentials the provider call fails, and says so without a traceback.
    config.unlink()
    failed = run_cli("renew", "--force", "--json", "--state-dir", str(state), env=renew_env)
    assert failed.returncode != 0
    assert "powerdns" in failed.stdout + failed.stderr
    assert pdns.api_key not in failed.stdout + failed.stderr


def test_dns_provider_options_are_checked() -> None:
    from acmecerts.cli._args import ChallengeOptions
    from acmecerts.cli._solvers import plan_challenge
    from acmecerts.errors import InvalidInput
    from acmecerts.protocol.identifiers import parse_identifier

    names = [parse_identifier("example.test")]
    with pytest.raises(InvalidInput, match="one of --dns-rfc2136-server"):
        plan_challenge(
            ChallengeOptions(challenge="dns-01", dns_provider="powerdns", dns_hook="true"), names
        )
    with pytest.raises(InvalidInput, match="did you mean powerdns"):
        plan_challenge(ChallengeOptions(challenge="dns-01", dns_provider="powerdnz"), names)
    with pytest.raises(InvalidInput, match="KEY=VALUE") as info:
        plan_challenge(
            ChallengeOptions(
                challenge="dns-01", dns_provider="powerdns", dns_provider_options=("s3cret",)
            ),
            names,
        )
    assert "s3cret" not in str(info.value)
