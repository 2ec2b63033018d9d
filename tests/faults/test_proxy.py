"""The fault-injecting proxy, against the real Pebble: transparent by default, faults on cue."""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import json
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from acmecerts import AcmeClient, FakeClock
from acmecerts.protocol.ari import cert_id
from acmecerts.protocol.resources import parse_renewal_info
from tests.faults.proxy import (
    ALREADY_REPLACED,
    BAD_NONCE,
    RATE_LIMITED,
    AriAnswer,
    BadNonce,
    FaultProxy,
    Match,
    Reset,
    Respond,
    SlowBody,
    Stall,
    Truncate,
    jws_payload,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(30)


def _make_proxy(pebble: PebbleServer) -> FaultProxy:
    return FaultProxy(
        pebble.directory_url,
        certfile=pebble.tls_cert_path,
        keyfile=pebble.tls_key_path,
        upstream_ca=pebble.ca_bundle,
    )


def _ssl(pebble: PebbleServer) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pebble.ca_bundle))


@pytest.fixture
def proxy(pebble: PebbleServer) -> Iterator[FaultProxy]:
    with _make_proxy(pebble) as p:
        yield p


@pytest.fixture
def client(pebble: PebbleServer) -> Iterator[httpx.Client]:
    with httpx.Client(verify=_ssl(pebble), trust_env=False, timeout=5) as c:
        yield c


def _directory(client: httpx.Client, proxy: FaultProxy) -> dict[str, str]:
    response = client.get(proxy.directory_url)
    assert response.status_code == 200
    return {k: v for k, v in response.json().items() if isinstance(v, str)}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _new_account_jws(url: str, nonce: str, extra: dict[str, Any] | None = None) -> bytes:
    """A minimal ES256-signed newAccount request (RFC 8555 §7.3), built by hand.

    ``extra`` members are added to the payload.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    numbers = key.public_key().public_numbers()
    jwk = {
        "crv": "P-256",
        "kty": "EC",
        "x": _b64(numbers.x.to_bytes(32, "big")),
        "y": _b64(numbers.y.to_bytes(32, "big")),
    }
    protected = _b64(json.dumps({"alg": "ES256", "jwk": jwk, "nonce": nonce, "url": url}).encode())
    payload = _b64(json.dumps({"termsOfServiceAgreed": True, **(extra or {})}).encode())
    r, s = decode_dss_signature(
        key.sign(f"{protected}.{payload}".encode(), ec.ECDSA(hashes.SHA256()))
    )
    signature = _b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
    return json.dumps({"protected": protected, "payload": payload, "signature": signature}).encode()


def test_directory_urls_point_at_the_proxy(proxy: FaultProxy, client: httpx.Client) -> None:
    directory = _directory(client, proxy)
    assert proxy.directory_url == f"{proxy.url}/dir"
    for key in ("newNonce", "newAccount", "newOrder", "revokeCert", "keyChange"):
        assert directory[key].startswith(f"{proxy.url}/"), directory
    [recorded] = proxy.requests
    assert (recorded.method, recorded.path, recorded.status, recorded.fault) == (
        "GET",
        "/dir",
        200,
        None,
    )


def test_new_nonce_head_gets_a_replay_nonce(proxy: FaultProxy, client: httpx.Client) -> None:
    directory = _directory(client, proxy)
    response = client.head(directory["newNonce"])
    assert response.status_code == 200
    assert response.headers["Replay-Nonce"]


def test_post_is_forwarded_intact_and_location_points_at_the_proxy(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    directory = _directory(client, proxy)
    nonce = client.head(directory["newNonce"]).headers["Replay-Nonce"]
    url = directory["newAccount"]
    body = _new_account_jws(url, nonce)
    response = client.post(url, content=body, headers={"Content-Type": "application/jose+json"})
    assert response.status_code == 201, response.text
    assert response.headers["Location"].startswith(f"{proxy.url}/")
    assert proxy.requests_to("/sign-me-up", "POST")[0].body == body


def test_keep_alive_serves_every_request_on_one_connection(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    directory = _directory(client, proxy)
    for _ in range(3):
        client.head(directory["newNonce"])
    assert {r.connection for r in proxy.requests} == {1}


def test_respond_429_answers_once_then_traffic_passes(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    rule = proxy.add_rule(
        Match("/dir", "GET"), Respond(429, RATE_LIMITED, "too many", retry_after="2")
    )
    limited = client.get(proxy.directory_url)
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "2"
    assert limited.headers["Content-Type"] == "application/problem+json"
    assert limited.headers["Replay-Nonce"]
    assert limited.json() == {"type": RATE_LIMITED, "detail": "too many", "status": 429}

    assert client.get(proxy.directory_url).status_code == 200
    assert (rule.hits, rule.remaining, rule.exhausted) == (1, 0, True)
    assert [(r.status, r.fault) for r in proxy.requests] == [(429, rule.fault), (200, None)]


def test_times_none_applies_until_cleared(proxy: FaultProxy, client: httpx.Client) -> None:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
    http_date = email.utils.format_datetime(when, usegmt=True)
    proxy.add_rule(Match("/dir"), Respond(503, retry_after=http_date), times=None)
    for _ in range(4):
        response = client.get(proxy.directory_url)
        assert response.status_code == 503
        assert response.headers["Retry-After"] == http_date
    proxy.clear_rules()
    assert client.get(proxy.directory_url).status_code == 200


def test_rules_apply_in_order_and_only_to_their_match(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    directory = _directory(client, proxy)
    proxy.add_rule(Match("/nonce-plz", "HEAD"), Respond(500), times=2)
    proxy.add_rule(Match("/nonce-plz"), Respond(503))
    assert client.get(proxy.directory_url).status_code == 200  # not matched
    assert client.get(directory["newNonce"]).status_code == 503  # wrong method for the first
    statuses = [client.head(directory["newNonce"]).status_code for _ in range(3)]
    assert statuses == [500, 500, 200]
    assert [r.status for r in proxy.requests_to("/nonce-plz", "HEAD")] == statuses


def test_bad_nonce_carries_a_usable_nonce(proxy: FaultProxy, client: httpx.Client) -> None:
    directory = _directory(client, proxy)
    url = directory["newAccount"]
    proxy.add_rule(Match("/sign-me-up"), BadNonce())
    headers = {"Content-Type": "application/jose+json"}
    rejected = client.post(url, content=b"{}", headers=headers)
    assert rejected.status_code == 400
    assert rejected.json()["type"] == BAD_NONCE
    nonce = rejected.headers["Replay-Nonce"]

    accepted = client.post(url, content=_new_account_jws(url, nonce), headers=headers)
    assert accepted.status_code == 201, accepted.text


def test_reset_is_a_client_side_connection_error(proxy: FaultProxy, client: httpx.Client) -> None:
    proxy.add_rule(Match("/dir"), Reset())
    with pytest.raises(httpx.TransportError):
        client.get(proxy.directory_url)
    [recorded] = proxy.requests
    assert recorded.status is None
    assert recorded.fault == Reset()
    assert client.get(proxy.directory_url).status_code == 200  # the server lives on


def test_stall_longer_than_the_timeout_is_a_client_timeout(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    proxy.add_rule(Match("/dir"), Stall(60))  # ends early when the proxy stops
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        client.get(proxy.directory_url, timeout=0.5)
    assert time.monotonic() - started < 30  # the client's timeout, not the stall
    assert client.get(proxy.directory_url).status_code == 200  # other connections unaffected


def test_stall_shorter_than_the_timeout_only_delays(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    proxy.add_rule(Match("/dir"), Stall(0.3))
    started = time.monotonic()
    assert client.get(proxy.directory_url).status_code == 200
    assert time.monotonic() - started >= 0.3


def test_truncate_is_a_client_side_error(proxy: FaultProxy, client: httpx.Client) -> None:
    proxy.add_rule(Match("/dir"), Truncate())
    with pytest.raises(httpx.RemoteProtocolError, match=r"incomplete|complete message body"):
        client.get(proxy.directory_url)
    assert client.get(proxy.directory_url).status_code == 200


def test_slow_body_dribbles_the_body(proxy: FaultProxy, client: httpx.Client) -> None:
    size = len(client.get(proxy.directory_url).content)
    proxy.add_rule(Match("/dir"), SlowBody(bytes_per_second=size / 0.5))
    started = time.monotonic()
    response = client.get(proxy.directory_url)
    assert response.status_code == 200
    assert len(response.content) == size
    assert time.monotonic() - started >= 0.4


def test_requests_are_recorded_with_increasing_arrival_times(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    directory = _directory(client, proxy)
    for _ in range(3):
        client.head(directory["newNonce"])
    recorded = proxy.requests
    assert [(r.method, r.path) for r in recorded] == [("GET", "/dir")] + [
        ("HEAD", "/nonce-plz")
    ] * 3
    arrivals = [r.arrival for r in recorded]
    assert arrivals == sorted(arrivals)
    assert len(set(arrivals)) == len(arrivals)
    for r in recorded:
        assert r.responded is not None
        assert r.responded >= r.arrival
        assert r.wall.tzinfo is dt.UTC
    assert len(proxy.requests_to("/nonce-plz")) == 3
    assert proxy.requests_to("/nonce-plz", "GET") == []
    proxy.clear_requests()
    assert proxy.requests == []


def test_garbage_on_the_socket_does_not_kill_the_server(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as raw:
        raw.sendall(b"this is not TLS\r\n\r\n")
        try:
            answer = raw.recv(100)
        except OSError:  # a reset is as good as a close
            answer = b""
        assert b"HTTP" not in answer
    assert client.get(proxy.directory_url).status_code == 200


def _proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("FaultProxy")]


def test_stop_ends_stalls_and_leaves_no_thread(pebble: PebbleServer) -> None:
    assert _proxy_threads() == []
    proxy = _make_proxy(pebble)
    proxy.start()
    proxy.add_rule(Match("/dir"), Stall(60))
    errors: list[BaseException] = []

    def stalled_request() -> None:
        with httpx.Client(verify=_ssl(pebble), trust_env=False, timeout=20) as c:
            try:
                c.get(proxy.directory_url)
            except httpx.TransportError as exc:
                errors.append(exc)

    requester = threading.Thread(target=stalled_request)
    requester.start()
    while not proxy.requests:
        time.sleep(0.01)
    started = time.monotonic()
    proxy.stop()
    requester.join(30)
    assert not requester.is_alive(), "the stalled request still waits 30 s after stop()"
    assert time.monotonic() - started < 30  # stop() ended the 60 s stall
    assert len(errors) == 1
    assert _proxy_threads() == []
    proxy.stop()  # idempotent


@pytest.mark.anyio
async def test_the_proxy_never_blocks_the_test_event_loop(
    proxy: FaultProxy, pebble: PebbleServer
) -> None:
    proxy.add_rule(Match("/dir"), Stall(1))
    async with httpx.AsyncClient(verify=_ssl(pebble), trust_env=False, timeout=5) as client:
        statuses: dict[str, float] = {}

        async def fetch(name: str, url: str) -> None:
            started = time.monotonic()
            response = await client.get(url)
            assert response.status_code in (200, 204)
            statuses[name] = time.monotonic() - started

        async with anyio.create_task_group() as tg:
            tg.start_soon(fetch, "stalled", proxy.directory_url)
            await anyio.sleep(0.1)
            tg.start_soon(fetch, "fast", f"{proxy.url}/nonce-plz")
    assert statuses["fast"] < 0.5 <= 1 <= statuses["stalled"]


# -- looking into the JWS payload ----------------------------------------------------------


def _jws(payload: str) -> bytes:
    return json.dumps({"protected": "e30", "payload": payload, "signature": "c2ln"}).encode()


def test_jws_payload_decodes_only_a_flattened_jws_with_a_json_payload() -> None:
    body = _jws(_b64(b'{"identifiers": [], "replaces": "a.b"}'))
    assert jws_payload(body) == {"identifiers": [], "replaces": "a.b"}
    assert jws_payload(_jws("")) is None  # POST-as-GET
    assert jws_payload(_jws("%%%")) is None  # not base64url
    assert jws_payload(_jws(_b64(b"not json"))) is None
    assert jws_payload(b"") is None
    assert jws_payload(b"\xff\xfe") is None
    assert jws_payload(b"[1, 2]") is None
    assert jws_payload(json.dumps({"payload": 5}).encode()) is None


def test_match_payload_has_needs_the_member_in_the_payload() -> None:
    with_replaces = _jws(_b64(b'{"identifiers": [], "replaces": "a.b"}'))
    without = _jws(_b64(b'{"identifiers": []}'))
    match = Match("/order-plz", "POST", payload_has="replaces")
    assert match.matches("POST", "/order-plz", with_replaces)
    assert not match.matches("POST", "/order-plz", without)
    assert not match.matches("POST", "/order-plz", _jws(""))
    assert not match.matches("POST", "/order-plz")  # no body given
    assert not match.matches("GET", "/order-plz", with_replaces)
    assert not match.matches("POST", "/sign-me-up", with_replaces)
    # a list payload has no members, even when it holds the string
    assert not match.matches("POST", "/order-plz", _jws(_b64(b'["replaces"]')))
    # without payload_has the body does not matter (the old two-argument call still works)
    assert Match("/order-plz").matches("POST", "/order-plz")
    assert Match("/order-plz").matches("POST", "/order-plz", without)


def test_a_payload_rule_answers_only_requests_with_that_member(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    directory = _directory(client, proxy)
    url = directory["newAccount"]
    headers = {"Content-Type": "application/jose+json"}
    rule = proxy.add_rule(
        Match("/sign-me-up", "POST", payload_has="replaces"),
        Respond(409, ALREADY_REPLACED, "was already replaced"),
        times=None,
    )

    nonce = client.head(directory["newNonce"]).headers["Replay-Nonce"]
    refused = client.post(
        url, content=_new_account_jws(url, nonce, {"replaces": "a.b"}), headers=headers
    )
    assert refused.status_code == 409
    assert refused.json()["type"] == ALREADY_REPLACED
    nonce = refused.headers["Replay-Nonce"]  # a usable nonce, as from a real CA

    accepted = client.post(url, content=_new_account_jws(url, nonce), headers=headers)
    assert accepted.status_code == 201, accepted.text
    assert rule.hits == 1
    assert not rule.exhausted

    posts = proxy.requests_to("/sign-me-up", "POST")
    assert [(r.status, r.fault) for r in posts] == [(409, rule.fault), (201, None)]
    assert [r.payload.get("replaces") for r in posts] == ["a.b", None]
    [marked] = proxy.requests_to("/sign-me-up", "POST", payload_has="replaces")
    assert marked == posts[0]
    assert proxy.requests_to("/dir")[0].payload is None


# -- ARI emulation -------------------------------------------------------------------------


def _certificate_with_aki() -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ari.example.test")])
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(0x87654321)  # a serial whose DER form starts with 0x00
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False
        )
        .sign(key, hashes.SHA256())
    )


def test_without_emulation_pebbles_own_ari_passes_through(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    # Pebble 2.10 has ARI; the proxy leaves its directory entry alone (its host rewritten)
    assert _directory(client, proxy)["renewalInfo"] == (
        f"{proxy.url}/draft-ietf-acme-ari-03/renewalInfo"
    )
    assert client.get(f"{proxy.url}/renewal-info/a.b").status_code == 404  # Pebble's answer


def test_emulated_ari_directory_and_renewal_info(
    proxy: FaultProxy, client: httpx.Client, pebble: PebbleServer
) -> None:
    start = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=6)
    proxy.emulate_ari(
        AriAnswer(start, end, retry_after="120", explanation_url="https://ca.example/why")
    )
    directory = _directory(client, proxy)
    assert directory["renewalInfo"] == f"{proxy.url}/renewal-info"
    # everything else is Pebble's own directory (whose URLs name the host asked)
    pebble_base = pebble.directory_url.removesuffix("/dir")
    pebble_directory = client.get(pebble.directory_url).json()
    assert {k: v for k, v in directory.items() if k != "renewalInfo"} == {
        k: v.replace(pebble_base, proxy.url)
        for k, v in pebble_directory.items()
        if isinstance(v, str) and k != "renewalInfo"  # 2.10 has its own, replaced here
    }

    ident = cert_id(_certificate_with_aki())
    url = f"{directory['renewalInfo']}/{ident}"
    answer = client.get(url)
    assert answer.status_code == 200
    assert answer.headers["Retry-After"] == "120"
    assert answer.headers["Content-Type"] == "application/json"
    info = parse_renewal_info(answer.json(), url=url)
    assert (info.window_start, info.window_end) == (start, end)
    assert info.explanation_url == "https://ca.example/why"

    bad = client.get(f"{directory['renewalInfo']}/not-a-cert-id")
    assert bad.status_code == 400
    assert bad.json()["type"] == "urn:ietf:params:acme:error:malformed"
    recorded = proxy.requests_to("/renewal-info/", "GET")
    assert [(r.status, type(r.fault)) for r in recorded] == [(200, AriAnswer), (400, AriAnswer)]
    # the upstream never saw them: nothing was forwarded
    assert all(r.fault is not None for r in recorded)


def test_an_ari_rule_changes_the_next_answers_and_the_default_window_is_open(
    proxy: FaultProxy, client: httpx.Client
) -> None:
    proxy.emulate_ari()
    url = f"{_directory(client, proxy)['renewalInfo']}/{cert_id(_certificate_with_aki())}"
    later = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    proxy.add_rule(
        Match("/renewal-info/", "GET"),
        AriAnswer(later, later + dt.timedelta(days=1), retry_after=None),
        times=1,
    )
    proxy.add_rule(Match("/renewal-info/", "GET"), Respond(503, retry_after="7"), times=1)

    first = client.get(url)
    assert "Retry-After" not in first.headers
    assert parse_renewal_info(first.json(), url=url).window_start == later
    assert client.get(url).status_code == 503

    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    default = client.get(url)
    after = dt.datetime.now(dt.UTC)
    assert default.headers["Retry-After"] == "21600"
    info = parse_renewal_info(default.json(), url=url)
    assert info.window_start < before <= after < info.window_end  # open when it was asked


@pytest.mark.anyio
async def test_the_acme_client_reads_the_emulated_renewal_info(
    proxy: FaultProxy, pebble: PebbleServer
) -> None:
    clock = FakeClock()
    start = clock.now() - dt.timedelta(days=2)
    end = clock.now() + dt.timedelta(days=1)
    proxy.emulate_ari(AriAnswer(start, end, retry_after="3600"))
    certificate = _certificate_with_aki()
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle, clock=clock) as acme:
        result = await acme.renewal_info(certificate)
        asked_at = clock.now()
    assert result.cert_id == cert_id(certificate)
    assert result.url == f"{proxy.url}/renewal-info/{result.cert_id}"
    assert result.window_start == start.replace(microsecond=0)
    assert result.window_end == end.replace(microsecond=0)
    assert result.retry_after == asked_at + dt.timedelta(hours=1)
    assert [r.path for r in proxy.requests] == ["/dir", f"/renewal-info/{result.cert_id}"]


def test_ari_answer_rejects_naive_or_empty_windows() -> None:
    now = dt.datetime.now(dt.UTC)
    with pytest.raises(ValueError, match="timezone-aware"):
        AriAnswer(start=now.replace(tzinfo=None))
    with pytest.raises(ValueError, match="end after"):
        AriAnswer(start=now, end=now)


def test_emulate_ari_rejects_a_bad_path(proxy: FaultProxy) -> None:
    for path in ("renewal-info", "/renewal-info/", "/dir"):
        with pytest.raises(ValueError, match="absolute path"):
            proxy.emulate_ari(path=path)
