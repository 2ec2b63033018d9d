"""PEM chain parsing, certificate metadata, and the key/name match check."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts.errors import BadServerResponse, CertificateMismatch
from acmecerts.protocol.certificate import (
    certificate_info,
    check_certificate_matches,
    parse_pem_chain,
)
from acmecerts.protocol.identifiers import parse_identifiers
from acmecerts.protocol.keys import generate_private_key

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def _cert(
    subject_key: ec.EllipticCurvePrivateKey,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    cn: str,
    issuer_cn: str,
    names: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_cn)]))
        .public_key(subject_key.public_key())
        .serial_number(0xABC123)
        .not_valid_before(NOW)
        .not_valid_after(NOW + dt.timedelta(days=90))
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(*certs: x509.Certificate) -> str:
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


@pytest.fixture
def chain_parts() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, x509.Certificate]:
    root_key = ec.generate_private_key(ec.SECP256R1())
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("a.example"),
        x509.IPAddress(ipaddress.ip_address("192.0.2.1")),
    ]
    leaf = _cert(leaf_key, root_key, cn="a.example", issuer_cn="Test Intermediate", names=names)
    inter = _cert(root_key, root_key, cn="Test Intermediate", issuer_cn="Test Root")
    return leaf_key, leaf, inter


def test_chain_parsing_and_info(
    chain_parts: tuple[ec.EllipticCurvePrivateKey, x509.Certificate, x509.Certificate],
) -> None:
    leaf_key, leaf, inter = chain_parts
    chain = parse_pem_chain("garbage before\n" + _pem(leaf, inter) + "trailing\n")
    assert len(chain.certificates) == 2
    assert chain.leaf_pem == _pem(leaf)
    assert chain.intermediates_pem == _pem(inter)
    assert chain.root_issuer_name == "Test Root"
    info = certificate_info(chain.leaf)
    assert info.names == ("a.example", "192.0.2.1")
    assert info.serial == "abc123"
    assert info.lifetime == dt.timedelta(days=90)
    check_certificate_matches(
        chain, key=leaf_key, identifiers=parse_identifiers(["192.0.2.1", "a.example"])
    )


def test_mismatches_are_detected(
    chain_parts: tuple[ec.EllipticCurvePrivateKey, x509.Certificate, x509.Certificate],
) -> None:
    leaf_key, leaf, inter = chain_parts
    chain = parse_pem_chain(_pem(leaf, inter))
    with pytest.raises(CertificateMismatch, match="key"):
        check_certificate_matches(
            chain,
            key=generate_private_key(),
            identifiers=parse_identifiers(["a.example", "192.0.2.1"]),
        )
    with pytest.raises(CertificateMismatch, match="names"):
        check_certificate_matches(
            chain, key=leaf_key, identifiers=parse_identifiers(["a.example", "b.example"])
        )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a certificate",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ],
)
def test_broken_chains(data: bytes) -> None:
    with pytest.raises(BadServerResponse):
        parse_pem_chain(data, url="https://ca/cert/1")


def test_overlong_chain_is_refused(
    chain_parts: tuple[ec.EllipticCurvePrivateKey, x509.Certificate, x509.Certificate],
) -> None:
    _, leaf, _ = chain_parts
    with pytest.raises(BadServerResponse, match="too long"):
        parse_pem_chain(_pem(*([leaf] * 11)))


def test_chain_pem_is_cryptographys_encoding_whatever_the_layout(
    chain_parts: tuple[ec.EllipticCurvePrivateKey, x509.Certificate, x509.Certificate],
) -> None:
    _, leaf, inter = chain_parts
    canonical = _pem(leaf, inter)
    assert parse_pem_chain(canonical).pem == canonical
    # CRLF line ends, 76-character lines: the PEM parser's path, same normalised text
    crlf = canonical.replace("\n", "\r\n")
    assert parse_pem_chain(crlf).pem == canonical
    wide = "".join(
        "-----BEGIN CERTIFICATE-----\n"
        + base64.encodebytes(c.public_bytes(serialization.Encoding.DER)).decode()
        + "-----END CERTIFICATE-----\n"
        for c in (leaf, inter)
    )
    chain = parse_pem_chain(wide.encode())
    assert chain.pem == canonical
    assert chain.certificates == (leaf, inter)


@pytest.mark.parametrize(
    "body",
    [
        "\nMIIB!!!!\n",  # not base64
        "\nAAAA\n",  # base64, not DER
        "\n" + "A" * 65 + "\n",  # bad padding
        "",
    ],
)
def test_blocks_that_do_not_decode_are_bad_server_responses(body: str) -> None:
    data = f"-----BEGIN CERTIFICATE-----{body}-----END CERTIFICATE-----\n"
    with pytest.raises(BadServerResponse, match="unparseable"):
        parse_pem_chain(data, url="https://ca/cert/1")


def test_key_of_another_type_is_a_mismatch(
    chain_parts: tuple[ec.EllipticCurvePrivateKey, x509.Certificate, x509.Certificate],
) -> None:
    leaf_key, leaf, inter = chain_parts
    chain = parse_pem_chain(_pem(leaf, inter))
    names = parse_identifiers(["a.example", "192.0.2.1"])
    with pytest.raises(CertificateMismatch, match="key"):
        check_certificate_matches(chain, key=generate_private_key("rsa2048"), identifiers=names)
    with pytest.raises(CertificateMismatch, match="key"):
        check_certificate_matches(chain, key=generate_private_key("ec384"), identifiers=names)
    check_certificate_matches(chain, key=leaf_key, identifiers=names)
