"""A malicious CA cannot send the client to another host: :class:`UrlPolicy` in the transport.

Every URL the transport sends to is checked before anything is sent: the directory's
resource URLs, ``Location``, authorization, challenge, finalize and certificate URLs, and
``Link: rel="alternate"`` chains. The fake CA (``httpx.MockTransport``) answers with URLs
on ``evil.test``; the tests prove :class:`UnsafeUrl` is raised and no request reached it.
The real Pebble flow (all URLs on the directory's origin) still works under the
default policy: the last test issues a certificate and checks every URL it requested.
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from requests_seen import on_requests

from acmecerts import (
    AcmeClient,
    BadServerResponse,
    Http01Server,
    Http01Webroot,
    InvalidInput,
    UnsafeUrl,
    UrlPolicy,
)
from acmecerts.errors import AcmeCertsError
from acmecerts.protocol.keys import generate_private_key
from acmecerts.testing import PebbleServer
from acmecerts.transport._policy import _MAX_ACCEPTED, origin_of
from tests.security._fake_ca import CA, EVIL, FakeCa, make_chain

pytestmark = pytest.mark.anyio

DIRECTORY = f"{CA}/directory"


# --------------------------------------------------------------------------- the policy


class _CountingPolicy(UrlPolicy):
    """A narrowing policy (allows all the default does) that counts the URLs it parses."""

    def __init__(self) -> None:
        super().__init__()
        self.parsed: list[str] = []

    def checked(self, url: str, *, directory_url: str) -> httpx.URL:
        self.parsed.append(url)
        return super().checked(url, directory_url=directory_url)


def test_the_memo_of_checked_urls_forgets_the_least_recently_used_only() -> None:
    # A fleet larger than the memo (a renewalInfo URL per certificate) must not make the
    # memo start over: the hot URLs stay parsed once, the memo stays bounded.
    policy = _CountingPolicy()
    bound = policy.bind(DIRECTORY)
    hot = f"{CA}/new-order"
    many = [f"{CA}/renewal-info/aaaa.{i:06d}" for i in range(_MAX_ACCEPTED + 500)]
    for i, url in enumerate(many):
        assert str(bound.checked(url)) == url
        if i % 100 == 0:
            assert str(bound.checked(hot)) == hot
        assert len(bound._accepted) <= _MAX_ACCEPTED
    assert policy.parsed.count(hot) == 1  # used often: never forgotten
    recent = many[-1]
    bound.checked(recent)
    assert policy.parsed.count(recent) == 1  # still remembered
    bound.checked(many[0])  # forgotten (least recently used): checked and parsed again
    assert policy.parsed.count(many[0]) == 2
    with pytest.raises(UnsafeUrl):  # a refused URL is never remembered as accepted
        bound.checked(f"{EVIL}/x")
    with pytest.raises(UnsafeUrl):
        bound.checked(f"{EVIL}/x")


@pytest.mark.parametrize(
    "url",
    [
        f"{CA}/order/1",
        "https://CA.test/order/1",
        "https://ca.test:443/x",
        "https://ca.test./x",
        f"{CA}/x?y=1#z",
    ],
)
def test_the_directory_origin_is_allowed(url: str) -> None:
    assert UrlPolicy().check(url, directory_url=DIRECTORY) == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (f"{EVIL}/order/1", "origin https://evil.test is not allowed"),
        ("https://ca.test.evil.test/x", "not allowed"),
        ("https://evil.test/https://ca.test/x", "not allowed"),
        ("https://ca.test:8443/x", "origin https://ca.test:8443 is not allowed"),
        ("http://ca.test/x", "not https"),
        ("https://user:pw@ca.test/x", "credentials"),
        ("https://ca.test@evil.test/x", "not allowed"),
        ("ftp://ca.test/x", "not a usable URL"),
        ("/relative/path", "not a usable URL"),
        ("", "not a usable URL"),
        ("https://[::1/x", "not a usable URL"),
        ("https://127.0.0.1/x", "not allowed"),
        ("https://169.254.169.254/latest/meta-data/", "not allowed"),
    ],
)
def test_other_origins_are_refused(url: str, reason: str) -> None:
    with pytest.raises(UnsafeUrl, match=reason) as caught:
        UrlPolicy().check(url, directory_url=DIRECTORY)
    error = caught.value
    assert isinstance(error, BadServerResponse)
    assert error.reached_ca is False
    assert error.allowed_origins == ("https://ca.test",)
    assert not UrlPolicy().allows(url, directory_url=DIRECTORY)


def test_internationalised_hosts_compare_as_a_labels() -> None:
    policy = UrlPolicy()
    assert policy.allows(
        "https://xn--bcher-kva.example/x", directory_url="https://Bücher.example/d"
    )
    assert not policy.allows("https://bucher.example/x", directory_url="https://bücher.example/d")


def test_allowed_origins_add_hosts() -> None:
    policy = UrlPolicy(
        allowed_origins=["https://CDN.example/ignored/path", "https://ari.test:8443"]
    )
    assert policy.allowed_origins == ("https://cdn.example", "https://ari.test:8443")
    assert policy.allows("https://cdn.example/cert/1", directory_url=DIRECTORY)
    assert policy.allows("https://ari.test:8443/renewalInfo/x", directory_url=DIRECTORY)
    assert policy.allows(f"{CA}/order", directory_url=DIRECTORY)
    assert not policy.allows("https://ari.test/renewalInfo/x", directory_url=DIRECTORY)
    assert not policy.allows("http://cdn.example/cert/1", directory_url=DIRECTORY)
    assert policy == UrlPolicy(
        allowed_origins=["https://ari.test:8443", "https://cdn.example"][::-1]
    )
    assert "cdn.example" in repr(policy)


@pytest.mark.parametrize("bad", [["http://cdn.example"], ["cdn.example"], "https://cdn.example"])
def test_allowed_origins_must_be_https_origins(bad: object) -> None:
    with pytest.raises(InvalidInput):
        UrlPolicy(allowed_origins=bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- a hostile CA


async def test_a_directory_pointing_elsewhere_is_refused_before_any_request_there() -> None:
    ca = FakeCa()
    ca.directory["newOrder"] = f"{EVIL}/order"
    client = ca.client()
    with pytest.raises(UnsafeUrl, match=r"evil\.test"):
        await client.new_order(["example.com"])
    assert ca.hosts() == {"ca.test"}
    assert ca.paths() == ["/directory"]  # refused as a whole, when fetched


async def test_a_new_nonce_url_elsewhere_is_refused() -> None:
    ca = FakeCa()
    ca.directory["newNonce"] = "http://ca.test/nonce"
    with pytest.raises(UnsafeUrl, match="not https"):
        await ca.client().transport.new_nonce()
    assert ca.paths() == ["/directory"]


async def test_allowed_origins_let_a_directory_use_another_host() -> None:
    ca = FakeCa()
    ca.directory["renewalInfo"] = "https://ari.ca.test/renewal-info"
    client = ca.client(url_policy=UrlPolicy(allowed_origins=["https://ari.ca.test"]))
    directory = await client.directory()
    assert directory.renewal_info == "https://ari.ca.test/renewal-info"


async def test_an_order_location_elsewhere_is_never_polled(tmp_path: Path) -> None:
    ca = FakeCa()
    ca.new_order["status"] = "processing"
    ca.order_url = f"{EVIL}/order/1"
    key = generate_private_key()
    client = ca.client(certificate_key=key)
    with pytest.raises(UnsafeUrl):
        await client.issue(["example.com"], solver=Http01Webroot(tmp_path), private_key=key)
    assert ca.hosts() == {"ca.test"}


async def test_authorizations_on_another_host_are_refused(tmp_path: Path) -> None:
    ca = FakeCa()
    ca.new_order["status"] = "pending"
    ca.new_order["authorizations"] = [f"{EVIL}/authz/1"]
    client = ca.client()
    with pytest.raises(UnsafeUrl, match=r"evil\.test"):
        await client.issue(["example.com"], solver=Http01Webroot(tmp_path))
    assert ca.hosts() == {"ca.test"}
    assert not any(tmp_path.iterdir())  # noqa: ASYNC240 - no challenge was presented


async def test_a_finalize_url_elsewhere_is_refused(tmp_path: Path) -> None:
    ca = FakeCa()
    ca.new_order["finalize"] = f"{EVIL}/finalize/1"
    with pytest.raises(UnsafeUrl):
        await ca.client().issue(["example.com"], solver=Http01Webroot(tmp_path))
    assert ca.hosts() == {"ca.test"}


async def test_a_certificate_url_elsewhere_is_refused(tmp_path: Path) -> None:
    ca = FakeCa()
    ca.finalized["certificate"] = f"{EVIL}/cert/1"
    key = generate_private_key()
    with pytest.raises(UnsafeUrl):
        await ca.client(certificate_key=key).issue(
            ["example.com"], solver=Http01Webroot(tmp_path), private_key=key
        )
    assert ca.hosts() == {"ca.test"}


async def test_an_alternate_chain_elsewhere_is_not_fetched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The certificate is issued: the client keeps it, skips the alternate, and says so."""
    ca = FakeCa()
    key = generate_private_key()
    ca.chain_pem = make_chain(key.public_key(), ca.names, root_cn="Default Root")
    ca.cert_links = [
        f'<{EVIL}/cert/1/alt>;rel="alternate"',
        f'<{CA}/cert/1/alt>;rel="alternate"',
    ]
    client = ca.client()
    _chain, alternates = await client.download_certificate(f"{CA}/cert/1")
    assert alternates == [f"{EVIL}/cert/1/alt", f"{CA}/cert/1/alt"]
    with pytest.raises(UnsafeUrl):
        await client.download_certificate(alternates[0])

    with caplog.at_level(logging.WARNING, logger="acmecerts"):
        issued = await client.issue(
            ["example.com"],
            solver=Http01Webroot(tmp_path),
            private_key=key,
            preferred_chain="Some Other Root",
        )
    assert issued.chain.root_issuer_name == "Default Root"
    assert ca.hosts() == {"ca.test"}
    assert "/cert/1/alt" in ca.paths()  # the same-origin alternate was fetched
    assert any("evil.test" in r.getMessage() for r in caplog.records)


async def test_redirects_are_not_followed_even_by_a_callers_client() -> None:
    import httpx

    ca = FakeCa()
    ca.routes["/directory"] = lambda request: httpx.Response(
        302, headers={"Location": f"{EVIL}/directory"}
    )
    from acmecerts.transport import AcmeTransport

    transport = AcmeTransport(
        f"{CA}/directory",
        client=httpx.AsyncClient(transport=httpx.MockTransport(ca.handle), follow_redirects=True),
    )
    with pytest.raises(BadServerResponse, match="redirect"):
        await transport.directory()
    assert ca.hosts() == {"ca.test"}


async def test_every_error_is_typed() -> None:
    """UnsafeUrl is an AcmeCertsError of kind PERMANENT: retry policy does not retry it."""
    ca = FakeCa()
    ca.directory["newAccount"] = f"{EVIL}/account"
    with pytest.raises(AcmeCertsError) as caught:
        await ca.client().directory()
    assert isinstance(caught.value, UnsafeUrl)
    assert caught.value.kind.value == "permanent"


async def test_the_real_pebble_flow_passes_the_default_policy(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    """Every URL Pebble hands out shares its directory's origin: issuance just works."""
    sent: list[str] = []
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        client.subscribe(on_requests(lambda method, url: sent.append(url)))
        issued = await client.issue(["policy.example.test"], solver=http01)
        policy = client.transport.url_policy
    assert issued.names == ("policy.example.test",)
    assert policy == UrlPolicy()
    assert {origin_of(url) for url in sent} == {origin_of(pebble.directory_url)}
    assert len(sent) >= 8  # directory, nonce, account, order, authz, challenge, finalize...


class _NoCertificates(UrlPolicy):
    """A narrower policy: certificate downloads are refused."""

    __slots__ = ()

    def checked(self, url: str, *, directory_url: str) -> httpx.URL:
        if "/certZ/" in url:
            raise UnsafeUrl(f"no downloads from {url}", url=url, allowed_origins=())
        return super().checked(url, directory_url=directory_url)


async def test_a_subclass_narrowing_the_policy_is_obeyed_by_the_transport(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    sent: list[str] = []
    async with AcmeClient(
        pebble.directory_url,
        ca_bundle=pebble.ca_bundle,
        url_policy=_NoCertificates(),
    ) as client:
        client.subscribe(on_requests(lambda method, url: sent.append(url)))
        with pytest.raises(UnsafeUrl, match="no downloads"):
            await client.issue(["narrow.example.test"], solver=http01)
    assert any("/finalize-order/" in url for url in sent)
    assert not any("/certZ/" in url for url in sent)  # refused before anything was sent
