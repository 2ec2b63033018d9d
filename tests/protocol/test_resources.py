"""Parsing the CA's JSON into typed resources; malformed answers raise BadServerResponse."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

import pytest
from acme import messages
from hypothesis import given, settings
from hypothesis import strategies as st

from acmecerts.errors import BadServerResponse, RateLimited
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.resources import (
    parse_account,
    parse_authorization,
    parse_challenge,
    parse_directory,
    parse_order,
    parse_renewal_info,
    renewal_info_from_body,
)

DIRECTORY: dict[str, Any] = {
    "newNonce": "https://ca/nonce",
    "newAccount": "https://ca/acct",
    "newOrder": "https://ca/order",
    "revokeCert": "https://ca/revoke",
    "keyChange": "https://ca/kc",
    "renewalInfo": "https://ca/ari",
    "meta": {
        "termsOfService": "https://ca/tos",
        "externalAccountRequired": True,
        "profiles": {"classic": "90 days", "shortlived": "6 days"},
        "caaIdentities": ["ca.example"],
    },
}


def test_directory_with_meta() -> None:
    d = parse_directory(dict(DIRECTORY))
    assert d.new_order == "https://ca/order"
    assert d.renewal_info == "https://ca/ari"
    assert d.external_account_required is True
    assert d.terms_of_service == "https://ca/tos"
    assert dict(d.profiles) == {"classic": "90 days", "shortlived": "6 days"}
    assert d.caa_identities == ("ca.example",)


def test_minimal_directory() -> None:
    d = parse_directory({k: DIRECTORY[k] for k in ("newNonce", "newAccount", "newOrder")})
    assert d.revoke_cert is None
    assert d.renewal_info is None
    assert d.external_account_required is False


@pytest.mark.parametrize(
    "data",
    [
        [],
        "dir",
        None,
        {"newNonce": "https://ca/nonce"},
        {**DIRECTORY, "newOrder": 5},
    ],
)
def test_broken_directories(data: object) -> None:
    with pytest.raises(BadServerResponse):
        parse_directory(data, url="https://ca/dir")


ORDER: dict[str, Any] = {
    "status": "pending",
    "expires": "2026-12-01T00:00:00Z",
    "identifiers": [{"type": "dns", "value": "a.example"}, {"type": "ip", "value": "192.0.2.1"}],
    "authorizations": ["https://ca/authz/1", "https://ca/authz/2"],
    "finalize": "https://ca/finalize/1",
    "profile": "classic",
    "replaces": "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE",
}


def test_order() -> None:
    o = parse_order(dict(ORDER), url="https://ca/order/1")
    assert o.status == "pending"
    assert o.identifiers == (Identifier("dns", "a.example"), Identifier("ip", "192.0.2.1"))
    assert o.authorizations == ("https://ca/authz/1", "https://ca/authz/2")
    assert o.expires == dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    assert o.profile == "classic"
    assert o.replaces is not None
    assert o.certificate is None


def test_order_with_error_becomes_typed_problem() -> None:
    data = {
        **ORDER,
        "status": "invalid",
        "error": {"type": "urn:ietf:params:acme:error:rateLimited", "detail": "slow down"},
    }
    o = parse_order(data, url="https://ca/order/1")
    assert isinstance(o.error, RateLimited)
    assert o.error.detail == "slow down"


@pytest.mark.parametrize(
    "patch",
    [
        {"status": "weird"},
        {"status": None},
        {"finalize": None},
        {"authorizations": "https://ca/authz/1"},
        {"authorizations": [1, 2]},
        {"identifiers": [{"type": "dns"}]},
        {"expires": "yesterday"},
    ],
)
def test_broken_orders(patch: dict[str, Any]) -> None:
    data = {**ORDER, **patch}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(BadServerResponse) as info:
        parse_order(data, url="https://ca/order/1")
    assert info.value.url == "https://ca/order/1"


AUTHZ: dict[str, Any] = {
    "status": "invalid",
    "identifier": {"type": "dns", "value": "example.org"},
    "wildcard": True,
    "challenges": [
        {
            "type": "dns-01",
            "url": "https://ca/chall/1",
            "status": "invalid",
            "token": "DGyRejmCefe7v4NfDGDKfA",
            "error": {
                "type": "urn:ietf:params:acme:error:unauthorized",
                "detail": "no TXT record",
            },
        },
        {"type": "future-01", "url": "https://ca/chall/2", "status": "pending"},
    ],
}


def test_authorization_with_failed_challenge() -> None:
    a = parse_authorization(dict(AUTHZ), url="https://ca/authz/1")
    assert a.dns_name == "*.example.org"
    assert a.challenge("dns-01") is not None
    assert a.challenge("http-01") is None
    assert a.error is not None
    assert "no TXT record" in str(a.error)
    assert a.challenges[1].token is None


def test_challenge_answer_parses() -> None:
    c = parse_challenge(
        {"type": "http-01", "url": "https://ca/c/1", "status": "processing", "token": "t" * 22},
        url="https://ca/c/1",
    )
    assert c.status == "processing"
    with pytest.raises(BadServerResponse):
        parse_challenge({"type": "http-01", "status": "pending"}, url="https://ca/c/1")


def test_account() -> None:
    acct = parse_account(
        {"status": "valid", "contact": ["mailto:a@example.org"], "orders": "https://ca/o"},
        url="https://ca/acct/1",
    )
    assert acct.contact == ("mailto:a@example.org",)
    assert acct.orders == "https://ca/o"
    with pytest.raises(BadServerResponse):
        parse_account({"status": "sleeping"}, url="https://ca/acct/1")


def test_renewal_info() -> None:
    info = parse_renewal_info(
        {
            "suggestedWindow": {"start": "2026-01-02T00:00:00Z", "end": "2026-01-03T00:00:00Z"},
            "explanationURL": "https://ca/why",
        },
        url="https://ca/ari/x",
    )
    assert info.window_start < info.window_end
    assert info.explanation_url == "https://ca/why"
    with pytest.raises(BadServerResponse):
        parse_renewal_info(
            {"suggestedWindow": {"start": "2026-01-03T00:00:00Z", "end": "2026-01-02T00:00:00Z"}},
            url="u",
        )
    with pytest.raises(BadServerResponse):
        parse_renewal_info({}, url="u")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T00:00:00Z", dt.datetime(2026, 12, 1, tzinfo=dt.UTC)),
        ("2026-12-01T00:00:00z", dt.datetime(2026, 12, 1, tzinfo=dt.UTC)),
        # Go (Pebble, Boulder) writes nanoseconds: truncated to microseconds
        ("2026-12-01T10:20:30.123456789Z", dt.datetime(2026, 12, 1, 10, 20, 30, 123456, dt.UTC)),
        ("2026-12-01T10:20:30.5Z", dt.datetime(2026, 12, 1, 10, 20, 30, 500000, dt.UTC)),
        ("2026-12-01T02:00:00+02:00", dt.datetime(2026, 12, 1, tzinfo=dt.UTC)),
        ("2026-12-01T00:00:00", dt.datetime(2026, 12, 1, tzinfo=dt.UTC)),  # naive: UTC
    ],
)
def test_timestamps_become_aware_utc(text: str, expected: dt.datetime) -> None:
    o = parse_order({**ORDER, "expires": text}, url="https://ca/order/1")
    assert o.expires == expected
    assert o.expires is not None
    assert o.expires.utcoffset() == dt.timedelta(0)
    a = parse_authorization({**AUTHZ, "expires": text}, url="https://ca/authz/1")
    assert a.expires == expected
    c = parse_challenge({**AUTHZ["challenges"][0], "validated": text}, url="https://ca/c/1")
    assert c.validated == expected


@pytest.mark.parametrize(
    "value",
    [None, 5, "", "yesterday", "2026-13-01T00:00:00Z", "2026-12-01T25:00:00Z",
     "0001-01-01T00:00:00+14:00", "2026-12-01T00:00:00Z\n", ["2026-12-01T00:00:00Z"]],
)  # fmt: skip
def test_bad_timestamps_are_refused(value: object) -> None:
    with pytest.raises(BadServerResponse) as info:
        parse_order({**ORDER, "expires": value}, url="https://ca/order/1")
    assert info.value.url == "https://ca/order/1"
    with pytest.raises(BadServerResponse):
        parse_authorization({**AUTHZ, "expires": value}, url="https://ca/authz/1")
    with pytest.raises(BadServerResponse):
        parse_challenge({**AUTHZ["challenges"][0], "validated": value}, url="https://ca/c/1")


@pytest.mark.parametrize(
    "patch",
    [
        {"identifiers": [{"type": "email", "value": "a@example.org"}]},
        {"identifiers": [{"type": "dns", "value": 5}]},
        {"identifiers": ["a.example"]},
        {"identifiers": {"type": "dns", "value": "a.example"}},
        {"status": ["pending"]},
        {"status": "unknown"},
        {"finalize": 7},
        {"error": None},
        {"error": "boom"},
        {"authorizations": None},
    ],
)
def test_more_broken_orders(patch: dict[str, Any]) -> None:
    with pytest.raises(BadServerResponse) as info:
        parse_order({**ORDER, **patch}, url="https://ca/order/1")
    assert info.value.url == "https://ca/order/1"


def test_order_fields_of_other_types_are_ignored_and_dns_names_lower_cased() -> None:
    o = parse_order(
        {**ORDER, "certificate": 5, "profile": ["x"], "replaces": None,
         "identifiers": [{"type": "dns", "value": "A.Example"}], "extra": {"x": [1]}},
        url="https://ca/order/1",
    )  # fmt: skip
    assert o.certificate is None
    assert o.profile is None
    assert o.replaces is None
    assert o.identifiers == (Identifier("dns", "a.example"),)
    bare = parse_order({"status": "pending", "finalize": "https://ca/f"}, url="https://ca/o")
    assert (bare.identifiers, bare.authorizations, bare.expires, bare.error) == ((), (), None, None)


def test_order_error_keeps_subproblems_even_if_odd() -> None:
    error = {
        "type": "urn:ietf:params:acme:error:compound",
        "detail": "several",
        "subproblems": [
            {"type": "urn:ietf:params:acme:error:caa", "identifier": {}},
            {"type": "urn:ietf:params:acme:error:dns", "identifier": {"type": "dns", "value": "x"}},
        ],
    }
    o = parse_order({**ORDER, "status": "invalid", "error": error}, url="https://ca/order/1")
    assert o.error is not None
    assert o.error.url == "https://ca/order/1"
    assert len(o.error.subproblems) == 2


CHALL: dict[str, Any] = {
    "type": "http-01",
    "url": "https://ca/c/1",
    "status": "pending",
    "token": "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0",
}


@pytest.mark.parametrize("ctype", ["http-01", "dns-01", "dns"])
@pytest.mark.parametrize(
    "token", [None, 5, "", "short", "A" * 21, "A" * 25, "tok\u00e9n" * 8, "====" * 8]
)
def test_challenges_that_need_a_token_refuse_a_bad_one(ctype: str, token: object) -> None:
    chall = {**CHALL, "type": ctype, "token": token}
    if token is None:
        del chall["token"]
    with pytest.raises(BadServerResponse) as info:
        parse_challenge(chall, url="https://ca/authz/1")
    assert info.value.url == "https://ca/authz/1"
    with pytest.raises(BadServerResponse):
        parse_authorization({**AUTHZ, "challenges": [chall]}, url="https://ca/authz/1")


@pytest.mark.parametrize(
    "token",
    [
        "A" * 22,  # 16 octets, the minimum
        "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0",
        "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0=",  # padded: acme.challenges took it
    ],
)
def test_good_tokens_pass(token: str) -> None:
    c = parse_challenge({**CHALL, "token": token}, url="https://ca/c/1")
    assert c.token == token


def test_unknown_challenge_types_need_no_token() -> None:
    for ctype in ("tls-alpn-01", "future-01"):
        c = parse_challenge({**CHALL, "type": ctype, "token": 5}, url="https://ca/c/1")
        assert c.token is None


@pytest.mark.parametrize(
    "patch",
    [
        {"status": "weird"},
        {"status": None},
        {"url": None},
        {"type": 1},
        {"error": None},
        {"error": ["x"]},
    ],
)
def test_broken_challenges(patch: dict[str, Any]) -> None:
    with pytest.raises(BadServerResponse):
        parse_challenge({**CHALL, **patch}, url="https://ca/c/1")
    for junk in (None, [], "challenge", 5):
        with pytest.raises(BadServerResponse):
            parse_challenge(junk, url="https://ca/c/1")


def test_challenge_error_names_the_challenge_url() -> None:
    error = {"type": "urn:ietf:params:acme:error:connection", "detail": "refused"}
    c = parse_challenge({**CHALL, "status": "invalid", "error": error}, url="https://ca/a/1")
    assert c.error is not None
    assert c.error.url == "https://ca/c/1"


@pytest.mark.parametrize(
    "patch",
    [
        {"status": "weird"},
        {"identifier": None},
        {"identifier": {"type": "email", "value": "a@example.org"}},
        {"identifier": {"type": "dns"}},
        {"challenges": None},
        {"challenges": {"type": "dns-01"}},
        {"challenges": ["dns-01"]},
    ],
)
def test_broken_authorizations(patch: dict[str, Any]) -> None:
    data = {**AUTHZ, **patch}
    with pytest.raises(BadServerResponse) as info:
        parse_authorization(data, url="https://ca/authz/1")
    assert info.value.url == "https://ca/authz/1"


def test_authorization_statuses_of_rfc8555() -> None:
    for status in ("pending", "valid", "invalid", "deactivated", "expired", "revoked"):
        a = parse_authorization({**AUTHZ, "status": status}, url="https://ca/authz/1")
        assert a.status == status
    a = parse_authorization(
        {"status": "valid", "identifier": {"type": "ip", "value": "2001:DB8::1"}},
        url="https://ca/authz/1",
    )
    assert a.identifier == Identifier("ip", "2001:DB8::1")
    assert a.challenges == ()
    assert a.wildcard is False


def test_directory_meta_of_the_wrong_types() -> None:
    """Found by the fuzz tests: acme.messages leaves meta field types unchecked."""
    meta = {"termsOfService": 5, "website": ["x"], "caaIdentities": ["ca.example"]}
    d = parse_directory({**DIRECTORY, "meta": meta})
    assert d.terms_of_service is None
    assert d.website is None
    for caa in (True, "ca.example", [1]):
        with pytest.raises(BadServerResponse, match="caaIdentities"):
            parse_directory({**DIRECTORY, "meta": {"caaIdentities": caa}}, url="https://ca/dir")


def test_directory_meta_must_be_an_object_when_present() -> None:
    for meta in (None, [], "meta", 5):
        with pytest.raises(BadServerResponse, match="'meta' is not an object"):
            parse_directory({**DIRECTORY, "meta": meta}, url="https://ca/dir")
    d = parse_directory({**DIRECTORY, "meta": {}})
    assert d.terms_of_service is None
    assert d.profiles == {}
    assert d.external_account_required is False


# -- the directory and the account are read directly (no acme.messages, which imports
# requests at the start of every run): they give what acme.messages gave ---------------

_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
_META_VALUE = st.one_of(
    _ANY_JSON,
    st.sampled_from(["https://ca/tos", ["ca.example"], {"classic": "90 days"}, True]),
)
_META = st.fixed_dictionaries(
    {},
    optional={
        "termsOfService": _META_VALUE,
        "website": _META_VALUE,
        "caaIdentities": _META_VALUE,
        "externalAccountRequired": _META_VALUE,
        "profiles": _META_VALUE,
    },
)


def _directory_through_acme_messages(doc: dict[str, Any]) -> tuple[object, ...]:
    """What parse_directory read from acme.messages before (its fields as it kept them)."""
    meta = messages.Directory.from_json(dict(doc)).meta
    profiles = meta.profiles if isinstance(meta.profiles, Mapping) else {}
    tos, website = meta.terms_of_service, meta.website
    return (
        tos if isinstance(tos, str) else None,
        website if isinstance(website, str) else None,
        bool(meta.external_account_required),
        # the profile names; a description only where it is a string (acme.messages
        # kept any JSON value there: a list came out as a tuple)
        {str(k): v if isinstance(v, str) else "" for k, v in profiles.items()},
    )


@settings(max_examples=300, deadline=None)
@given(_META, st.booleans())
def test_directory_direct_path_agrees_with_acme_messages(
    meta: dict[str, Any], with_meta: bool
) -> None:
    doc: dict[str, Any] = {k: DIRECTORY[k] for k in ("newNonce", "newAccount", "newOrder")}
    if with_meta:
        doc["meta"] = meta
    expected = _directory_through_acme_messages(doc)
    caa = meta.get("caaIdentities") if with_meta else None
    if caa is not None and (not isinstance(caa, list) or not all(isinstance(c, str) for c in caa)):
        with pytest.raises(BadServerResponse, match="caaIdentities"):
            parse_directory(doc, url="https://ca/dir")
        return
    d = parse_directory(doc, url="https://ca/dir")
    assert (d.terms_of_service, d.website, d.external_account_required, dict(d.profiles)) == (
        expected
    )
    assert d.caa_identities == tuple(caa or ())


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "status": st.sampled_from(["valid", "deactivated", "revoked", "sleeping", 5]),
            "contact": st.one_of(_ANY_JSON, st.just(["mailto:a@example.org"])),
            "termsOfServiceAgreed": _ANY_JSON,
            "orders": st.one_of(_ANY_JSON, st.just("https://ca/orders/1")),
        },
    )
)
def test_account_direct_path_agrees_with_acme_messages(doc: dict[str, Any]) -> None:
    reg = messages.Registration.from_json(dict(doc))
    contact = reg.contact or ()
    agreed = reg.terms_of_service_agreed
    contact_ok = isinstance(contact, list | tuple) and all(isinstance(c, str) for c in contact)
    if not contact_ok or doc.get("status", "valid") not in ("valid", "deactivated", "revoked"):
        with pytest.raises(BadServerResponse):
            parse_account(doc, url="https://ca/acct/1")
        return
    account = parse_account(doc, url="https://ca/acct/1")
    assert account.contact == tuple(contact)
    assert account.terms_of_service_agreed == (agreed if isinstance(agreed, bool) else None)
    orders = doc.get("orders")
    assert account.orders == (orders if isinstance(orders, str) else None)


# -- renewalInfo's direct path (issue #26: a fleet parses it tens of thousands of times a
# day) gives what acme.messages gives, and leaves every other shape to it ------------------

_INSTANT = st.datetimes(min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(9998, 12, 31)).map(
    lambda d: d.isoformat(timespec="microseconds")[: 19 + d.microsecond % 8] + "Z"
)
_STAMP = st.one_of(
    _INSTANT,
    st.text(alphabet="0123456789-:T.Zz+ ", max_size=32),
    st.sampled_from(["2027-13-01T00:00:00Z", "2027-01-01T00:00:00.Z", "2027-01-01T24:00:00Z"]),
    st.none(),
    st.integers(),
)


def _through_acme_messages(doc: dict[str, Any]) -> Any:
    """What parse_renewal_info returned before its direct path (acme.messages only)."""
    info = messages.RenewalInfo.from_json(dict(doc))
    start, end = info.suggested_window.start, info.suggested_window.end
    start = start.replace(tzinfo=dt.UTC) if start.tzinfo is None else start.astimezone(dt.UTC)
    end = end.replace(tzinfo=dt.UTC) if end.tzinfo is None else end.astimezone(dt.UTC)
    return start, end


@settings(max_examples=400, deadline=None)
@given(_STAMP, _STAMP, st.sampled_from([None, "https://ca/why", 3]))
def test_renewal_info_direct_path_agrees_with_acme_messages(
    start: Any, end: Any, explanation: Any
) -> None:
    doc: dict[str, Any] = {"suggestedWindow": {"start": start, "end": end}}
    if explanation is not None:
        doc["explanationURL"] = explanation
    try:
        expected = _through_acme_messages(doc)
    except Exception:  # any failure there is a BadServerResponse here
        expected = None
    if expected is None or expected[1] < expected[0]:
        with pytest.raises(BadServerResponse):
            parse_renewal_info(doc, url="u")
        return
    info = parse_renewal_info(doc, url="u")
    assert (info.window_start, info.window_end) == expected
    assert info.window_start.tzinfo is dt.UTC
    assert info.window_end.tzinfo is dt.UTC
    assert info.explanation_url == (explanation if isinstance(explanation, str) else None)


def test_renewal_info_usual_answer_takes_the_direct_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("acme.messages was asked")

    monkeypatch.setattr(messages.RenewalInfo, "from_json", refuse)
    info = parse_renewal_info(
        {"suggestedWindow": {"start": "2027-01-01T00:00:00Z", "end": "2027-01-02T00:00:00.5Z"}},
        url="u",
    )
    assert info.window_end == dt.datetime(2027, 1, 2, 0, 0, 0, 500000, tzinfo=dt.UTC)
    with pytest.raises(AssertionError, match=r"acme\.messages"):  # any other shape: the full path
        parse_renewal_info({"suggestedWindow": {"start": "2027-01-01T00:00:00+01:00"}}, url="u")


# --- renewal_info_from_body: the usual answer read from its bytes gives what
# parse_renewal_info gives for the document, and leaves everything else to it -------------

_SEPARATORS = st.sampled_from([(", ", ": "), (",", ":"), (" ,\n", " :\t"), (",\r\n  ", ":  ")])


def _through_json(body: bytes) -> Any:
    """What renewal_info() read before the direct path: parse_renewal_info of the JSON,
    an empty window refused."""
    try:
        info = parse_renewal_info(json.loads(body), url="u")
    except (BadServerResponse, ValueError):
        return None
    return info if info.window_end > info.window_start else None


@settings(max_examples=400, deadline=None)
@given(
    _STAMP,
    _STAMP,
    st.sampled_from([None, "https://ca/why"]),
    _SEPARATORS,
    st.sampled_from(["", " ", "\n", "\t \r\n"]),
)
def test_renewal_info_from_body_agrees_with_parse_renewal_info(
    start: Any, end: Any, explanation: Any, separators: tuple[str, str], around: str
) -> None:
    doc: dict[str, Any] = {"suggestedWindow": {"start": start, "end": end}}
    if explanation is not None:
        doc["explanationURL"] = explanation
    body = (around + json.dumps(doc, separators=separators) + around).encode()
    fast = renewal_info_from_body(body)
    if fast is not None:
        assert fast == _through_json(body)
        assert fast.window_start.tzinfo is dt.UTC
        assert fast.window_end.tzinfo is dt.UTC


@pytest.mark.parametrize(
    "body",
    [
        b'{"suggestedWindow": {"start": "2027-01-01T00:00:00Z", "end": "2027-01-02T00:00:00Z"}}',
        b'{"suggestedWindow":{"start":"2027-01-01T00:00:00Z","end":"2027-01-02T00:00:00.25Z"}}',
        b' {\n "suggestedWindow" : {\n  "start" : "2027-01-01T00:00:00.123456Z",'
        b'\n  "end" : "2027-01-01T00:00:00.123457Z"\n }\n}\n',
        b'{"suggestedWindow": {"start": "2027-01-01T00:00:00.1234567Z", '
        b'"end": "2027-01-02T00:00:00Z"}}',  # more than microseconds: truncated, as before
    ],
)
def test_renewal_info_from_body_reads_the_usual_answers(body: bytes) -> None:
    fast = renewal_info_from_body(body)
    assert fast is not None
    assert fast == _through_json(body)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{oops",
        b'{"suggestedWindow": {"start": "2027-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"}}',
        b'{"suggestedWindow": {"start": "2027-01-02T00:00:00Z", "end": "2027-01-01T00:00:00Z"}}',
        b'{"suggestedWindow": {"end": "2027-01-02T00:00:00Z", "start": "2027-01-01T00:00:00Z"}}',
        b'{"suggestedWindow": {"start": "2027-01-01T00:00:00+00:00", '
        b'"end": "2027-01-02T00:00:00Z"}}',
        b'{"suggestedWindow": {"start": "2027-13-01T00:00:00Z", "end": "2028-01-02T00:00:00Z"}}',
        b'{"suggestedWindow": {"start": "\\u0032027-01-01T00:00:00Z", '
        b'"end": "2027-01-02T00:00:00Z"}}',
        b'{"suggestedWindow": {"start": "2027-01-01T00:00:00Z", "end": "2027-01-02T00:00:00Z"}, '
        b'"explanationURL": "https://ca/why"}',
        b'{"suggestedWindow": {"start": "2027-01-01T00:00:00Z", "end": "2027-01-02T00:00:00Z"}}x',
        b'[{"suggestedWindow": {"start": "2027-01-01T00:00:00Z", "end": "2027-01-02T00:00:00Z"}}]',
    ],
)
def test_renewal_info_from_body_leaves_every_other_answer_to_the_full_path(body: bytes) -> None:
    assert renewal_info_from_body(body) is None
