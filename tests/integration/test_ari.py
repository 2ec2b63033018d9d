"""ARI (RFC 9773) against a real acme2certifier, and issuance on it as an interop check.

acme2certifier is the second, independent ACME server (Pebble 2.4.0 has no ARI). The
session's ``a2c`` fixture skips challenge validation, so the solver here presents nothing;
a second server in this module validates for real (http-01 on port 80 of ``127.0.0.1``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from requests_seen import on_requests

from acmecerts import (
    AcmeClient,
    AcmeProblem,
    AlreadyReplaced,
    AuthorizationFailed,
    ChallengeTask,
    Http01Server,
    InvalidInput,
    IssuedCertificate,
)
from acmecerts.protocol.ari import cert_id
from acmecerts.protocol.identifiers import Identifier
from acmecerts.testing import PebbleServer
from acmecerts.transport import AcmeTransport
from tests.servers.a2c import Acme2CertifierServer

pytestmark = pytest.mark.anyio


class _NoopSolver:
    """Presents nothing: enough where the CA does not validate."""

    challenge_type = "http-01"

    def __init__(self) -> None:
        self.presented: list[str] = []
        self.cleaned: list[str] = []

    def supports(self, identifier: Identifier) -> bool:
        return not identifier.is_wildcard

    async def present(self, task: ChallengeTask) -> None:
        self.presented.append(task.identifier.value)

    async def cleanup(self, task: ChallengeTask) -> None:
        self.cleaned.append(task.identifier.value)


@pytest.fixture
async def a2c_client(a2c: Acme2CertifierServer) -> AsyncIterator[AcmeClient]:
    """A client with a fresh ES256 account key on the session acme2certifier."""
    async with AcmeClient(a2c.directory_url, ca_bundle=a2c.ca_bundle) as acme:
        yield acme


def assert_issued_by_a2c(
    issued: IssuedCertificate, a2c: Acme2CertifierServer, names: Sequence[str]
) -> None:
    """Names, key and issuer: the leaf is signed by the server's issuing CA."""
    assert sorted(issued.names) == sorted(names)
    ca = x509.load_pem_x509_certificate(a2c.issuing_ca_pem.encode())
    issued.chain.leaf.verify_directly_issued_by(ca)
    key = serialization.load_pem_private_key(issued.private_key_pem.encode(), None)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    assert issued.chain.leaf.public_key().public_bytes(der, spki) == key.public_key().public_bytes(
        der, spki
    )


# -- issuance interop ----------------------------------------------------------------------


async def test_issue_one_name(a2c: Acme2CertifierServer, a2c_client: AcmeClient) -> None:
    solver = _NoopSolver()
    issued = await a2c_client.issue(["one.a2c.example.test"], solver=solver)
    assert_issued_by_a2c(issued, a2c, ["one.a2c.example.test"])
    assert solver.cleaned == solver.presented == ["one.a2c.example.test"]
    assert issued.order_url.startswith(a2c.base_url + "/acme/order/")


async def test_issue_three_names(a2c: Acme2CertifierServer, a2c_client: AcmeClient) -> None:
    names = [f"n{i}.three.a2c.example.test" for i in range(3)]
    issued = await a2c_client.issue(names, solver=_NoopSolver())
    assert_issued_by_a2c(issued, a2c, names)


# -- renewalInfo ---------------------------------------------------------------------------


async def test_renewal_info_window_retry_after_and_cert_id(
    a2c: Acme2CertifierServer, a2c_client: AcmeClient
) -> None:
    issued = await a2c_client.issue(["ari.a2c.example.test"], solver=_NoopSolver())
    leaf = issued.chain.leaf
    before = dt.datetime.now(dt.UTC)
    result = await a2c_client.renewal_info(leaf)
    after = dt.datetime.now(dt.UTC)

    assert result.cert_id == cert_id(leaf)
    assert result.url == f"{a2c.base_url}/acme/renewal-info/{result.cert_id}"
    # the fixture's window opens at 50 % of the lifetime and ends at expiry
    lifetime = issued.not_after - issued.not_before
    assert result.window_end == issued.not_after
    midpoint = issued.not_before + lifetime / 2
    assert abs(result.window_start - midpoint) < dt.timedelta(minutes=5)
    assert result.explanation_url is None
    # "Retry-After: 3600" from the server, as an instant
    hour = dt.timedelta(hours=1)
    assert before + hour - dt.timedelta(seconds=1) <= result.retry_after <= after + hour
    renew_at = result.renewal_time(now=before)
    assert result.window_start <= renew_at <= result.window_end

    # the same answer for the certificate as PEM (str or bytes, a chain) and DER
    for form in (
        issued.certificate_pem,
        issued.fullchain_pem.encode(),
        leaf.public_bytes(serialization.Encoding.DER),
    ):
        again = await a2c_client.renewal_info(form)
        assert again.cert_id == result.cert_id
        assert again.info == result.info


async def test_forced_renewal_window_is_open_now(tmp_path: Path) -> None:
    with Acme2CertifierServer(tmp_path, renewal_force=True, retry_after=10) as server:
        async with AcmeClient(server.directory_url, ca_bundle=server.ca_bundle) as acme:
            issued = await acme.issue(["forced.a2c.example.test"], solver=_NoopSolver())
            now = dt.datetime.now(dt.UTC)
            result = await acme.renewal_info(issued.certificate_pem)
    assert result.window_start < now < result.window_end
    assert result.renewal_time(now=now) <= result.window_end
    # Retry-After: 10 is below RFC 9773's one-minute floor
    assert result.retry_after >= now + dt.timedelta(seconds=59)


async def test_renewal_sends_replaces(
    a2c: Acme2CertifierServer, a2c_client: AcmeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await a2c_client.issue(["renew.a2c.example.test"], solver=_NoopSolver())
    info = await a2c_client.renewal_info(first.certificate_pem)

    payloads: list[tuple[str, Any]] = []
    real_post = a2c_client.transport.post

    async def spy(url: str, **kwargs: Any) -> Any:
        payloads.append((url, kwargs.get("payload")))
        return await real_post(url, **kwargs)

    monkeypatch.setattr(a2c_client.transport, "post", spy)
    second = await a2c_client.issue(
        ["renew.a2c.example.test"], solver=_NoopSolver(), replaces=info.cert_id
    )

    directory = await a2c_client.directory()
    new_orders = [p for url, p in payloads if url == directory.new_order]
    assert new_orders == [
        {
            "identifiers": [{"type": "dns", "value": "renew.a2c.example.test"}],
            "replaces": info.cert_id,
        }
    ]
    assert_issued_by_a2c(second, a2c, ["renew.a2c.example.test"])
    assert second.serial != first.serial
    # acme2certifier accepts ``replaces`` but ignores it: the order does not echo it
    order = await a2c_client.get_order(second.order_url)
    assert order.replaces is None
    # the replacement has its own renewal information
    assert (await a2c_client.renewal_info(second.certificate_pem)).cert_id != info.cert_id


async def test_renewal_info_for_an_unknown_certificate(a2c_client: AcmeClient) -> None:
    stranger = _self_signed_with_aki()
    with pytest.raises(AcmeProblem) as info:
        await a2c_client.renewal_info(stranger)
    assert info.value.status_code == 404


async def test_renewal_info_without_ari_is_invalid_input(pebble_2_4: PebbleServer) -> None:
    pebble = pebble_2_4  # Pebble 2.4 has no renewalInfo (2.10, the session's, has)
    seen: list[tuple[str, str]] = []
    async with AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as acme:
        acme.subscribe(on_requests(lambda method, url: seen.append((method, url))))
        with pytest.raises(InvalidInput, match="renewalInfo"):
            await acme.renewal_info(_self_signed_with_aki())
    assert seen == [("GET", pebble.directory_url)]  # nothing but the directory


async def test_certificate_without_aki_is_invalid_input(a2c_client: AcmeClient) -> None:
    seen: list[str] = []
    a2c_client.transport.subscribe(on_requests(lambda method, url: seen.append(url)))
    with pytest.raises(InvalidInput, match="Authority Key Identifier"):
        await a2c_client.renewal_info(_self_signed_with_aki(aki=False))
    assert seen == []


# -- alreadyReplaced: no real server here sends it -----------------------------------------


async def test_already_replaced_is_typed() -> None:
    base = "https://ca.test"
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/dir":
            return httpx.Response(
                200,
                json={
                    "newNonce": f"{base}/nonce",
                    "newAccount": f"{base}/acct",
                    "newOrder": f"{base}/order",
                    "renewalInfo": f"{base}/ari",
                },
            )
        if request.url.path == "/nonce":
            return httpx.Response(200, headers={"Replay-Nonce": "bm9uY2Utbm9uY2Utbm9uY2U"})
        jws = json.loads(request.content)
        payload = jws["payload"] + "=" * (-len(jws["payload"]) % 4)
        bodies.append(json.loads(base64.urlsafe_b64decode(payload)))
        return httpx.Response(
            409,
            headers={"Content-Type": "application/problem+json", "Replay-Nonce": "bm9uY2UtMg"},
            json={
                "type": "urn:ietf:params:acme:error:alreadyReplaced",
                "detail": "certificate aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE was already replaced",
            },
        )

    transport = AcmeTransport(
        f"{base}/dir", client=httpx.AsyncClient(transport=httpx.MockTransport(handler))
    )
    async with AcmeClient(f"{base}/dir", transport=transport, account_url=f"{base}/acct/1") as acme:
        with pytest.raises(AlreadyReplaced) as info:
            await acme.new_order(["x.example.test"], replaces="aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE")
    assert info.value.status_code == 409
    assert bodies[0]["replaces"] == "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE"


# -- real validation on acme2certifier -----------------------------------------------------


@pytest.fixture(scope="module")
def a2c_validating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Acme2CertifierServer]:
    """An acme2certifier that validates challenges (http-01 on port 80 of the identifier)."""
    with Acme2CertifierServer(
        tmp_path_factory.mktemp("a2c-validating"), validation_disabled=False
    ) as server:
        yield server


async def test_failed_validation_is_reported_at_once(
    a2c_validating: Acme2CertifierServer,
) -> None:
    # acme2certifier validates inside the challenge POST and answers "invalid" there, but
    # leaves the order "pending" for good: the client must not poll it until the deadline.
    solver = _NoopSolver()
    async with AcmeClient(a2c_validating.directory_url, ca_bundle=a2c_validating.ca_bundle) as acme:
        with anyio.fail_after(30):
            with pytest.raises(AuthorizationFailed) as info:
                await acme.issue(["127.0.0.1"], solver=solver, attempt_timeout=60)
    assert info.value.identifier == "127.0.0.1"
    assert solver.cleaned == ["127.0.0.1"]


def _port_80_free() -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the solver does
        try:
            sock.bind(("127.0.0.1", 80))
        except OSError:
            return False
    return True


@pytest.mark.skipif(not _port_80_free(), reason="needs to bind 127.0.0.1:80 (root)")
async def test_real_http01_validation(a2c_validating: Acme2CertifierServer) -> None:
    async with (
        Http01Server(host="127.0.0.1", port=80) as solver,
        AcmeClient(a2c_validating.directory_url, ca_bundle=a2c_validating.ca_bundle) as acme,
    ):
        issued = await acme.issue(["127.0.0.1"], solver=solver)
    assert_issued_by_a2c(issued, a2c_validating, ["127.0.0.1"])
    result = await _renewal_info(a2c_validating, issued)
    assert result.window_end == issued.not_after


async def _renewal_info(server: Acme2CertifierServer, issued: IssuedCertificate) -> Any:
    async with AcmeClient(server.directory_url, ca_bundle=server.ca_bundle) as acme:
        return await acme.renewal_info(issued.certificate_pem)  # unauthenticated: no account


def _self_signed_with_aki(*, aki: bool = True) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stranger.example.test")])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
    )
    if aki:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False
        )
    return builder.sign(key, hashes.SHA256())
