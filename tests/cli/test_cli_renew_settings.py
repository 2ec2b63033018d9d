"""Challenge settings stored with each certificate: a bare ``acmecerts renew`` (cron, no
flags) answers each certificate as it was issued, and an option given to ``renew``
replaces the stored one for that run only.

Against a Pebble that reuses no authorization, so that every renewal is validated again:
one state directory holds an http-01, a dns-01 (with a wildcard: only dns-01 can renew
it) and a tls-alpn-01 certificate. The http-01 validations are read from Pebble's log,
the dns-01 ones from the log of the ``--dns-hook`` program (which puts the TXT values
into pebble-challtestsrv).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from cli_support import (
    NEW_ORDER,
    ca_args,
    clean_environment,
    free_port,
    http01_args,
    one_json,
    run_main,
    serial_of,
)

from acmecerts.cli._args import ChallengeOptions
from acmecerts.cli._solvers import plan_challenge, renewal_options, stored_challenge
from acmecerts.cli._state import State
from acmecerts.errors import StorageError
from acmecerts.manager import CertificateRecord, StoredChallenge
from acmecerts.protocol.identifiers import parse_identifiers
from tests.cli.no_reuse import deactivate_valid_authorizations
from tests.cli.test_cli_challenges import dns_hook

if TYPE_CHECKING:
    from conftest import PebbleFactory

    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(60)

HTTP_NAME = "mix-http.example.test"
DNS_NAME = "mix-dns.example.test"
ALPN_NAME = "mix-alpn.example.test"
SECRET = "c2VjcmV0LXRzaWctdmFsdWUtbm90LXRvLWJlLXN0b3JlZA=="


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)


def http_validations(ca: PebbleServer, name: str) -> int:
    """How many http-01 challenges Pebble validated for ``name`` (each token once: Pebble
    logs a validation from each of its perspectives)."""
    pattern = re.compile(
        rf"Attempting to validate w/ HTTP: http://{re.escape(name)}:\d+/"
        r"\.well-known/acme-challenge/(\S+)"
    )
    return len(set(pattern.findall(ca.log_path.read_text())))


def presented(hook_log: Path) -> int:
    """The TXT values the dns-01 hook put in place."""
    if not hook_log.exists():
        return 0
    return sum(line.startswith("present ") for line in hook_log.read_text().splitlines())


def record_of(state: Path, directory_url: str, name: str) -> CertificateRecord:
    async def load() -> CertificateRecord:
        loaded = await State(state, directory_url).load_record(name)
        assert loaded is not None
        return loaded

    return anyio.run(load)


def save_record(state: Path, directory_url: str, record: CertificateRecord) -> None:
    anyio.run(State(state, directory_url).save_record, record)


@pytest.mark.timeout(240)
def test_bare_renew_answers_each_certificate_with_its_own_challenge_and_flags_override(
    pebble_factory: PebbleFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca = pebble_factory(authz_reuse_percent=0)
    assert ca.challtestsrv_url is not None
    state, hook_log = tmp_path / "state", tmp_path / "hook.log"
    monkeypatch.setenv("CHALLTESTSRV_URL", ca.challtestsrv_url)  # for the hook program
    monkeypatch.setenv("HOOK_LOG", str(hook_log))
    http = run_main(
        capsys,
        "issue",
        HTTP_NAME,
        "--out",
        str(tmp_path / "http"),
        "--json",
        *ca_args(ca, state),
        *http01_args(ca),
    )
    assert http.returncode == 0, http.stderr
    dns = run_main(
        capsys,
        "issue",
        DNS_NAME,
        f"*.{DNS_NAME}",  # a wildcard: only dns-01 can renew it
        "--out",
        str(tmp_path / "dns"),
        "--json",
        "--challenge",
        "dns-01",
        "--dns-hook",
        str(dns_hook(tmp_path)),
        "--dns-propagation-nameserver",
        f"127.0.0.1:{ca.dns_port}",
        "--dns-propagation-timeout",
        "20",
        *ca_args(ca, state),
    )
    assert dns.returncode == 0, dns.stderr
    alpn = run_main(
        capsys,
        "issue",
        ALPN_NAME,
        "--out",
        str(tmp_path / "alpn"),
        "--json",
        "--challenge",
        "tls-alpn-01",
        "--tls-alpn-01-listen",
        f"127.0.0.1:{ca.tls_port}",
        *ca_args(ca, state),
    )
    assert alpn.returncode == 0, alpn.stderr
    # Stored as issued, with no secret and only what each type uses.
    dns_settings = record_of(state, ca.directory_url, DNS_NAME).challenge
    assert dns_settings is not None
    assert (dns_settings.challenge, dns_settings.dns_hook) == (
        "dns-01",
        str(tmp_path / "dns-hook.py"),
    )
    assert dns_settings.dns_propagation_nameservers == (f"127.0.0.1:{ca.dns_port}",)
    assert dns_settings.http_01_listen is None
    http_settings = record_of(state, ca.directory_url, HTTP_NAME).challenge
    assert http_settings == StoredChallenge("http-01", http_01_listen=f"127.0.0.1:{ca.http_port}")
    # status shows them (what a bare renew will do)
    shown = one_json(run_main(capsys, "status", "--json", "--state-dir", str(state)))
    challenges = {c["name"]: c["challenge"] for c in shown["certificates"]}
    assert challenges[DNS_NAME]["challenge"] == "dns-01"
    assert challenges[HTTP_NAME]["http_01_listen"] == f"127.0.0.1:{ca.http_port}"
    assert challenges[ALPN_NAME]["tls_alpn_01_listen"] == f"127.0.0.1:{ca.tls_port}"
    before = {"http": http_validations(ca, HTTP_NAME), "dns": presented(hook_log)}
    serials = {n: serial_of(tmp_path / n) for n in ("http", "dns", "alpn")}

    # every renewal below is validated for real (tests/cli/no_reuse.py: Pebble's 1 % reuse)
    assert deactivate_valid_authorizations(ca, state) == 4
    # cron's renew: no --directory, no --ca-bundle, no challenge option at all
    bare = run_main(capsys, "renew", "--force", "--json", "--state-dir", str(state))

    assert bare.returncode == 0, bare.stderr
    found = {c["name"]: c["status"] for c in one_json(bare)["certificates"]}
    assert found == {HTTP_NAME: "renewed", DNS_NAME: "renewed", ALPN_NAME: "renewed"}
    assert http_validations(ca, HTTP_NAME) == before["http"] + 1  # through its http-01
    assert presented(hook_log) == before["dns"] + 2  # the name and its wildcard, by dns-01
    # tls-alpn-01 on its port: no http-01 validation, no TXT value for it
    assert http_validations(ca, DNS_NAME) == http_validations(ca, ALPN_NAME) == 0
    assert ALPN_NAME not in hook_log.read_text()
    for n in ("http", "dns", "alpn"):
        assert serial_of(tmp_path / n) != serials[n]

    # The stored --http-01-listen is used: moved where Pebble does not look, it fails ...
    dead = f"127.0.0.1:{free_port(not_=ca.http_port)}"
    record = record_of(state, ca.directory_url, HTTP_NAME)
    assert record.challenge is not None
    moved = dataclasses.replace(
        record, challenge=dataclasses.replace(record.challenge, http_01_listen=dead)
    )
    save_record(state, ca.directory_url, moved)
    assert deactivate_valid_authorizations(ca, state) == 4
    stored_used = run_main(
        capsys,
        "renew",
        HTTP_NAME,
        "--force",
        "--json",
        "--max-wait",
        "0",
        "--state-dir",
        str(state),
    )
    assert stored_used.returncode == 1, stored_used.stderr
    (entry,) = one_json(stored_used)["certificates"]
    assert entry["status"] == "failed"

    # ... and --http-01-listen given to renew replaces it, for this run only.
    deactivate_valid_authorizations(ca, state)
    overridden = run_main(
        capsys, "renew", HTTP_NAME, "--force", "--json", "--state-dir", str(state), *http01_args(ca)
    )
    assert overridden.returncode == 0, overridden.stderr
    (entry,) = one_json(overridden)["certificates"]
    assert entry["status"] == "renewed"
    assert record_of(state, ca.directory_url, HTTP_NAME).challenge == moved.challenge
    # The environment counts as given too; the dns-01 certificate keeps its own settings.
    monkeypatch.setenv("ACMECERTS_HTTP_01_LISTEN", f"127.0.0.1:{ca.http_port}")
    assert deactivate_valid_authorizations(ca, state) == 1
    hooks_before = presented(hook_log)
    from_env = run_main(capsys, "renew", "--force", "--json", "--state-dir", str(state))
    assert from_env.returncode == 0, from_env.stderr
    found = {c["name"]: c["status"] for c in one_json(from_env)["certificates"]}
    assert found == {HTTP_NAME: "renewed", DNS_NAME: "renewed", ALPN_NAME: "renewed"}
    assert presented(hook_log) == hooks_before + 2


def test_a_tsig_secret_is_never_stored_and_its_absence_at_renew_is_exit_2_before_ordering(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    issued = run_main(
        capsys,
        "issue",
        "current.example.test",
        "--out",
        str(tmp_path / "current"),
        *ca_args(pebble, state),
        *http01_args(pebble),
    )
    assert issued.returncode == 0, issued.stderr
    # What issue stores for --dns-rfc2136-server: the server and the key's name, not its secret.
    options = ChallengeOptions(
        challenge="dns-01",
        dns_rfc2136_server="127.0.0.1:5399",
        dns_tsig_key="acme-key.",
        dns_tsig_secret=SECRET,
        dns_propagation_timeout=0,
    )
    plan = plan_challenge(options, parse_identifiers(["tsig.example.test"]))
    settings = stored_challenge(options, plan)
    record = CertificateRecord(
        name="tsig.example.test",
        identifiers=("tsig.example.test",),
        out=str(tmp_path / "tsig"),
        challenge=settings,
    )
    assert SECRET not in json.dumps(record.to_json())
    assert settings.dns_tsig_key == "acme-key."
    # A certificate asked for with those settings (never issued yet: renew issues it).
    save_record(state, pebble.directory_url, record)
    seen = len(pebble.requests_seen())

    result = run_main(capsys, "renew", "--json", "--state-dir", str(state))

    assert result.returncode == 2, (result.stdout, result.stderr)
    found = {c["name"]: c for c in one_json(result)["certificates"]}
    assert found["current.example.test"]["status"] == "current"
    refused = found["tsig.example.test"]
    assert refused["status"] == "failed"
    assert "TSIG secret" in refused["error"]
    assert "ACMECERTS_DNS_TSIG_SECRET" in refused["error"]
    assert "nothing was ordered" in refused["error"]
    assert pebble.requests_seen()[seen:].count(NEW_ORDER) == 0


# -- the rule, without a CA ---------------------------------------------------------------------


def stored_record(settings: StoredChallenge, *, webroot: str | None = None) -> CertificateRecord:
    return CertificateRecord(
        name="a.example", identifiers=("a.example",), webroot=webroot, challenge=settings
    )


def test_renewal_options_stored_given_and_records_without_settings(tmp_path: Path) -> None:
    command = ChallengeOptions(http_01_listen="127.0.0.1:8080", dns_tsig_secret=SECRET)
    dns = stored_record(
        StoredChallenge(
            "dns-01",
            dns_hook="/usr/local/bin/dns",
            dns_propagation_nameservers=("192.0.2.53",),
            dns_propagation_timeout=30.0,
        )
    )
    # Nothing given: the stored settings (and the command's secret, never stored).
    options, stored = renewal_options(command, (), dns)
    assert stored
    assert (options.challenge, options.dns_hook) == ("dns-01", "/usr/local/bin/dns")
    assert options.dns_propagation_nameservers == ("192.0.2.53",)
    assert options.dns_propagation_timeout == 30.0
    assert options.dns_tsig_secret == SECRET
    # Each option given replaces its stored value; one of a pair drops the other.
    given = ChallengeOptions(dns_rfc2136_server="192.0.2.1", dns_propagation_timeout=5.0)
    options, _ = renewal_options(given, {"dns_rfc2136_server", "dns_propagation_timeout"}, dns)
    assert (options.dns_hook, options.dns_rfc2136_server) == (None, "192.0.2.1")
    assert options.dns_propagation_timeout == 5.0
    assert options.dns_propagation_nameservers == ("192.0.2.53",)  # not given: stored

    web = stored_record(StoredChallenge("http-01"), webroot="/srv/www")
    options, _ = renewal_options(command, (), web)
    assert (options.webroot, options.http_01_listen) == (Path("/srv/www"), "[::]:80")
    options, _ = renewal_options(command, {"http_01_listen"}, web)
    assert (options.webroot, options.http_01_listen) == (None, "127.0.0.1:8080")
    moved = ChallengeOptions(challenge="tls-alpn-01")
    options, _ = renewal_options(moved, {"challenge"}, web)
    assert (options.challenge, options.webroot) == ("tls-alpn-01", None)

    # A record written before the settings were stored: the command's options, as always,
    # its stored webroot unless one is given.
    old = CertificateRecord(name="a.example", identifiers=("a.example",))
    assert renewal_options(command, (), old) == (command, False)
    assert renewal_options(command, (), None) == (command, False)
    old_web = dataclasses.replace(old, webroot="/srv/www")
    options, stored = renewal_options(command, {"http_01_listen"}, old_web)
    assert (options.webroot, stored) == (Path("/srv/www"), False)
    root = tmp_path / "www"
    options, _ = renewal_options(dataclasses.replace(command, webroot=root), {"webroot"}, old_web)
    assert options.webroot == root


def test_a_record_round_trips_its_settings_and_bad_ones_are_a_storage_error() -> None:
    settings = StoredChallenge(
        "dns-01",
        dns_rfc2136_server="192.0.2.1:53",
        dns_tsig_key="k.",
        dns_tsig_algorithm="hmac-sha256",
        dns_propagation_nameservers=("192.0.2.53",),
        dns_propagation_timeout=20.0,
    )
    record = stored_record(settings)
    document = json.loads(json.dumps(record.to_json()))
    assert CertificateRecord.from_json(document, "x.json") == record
    # written by an earlier acmecerts: no settings
    del document["challenge"]
    assert CertificateRecord.from_json(document, "x.json").challenge is None
    from acmecerts.errors import StorageError

    with pytest.raises(StorageError, match="stored challenge settings"):
        CertificateRecord.from_json({**document, "challenge": {"challenge": 1}}, "x.json")


@pytest.mark.parametrize("timeout", ["NaN", "Infinity", "-1", "true", '"20"'])
def test_a_stored_propagation_timeout_that_is_no_duration_is_a_storage_error(
    timeout: str,
) -> None:
    # Python's json reads NaN and Infinity: the record goes through the one duration parser
    document = json.loads(
        '{"challenge": "dns-01", "dns_propagation_timeout": %s}' % timeout  # noqa: UP031
    )
    with pytest.raises(StorageError, match=r"x\.json: the stored challenge settings are not valid"):
        StoredChallenge.from_json(document, "x.json")
    taken = StoredChallenge.from_json({"challenge": "dns-01", "dns_propagation_timeout": 0}, "x")
    assert taken.dns_propagation_timeout == 0.0
    assert type(taken.dns_propagation_timeout) is float
