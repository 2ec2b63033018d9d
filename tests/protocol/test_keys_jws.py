"""Keys, JWS request bodies, EAB and key-change payloads, key authorizations, CSRs."""

from __future__ import annotations

import base64
import functools
import hashlib
import json

import pytest
from acme import jws as acme_jws
from cryptography import x509
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from acmecerts.errors import BadServerResponse, InvalidInput
from acmecerts.protocol.challenges import dns01_txt_value, key_authorization, validate_token
from acmecerts.protocol.csr import build_csr
from acmecerts.protocol.identifiers import parse_identifiers
from acmecerts.protocol.jws import eab_binding, key_change_inner, sign_request
from acmecerts.protocol.keys import AccountKey, KeyType, generate_private_key, load_private_key


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _verify(key: AccountKey, jws: dict[str, str]) -> None:
    signing_input = f"{jws['protected']}.{jws['payload']}".encode()
    sig = _b64d(jws["signature"])
    pub = key.private_key.public_key()
    if isinstance(pub, ec.EllipticCurvePublicKey):
        half = len(sig) // 2
        der = encode_dss_signature(
            int.from_bytes(sig[:half], "big"), int.from_bytes(sig[half:], "big")
        )
        digest = hashes.SHA256() if pub.curve.key_size == 256 else hashes.SHA384()
        pub.verify(der, signing_input, ec.ECDSA(digest))
    else:
        assert isinstance(pub, rsa.RSAPublicKey)
        pub.verify(sig, signing_input, padding.PKCS1v15(), hashes.SHA256())


@pytest.mark.parametrize(
    ("key_type", "alg"),
    [(KeyType.EC256, "ES256"), (KeyType.EC384, "ES384"), (KeyType.RSA2048, "RS256")],
)
def test_signed_request_has_acme_protected_header(key_type: KeyType, alg: str) -> None:
    key = AccountKey.generate(key_type)
    body = json.loads(
        sign_request(key, url="https://ca/acct", nonce="bm9uY2U", payload={"a": 1}, kid=None)
    )
    protected = json.loads(_b64d(body["protected"]))
    assert protected["alg"] == alg
    assert protected["url"] == "https://ca/acct"
    assert protected["nonce"] == "bm9uY2U"
    assert protected["jwk"] == key.public_jwk_json
    assert "kid" not in protected
    assert json.loads(_b64d(body["payload"])) == {"a": 1}
    _verify(key, body)


def test_kid_form_and_post_as_get() -> None:
    key = AccountKey.generate()
    body = json.loads(
        sign_request(key, url="https://ca/o/1", nonce="bm9uY2U", payload=None, kid="https://ca/a/9")
    )
    protected = json.loads(_b64d(body["protected"]))
    assert protected["kid"] == "https://ca/a/9"
    assert "jwk" not in protected
    assert body["payload"] == ""
    _verify(key, body)


def test_thumbprint_matches_rfc7638() -> None:
    key = AccountKey.generate()
    jwk = key.public_jwk_json
    canonical = json.dumps(
        {"crv": jwk["crv"], "kty": "EC", "x": jwk["x"], "y": jwk["y"]}, separators=(",", ":")
    )
    expected = base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest())
    assert key.thumbprint == expected.rstrip(b"=").decode()


def test_account_key_repr_hides_secret_and_pem_round_trips() -> None:
    key = AccountKey.generate()
    assert "PRIVATE" not in repr(key)
    again = AccountKey.from_pem(key.to_pem())
    assert again == key
    assert hash(again) == hash(key)


def test_bad_keys_are_refused() -> None:
    with pytest.raises(InvalidInput):
        load_private_key(b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    with pytest.raises(InvalidInput):
        KeyType.parse("dsa1024")
    assert KeyType.parse("EC384") is KeyType.EC384


def test_eab_binding_is_hmac_over_account_jwk() -> None:
    key = AccountKey.generate()
    mac = base64.urlsafe_b64encode(b"k" * 32).rstrip(b"=").decode()
    eab = eab_binding(key, kid="kid-1", hmac_key_b64url=mac, url="https://ca/new-acct")
    protected = json.loads(_b64d(eab["protected"]))
    assert protected == {"alg": "HS256", "kid": "kid-1", "url": "https://ca/new-acct"}
    assert json.loads(_b64d(eab["payload"])) == key.public_jwk_json
    h = hmac.HMAC(b"k" * 32, hashes.SHA256())
    h.update(f"{eab['protected']}.{eab['payload']}".encode())
    h.verify(_b64d(eab["signature"]))
    with pytest.raises(InvalidInput):
        eab_binding(key, kid="k", hmac_key_b64url=mac, url="u", algorithm="none")
    with pytest.raises(InvalidInput):
        eab_binding(key, kid="k", hmac_key_b64url="", url="u")


def test_key_change_inner_is_signed_by_new_key() -> None:
    old, new = AccountKey.generate(), AccountKey.generate()
    inner = key_change_inner(
        old_key=old, new_key=new, account_url="https://ca/a/1", url="https://ca/kc"
    )
    protected = json.loads(_b64d(inner["protected"]))
    assert protected["jwk"] == new.public_jwk_json
    assert "nonce" not in protected
    assert json.loads(_b64d(inner["payload"])) == {
        "account": "https://ca/a/1",
        "oldKey": old.public_jwk_json,
    }
    _verify(new, inner)


def test_key_authorization_and_dns_value() -> None:
    token = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA"
    thumb = "9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI"
    assert key_authorization(token, thumb) == f"{token}.{thumb}"
    # RFC 8555 §8.4 example digest shape: 43 base64url characters
    value = dns01_txt_value(f"{token}.{thumb}")
    assert len(value) == 43
    assert (
        value
        == base64.urlsafe_b64encode(hashlib.sha256(f"{token}.{thumb}".encode()).digest())
        .rstrip(b"=")
        .decode()
    )


@pytest.mark.parametrize("token", ["../../etc/passwd", "short", "a/b" * 10, "", "x" * 300, None, 7])
def test_hostile_tokens_are_refused(token: object) -> None:
    with pytest.raises(BadServerResponse):
        validate_token(token)


@pytest.mark.parametrize("key_type", list(KeyType))
def test_csr_has_all_names_and_is_signed(key_type: KeyType) -> None:
    key = generate_private_key(key_type)
    idents = parse_identifiers(["www.example.com", "example.com", "192.0.2.7"])
    csr = x509.load_der_x509_csr(build_csr(idents, key))
    assert csr.is_signature_valid
    san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["www.example.com", "example.com"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["192.0.2.7"]
    cn = csr.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    assert cn[0].value == "www.example.com"


def test_csr_without_short_name_has_no_common_name() -> None:
    long_name = ("a" * 60) + ".example.com"
    csr = x509.load_der_x509_csr(build_csr(parse_identifiers([long_name]), generate_private_key()))
    assert csr.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME) == []


NONCE = "2B2Ew3YB9jLhrCrsyTZAx0Xh1k4JbK0VlNhHZb4gQAk"


@functools.cache
def _account_key(key_type: KeyType) -> AccountKey:
    return AccountKey.generate(key_type)  # one per type: RSA 4096 takes a while


def _acme_jws_reference(
    key: AccountKey, *, url: str, nonce: str | None, payload: dict[str, str] | None, kid: str | None
) -> bytes:
    """What sign_request produced through acme.jws before it built the JWS itself."""
    body = b"" if payload is None else json.dumps(payload, separators=(",", ":")).encode()
    nonce_bytes = None if nonce is None else _b64d(nonce)
    signed = acme_jws.JWS.sign(body, key.jwk, key.algorithm, nonce_bytes, url=url, kid=kid)
    text: str = signed.json_dumps()
    return text.encode()


@pytest.mark.parametrize("key_type", list(KeyType))
@pytest.mark.parametrize("kid", [None, "https://ca/acct/1", 'https://ca/acct/\u00e9"\\'])
@pytest.mark.parametrize("payload", [None, {"csr": "MIIB", "note": 'caf\u00e9 "q"'}])
@pytest.mark.parametrize("nonce", [NONCE, None])
def test_signed_request_equals_acme_jws_and_verifies_with_josepy(
    key_type: KeyType, kid: str | None, payload: dict[str, str] | None, nonce: str | None
) -> None:
    key = AccountKey.generate(key_type)
    url = 'https://ca/order/\u00e9?x="1"'
    ours = sign_request(key, url=url, nonce=nonce, payload=payload, kid=kid)
    reference = _acme_jws_reference(key, url=url, nonce=nonce, payload=payload, kid=kid)
    parsed, expected = json.loads(ours), json.loads(reference)
    assert list(parsed) == ["protected", "signature", "payload"]
    assert parsed["protected"] == expected["protected"]  # same header bytes, same order
    assert parsed["payload"] == expected["payload"]
    if key_type.value.startswith("rsa"):
        assert ours == reference  # PKCS#1 v1.5 is deterministic: the whole body is equal
    else:
        assert len(ours) == len(reference)  # ECDSA is randomised: same shape
    jws = acme_jws.JWS.json_loads(ours)
    if kid is None:
        assert jws.verify()  # with the embedded jwk
    assert jws.verify(key.jwk.public_key())
    _verify(key, parsed)
    header = jws.signature.combined
    assert header.alg == key.algorithm
    assert header.url == url
    assert header.kid == kid
    assert (header.nonce is None) if nonce is None else (header.nonce == _b64d(nonce))


@pytest.mark.parametrize(
    "nonce",
    ["", "a", "abcde", "bm9u Y2U", "bm9uY2U=", "bm9uY2U\n", "bm9u+2U/", "n\u00f6nce", "bm9u.2U"],
)
def test_malformed_nonce_is_a_bad_server_response(nonce: str) -> None:
    with pytest.raises(BadServerResponse, match="nonce"):
        sign_request(AccountKey.generate(), url="https://ca/x", nonce=nonce, payload=None, kid="k")


def test_account_key_precomputes_what_signing_needs() -> None:
    key = AccountKey.generate(KeyType.EC384)
    assert key.jws_alg == "ES384"
    assert json.loads(key.jwk_header_json) == key.public_jwk_json
    signature = key.jws_sign(b"signing input")
    assert len(signature) == 96  # r || s, 48 octets each (RFC 7518 §3.4)
    rsa_key = AccountKey.generate(KeyType.RSA2048)
    assert rsa_key.jws_alg == "RS256"
    assert len(rsa_key.jws_sign(b"x")) == 256
