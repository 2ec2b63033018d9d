"""Identifier validation: what is accepted, how it is normalised, what is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acmecerts.errors import InvalidIdentifier, InvalidInput
from acmecerts.protocol.identifiers import Identifier, parse_identifier, parse_identifiers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Example.COM", Identifier("dns", "example.com")),
        ("example.com.", Identifier("dns", "example.com")),
        ("*.example.com", Identifier("dns", "*.example.com")),
        ("bücher.example", Identifier("dns", "xn--bcher-kva.example")),
        ("a-b.c-d.example", Identifier("dns", "a-b.c-d.example")),
        ("192.0.2.1", Identifier("ip", "192.0.2.1")),
        ("2001:DB8::0:1", Identifier("ip", "2001:db8::1")),
        ("[::1]", Identifier("ip", "::1")),
    ],
)
def test_valid_identifiers_are_normalised(text: str, expected: Identifier) -> None:
    assert parse_identifier(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "com",
        "localhost",
        "a..example.com",
        "-a.example.com",
        "a-.example.com",
        "foo.*.example.com",
        "*example.com",
        "**.example.com",
        "a_b.example.com",
        "exa mple.com",
        "example.123",
        ("a" * 64) + ".example.com",
        ".".join(["abcdefghi"] * 26) + ".com",
        "http://example.com",
        "example.com/path",
    ],
)
def test_malformed_identifiers_raise_typed_error(text: str) -> None:
    with pytest.raises(InvalidIdentifier) as info:
        parse_identifier(text)
    assert isinstance(info.value, InvalidInput)
    assert isinstance(info.value, ValueError)
    assert info.value.reached_ca is False


def test_wildcard_properties() -> None:
    ident = parse_identifier("*.Example.org")
    assert ident.is_wildcard
    assert ident.base_name == "example.org"
    assert not parse_identifier("example.org").is_wildcard
    assert ident.to_json() == {"type": "dns", "value": "*.example.org"}


def test_parse_identifiers_deduplicates_in_order() -> None:
    idents = parse_identifiers(["b.example", "A.example", "b.example.", "a.example"])
    assert [i.value for i in idents] == ["b.example", "a.example"]


def test_parse_identifiers_needs_one() -> None:
    with pytest.raises(InvalidIdentifier):
        parse_identifiers([])


@given(st.text(max_size=300))
def test_any_text_parses_or_raises_invalid_identifier(text: str) -> None:
    try:
        ident = parse_identifier(text)
    except InvalidIdentifier:
        return
    assert ident.type in ("dns", "ip")
    assert ident.value == ident.value.strip()
    if ident.type == "dns":
        assert len(ident.value) <= 253
        assert ident.value.isascii()
        assert ident.value == ident.value.lower()
