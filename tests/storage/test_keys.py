"""The key layout: names from the network or the operator never become paths."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acmecerts import DirectoryUrl
from acmecerts.errors import InvalidInput
from acmecerts.storage import KeyLayout
from acmecerts.storage.keys import (
    MAX_SEGMENT_LENGTH,
    ca_slug,
    certificate_slug,
    validate_key,
    validate_prefix,
    validate_segment,
)
from tests.storage.contract import INVALID_KEYS

LE = "https://acme-v02.api.letsencrypt.org/directory"


def test_layout_names_everything_under_the_ca_and_account() -> None:
    layout = KeyLayout(LE, account="prod")
    ca = layout.ca
    base = f"{ca}/accounts/prod/"

    assert ca.startswith("acme-v02.api.letsencrypt.org-directory-")
    assert layout.account_prefix == base
    assert layout.account_key() == f"{base}key.pem"
    assert layout.account_meta() == f"{base}account.json"
    assert layout.order("www.example.com") == f"{base}orders/www.example.com.json"
    assert layout.attempt_state("default.web") == f"{base}attempts/default.web.json"
    assert layout.ledger() == f"{ca}/ledger.json"
    assert layout.account_lock() == f"{base}account"
    assert layout.certificate_lock("a.example") == f"{base}certificates/a.example"

    cert = layout.certificate("default.my-ingress")
    assert cert.prefix == f"{base}certificates/default.my-ingress/"
    assert (cert.record, cert.cert, cert.privkey, cert.meta) == (
        f"{cert.prefix}certificate.json",
        f"{cert.prefix}cert.pem",
        f"{cert.prefix}privkey.pem",
        f"{cert.prefix}meta.json",
    )
    assert cert.prefix.startswith(layout.certificates_prefix())
    assert layout.order("x").startswith(layout.orders_prefix())
    retired = layout.retired(["dns:b.example", "dns:a.example", "dns:a.example"])
    assert retired.startswith(f"{base}retired/")
    assert retired.startswith(layout.retired_prefix())
    assert retired == layout.retired(["dns:a.example", "dns:b.example"])  # a set
    assert retired != layout.retired(["dns:a.example"])
    with pytest.raises(InvalidInput):
        layout.retired([])


def test_every_name_is_a_valid_key() -> None:
    layout = KeyLayout("https://127.0.0.1:14000/dir")
    cert = layout.certificate("*.example.com")
    for key in (
        layout.account_key(),
        layout.account_meta(),
        layout.ledger(),
        layout.order("*.example.com"),
        layout.attempt_state("*.example.com"),
        layout.retired(["dns:*.example.com", "ip:192.0.2.1"]),
        layout.account_lock(),
        layout.certificate_lock("*.example.com"),
        cert.cert,
        cert.privkey,
        cert.meta,
    ):
        assert validate_key(key) == key


def test_the_layout_never_makes_a_key_the_prefix_of_another() -> None:
    layout = KeyLayout(LE)
    keys = [
        layout.account_key(),
        layout.account_meta(),
        layout.ledger(),
        layout.order("a"),
        layout.attempt_state("a"),
        layout.retired(["dns:a"]),
        layout.certificate("a").record,
        layout.certificate("a").cert,
        layout.certificate("a").privkey,
        layout.certificate("a").meta,
    ]
    locks = [layout.account_lock(), layout.certificate_lock("a"), layout.certificate_lock("b")]
    for names in (keys, locks):
        for name in names:
            assert not any(other.startswith(f"{name}/") for other in names)


def test_ca_slug_distinguishes_directories() -> None:
    slugs = {
        ca_slug(LE),
        ca_slug("https://acme-staging-v02.api.letsencrypt.org/directory"),
        ca_slug("https://127.0.0.1:14000/dir"),
        ca_slug("https://127.0.0.1:15000/dir"),
        ca_slug("https://[::1]:14000/dir"),
        ca_slug("https://ca.example/acme/directory?profile=a"),
        ca_slug("https://ca.example/acme/directory?profile=b"),
    }
    assert len(slugs) == 7
    assert ca_slug("https://127.0.0.1:14000/dir").startswith("127.0.0.1-14000-dir-")


def test_ca_slug_normalises_what_does_not_matter() -> None:
    assert ca_slug("HTTPS://Acme.Example:443/directory") == ca_slug(
        "https://acme.example/directory"
    )


#: The slugs stores hold today: a change here would orphan every stored account and
#: certificate of that CA (they would be looked for under another name).
PINNED_SLUGS = {
    LE: "acme-v02.api.letsencrypt.org-directory-5e76d315",
    "https://acme-staging-v02.api.letsencrypt.org/directory": (
        "acme-staging-v02.api.letsencrypt.org-directory-67f27506"
    ),
    "https://acme.zerossl.com/v2/DV90": "acme.zerossl.com-v2-dv90-562d2d8e",
    "https://api.buypass.com/acme/directory": "api.buypass.com-acme-directory-15df22c5",
    "https://api.test4.buypass.no/acme/directory": "api.test4.buypass.no-acme-directory-c7c93fe6",
    "https://dv.acme-v02.api.pki.goog/directory": "dv.acme-v02.api.pki.goog-directory-5512775e",
    "https://dv.acme-v02.test-api.pki.goog/directory": (
        "dv.acme-v02.test-api.pki.goog-directory-17c3fc98"
    ),
    "https://acme.ssl.com/sslcom-dv-rsa": "acme.ssl.com-sslcom-dv-rsa-cb024d92",
    "https://acme.ssl.com/sslcom-dv-ecc": "acme.ssl.com-sslcom-dv-ecc-2d40c326",
    "https://acme.sectigo.com/v2/DV": "acme.sectigo.com-v2-dv-90be5d75",
    "https://acme-api.actalis.com/acme/directory": "acme-api.actalis.com-acme-directory-aaeffb8a",
    # Pebble, step-ca, IPv6, and what urlsplit kept as given (an IDN, a trailing dot)
    "https://127.0.0.1:14000/dir": "127.0.0.1-14000-dir-6d8ba56d",
    "https://localhost:14000/dir": "localhost-14000-dir-929abca7",
    "https://ca.internal:9000/acme/acme/directory": "ca.internal-9000-acme-acme-directory-cf86adaa",
    "https://[::1]:14000/dir": "1-14000-dir-95429408",
    "https://acme-v02.api.letsencrypt.org:443/directory": (
        "acme-v02.api.letsencrypt.org-directory-5e76d315"
    ),
    "https://CA.Example/Dir?x=1": "ca.example-dir-ce3cf80b",
    "https://bücher.example/dir": "b-cher.example-dir-dd213dea",
    "https://ca.example./dir": "ca.example.-dir-08539cc7",
}


@pytest.mark.parametrize(("url", "slug"), PINNED_SLUGS.items())
def test_the_slugs_of_stored_layouts_do_not_change(url: str, slug: str) -> None:
    assert ca_slug(url) == slug
    assert ca_slug(DirectoryUrl(url)) == slug
    assert KeyLayout(url).ca == slug


@pytest.mark.parametrize(
    "url",
    [
        "",
        "acme.example/directory",
        "ftp://acme.example/",
        "https:///nohost",
        "https://h:x/",
        # as DirectoryUrl reads them: no client talks to these, so they name no CA
        "http://127.0.0.1:14000/dir",
        "http://acme.example/directory",
        " https://acme.example/directory",
        "https://user:pw@acme.example/directory",
    ],
)
def test_ca_slug_refuses_what_is_no_directory_url(url: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        DirectoryUrl(url)
    with pytest.raises(InvalidInput) as slug_refused:
        ca_slug(url)
    assert str(slug_refused.value) == str(refused.value)
    with pytest.raises(InvalidInput):
        KeyLayout(url)


def test_a_layout_holds_the_parsed_directory_url() -> None:
    url = DirectoryUrl(LE)
    assert KeyLayout(url).directory_url is url
    assert isinstance(KeyLayout(LE).directory_url, DirectoryUrl)
    assert KeyLayout(LE).directory_url == LE


def test_certificate_slug() -> None:
    assert certificate_slug("default.my-ingress") == "default.my-ingress"
    assert certificate_slug("WWW.Example.COM") == "www.example.com"
    assert certificate_slug("*.example.com") == "_wildcard_.example.com"
    long_name = "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + ".example.com"
    slug = certificate_slug(long_name)
    assert len(slug) <= 120
    assert slug != certificate_slug(long_name.replace("c", "d"))


@pytest.mark.parametrize(
    "name",
    ["", "../etc", "a/b", "a..b", ".hidden", "a b", "b\u00fccher.de", "_wildcard_.x", "x\x00"],
)
def test_certificate_slug_refuses(name: str) -> None:
    with pytest.raises(InvalidInput):
        certificate_slug(name)


@pytest.mark.parametrize("key", INVALID_KEYS)
def test_invalid_keys(key: str) -> None:
    with pytest.raises(InvalidInput):
        validate_key(key)


def test_valid_keys_and_prefixes() -> None:
    for key in ("a", "a/b", "_wildcard_.example.com/cert.pem", "x" * MAX_SEGMENT_LENGTH):
        assert validate_key(key) == key
    for prefix in ("", "a", "a/", "a/b/ce", "a/."):
        assert validate_prefix(prefix) == prefix


def test_account_names_are_segments() -> None:
    with pytest.raises(InvalidInput):
        KeyLayout(LE, account="../other")
    assert KeyLayout(LE, account="staging-2").account == "staging-2"


@given(st.text(max_size=300))
def test_any_certificate_name_is_refused_or_a_safe_segment(name: str) -> None:
    try:
        slug = certificate_slug(name)
    except InvalidInput:
        return
    assert validate_segment(slug) == slug
    assert "/" not in slug
    assert ".." not in slug


@given(st.text(alphabet="abcXY.-_*19", min_size=1, max_size=150), st.text(min_size=1))
def test_different_names_get_different_slugs(name: str, other: str) -> None:
    try:
        one, two = certificate_slug(name), certificate_slug(other)
    except InvalidInput:
        return
    assert (one == two) == (name.lower() == other.lower())


@given(st.text(max_size=50))
def test_any_key_is_refused_or_stays_inside(key: str) -> None:
    try:
        validate_key(key)
    except InvalidInput:
        return
    assert not key.startswith("/")
    assert all(segment not in ("", ".", "..") for segment in key.split("/"))
    assert not any(segment.startswith(".") for segment in key.split("/"))


def test_validation_remembers_only_valid_keys_and_stays_bounded() -> None:
    from acmecerts.storage import keys as keys_module

    good = "ca/accounts/default/certificates/remembered.example/certificate.json"
    assert validate_key(good) == good
    assert good in keys_module._VALID_KEYS
    for bad in ("ca//x", "Ca/x", "ca/../x", ""):
        for _ in range(2):  # refused again: a refusal is never remembered
            with pytest.raises(InvalidInput):
                validate_key(bad)
    assert certificate_slug("*.Remembered.Example") == "_wildcard_.remembered.example"
    assert certificate_slug("*.Remembered.Example") == "_wildcard_.remembered.example"
    for _ in range(2):
        with pytest.raises(InvalidInput):
            certificate_slug("not valid.example")
    for i in range(keys_module._MAX_VALID_KEYS + 10):
        validate_key(f"many/k{i}")
        certificate_slug(f"n{i}.example")
    assert len(keys_module._VALID_KEYS) == keys_module._MAX_VALID_KEYS
    assert len(keys_module._SLUGS) == keys_module._MAX_VALID_KEYS
    # full, it forgets the oldest only (no cliff: the latest keys stay remembered)
    assert "many/k9" not in keys_module._VALID_KEYS
    assert f"many/k{keys_module._MAX_VALID_KEYS + 9}" in keys_module._VALID_KEYS
    assert "n9.example" not in keys_module._SLUGS
    assert f"n{keys_module._MAX_VALID_KEYS + 9}.example" in keys_module._SLUGS


def test_a_full_memo_of_valid_keys_is_shared_safely_by_threads() -> None:
    """Evicting from the full memo is a read then a delete: two threads must not both
    pick the same oldest key (a KeyError in whichever deletes second, seen in CI when the
    memo was full and three event loops in threads shared one FileStorage)."""
    import threading

    from acmecerts.storage import keys as keys_module

    for i in range(keys_module._MAX_VALID_KEYS):
        validate_key(f"full/k{i}")
    assert len(keys_module._VALID_KEYS) == keys_module._MAX_VALID_KEYS
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def insert(n: int) -> None:
        start.wait()
        try:
            for i in range(20_000):
                validate_key(f"t{n}/k{i}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=insert, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert len(keys_module._VALID_KEYS) == keys_module._MAX_VALID_KEYS
