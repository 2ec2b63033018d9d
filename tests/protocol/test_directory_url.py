"""The directory URL is one value, parsed and checked once (:class:`acmecerts.DirectoryUrl`).

One rule for its scheme everywhere: https only, loopback test CAs included.
"""

from __future__ import annotations

import copy

import pytest

from acmecerts import AcmeClient, DirectoryUrl, InvalidInput, UrlPolicy
from acmecerts.cli._state import directory_slug
from acmecerts.ratelimit import LETS_ENCRYPT, NO_LIMITS, model_for_directory
from acmecerts.storage import KeyLayout
from acmecerts.storage.keys import ca_slug
from acmecerts.transport import AcmeTransport

LE = "https://acme-v02.api.letsencrypt.org/directory"


def test_a_directory_url_is_its_string_with_its_parts_parsed() -> None:
    url = DirectoryUrl("https://CA.Example.:14000/acme/dir?x=1")
    assert url == "https://CA.Example.:14000/acme/dir?x=1"
    assert isinstance(url, str)
    assert type(str(url)) is str
    assert (url.host, url.port, url.origin) == ("ca.example", 14000, ("https", "ca.example", 14000))
    assert DirectoryUrl(LE).port == 443
    assert DirectoryUrl("https://bücher.example/dir").host == "xn--bcher-kva.example"
    assert DirectoryUrl("https://[::1]:14000/dir").origin == ("https", "::1", 14000)


def test_it_is_parsed_once_and_immutable() -> None:
    url = DirectoryUrl(LE)
    assert DirectoryUrl(url) is url
    with pytest.raises(AttributeError):
        url.host = "evil.example"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del url.port
    assert copy.deepcopy(url) == url  # through __reduce__, as pickle does
    assert copy.deepcopy(url).host == url.host
    assert copy.copy(url) == url
    assert {url: 1}[LE] == 1  # hashes as its string


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("http://127.0.0.1:14000/dir", "https://"),
        ("http://ca.example/dir", "https://"),
        ("ftp://ca.example/dir", "https://"),
        ("acme-v02.api.letsencrypt.org/directory", "https://"),
        ("https:///dir", "https://"),
        ("", "https://"),
        ("not a url", "invalid directory URL"),
        (" https://ca.example/dir", "invalid directory URL"),
        ("https://ca.example/dir\n", "invalid directory URL"),
        ("https://exa mple/dir", "invalid directory URL"),
        ("https://[bad/dir", "invalid directory URL"),
        ("https://[::zz]/dir", "IPv6"),
        ("https://ca.example:http/dir", "invalid directory URL"),
        ("https://ca.example:70000/dir", "invalid directory URL"),
        ("https://ca.example:0/dir", "port 0"),
        ("https://user:pw@ca.example/dir", "credentials"),
        ("https://ca!.example/dir", "host name"),
        (3, "string"),
        (None, "string"),
        (b"https://ca.example/dir", "string"),
    ],
)
def test_a_malformed_directory_url_is_invalid_input(value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        DirectoryUrl(value)  # type: ignore[arg-type]
    # ... with the same error wherever it enters
    with pytest.raises(InvalidInput, match=message):
        AcmeClient(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=message):
        AcmeTransport(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=message):
        model_for_directory(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=message):
        UrlPolicy().bind(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=message):
        directory_slug(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=message):  # the store's name for the CA
        ca_slug(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=message):
        KeyLayout(value)  # type: ignore[arg-type]


def test_every_entry_takes_the_value_and_passes_it_on() -> None:
    url = DirectoryUrl(LE)
    client = AcmeClient(url)
    assert client.transport.directory_url is url  # not parsed again
    assert model_for_directory(url) is LETS_ENCRYPT
    assert model_for_directory("https://127.0.0.1:14000/dir") is NO_LIMITS
    assert UrlPolicy().bind(url).directory_url is url
    assert UrlPolicy().bind(url).origins == (url.origin,)
    assert KeyLayout(url).ca == KeyLayout(LE).ca
    assert KeyLayout(url).directory_url is url
    # a str is still taken, and becomes the value
    from_text = AcmeClient(LE)
    assert isinstance(from_text.transport.directory_url, DirectoryUrl)
    assert from_text.transport.directory_url == LE
    assert repr(from_text.transport) == f"AcmeTransport({LE!r})"  # reprs unchanged


def test_the_legacy_slug_is_unchanged() -> None:
    assert directory_slug("https://127.0.0.1:14000/dir") == "127.0.0.1_14000_dir"
    assert directory_slug(DirectoryUrl(LE)) == "acme-v02.api.letsencrypt.org_directory"
