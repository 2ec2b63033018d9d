"""Egress proxies: the environment's and ``proxy=``, through a real tinyproxy to a real Pebble.

The first half reads ``NO_PROXY`` and the proxy variables as curl and httpx do (no network).
The second half issues certificates from Pebble through Debian's ``tinyproxy`` (started on
loopback by ``proxy_factory``): its log shows each ``CONNECT`` it was asked, so a test
proves that the requests went through it (one ``CONNECT`` per connection the pool opened)
or that none did.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from typing import TYPE_CHECKING

import httpx
import pytest
from cli_support import free_port

from acmecerts import (
    AcmeClient,
    ConnectError,
    ErrorKind,
    Http01Server,
    InvalidInput,
    ProxyConfig,
    ProxyError,
    RequestRetry,
)
from acmecerts.transport import AcmeTransport, Http11Pool, ProxyFailed
from acmecerts.transport._proxy import resolve_proxy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from conftest import ProxyFactory

    from acmecerts.testing import PebbleServer


# -- which requests go through which proxy (no network) ---------------------------------------

PROXY = "http://proxy.example:3128"

NO_PROXY_CASES = [
    # (no_proxy, url requested, direct?)
    ("", "https://ca.example/dir", False),
    ("*", "https://ca.example/dir", True),
    (" * ", "https://ca.example/dir", True),
    ("ca.example", "https://ca.example/dir", True),
    ("ca.example", "https://acme.ca.example/dir", True),
    ("ca.example", "https://badca.example/dir", False),
    (".ca.example", "https://ca.example/dir", True),
    (".ca.example", "https://x.y.ca.example/dir", True),
    ("*.ca.example", "https://x.ca.example/dir", True),
    ("CA.Example.", "https://ca.example./dir", True),
    ("example", "https://ca.example/dir", True),
    ("other.example, ca.example", "https://ca.example/dir", True),
    ("other.example,,  ,ca.example", "https://ca.example/dir", True),
    ("other.example", "https://ca.example/dir", False),
    ("localhost", "https://localhost:14000/dir", True),
    ("localhost", "https://127.0.0.1:14000/dir", False),  # names are not resolved
    ("127.0.0.1", "https://127.0.0.1:14000/dir", True),
    ("127.0.0.1", "https://127.0.0.2:14000/dir", False),
    ("127.0.0.0/8", "https://127.9.8.7/dir", True),
    ("10.0.0.0/8", "https://127.0.0.1/dir", False),
    ("10.0.0.0/8", "https://10.0.0.0.example/dir", False),  # a name, not an address
    ("::1", "https://[::1]:14000/dir", True),
    ("[::1]", "https://[::1]/dir", True),
    ("fd00::/8", "https://[fd12::1]/dir", True),
    ("fd00::/8", "https://[fe80::1]/dir", False),
    ("ca.example:8443", "https://ca.example:8443/dir", True),
    ("ca.example:8443", "https://ca.example/dir", False),
    ("ca.example:443", "https://ca.example/dir", True),  # the default port counts
    ("127.0.0.1:14000", "https://127.0.0.1:14000/dir", True),
    ("127.0.0.1:14000", "https://127.0.0.1:14001/dir", False),
    ("[::1]:8443", "https://[::1]:8443/dir", True),
    ("[::1]:8443", "https://[::1]:443/dir", False),
    ("bücher.example", "https://www.xn--bcher-kva.example/dir", True),
]


@pytest.mark.parametrize(("no_proxy", "url", "direct"), NO_PROXY_CASES)
def test_no_proxy_matches_as_curl_does(no_proxy: str, url: str, direct: bool) -> None:
    config = ProxyConfig(PROXY, no_proxy=no_proxy)
    assert config.proxy_for(url) == (None if direct else "http://proxy.example:3128")
    from_env = ProxyConfig.from_env({"HTTPS_PROXY": PROXY, "NO_PROXY": no_proxy})
    assert from_env.proxy_for(url) == config.proxy_for(url)


def test_no_proxy_as_a_list_and_normalised() -> None:
    config = ProxyConfig(
        PROXY, no_proxy=[".Corp.Example", "10.0.0.0/8", "::1", "[::1]:8443", "h:80"]
    )
    assert config.no_proxy == ("corp.example", "10.0.0.0/8", "::1", "[::1]:8443", "h:80")
    assert ProxyConfig(PROXY, no_proxy="*").no_proxy == ("*",)
    assert not ProxyConfig(PROXY, no_proxy="*")  # nothing goes through a proxy


@pytest.mark.parametrize("entry", ["a:b:c:d:port", "host:99999", "10.0.0.0/99", "[::1", "a b/c"])
def test_a_bad_no_proxy_entry_is_refused_when_given_and_skipped_from_the_environment(
    entry: str,
) -> None:
    with pytest.raises(InvalidInput, match="no_proxy"):
        ProxyConfig(PROXY, no_proxy=f"ok.example,{entry}")
    config = ProxyConfig.from_env({"HTTPS_PROXY": PROXY, "NO_PROXY": f"ok.example,{entry}"})
    assert config.proxy_for("https://ok.example/") is None
    assert config.proxy_for("https://ca.example/") == "http://proxy.example:3128"


def test_environment_precedence() -> None:
    env = {
        "https_proxy": "http://lower:1",
        "HTTPS_PROXY": "http://upper:2",
        "HTTP_PROXY": "http://plain:3",
        "ALL_PROXY": "http://every:4",
    }
    config = ProxyConfig.from_env(env)
    assert config.https == "http://lower:1"  # lower case wins
    assert config.http == "http://plain:3"
    assert ProxyConfig.from_env({**env, "https_proxy": ""}).https == "http://upper:2"
    only_all = ProxyConfig.from_env({"all_proxy": "every:4"})  # no scheme: http://
    assert (only_all.https, only_all.http) == ("http://every:4", "http://every:4")
    # httpoxy: under CGI, HTTP_PROXY comes from the client's Proxy: header
    cgi = ProxyConfig.from_env({"HTTP_PROXY": "http://evil:5", "REQUEST_METHOD": "GET"})
    assert cgi.http is None
    assert ProxyConfig.from_env({"http_proxy": "http://ok:6", "REQUEST_METHOD": "GET"}).http
    assert not ProxyConfig.from_env({})
    assert not ProxyConfig.from_env({"HTTPS_PROXY": "  ", "NO_PROXY": "x"})
    assert ProxyConfig.from_env({"no_proxy": "a.example", "NO_PROXY": "b.example"}).no_proxy == (
        "a.example",
    )


def test_per_scheme_proxies_and_the_default_port() -> None:
    config = ProxyConfig("http://every.example", https="secure.example:8080")
    assert config.proxy_for("https://ca.example/") == "http://secure.example:8080"
    assert config.proxy_for("http://ca.example/") == "http://every.example:80"
    assert ProxyConfig(http="http://[::1]:3128").proxy_for("http://x/") == "http://[::1]:3128"
    assert ProxyConfig(http="http://[::1]:3128").proxy_for("https://x/") is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("socks5://user:s3cret@proxy.example:1080", "only http:// proxies"),
        ("https://user:s3cret@proxy.example:443", "only http:// proxies"),
        ("http://user:s3cret@:3128", "names no proxy host"),
        ("http://user:s3cret@proxy.example:notaport", "not a proxy URL"),
    ],
)
def test_a_bad_proxy_url_is_invalid_input_without_its_credentials(value: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=words) as caught:
        ProxyConfig(value)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(InvalidInput, match="HTTPS_PROXY") as from_env:
        ProxyConfig.from_env({"HTTPS_PROXY": value})
    assert "s3cret" not in str(from_env.value)


def test_credentials_are_never_shown() -> None:
    config = ProxyConfig("http://us%40er:p%3Ass@proxy.example:3128", no_proxy="x.example")
    shown = [repr(config), str(config.https), str(config.http), repr(config.route("https", "a", 1))]
    for text in shown:
        assert "p%3Ass" not in text
        assert "p:ss" not in text
        assert "us@er" not in text
    assert config.https == "http://proxy.example:3128"
    route = config.route("https", "ca.example", 443)
    assert route is not None
    # percent-decoded, as curl sends them
    assert route.authorization == b"Basic " + base64.b64encode(b"us@er:p:ss")


def test_what_proxy_takes() -> None:
    env = {"HTTPS_PROXY": PROXY}
    from_env = resolve_proxy("env", env)
    assert from_env is not None
    assert from_env.https == "http://proxy.example:3128"
    assert resolve_proxy("env", {}) is None  # no proxy configured: nothing to look up
    assert resolve_proxy(None, env) is None
    explicit = resolve_proxy("http://other.example:8080", env)
    assert explicit is not None
    assert explicit.https == "http://other.example:8080"
    assert resolve_proxy(ProxyConfig(PROXY, no_proxy="*"), env) is None
    with pytest.raises(InvalidInput, match="proxy must be"):
        resolve_proxy(3128, env)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_proxy_cannot_be_given_with_a_ready_client_or_transport() -> None:
    async with httpx.AsyncClient() as client:
        with pytest.raises(InvalidInput, match="proxy cannot be given with client"):
            AcmeTransport("https://ca.example/dir", client=client, proxy=None)
    async with AcmeTransport("https://ca.example/dir", proxy=None) as transport:
        with pytest.raises(InvalidInput, match="proxy cannot be given with transport"):
            AcmeClient("https://ca.example/dir", transport=transport, proxy=PROXY)


@pytest.mark.anyio
async def test_the_environment_is_read_when_the_client_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("https_proxy", "proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost")
    async with AcmeClient("https://ca.example/dir") as client:
        proxy = client.transport.proxy
        assert proxy is not None
        assert proxy.proxy_for("https://ca.example/dir") == "http://proxy.example:3128"
        assert proxy.proxy_for("https://localhost/dir") is None
    async with AcmeClient("https://ca.example/dir", proxy=None) as direct:
        assert direct.transport.proxy is None
    monkeypatch.setenv("https_proxy", "socks5://proxy.example:1080")
    with pytest.raises(InvalidInput, match="https_proxy: only http:// proxies"):
        AcmeClient("https://ca.example/dir")


# -- through a real proxy to a real Pebble ---------------------------------------------------

pebble_tests = pytest.mark.timeout(90)


def _pebble_authority(pebble: PebbleServer) -> str:
    url = httpx.URL(pebble.directory_url)
    return f"{url.host}:{url.port}"


@pytest.fixture
async def http01(pebble: PebbleServer) -> AsyncIterator[Http01Server]:
    async with Http01Server(host="127.0.0.1", port=pebble.http_port) as solver:
        yield solver


@pebble_tests
@pytest.mark.anyio
@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
async def test_issuance_goes_through_the_environments_proxy(
    pebble: PebbleServer,
    proxy_factory: ProxyFactory,
    http01: Http01Server,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    proxy = proxy_factory()
    monkeypatch.setenv(variable, proxy.url)
    name = f"via-{variable.lower().replace('_', '-')}.example.test"
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        issued = await client.issue([name], solver=http01)
        pool = client.transport._pool
        assert pool is not None
        opened = pool.connections_opened
        sent = client.transport.request_count
    assert issued.names == (name,)
    connects = proxy.connects()
    # every connection the pool opened is one CONNECT to Pebble, and only to Pebble
    assert connects == [_pebble_authority(pebble)] * opened, proxy.log_text()
    assert 1 <= opened < sent  # kept alive: far fewer tunnels than requests


@pebble_tests
@pytest.mark.anyio
async def test_http2_through_httpx_goes_through_the_proxy_too(
    pebble: PebbleServer,
    proxy_factory: ProxyFactory,
    http01: Http01Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = proxy_factory()
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, http2=True) as client:
        assert client.transport._pool is None  # httpx's transport, not ours
        await client.issue(["via-h2.example.test"], solver=http01)
    connects = proxy.connects()
    assert connects, proxy.log_text()
    assert set(connects) == {_pebble_authority(pebble)}


@pebble_tests
@pytest.mark.anyio
@pytest.mark.parametrize(
    "no_proxy", ["127.0.0.1,localhost", "localhost, 127.0.0.1", ".example,127.0.0.0/8", "*"]
)
async def test_no_proxy_for_the_ca_connects_directly(
    pebble: PebbleServer,
    proxy_factory: ProxyFactory,
    http01: Http01Server,
    monkeypatch: pytest.MonkeyPatch,
    no_proxy: str,
) -> None:
    proxy = proxy_factory()
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client:
        await client.issue(["direct.example.test"], solver=http01)
        pool = client.transport._pool
        assert pool is not None
        assert pool.connections_opened >= 1
    assert proxy.connects() == []
    assert proxy.requests() == []


@pebble_tests
@pytest.mark.anyio
async def test_an_explicit_proxy_wins_over_the_environment(
    pebble: PebbleServer,
    proxy_factory: ProxyFactory,
    http01: Http01Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chosen = proxy_factory()
    ignored = proxy_factory()
    monkeypatch.setenv("HTTPS_PROXY", ignored.url)
    monkeypatch.setenv("NO_PROXY", "")
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, proxy=chosen.url
    ) as client:
        await client.issue(["explicit.example.test"], solver=http01)
    assert chosen.connects(), chosen.log_text()
    assert ignored.connects() == []
    # and proxy=None: directly, whatever the environment says
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, proxy=None) as client:
        await client.issue(["explicit-direct.example.test"], solver=http01)
    assert ignored.connects() == []
    # a ProxyConfig with exceptions: the exception wins for the CA's host
    config = ProxyConfig(chosen.url, no_proxy="127.0.0.1")
    before = len(chosen.connects())
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, proxy=config) as client:
        await client.directory()
    assert len(chosen.connects()) == before


@pebble_tests
@pytest.mark.anyio
async def test_a_proxy_with_credentials(
    pebble: PebbleServer, proxy_factory: ProxyFactory, http01: Http01Server
) -> None:
    proxy = proxy_factory(basic_auth=("acme", "pa55word"))
    url = proxy.url_with("acme", "pa55word")
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle, proxy=url) as client:
        await client.issue(["with-credentials.example.test"], solver=http01)
    assert proxy.connects(), proxy.log_text()


@pebble_tests
@pytest.mark.anyio
@pytest.mark.parametrize("http2", [False, True], ids=["h1-pool", "httpx-h2"])
@pytest.mark.parametrize(
    ("credentials", "status", "words"),
    [
        (None, 407, "the proxy wants credentials"),
        # tinyproxy answers wrong credentials with 401, not 407
        (("acme", "wrong-s3cret"), 401, "refused the credentials"),
    ],
)
async def test_a_proxy_that_wants_other_credentials_is_a_permanent_proxy_error(
    pebble: PebbleServer,
    proxy_factory: ProxyFactory,
    http2: bool,
    credentials: tuple[str, str] | None,
    status: int,
    words: str,
) -> None:
    proxy = proxy_factory(basic_auth=("acme", "pa55word"))
    url = proxy.url if credentials is None else proxy.url_with(*credentials)
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, proxy=url, http2=http2
    ) as client:
        with pytest.raises(ProxyError) as caught:
            await client.directory()
        assert client.transport.request_count == 1  # permanent: not retried
    error = caught.value
    assert isinstance(error, ConnectError)
    assert error.proxy == proxy.url
    assert error.status_code == status
    assert error.kind is ErrorKind.PERMANENT
    assert error.reached_ca is False
    message = str(error)
    assert proxy.url in message
    assert str(status) in message
    assert pebble.directory_url in message
    assert "s3cret" not in message
    if not http2:  # httpcore's words are its own; ours say what to do
        assert words in message
    assert len(proxy.connects()) == 1


@pebble_tests
@pytest.mark.anyio
async def test_a_proxy_that_forbids_the_port_is_a_proxy_error(
    pebble: PebbleServer, proxy_factory: ProxyFactory
) -> None:
    proxy = proxy_factory(connect_ports=[443])
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, proxy=proxy.url
    ) as client:
        with pytest.raises(ProxyError, match="does not allow this destination") as caught:
            await client.directory()
    assert caught.value.status_code == 403
    assert f"refused CONNECT {_pebble_authority(pebble)}" in str(caught.value)


@pebble_tests
@pytest.mark.anyio
async def test_an_unreachable_proxy_is_a_transient_proxy_error(pebble: PebbleServer) -> None:
    port = free_port()
    retry = RequestRetry(max_attempts=2, floor=0.01, cap=0.02)
    async with AcmeClient(
        pebble.directory_url,
        ca_bundle=pebble.ca_bundle,
        proxy=f"http://user:s3cret@127.0.0.1:{port}",
        request_retry=retry,
    ) as client:
        with pytest.raises(
            ProxyError,
            match=f"cannot connect to the proxy http://127.0.0.1:{port}: connection refused",
        ):
            await client.directory()
        assert client.transport.request_count == 2  # transient: retried
    with pytest.raises(ProxyError) as caught:
        async with AcmeClient(
            pebble.directory_url,
            ca_bundle=pebble.ca_bundle,
            proxy=f"http://user:s3cret@127.0.0.1:{port}",
            request_retry=RequestRetry(max_attempts=1),
        ) as client:
            await client.directory()
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert caught.value.status_code is None
    assert "s3cret" not in str(caught.value)


@pebble_tests
@pytest.mark.anyio
async def test_the_cas_certificate_is_verified_through_the_tunnel(
    pebble: PebbleServer, proxy_factory: ProxyFactory
) -> None:
    proxy = proxy_factory()
    async with AcmeClient(pebble.directory_url, proxy=proxy.url) as client:  # no ca_bundle
        with pytest.raises(ConnectError, match="verification") as caught:
            await client.directory()
    assert not isinstance(caught.value, ProxyError)  # the proxy did its part
    assert caught.value.kind is ErrorKind.PERMANENT
    assert proxy.connects() == [_pebble_authority(pebble)]


# -- the pool's own seam: plain http through the proxy ---------------------------------------


@pebble_tests
@pytest.mark.anyio
async def test_plain_http_goes_to_the_proxy_in_absolute_form(
    pebble: PebbleServer, proxy_factory: ProxyFactory, http01: Http01Server
) -> None:
    proxy = proxy_factory()
    pool = Http11Pool(ssl_context=ssl.create_default_context(), proxy=ProxyConfig(proxy.url))
    async with httpx.AsyncClient(transport=pool) as client:
        answer = await client.get(f"http://127.0.0.1:{pebble.http_port}/nothing-here")
    assert answer.status_code == 404  # our solver answered, through the proxy
    assert proxy.requests() == [("GET", f"http://127.0.0.1:{pebble.http_port}/nothing-here")]
    assert pool.connections_opened == 1


@pebble_tests
@pytest.mark.anyio
async def test_tunnelled_and_direct_connections_are_pooled_apart(
    pebble: PebbleServer, proxy_factory: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = proxy_factory()
    port = httpx.URL(pebble.directory_url).port
    ctx = ssl.create_default_context(cafile=str(pebble.ca_bundle))
    decided: list[tuple[str, str, int]] = []
    route = ProxyConfig.route

    def counted(self: ProxyConfig, scheme: str, host: str, port: int) -> object:
        decided.append((scheme, host, port))
        return route(self, scheme, host, port)

    monkeypatch.setattr(ProxyConfig, "route", counted)
    # the same server by two names: 127.0.0.1 through the proxy, localhost directly
    pool = Http11Pool(ssl_context=ctx, proxy=ProxyConfig(proxy.url, no_proxy="localhost"))
    async with httpx.AsyncClient(transport=pool) as client:
        for _ in range(3):
            for host in ("127.0.0.1", "localhost"):
                answer = await client.get(f"https://{host}:{port}/dir")
                assert answer.status_code == 200
        assert pool.connections_opened == 2  # one each, each kept alive and reused
        assert pool.open_connections == 2
    assert proxy.connects() == [f"127.0.0.1:{port}"]
    # the proxy decision is made once per origin, not per request
    assert decided == [("https", "127.0.0.1", port), ("https", "localhost", port)]
    # and a configuration that proxies nothing costs nothing: the pool has no proxy
    assert Http11Pool(ssl_context=ctx, proxy=ProxyConfig(proxy.url, no_proxy="*")).proxy is None


@pebble_tests
@pytest.mark.anyio
async def test_off_asyncio_the_transport_sends_through_httpx_with_the_same_proxies(
    pebble: PebbleServer, proxy_factory: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under trio the pool does not run: httpx's HTTP/1.1 transport does, same proxies.

    The event loop is asyncio here; the pool is told there is none, so the transport takes
    the path it takes under trio (the same ``ClientExchange`` the fakes and HTTP/2 use).
    """
    import acmecerts.transport._pool as pool_module
    from acmecerts.transport._exchange import ClientExchange

    monkeypatch.setattr(pool_module, "_running_loop", lambda: None)
    proxy = proxy_factory()
    async with AcmeTransport(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, proxy=ProxyConfig(proxy.url)
    ) as transport:
        await transport.directory()
        await transport.new_nonce()
        assert isinstance(transport._http, ClientExchange)
        assert transport._pool is not None
        assert transport._pool.connections_opened == 0
        assert transport.request_count == 2
    assert proxy.connects() == [_pebble_authority(pebble)]  # one kept-alive connection
    refusing = proxy_factory(connect_ports=[443])
    async with AcmeTransport(
        pebble.directory_url,
        ca_bundle=pebble.ca_bundle,
        proxy=ProxyConfig(refusing.url),
        retry=RequestRetry(max_attempts=1),
    ) as transport:
        with pytest.raises(ProxyError, match="403") as caught:
            await transport.directory()
    assert caught.value.proxy == refusing.url
    assert caught.value.status_code == 403


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b"", "closed the connection without answering CONNECT"),
        (b"HTTP/1.1 200 OK\r\n\r\n\x16\x03\x01early", "sent data into the tunnel"),
        (b"HTTP/1.1 200 Connection established\r\nBad Header\r\n\r\n", "malformed"),
        (b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n", "502 Bad Gateway"),
        (None, "did not answer CONNECT"),
    ],
    ids=["closed", "early-data", "malformed", "502", "silent"],
)
async def test_a_proxy_that_answers_connect_wrongly_is_a_proxy_failure(
    answer: bytes | None, words: str
) -> None:
    """A fake proxy at the socket seam: what the pool makes of a bad answer to CONNECT."""
    asked: list[bytes] = []
    served = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            asked.append(await reader.readuntil(b"\r\n\r\n"))
            if answer is None:
                await reader.read()  # say nothing until the client gives up
            else:
                writer.write(answer)
                await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            served.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Http11Pool(
        ssl_context=ssl.create_default_context(),
        proxy=ProxyConfig(f"http://u:s3cret@127.0.0.1:{port}"),
    )
    timeouts = {"connect": 1.0, "read": 1.0, "write": 1.0, "pool": 1.0}
    try:
        assert pool.serves_here()
        with pytest.raises(ProxyFailed, match=words) as caught:
            await pool.exchange("GET", httpx.URL("https://ca.example/dir"), [], b"", timeouts)
    finally:
        await pool.aclose()
        server.close()
        await server.wait_closed()
    await asyncio.wait_for(served.wait(), 10)  # the fake proxy's side is closed too
    assert caught.value.proxy == f"http://127.0.0.1:{port}"
    assert "s3cret" not in str(caught.value)
    assert pool.open_connections == 0
    (request,) = asked
    assert request.startswith(b"CONNECT ca.example:443 HTTP/1.1\r\n")
    assert b"Host: ca.example:443\r\n" in request
    assert b"Proxy-Authorization: Basic " + base64.b64encode(b"u:s3cret") in request


@pytest.mark.anyio
async def test_proxy_failed_is_an_httpx_proxy_error() -> None:
    assert issubclass(ProxyFailed, httpx.ProxyError)
    assert issubclass(ProxyError, ConnectError)
