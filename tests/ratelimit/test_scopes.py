"""Scope keys: registered domains from the Public Suffix List, IP addresses, exact sets."""

from __future__ import annotations

import pytest

from acmecerts.errors import InvalidIdentifier
from acmecerts.protocol.identifiers import parse_identifiers
from acmecerts.ratelimit import identifier_set_key, registered_domain


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("example.com", "example.com"),
        ("www.example.com", "example.com"),
        ("a.b.example.co.uk", "example.co.uk"),
        ("*.example.com", "example.com"),
        ("*.a.b.example.co.uk", "example.co.uk"),
        ("WWW.Example.COM", "example.com"),
        # private section of the PSL: each user of github.io is its own domain
        ("foo.github.io", "foo.github.io"),
        ("a.foo.github.io", "foo.github.io"),
        # wildcard PSL rule *.ck with the exception !www.ck
        ("a.b.ck", "a.b.ck"),
        ("x.www.ck", "www.ck"),
        # a name that is itself a public suffix counts as itself
        ("co.uk", "co.uk"),
        # IDNs count by their A-label, whichever form was given
        ("bücher.de", "xn--bcher-kva.de"),
        ("www.xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("www.例え.jp", "xn--r8jz45g.jp"),
        ("shop.例え.公司.cn", "xn--r8jz45g.xn--55qx5d.cn"),
        # an unknown TLD: the last label is the public suffix
        ("a.b.internal-test", "b.internal-test"),
    ],
)
def test_registered_domain(name: str, expected: str) -> None:
    assert registered_domain(name) == expected


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("192.0.2.8", "192.0.2.8"),  # IPv4 counts per address
        ("2001:db8:1:2::5", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),  # same /64
        ("2001:db8:1:3::5", "2001:db8:1:3::/64"),  # the next /64
        ("[2001:DB8::1]", "2001:db8::/64"),
    ],
)
def test_ip_addresses_count_per_address_or_64(address: str, expected: str) -> None:
    assert registered_domain(address) == expected


def test_malformed_names_are_refused() -> None:
    with pytest.raises(InvalidIdentifier):
        registered_domain("bad..name")


def test_identifier_set_key_ignores_order_case_and_duplicates() -> None:
    one = identifier_set_key(parse_identifiers(["b.example.com", "A.example.com"]))
    two = identifier_set_key(parse_identifiers(["a.example.com", "b.example.com", "a.example.com"]))
    assert one == two == "a.example.com,b.example.com"
    assert identifier_set_key(parse_identifiers(["*.example.com"])) == "*.example.com"
    many = parse_identifiers([f"host-number-{i}.example.com" for i in range(100)])
    key = identifier_set_key(many)
    assert key.startswith("sha256:")
    assert len(key) == 71
    assert identifier_set_key(reversed(many)) == key
