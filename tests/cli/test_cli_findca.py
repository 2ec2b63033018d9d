"""``delete``, ``revoke`` and ``account show`` find their CA in the state directory.

Against the session Pebble 2.10: certificates are issued with ``--directory`` and
``--ca-bundle``; the commands then run with neither, and must act at the CA (and with
the CA bundle) stored for the certificate. A second CA is the fault proxy's URL in front
of the same Pebble (another directory URL: another CA directory in the state).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import (
    assert_one_line_error,
    ca_args,
    clean_environment,
    http01_args,
    one_json,
    run_cli,
    run_main,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.faults.proxy import FaultProxy

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)

REVOKE = ("POST", "/revoke-cert")


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)


def issue(pebble: PebbleServer, state: Path, *names: str, directory: str | None = None) -> None:
    result = run_cli(
        "issue",
        "--json",
        *ca_args(pebble, state, directory=directory),
        *http01_args(pebble),
        *names,
    )
    assert result.returncode == 0, result.stderr


def revocations(pebble: PebbleServer) -> int:
    return sum(1 for seen in pebble.requests_seen() if seen == REVOKE)


def test_commands_without_directory_act_at_the_certificates_ca(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    issue(pebble, state, "kept.findca.test")
    issue(pebble, state, "gone.findca.test")
    issue(pebble, state, "file.findca.test")
    only_state = ("--state-dir", str(state), "--json")

    shown = run_cli("account", "show", *only_state)
    assert shown.returncode == 0, shown.stderr
    account = one_json(shown)
    assert account["status"] == "show"
    assert account["account_status"] == "valid"
    assert account["url"].startswith(pebble.directory_url.rsplit("/", 1)[0])

    before = revocations(pebble)
    revoked = run_main(capsys, "revoke", "kept.findca.test", *only_state)
    assert revoked.returncode == 0, revoked.stderr
    assert one_json(revoked)["stored_name"] == "kept.findca.test"
    assert revocations(pebble) == before + 1

    # A file: the CA whose state holds a certificate with its serial.
    exported = state / "certificates" / "file.findca.test" / "cert.pem"
    by_file = run_main(capsys, "revoke", str(exported), *only_state)
    assert by_file.returncode == 0, by_file.stderr
    assert one_json(by_file)["stored_name"] == "file.findca.test"
    assert revocations(pebble) == before + 2

    deleted = run_main(capsys, "delete", "gone.findca.test", "--revoke", "--yes", *only_state)
    assert deleted.returncode == 0, deleted.stderr
    (result,) = one_json(deleted)["certificates"]
    assert (result["status"], result["revocation"]) == ("deleted", "revoked")
    assert revocations(pebble) == before + 3

    status = one_json(run_main(capsys, "status", *only_state))
    assert [(c["name"], c["status"]) for c in status["certificates"]] == [
        ("file.findca.test", "revoked"),
        ("kept.findca.test", "revoked"),
    ]


def test_a_name_at_two_cas_needs_directory(
    pebble: PebbleServer, proxy: FaultProxy, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    name = "twice.findca.test"
    issue(pebble, state, name)
    issue(pebble, state, name, directory=proxy.directory_url)
    only_state = ("--state-dir", str(state))
    sent = len(pebble.requests_seen())

    for command in (
        ("delete", name, "--revoke", "--yes"),
        ("revoke", name),
        ("account", "show"),
    ):
        refused = run_main(capsys, *command, *only_state)
        line = assert_one_line_error(refused, 2)
        assert "several CAs" in line
        assert pebble.directory_url in line
        assert proxy.directory_url in line
        assert "--directory" in line
    assert len(pebble.requests_seen()) == sent  # nothing was sent
    assert len(one_json(run_main(capsys, "status", "--json", *only_state))["certificates"]) == 2

    # --directory narrows (its stored --ca-bundle is used: none is given).
    narrowed = run_main(
        capsys, "delete", name, "--revoke", "--yes", "--json", "--directory",
        proxy.directory_url, *only_state,
    )  # fmt: skip
    assert narrowed.returncode == 0, narrowed.stderr
    assert one_json(narrowed)["certificates"][0]["revocation"] == "revoked"
    assert len(proxy.requests_to("/revoke-cert")) == 1
    left = one_json(run_main(capsys, "status", "--json", *only_state))["certificates"]
    assert [(c["name"], c["directory"]) for c in left] == [(name, pebble.directory_url)]

    # Now the name is at one CA only: no --directory needed.
    before = revocations(pebble)
    revoked = run_main(capsys, "revoke", name, "--json", *only_state)
    assert revoked.returncode == 0, revoked.stderr
    assert revocations(pebble) == before + 1
    shown = run_main(capsys, "account", "show", "--json", "--directory", proxy.directory_url,
                     *only_state)  # fmt: skip
    assert shown.returncode == 0, shown.stderr


def _other_root(tmp_path: Path) -> Path:
    """A self-signed CA certificate that did not sign Pebble's (a wrong bundle)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not pebble's root")])
    now = _dt.datetime.now(_dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(days=1))
        .not_valid_after(now + _dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "other-root.pem"
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


def test_an_untrusted_ca_names_the_ca_bundle_option(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    issue(pebble, state, "tls.findca.test")
    # --directory too: the message alone is tested here (finding the CA is, above).
    wrong = (
        *("--directory", pebble.directory_url, "--ca-bundle", str(_other_root(tmp_path))),
        *("--state-dir", str(state)),
    )

    refused = run_cli("revoke", "tls.findca.test", *wrong)
    line = assert_one_line_error(refused, 1)
    assert "TLS certificate verification" in line
    assert "--ca-bundle" in line
    assert "ca_bundle" not in line

    deleted = run_main(capsys, "delete", "tls.findca.test", "--revoke", "--yes", "--json", *wrong)
    assert deleted.returncode == 1
    (result,) = one_json(deleted)["certificates"]
    assert result["status"] == "failed"
    assert "--ca-bundle" in result["error"]
    assert "ca_bundle" not in result["error"]
