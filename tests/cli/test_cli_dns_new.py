"""The CLI with dns-persist-01 and dns-account-01, against Pebble 2.10 and BIND.

``account dns-persist-records`` prints the record; it is published once (by hand, as a
zone's administrator would); ``issue --challenge dns-persist-01`` and ``renew`` then
write nothing to DNS. ``issue --challenge dns-account-01`` writes at the account's label.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

import dns.query
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TXT
import dns.tsig
import dns.update
import pytest
from cli_support import ca_args, check_certificate, cli_env, one_json, run_cli

from acmecerts.protocol.challenges import dns_account01_label, dns_persist01_txt_value
from acmecerts.testing import PebbleServer
from tests.servers.bind import BindServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BindServer]:
    if shutil.which("named") is None:
        pytest.fail("named not found: apt-get install -y bind9 bind9-utils", pytrace=False)
    with BindServer(tmp_path_factory.mktemp("bind")) as server:
        yield server


@pytest.fixture(scope="module")
def ca(bind: BindServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PebbleServer]:
    with PebbleServer(
        tmp_path_factory.mktemp("pebble-cli-dns"),
        dns_server=bind.address,
        authz_reuse_percent=0,
        release="2.10",
    ) as server:
        yield server


def serial(bind: BindServer) -> int:
    (rrset,) = bind.query("example.test", "SOA").answer
    return int(rrset[0].serial)


def publish(bind: BindServer, name: str, value: str) -> None:
    key = dns.tsig.Key(bind.tsig_key_name, bind.tsig_secret, bind.tsig_algorithm)
    message = dns.update.UpdateMessage("example.test", keyring=key)
    rdata = dns.rdtypes.ANY.TXT.TXT(dns.rdataclass.IN, dns.rdatatype.TXT, [value.encode()])
    message.add(name + ".", 60, rdata)
    response = dns.query.tcp(message, "127.0.0.1", port=bind.port, timeout=5)
    assert response.rcode() == dns.rcode.NOERROR


def test_dns_persist_01_records_issue_and_renew(
    bind: BindServer, ca: PebbleServer, tmp_path: Path
) -> None:
    state, env = tmp_path / "state", cli_env(tmp_path)
    created = run_cli("account", "create", "--json", *ca_args(ca, state), env=env)
    assert created.returncode == 0, created.stderr
    account_url = one_json(created)["url"]

    shown = run_cli(
        "account",
        "dns-persist-records",
        "--json",
        *ca_args(ca, state),
        "cli-persist.example.test",
        "*.cli-persist.example.test",
        env=env,
    )
    assert shown.returncode == 0, shown.stderr
    document = one_json(shown)
    assert document["issuer"] == "pebble.letsencrypt.org"  # the directory's caaIdentities
    (record,) = document["records"]  # the wildcard and its base name share one record
    value = dns_persist01_txt_value("pebble.letsencrypt.org", account_url, wildcard=True)
    assert record == {
        "name": "_validation-persist.cli-persist.example.test",
        "value": value,
        "wildcard": True,
    }
    text = run_cli(
        "account",
        "dns-persist-records",
        *ca_args(ca, state),
        "--persist-until",
        "2030-01-01",
        "cli-persist.example.test",
        env=env,
    )
    assert text.returncode == 0, text.stderr
    assert (
        '_validation-persist.cli-persist.example.test. IN TXT "pebble.letsencrypt.org; '
        f'accounturi={account_url}; persistUntil=1893456000"'
    ) in text.stdout

    publish(bind, record["name"], record["value"])
    before = serial(bind)
    check = ["--dns-propagation-nameserver", bind.address, "--dns-propagation-timeout", "10"]
    issued = run_cli(
        "issue",
        "--challenge",
        "dns-persist-01",
        *check,
        "--out",
        str(tmp_path / "out"),
        "--json",
        *ca_args(ca, state),
        "cli-persist.example.test",
        "*.cli-persist.example.test",
        env=env,
    )
    assert issued.returncode == 0, issued.stderr
    assert one_json(issued)["certificates"][0]["status"] == "issued"
    names = {"cli-persist.example.test", "*.cli-persist.example.test"}
    check_certificate(tmp_path / "out", names, ca.root_pem())

    renewed = run_cli("renew", "--force", "--json", "--state-dir", str(state), env=env)
    assert renewed.returncode == 0, renewed.stderr
    assert one_json(renewed)["certificates"][0]["status"] == "renewed"
    assert serial(bind) == before  # neither issue nor renew wrote to the zone


def test_dns_persist_01_without_the_record_says_what_to_publish(
    bind: BindServer, ca: PebbleServer, tmp_path: Path
) -> None:
    state, env = tmp_path / "state", cli_env(tmp_path)
    result = run_cli(
        "issue",
        "--challenge",
        "dns-persist-01",
        "--dns-propagation-nameserver",
        bind.address,
        *ca_args(ca, state),
        "cli-unpublished.example.test",
        env=env,
    )
    assert result.returncode != 0
    assert "_validation-persist.cli-unpublished.example.test. IN TXT" in result.stderr


def test_dns_account_01_through_rfc2136(bind: BindServer, ca: PebbleServer, tmp_path: Path) -> None:
    state, env = tmp_path / "state", cli_env(tmp_path)
    result = run_cli(
        "issue",
        "--challenge",
        "dns-account-01",
        "--dns-rfc2136-server",
        bind.address,
        "--dns-tsig-key",
        bind.tsig_key_name,
        "--dns-tsig-secret",
        bind.tsig_secret,
        "--out",
        str(tmp_path / "out"),
        "--json",
        "-v",
        *ca_args(ca, state),
        "cli-account.example.test",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    check_certificate(tmp_path / "out", {"cli-account.example.test"}, ca.root_pem())
    shown = run_cli("account", "show", "--json", *ca_args(ca, state), env=env)
    label = dns_account01_label(one_json(shown)["url"])
    assert f"{label}._acme-challenge.cli-account.example.test" in result.stderr


def test_challenge_options_for_the_new_dns_types() -> None:
    from acmecerts.cli._args import ChallengeOptions
    from acmecerts.cli._solvers import plan_challenge
    from acmecerts.errors import InvalidInput
    from acmecerts.protocol.identifiers import parse_identifier
    from acmecerts.solvers import DnsPersistSolver, Rfc2136Solver

    wildcard = [parse_identifier("*.a.example")]
    # a renewal: the primary is stored, its TSIG secret is not -> read-only, its port kept
    read_only = plan_challenge(
        ChallengeOptions(challenge="dns-persist-01", dns_rfc2136_server="127.0.0.1:5353"),
        wildcard,
    ).solver
    assert isinstance(read_only, DnsPersistSolver)
    assert read_only.propagation.port == 5353
    assert "publisher" not in repr(read_only)
    publishing = plan_challenge(
        ChallengeOptions(
            challenge="dns-persist-01",
            dns_rfc2136_server="127.0.0.1:5353",
            dns_tsig_key="k",
            dns_tsig_secret="c2VjcmV0",
        ),
        wildcard,
    ).solver
    assert "publisher=Rfc2136Solver" in repr(publishing)
    account = plan_challenge(
        ChallengeOptions(
            challenge="dns-account-01",
            dns_rfc2136_server="127.0.0.1",
            dns_tsig_key="k",
            dns_tsig_secret="c2VjcmV0",
        ),
        wildcard,
    ).solver
    assert isinstance(account, Rfc2136Solver)
    assert account.challenge_type == "dns-account-01"
    with pytest.raises(InvalidInput, match="--dns-hook has nothing to do"):
        plan_challenge(ChallengeOptions(challenge="dns-persist-01", dns_hook="true"), wildcard)
    with pytest.raises(InvalidInput, match="cannot validate an IP address"):
        plan_challenge(
            ChallengeOptions(challenge="dns-account-01", dns_hook="true"),
            [parse_identifier("192.0.2.1")],
        )
