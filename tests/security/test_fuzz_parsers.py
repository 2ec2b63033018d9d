"""Hostile input: every parser of data from the network or from disk, fuzzed with hypothesis.

The property is the same everywhere: a parser returns a well-typed value or raises an
:class:`~acmecerts.errors.AcmeCertsError` subclass (the one its docstring names), never
another exception, and never hangs (each call runs under :func:`bounded`). Inputs are
random JSON-ish values (``st.recursive``), random bytes and text, and *mutations* of valid
documents (fields dropped, replaced by random values, extra fields added), which reach the
deeper branches that random values alone rarely get to.

Crashes found by this file are pinned as plain regression tests at the end.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import re
import string
import tempfile
from collections.abc import Mapping
from typing import Any

import anyio
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from acmecerts._time import parse_retry_after, retry_after_from_detail
from acmecerts.errors import (
    AcmeCertsError,
    AcmeProblem,
    BadServerResponse,
    CertificateMismatch,
    InvalidIdentifier,
    InvalidInput,
    StorageError,
)
from acmecerts.protocol.ari import cert_id, load_certificate
from acmecerts.protocol.certificate import (
    CertificateChain,
    certificate_info,
    check_certificate_matches,
    parse_pem_chain,
)
from acmecerts.protocol.challenges import validate_token
from acmecerts.protocol.identifiers import Identifier, parse_identifier
from acmecerts.protocol.problems import problem_from_document, problem_from_response
from acmecerts.protocol.resources import (
    Account,
    Authorization,
    Challenge,
    Directory,
    Order,
    RenewalInfo,
    parse_account,
    parse_authorization,
    parse_challenge,
    parse_directory,
    parse_order,
    parse_renewal_info,
)
from acmecerts.ratelimit._state import LedgerState
from acmecerts.retry import AttemptState
from acmecerts.storage import FileStorage, KeyLayout, load_account_url
from acmecerts.transport._response import AcmeResponse, _parse_links
from tests.security._bounded import bounded, typed_or_success

NOW = dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC)
URL = "https://ca.test/acme/resource/1"
MAX_DELAY = dt.timedelta(days=30)

#: Examples per fuzz test: few enough for every test run; for a deeper run, e.g.
#: ``ACMECERTS_FUZZ_EXAMPLES=5000 python3 -m pytest tests/security/test_fuzz_parsers.py``.
EXAMPLES = int(os.environ.get("ACMECERTS_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # no "explain" phase: it re-runs a failure hundreds of times to annotate it
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
#: For the tests that build a certificate per example.
FUZZ_SLOW = settings(FUZZ, max_examples=max(10, EXAMPLES // 3))

# --------------------------------------------------------------------------- strategies

#: Strings a CA might plausibly put anywhere: statuses, URLs, dates, types, junk.
INTERESTING = st.sampled_from(
    [
        "",
        "valid",
        "pending",
        "processing",
        "ready",
        "invalid",
        "dns",
        "ip",
        "http-01",
        "dns-01",
        "*.example.com",
        "example.com",
        "192.0.2.1",
        "https://ca.test/x",
        "https://evil.test/x",
        "http://ca.test/x",
        "//evil.test/x",
        "../../etc/passwd",
        "/abs/path",
        "a\x00b",
        "2026-01-01T00:00:00Z",
        "2026-13-45T99:99:99Z",
        "9999-12-31T23:59:59Z",
        "0001-01-01T00:00:00+14:00",
        "not a date",
        "urn:ietf:params:acme:error:rateLimited",
        "urn:ietf:params:acme:error:badNonce",
        "mailto:a@example.com",
        "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0",
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | INTERESTING
)
#: Keys that ACME objects use, so random objects hit real branches too.
KEYS = st.text(max_size=12) | st.sampled_from(
    [
        "type",
        "value",
        "status",
        "url",
        "token",
        "error",
        "detail",
        "identifier",
        "identifiers",
        "subproblems",
        "authorizations",
        "finalize",
        "certificate",
        "challenges",
        "expires",
        "validated",
        "wildcard",
        "meta",
        "profiles",
        "suggestedWindow",
        "start",
        "end",
        "contact",
        "orders",
        "newNonce",
        "newAccount",
        "newOrder",
    ]
)
JSONISH: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=6,
)
OBJECTS = st.dictionaries(KEYS, JSONISH, max_size=6)
_DROP = object()


def mutated(value: Any) -> st.SearchStrategy[Any]:
    """``value``, with parts kept, dropped, replaced by random values, or extra keys added."""
    if isinstance(value, Mapping):
        fields = [
            st.tuples(st.just(k), st.one_of(mutated(v), st.just(_DROP), SCALARS, JSONISH))
            for k, v in value.items()
        ]

        def rebuild(parts: tuple[Any, ...]) -> dict[str, Any]:
            *pairs, extra = parts
            result = {k: v for k, v in pairs if v is not _DROP}
            result.update(extra)
            return result

        return st.tuples(*fields, st.dictionaries(KEYS, SCALARS, max_size=2)).map(rebuild)
    if isinstance(value, list):
        element = st.one_of(*(mutated(v) for v in value), JSONISH) if value else JSONISH
        return st.one_of(st.just(value), st.lists(element, max_size=len(value) + 2))
    return st.one_of(st.just(value), SCALARS)


PROBLEM = {
    "type": "urn:ietf:params:acme:error:compound",
    "detail": "several things failed",
    "status": 400,
    "identifier": {"type": "dns", "value": "example.com"},
    "subproblems": [
        {"type": "urn:ietf:params:acme:error:caa", "detail": "CAA forbids", "identifier": {}},
        {"type": "urn:ietf:params:acme:error:rateLimited", "detail": "retry after 2026-07-01"},
    ],
}
DIRECTORY = {
    "newNonce": "https://ca.test/nonce",
    "newAccount": "https://ca.test/account",
    "newOrder": "https://ca.test/order",
    "revokeCert": "https://ca.test/revoke",
    "keyChange": "https://ca.test/key-change",
    "renewalInfo": "https://ca.test/ari",
    "meta": {
        "termsOfService": "https://ca.test/tos",
        "website": "https://ca.test",
        "caaIdentities": ["ca.test"],
        "externalAccountRequired": False,
        "profiles": {"classic": "the default", "short": "six days"},
    },
}
ORDER = {
    "status": "pending",
    "expires": "2026-06-08T12:00:00Z",
    "identifiers": [{"type": "dns", "value": "example.com"}, {"type": "ip", "value": "192.0.2.1"}],
    "authorizations": ["https://ca.test/authz/1", "https://ca.test/authz/2"],
    "finalize": "https://ca.test/finalize/1",
    "certificate": "https://ca.test/cert/1",
    "error": PROBLEM,
    "profile": "classic",
    "replaces": "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE",
}
CHALLENGE = {
    "type": "http-01",
    "url": "https://ca.test/chall/1",
    "status": "pending",
    "token": "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0",
    "validated": "2026-06-01T12:00:00Z",
    "error": PROBLEM,
}
AUTHORIZATION = {
    "status": "pending",
    "expires": "2026-06-08T12:00:00Z",
    "identifier": {"type": "dns", "value": "example.com"},
    "wildcard": False,
    "challenges": [
        CHALLENGE,
        {"type": "dns-01", "url": "https://ca.test/chall/2", "status": "pending", "token": "x"},
    ],
}
ACCOUNT = {
    "status": "valid",
    "contact": ["mailto:a@example.com"],
    "orders": "https://ca.test/orders/1",
    "termsOfServiceAgreed": True,
    "key": {"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA"},
}
RENEWAL_INFO = {
    "suggestedWindow": {"start": "2026-07-01T00:00:00Z", "end": "2026-07-03T00:00:00Z"},
    "explanationURL": "https://ca.test/why",
}


def doc_or_junk(valid: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Mutations of a valid document, random objects, and random values of any type."""
    return st.one_of(mutated(valid), OBJECTS, JSONISH)


# --------------------------------------------------------------------------- resources


@FUZZ
@given(doc_or_junk(DIRECTORY))
def test_directory_parser(data: Any) -> None:
    result = typed_or_success(parse_directory, data, url=URL)
    if isinstance(result, AcmeCertsError):
        assert isinstance(result, BadServerResponse)
        return
    assert isinstance(result, Directory)
    for url in (result.new_nonce, result.new_account, result.new_order):
        assert isinstance(url, str)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in result.profiles.items())
    assert all(isinstance(i, str) for i in result.caa_identities)
    for optional in (result.terms_of_service, result.website, result.renewal_info):
        assert optional is None or isinstance(optional, str)
    assert isinstance(result.external_account_required, bool)


@FUZZ
@given(doc_or_junk(ORDER))
def test_order_parser(data: Any) -> None:
    result = typed_or_success(parse_order, data, url=URL)
    if isinstance(result, AcmeCertsError):
        assert isinstance(result, BadServerResponse)
        return
    assert isinstance(result, Order)
    assert isinstance(result.finalize, str)
    assert all(isinstance(a, str) for a in result.authorizations)
    assert all(isinstance(i, Identifier) for i in result.identifiers)
    assert result.error is None or isinstance(result.error, AcmeProblem)
    assert result.expires is None or result.expires.tzinfo is not None


@FUZZ
@given(doc_or_junk(AUTHORIZATION))
def test_authorization_parser(data: Any) -> None:
    result = typed_or_success(parse_authorization, data, url=URL)
    if isinstance(result, AcmeCertsError):
        assert isinstance(result, BadServerResponse)
        return
    assert isinstance(result, Authorization)
    assert isinstance(result.dns_name, str)
    assert all(isinstance(c, Challenge) for c in result.challenges)
    assert result.error is None or isinstance(result.error, AcmeProblem)


@FUZZ
@given(doc_or_junk(CHALLENGE))
def test_challenge_parser(data: Any) -> None:
    result = typed_or_success(parse_challenge, data, url=URL)
    if isinstance(result, AcmeCertsError):
        assert isinstance(result, BadServerResponse)
        return
    assert isinstance(result, Challenge)
    assert result.token is None or isinstance(result.token, str)
    if result.token is not None:
        # Tokens become paths and URLs: whatever the CA sends, only base64url passes.
        checked = typed_or_success(validate_token, result.token)
        if not isinstance(checked, AcmeCertsError):
            assert set(checked) <= set(string.ascii_letters + string.digits + "-_")


@FUZZ
@given(doc_or_junk(ACCOUNT))
def test_account_parser(data: Any) -> None:
    result = typed_or_success(parse_account, data, url=URL)
    if isinstance(result, AcmeCertsError):
        assert isinstance(result, BadServerResponse)
        return
    assert isinstance(result, Account)
    assert all(isinstance(c, str) for c in result.contact)
    assert result.terms_of_service_agreed in (None, True, False)


@FUZZ
@given(doc_or_junk(RENEWAL_INFO))
def test_renewal_info_parser(data: Any) -> None:
    result = typed_or_success(parse_renewal_info, data, url=URL)
    if isinstance(result, AcmeCertsError):
        assert isinstance(result, BadServerResponse)
        return
    assert isinstance(result, RenewalInfo)
    assert result.window_start.tzinfo is not None
    assert result.window_start <= result.window_end


CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        "application/problem+json",
        "application/json; charset=utf-8",
        "APPLICATION/PROBLEM+JSON ; x=y",
        "text/html",
        "",
        ";",
        "application/jose+json",
    ]
) | st.text(max_size=30)


def _body(data: Any) -> bytes:
    return json.dumps(data, allow_nan=True).encode()


BODIES = st.one_of(
    st.binary(max_size=200),
    mutated(ORDER).map(_body),
    JSONISH.map(_body),
    st.sampled_from([b"", b"null", b"[]", b"{}", b"\xff\xfe{", b'{"a":1}garbage', b"NaN"]),
)


@FUZZ
@given(BODIES, CONTENT_TYPES)
def test_response_json_then_parsers(body: bytes, content_type: str) -> None:
    """What the client does with every answer: ``response.json()`` then a parser."""
    # real header values arrive as bytes: latin-1 keeps every code point < 256 as one byte
    raw_type = (
        content_type.encode("utf-8")
        if max(content_type, default="a") > "\xff"
        else content_type.encode("latin-1")
    )
    response = AcmeResponse(200, httpx.Headers([(b"content-type", raw_type)]), body, URL, None)
    data = typed_or_success(response.json)
    if isinstance(data, AcmeCertsError):
        assert isinstance(data, BadServerResponse)
        return
    for parser in (parse_order, parse_authorization, parse_account, parse_renewal_info):
        result = typed_or_success(parser, data, url=URL)
        assert not isinstance(result, AcmeCertsError) or isinstance(result, BadServerResponse)
    typed_or_success(parse_directory, data, url=URL)


# --------------------------------------------------------------------------- problems


@FUZZ
@given(doc_or_junk(PROBLEM), st.one_of(st.none(), st.integers(100, 599)))
def test_problem_documents_always_give_a_problem(data: Any, status: int | None) -> None:
    if not isinstance(data, Mapping):
        data = {"detail": data}
    problem = bounded(problem_from_document, data, status_code=status, url=URL)
    assert isinstance(problem, AcmeProblem)
    assert isinstance(str(problem), str)
    assert isinstance(problem.type, str)
    assert isinstance(problem.detail, str)


@FUZZ
@given(
    st.integers(100, 599),
    CONTENT_TYPES,
    st.one_of(st.binary(max_size=300), mutated(PROBLEM).map(_body), JSONISH.map(_body)),
)
def test_problem_responses(status: int, content_type: str, body: bytes) -> None:
    problem = bounded(
        problem_from_response, status_code=status, content_type=content_type, body=body, url=URL
    )
    assert problem is None or isinstance(problem, AcmeProblem)


# --------------------------------------------------------------------------- Retry-After

HTTP_DATES = st.builds(
    lambda d, fmt: d.strftime(fmt),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)),
    st.sampled_from(
        ["%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %d %H:%M:%S %Y"]
    ),
)
RETRY_AFTER_TEXT = st.one_of(
    st.text(max_size=60),
    st.text(alphabet="0123456789. -+eE", max_size=40),
    st.integers().map(str),
    st.floats().map(str),
    HTTP_DATES,
    HTTP_DATES.map(lambda s: s.replace("GMT", "PST")),
    st.text(alphabet="0123456789", min_size=4000, max_size=6000),
)


@FUZZ
@given(RETRY_AFTER_TEXT)
def test_retry_after_header(value: str) -> None:
    result = bounded(parse_retry_after, value, now=NOW)
    assert result is None or NOW <= result <= NOW + MAX_DELAY


DETAILS = st.one_of(
    st.text(max_size=120),
    st.builds(
        lambda pre, d, post: f"{pre}retry after {d}{post}",
        st.text(max_size=20),
        st.one_of(
            st.datetimes().map(str),
            st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
            st.text(alphabet="0123456789-:T .+Z", max_size=40),
        ),
        st.text(max_size=20),
    ),
    st.just("retry after 9999-12-31 23:59:59.9999999 -2359 UTC"),
    st.just("retry after 0001-01-01 00:00:00 +2359 UTC"),
    st.just("retry after " * 5000),
)


@FUZZ
@given(DETAILS)
def test_retry_after_in_problem_detail(detail: str) -> None:
    result = bounded(retry_after_from_detail, detail, now=NOW)
    assert result is None or NOW <= result <= NOW + MAX_DELAY


# --------------------------------------------------------------------------- Link headers

LINK_TARGETS = st.one_of(
    st.text(max_size=40),
    INTERESTING,
    st.sampled_from(
        [
            "https://ca.test/cert/1/alt",
            "/cert/1/1",
            "//evil.test/x",
            "http://[::1",
            "https://ca.test:99999/",
            "https://exa mple.com/",
            "\x00",
            "javascript:alert(1)",
        ]
    ),
)
LINK_VALUES = st.one_of(
    st.text(max_size=120),
    st.builds(
        lambda target, rel, extra: f"<{target}>;rel={rel}{extra}",
        LINK_TARGETS,
        st.sampled_from(['"alternate"', "alternate", '"up alternate"', "index", '"', ""]),
        st.text(alphabet=';,="<> abc', max_size=20),
    ),
    st.lists(st.text(alphabet='<>;,"= rela', max_size=30), max_size=5).map(", ".join),
)


@FUZZ
@given(LINK_VALUES, st.sampled_from(["alternate", "up", "index", ""]))
def test_link_header_parsing(header: str, rel: str) -> None:
    urls = bounded(_parse_links, header, rel, base=URL)
    assert all(isinstance(u, str) for u in urls)


@FUZZ
@given(st.lists(st.binary(max_size=80), max_size=4))
def test_link_headers_on_a_response(raw_values: list[bytes]) -> None:
    headers = httpx.Headers([(b"link", value) for value in raw_values])
    response = AcmeResponse(200, headers, b"", URL, None)
    urls = typed_or_success(response.links, "alternate")
    assert isinstance(urls, list)
    assert all(isinstance(u, str) for u in urls)


# --------------------------------------------------------------------------- PEM chains


def _make_chain() -> tuple[ec.EllipticCurvePrivateKey, bytes, bytes]:
    root_key = ec.generate_private_key(ec.SECP256R1())
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    root_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Fuzz Root")])
    root = (
        x509.CertificateBuilder()
        .subject_name(root_name)
        .issuer_name(root_name)
        .public_key(root_key.public_key())
        .serial_number(0x0F00)
        .not_valid_before(NOW)
        .not_valid_after(NOW + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(root_key.public_key()), critical=False
        )
        .sign(root_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(root_name)
        .public_key(leaf_key.public_key())
        .serial_number(0x87654321)
        .not_valid_before(NOW)
        .not_valid_after(NOW + dt.timedelta(days=90))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("example.com"),
                    x509.IPAddress(ipaddress.ip_address("192.0.2.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(root_key.public_key()),
            critical=False,
        )
        .sign(root_key, hashes.SHA256())
    )
    der = leaf.public_bytes(serialization.Encoding.DER)
    pem = der_to_pem(der) + root.public_bytes(serialization.Encoding.PEM)
    return leaf_key, der, pem


def der_to_pem(der: bytes) -> bytes:
    body = base64.encodebytes(der).replace(b"\n", b"")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return b"-----BEGIN CERTIFICATE-----\n" + b"\n".join(lines) + b"\n-----END CERTIFICATE-----\n"


LEAF_KEY, LEAF_DER, CHAIN_PEM = _make_chain()
IDENTIFIERS = (Identifier("dns", "example.com"), Identifier("ip", "192.0.2.1"))


@st.composite
def mutated_der(draw: st.DrawFn, der: bytes = LEAF_DER) -> bytes:
    """The leaf's DER with a few bytes flipped, inserted, or cut off."""
    data = bytearray(der)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        op = draw(st.sampled_from(["flip", "set", "insert", "truncate"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[pos:]
    return bytes(data)


def _use_chain(chain: CertificateChain) -> None:
    """Everything the client does with a chain the CA sent."""
    assert chain.certificates
    chain.leaf_pem  # noqa: B018 - properties are the code under test
    chain.intermediates_pem  # noqa: B018
    chain.issuer_names  # noqa: B018
    chain.root_issuer_name  # noqa: B018
    certificate_info(chain.leaf)
    check_certificate_matches(chain, key=LEAF_KEY, identifiers=IDENTIFIERS)


PEM_INPUTS = st.one_of(
    st.binary(max_size=400),
    mutated_der().map(lambda der: der_to_pem(der) + CHAIN_PEM.split(b"\n", 1)[1]),
    mutated_der().map(der_to_pem),
    st.binary(max_size=300).map(
        lambda junk: b"-----BEGIN CERTIFICATE-----\n" + junk + b"\n-----END CERTIFICATE-----"
    ),
    st.just(CHAIN_PEM),
)


@FUZZ
@given(PEM_INPUTS)
def test_pem_chains(data: bytes) -> None:
    chain = typed_or_success(parse_pem_chain, data, url=URL)
    if isinstance(chain, AcmeCertsError):
        assert isinstance(chain, BadServerResponse)
        return
    outcome = typed_or_success(_use_chain, chain)
    assert outcome is None or isinstance(outcome, BadServerResponse | CertificateMismatch)


# --------------------------------------------------------------------------- identifiers


@FUZZ
@given(
    st.one_of(
        st.text(max_size=80),
        st.text(alphabet=string.ascii_letters + string.digits + ".-*:[]%", max_size=80),
        st.lists(st.text(alphabet="abc-*é\u00df0", max_size=70), max_size=6).map(".".join),
        st.ip_addresses().map(str),
        INTERESTING,
    )
)
def test_identifiers(text: str) -> None:
    result = typed_or_success(parse_identifier, text)
    if isinstance(result, AcmeCertsError):
        assert isinstance(result, InvalidIdentifier)
        return
    assert result.type in ("dns", "ip")
    if result.type == "dns":  # nothing but A-labels: no "/", NUL, newline, space...
        assert re.fullmatch(r"(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)+", result.value), result
    else:
        assert str(ipaddress.ip_address(result.value)) == result.value
    assert parse_identifier(result.value) == result  # normalisation is idempotent


# --------------------------------------------------------------------------- ARI certID


@FUZZ_SLOW
@given(
    serial=st.integers(1, 2**159 - 1),
    key_id=st.one_of(st.none(), st.binary(max_size=40)),
)
def test_cert_id_of_odd_certificates(serial: int, key_id: bytes | None) -> None:
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(x509.Name([]))
        .public_key(LEAF_KEY.public_key())
        .serial_number(serial)
        .not_valid_before(NOW)
        .not_valid_after(NOW + dt.timedelta(days=1))
    )
    if key_id is not None:
        aki = x509.AuthorityKeyIdentifier(key_id, None, None)
        builder = builder.add_extension(aki, critical=False)
    cert = builder.sign(LEAF_KEY, hashes.SHA256())
    result = typed_or_success(cert_id, cert)
    if not key_id:
        assert isinstance(result, InvalidInput)
        return
    assert isinstance(result, str)
    aki_part, serial_part = result.split(".")
    assert base64.urlsafe_b64decode(aki_part + "=" * (-len(aki_part) % 4)) == key_id
    raw = base64.urlsafe_b64decode(serial_part + "=" * (-len(serial_part) % 4))
    assert int.from_bytes(raw, "big", signed=True) == serial


@FUZZ
@given(st.one_of(mutated_der(), st.binary(max_size=300), PEM_INPUTS))
def test_cert_id_of_mangled_certificates(data: bytes) -> None:
    cert = typed_or_success(load_certificate, data)
    if isinstance(cert, AcmeCertsError):
        assert isinstance(cert, InvalidInput)
        return
    result = typed_or_success(cert_id, cert)
    assert isinstance(result, str | InvalidInput)


# --------------------------------------------------------------------------- stored state

ATTEMPT_STATE = {
    "attempts": 3,
    "next_attempt_at": "2026-06-01T13:00:00+00:00",
    "last_error": "rateLimited: too many",
    "last_error_kind": "rate-limited",
}


@FUZZ
@given(doc_or_junk(ATTEMPT_STATE))
def test_attempt_state(data: Any) -> None:
    result = typed_or_success(AttemptState.from_json, data)
    if isinstance(result, AcmeCertsError):
        assert isinstance(result, StorageError)
        return
    assert isinstance(result, AttemptState)
    assert AttemptState.from_json(result.to_json()) == result


VALID_LEDGER = LedgerState().to_bytes()


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=200),
        JSONISH.map(_body),
        mutated({"format": 1, "buckets": {"x": {"k": 1}}, "blocks": {}, "paused": {}}).map(_body),
    )
)
def test_ledger_state(data: bytes) -> None:
    result = typed_or_success(LedgerState.from_bytes, data)
    assert isinstance(result, LedgerState | StorageError)


KEY = "ca/accounts/default/key.pem"


@pytest.fixture(scope="module")
def store_root() -> Any:
    with tempfile.TemporaryDirectory() as root:
        yield root


def _envelope_mutations() -> st.SearchStrategy[bytes]:
    valid = (
        b"acmecerts-v1 "
        + b"0" * 32
        + b" 5 "
        + b"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\nhello"
    )
    return st.one_of(
        st.binary(max_size=300),
        st.just(valid),
        st.builds(lambda cut: valid[:cut], st.integers(0, len(valid))),
        st.builds(
            lambda pos, byte: valid[:pos] + bytes([byte]) + valid[pos + 1 :],
            st.integers(0, len(valid) - 1),
            st.integers(0, 255),
        ),
        st.builds(
            lambda fields: b" ".join(fields) + b"\nhello",
            st.lists(st.binary(max_size=70), max_size=6),
        ),
    )


@FUZZ
@given(_envelope_mutations())
def test_file_storage_envelope(store_root: str, content: bytes) -> None:
    """Any file content at a key reads as a value or as StorageError naming the file."""
    storage = FileStorage(store_root)
    path = storage.path_for(KEY)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "wb") as file:
        file.write(content)
    result = typed_or_success(anyio.run, storage.load, KEY)
    if isinstance(result, AcmeCertsError):
        assert isinstance(result, StorageError)
        assert result.path == path
        return
    assert result is not None
    assert content.endswith(result.data)


@FUZZ_SLOW
@given(st.one_of(st.binary(max_size=200), JSONISH.map(_body), mutated({"url": URL}).map(_body)))
def test_stored_account_metadata(store_root: str, content: bytes) -> None:
    storage = FileStorage(store_root)
    layout = KeyLayout("https://ca.test/directory")

    async def main() -> str | None:
        await storage.store(layout.account_meta(), content)
        return await load_account_url(storage, layout)

    result = typed_or_success(anyio.run, main)
    assert result is None or isinstance(result, str | StorageError)


# --------------------------------------------------------------------------- regressions


def test_deeply_nested_json_from_the_ca_is_a_typed_error() -> None:
    """A 1 MiB body of ``[`` made ``json.loads`` raise RecursionError, not a typed error."""
    for body in (b"[" * 200_000, b'{"a":' * 100_000):
        response = AcmeResponse(
            200, httpx.Headers({"content-type": "application/json"}), body, URL, None
        )
        with pytest.raises(BadServerResponse, match="not valid JSON"):
            response.json()
        problem = problem_from_response(
            status_code=400, content_type="application/problem+json", body=body, url=URL
        )
        assert problem is None  # not a problem document: the caller reports the HTTP status


def test_deeply_nested_stored_state_is_a_storage_error() -> None:
    with pytest.raises(StorageError):
        LedgerState.from_bytes(b"[" * 200_000)


def test_pem_parsing_is_linear_in_the_body_size() -> None:
    """Many BEGIN markers without END made the chain regex quadratic (minutes for 1 MiB)."""
    body = b"-----BEGIN CERTIFICATE-----\nA\n" * ((1 << 20) // 32)
    with pytest.raises(BadServerResponse):
        bounded(parse_pem_chain, body, seconds=2.0)


def test_unhashable_last_error_kind_is_a_storage_error() -> None:
    with pytest.raises(StorageError):
        AttemptState.from_json({"attempts": 1, "last_error_kind": []})


def test_certificate_with_a_malformed_extension_is_a_typed_error() -> None:
    """A leaf whose SAN (or AKI) does not parse must not escape as ValueError."""
    broken = _with_broken_extension(x509.SubjectAlternativeName.oid)
    with pytest.raises(BadServerResponse, match="unparseable"):
        parse_pem_chain(der_to_pem(broken))  # refused as the CA's answer...
    cert = x509.load_der_x509_certificate(broken)  # ...and wherever else it comes from
    with pytest.raises(BadServerResponse):
        certificate_info(cert)
    chain = CertificateChain(pem=der_to_pem(broken).decode(), certificates=(cert,))
    with pytest.raises(BadServerResponse):
        check_certificate_matches(chain, key=LEAF_KEY, identifiers=IDENTIFIERS)
    with pytest.raises(InvalidInput):
        cert_id(load_certificate(broken))


def _with_broken_extension(oid: x509.ObjectIdentifier) -> bytes:
    """The leaf's DER with the value of extension ``oid`` replaced by garbage (same size)."""
    cert = x509.load_der_x509_certificate(LEAF_DER)
    ext = cert.extensions.get_extension_for_oid(oid)
    value = ext.value.public_bytes()
    assert LEAF_DER.count(value) == 1
    return LEAF_DER.replace(value, b"\xff" * len(value))


def test_odd_jwk_in_an_account_is_not_read() -> None:
    """Found by hypothesis: ``"key": {"x": null}`` escaped josepy as AttributeError. The
    account's ``key`` is no longer parsed at all (the client signs with its own key), so
    nothing can escape from it and the account reads as without it."""
    for key in ({"kty": "EC", "crv": "P-256", "x": None, "y": "AAAA"}, "key", 5, None, []):
        assert parse_account({**ACCOUNT, "key": key}, url=URL) == parse_account(ACCOUNT, url=URL)


def test_a_trailing_newline_is_not_part_of_a_valid_token() -> None:
    """Found by atheris: ``^...$`` with ``re.match`` accepted ``"<token>\\n"``."""
    token = "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"
    assert validate_token(token) == token
    for bad in (token + "\n", "\n" + token, token + "\r\n"):
        with pytest.raises(BadServerResponse):
            validate_token(bad)


def test_a_newline_inside_a_name_is_not_a_valid_identifier() -> None:
    """Found while fixing the token: ``"abc\\n.example.com"`` was a valid DNS identifier."""
    for bad in ("abc\n.example.com", "a.b\n.example.com", "x-\n.example.com"):
        with pytest.raises(InvalidIdentifier):
            parse_identifier(bad)
    assert parse_identifier(" example.com\n").value == "example.com"  # outer space: stripped


def test_a_certificate_whose_issuer_does_not_parse_is_a_typed_error() -> None:
    """Found by atheris: names are parsed lazily, so ``chain.root_issuer_name`` raised."""
    root_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Fuzz Root")]).public_bytes()
    at = LEAF_DER.find(root_name)  # the leaf's issuer (its own subject is empty)
    assert at > 0
    assert LEAF_DER[at + 2] == 0x31  # the RDN's SET tag...
    broken = LEAF_DER[: at + 2] + b"\x30" + LEAF_DER[at + 3 :]  # ...made a SEQUENCE
    with pytest.raises(BadServerResponse, match="unparseable"):
        parse_pem_chain(der_to_pem(broken))


def test_an_unknown_certificate_version_is_a_typed_error() -> None:
    """Found by atheris: ``x509.InvalidVersion`` is not a ValueError."""
    v3 = bytes.fromhex("a003020102")
    assert LEAF_DER.count(v3) == 1
    v4 = LEAF_DER.replace(v3, bytes.fromhex("a003020103"))
    with pytest.raises(BadServerResponse):
        parse_pem_chain(der_to_pem(v4))
    with pytest.raises(InvalidInput):
        load_certificate(v4)


@pytest.mark.parametrize("contact", [5, [None], ["mailto:a@example.com", 1], "mailto:a@x"])
def test_an_account_contact_that_is_not_a_list_of_uris_is_a_typed_error(contact: Any) -> None:
    """Found by hypothesis (deep run): ``"contact": 5`` raised TypeError, ``[None]`` passed."""
    with pytest.raises(BadServerResponse):
        parse_account({**ACCOUNT, "contact": contact}, url=URL)


def test_a_negative_serial_in_the_authority_key_identifier_is_a_typed_error() -> None:
    """Found by hypothesis (deep run): cryptography warns (an error under ``-W error``, as in
    this suite, and an exception "in a future release") and the warning escaped."""
    at = LEAF_DER.find(bytes.fromhex("30168014"))  # AKI: SEQUENCE { [0] keyIdentifier }
    assert at > 0
    # ...made [2] authorityCertSerialNumber, negative
    broken = LEAF_DER[:at] + bytes.fromhex("30168214ff") + LEAF_DER[at + 5 :]
    with pytest.raises(InvalidInput):
        cert_id(load_certificate(broken))
    with pytest.raises(BadServerResponse):
        parse_pem_chain(der_to_pem(broken))
