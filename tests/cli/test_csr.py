"""``issue --csr FILE`` and ``AcmeClient.issue(csr=...)``: the user's own CSR, against real
Pebble 2.10. The certificate is for the CSR's key; acmecerts never has a private key."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import ca_args, clean_environment, http01_args, one_json, run_cli, run_main
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts import AcmeClient, Http01Server, InvalidInput
from acmecerts.protocol.csr import parse_csr

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)

_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
FINALIZE = ("POST", "/finalize-order/")


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # Pebble is trusted by --ca-bundle only


def _csr(
    names: list[str], *, common_name: str | None = None
) -> tuple[ec.EllipticCurvePrivateKey, x509.CertificateSigningRequest]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)] if common_name else []
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(subject))
    if names:
        sans = x509.SubjectAlternativeName([x509.DNSName(n) for n in names])
        builder = builder.add_extension(sans, critical=False)
    return key, builder.sign(key, hashes.SHA256())


def _leaf(out: Path) -> x509.Certificate:
    (leaf,) = x509.load_pem_x509_certificates((out / "cert.pem").read_bytes())
    return leaf


def test_issue_csr_certifies_the_csr_key_and_writes_no_private_key(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    names = ["one.csr.example.test", "two.csr.example.test"]
    key, csr = _csr(names, common_name=names[0])
    csr_file = tmp_path / "request.pem"
    csr_file.write_bytes(csr.public_bytes(serialization.Encoding.PEM))
    common = [*ca_args(pebble, state), *http01_args(pebble)]

    issued = run_cli("issue", "--csr", str(csr_file), "--out", str(out), *common)
    assert issued.returncode == 0, issued.stderr
    leaf = _leaf(out)
    assert leaf.public_key().public_bytes(*_SPKI) == key.public_key().public_bytes(*_SPKI)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == set(names)
    assert not (out / "privkey.pem").exists()
    assert {p.name for p in out.iterdir() if not p.name.startswith(".")} == {
        "cert.pem",
        "chain.pem",
        "fullchain.pem",
    }
    assert "the key stays with you" in issued.stdout
    # not stored: nothing for `status` or `renew`
    status = run_main(capsys, "status", "--json", *ca_args(pebble, state))
    assert status.returncode == 0, status.stderr
    assert one_json(status)["certificates"] == []

    # DER works too; NAME... may repeat the CSR's names (in any order)
    der_file = tmp_path / "request.der"
    der_file.write_bytes(csr.public_bytes(serialization.Encoding.DER))
    again = run_main(
        capsys,
        "issue",
        *reversed(names),
        "--csr",
        str(der_file),
        "--out",
        str(out),
        "--json",
        *common,
    )
    assert again.returncode == 0, again.stderr
    document = one_json(again)
    assert document["private_key"] is None
    assert document["managed"] is False
    assert format(_leaf(out).serial_number, "x") != format(leaf.serial_number, "x")
    assert _leaf(out).public_key().public_bytes(*_SPKI) == key.public_key().public_bytes(*_SPKI)


def test_a_bad_csr_is_refused_before_anything_is_sent(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    common = [*ca_args(pebble, state), *http01_args(pebble)]
    _, csr = _csr(["good.csrbad.example.test"])
    der = csr.public_bytes(serialization.Encoding.DER)
    tampered = der.replace(b"good.csrbad", b"evil.csrbad")
    assert tampered != der
    parse_csr(der)  # the untampered one is fine
    cases = {
        "tampered.der": tampered,
        "nonames.der": _csr([])[1].public_bytes(serialization.Encoding.DER),
        "garbage.der": b"not a csr",
    }
    seen = len(pebble.requests_seen())
    for filename, data in cases.items():
        path = tmp_path / filename
        path.write_bytes(data)
        refused = run_main(capsys, "issue", "--csr", str(path), "--out", str(out), *common)
        assert refused.returncode == 2, (filename, refused.stderr)
        assert str(path) in refused.stderr
    good = tmp_path / "good.der"
    good.write_bytes(der)
    other = run_main(
        capsys,
        "issue",
        "other.csrbad.example.test",
        "--csr",
        str(good),
        "--out",
        str(out),
        *common,
    )
    assert other.returncode == 2, other.stderr
    assert "differ" in other.stderr
    no_out = run_main(capsys, "issue", "--csr", str(good), *common)
    assert no_out.returncode == 2
    assert "--out" in no_out.stderr
    assert len(pebble.requests_seen()) == seen
    assert (
        "signature"
        in run_main(
            capsys, "issue", "--csr", str(tmp_path / "tampered.der"), "--out", str(out), *common
        ).stderr
    )
    assert not out.exists()


@pytest.mark.anyio
async def test_client_issue_with_a_csr(pebble: PebbleServer) -> None:
    names = ["lib.csr.example.test"]
    key, csr = _csr(names)
    pem = csr.public_bytes(serialization.Encoding.PEM)
    async with (
        AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client,
        Http01Server(host="127.0.0.1", port=pebble.http_port) as http01,
    ):
        with pytest.raises(InvalidInput, match="differ"):
            await client.issue(["other.csr.example.test"], solver=http01, csr=pem)
        with pytest.raises(InvalidInput, match="not both"):
            await client.issue(names, solver=http01, csr=pem, private_key=key)
        seen = len(pebble.requests_seen())
        issued = await client.issue([], solver=http01, csr=pem)
    assert FINALIZE in pebble.requests_seen()[seen:]
    assert issued.private_key_pem is None
    assert issued.names == tuple(names)
    leaf_key = issued.chain.leaf.public_key().public_bytes(*_SPKI)
    assert leaf_key == key.public_key().public_bytes(*_SPKI)
