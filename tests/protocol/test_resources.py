"""Parsing the CA's JSON into typed resources; malformed answers raise BadServerResponse."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from acmecerts.errors import BadServerResponse, RateLimited
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.resources import (
    parse_account,
    parse_authorization,
    parse_challenge,
    parse_directory,
    parse_order,
    parse_renewal_info,
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
