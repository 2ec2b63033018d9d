"""Choosing among the chains a CA offers (RFC 8555 §7.4.2, ``Link: rel="alternate"``).

The real protocol is tested against Pebble with ``PEBBLE_ALTERNATE_ROOTS`` in
tests/integration/test_protocol_features.py. Here: the cross-signed case Pebble cannot
produce (a default chain that passes *through* the preferred root), and an alternate
chain that cannot be downloaded, with an ``httpx.MockTransport`` CA.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts import AcmeClient, ChallengeTask, FakeClock
from acmecerts.protocol._actions import pick_chain as _pick_chain
from acmecerts.protocol.certificate import parse_pem_chain
from acmecerts.protocol.identifiers import Identifier
from acmecerts.transport import AcmeTransport

pytestmark = pytest.mark.anyio

BASE = "https://ca.test"
NOW = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def certificate(
    subject: str,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    public_key: Any,
    *,
    sans: list[str] | None = None,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(subject))
        .issuer_name(name(issuer))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=90))
        .add_extension(x509.BasicConstraints(ca=sans is None, path_length=None), critical=True)
    )
    if sans is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in sans]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


class CrossSignedCA:
    """Let's Encrypt in 2021: R3 under ISRG Root X1, which DST Root CA X3 cross-signed.

    Default chain: leaf, R3, ISRG Root X1 (cross-signed by DST). Alternate: leaf, R3.
    """

    def __init__(self) -> None:
        self.dst_key, self.isrg_key, self.r3_key = (
            ec.generate_private_key(ec.SECP256R1()) for _ in range(3)
        )
        self.r3 = certificate("R3", "ISRG Root X1", self.isrg_key, self.r3_key.public_key())
        self.isrg_cross = certificate(
            "ISRG Root X1", "DST Root CA X3", self.dst_key, self.isrg_key.public_key()
        )

    def chains(self, public_key: Any, sans: list[str]) -> tuple[str, str]:
        leaf = certificate(sans[0], "R3", self.r3_key, public_key, sans=sans)
        pem = [c.public_bytes(serialization.Encoding.PEM).decode() for c in (leaf, self.r3)]
        cross = self.isrg_cross.public_bytes(serialization.Encoding.PEM).decode()
        return pem[0] + pem[1] + cross, pem[0] + pem[1]


def test_the_root_wins_over_a_chain_passing_through_it() -> None:
    ca = CrossSignedCA()
    key = ec.generate_private_key(ec.SECP256R1())
    default_pem, short_pem = ca.chains(key.public_key(), ["example.com"])
    default, short = parse_pem_chain(default_pem), parse_pem_chain(short_pem)
    assert default.issuer_names == ("R3", "ISRG Root X1", "DST Root CA X3")
    assert short.root_issuer_name == "ISRG Root X1"
    offered = [default, short]
    # "ISRG Root X1" is in the default chain too, but only the short chain ends there
    assert _pick_chain(offered, "ISRG Root X1") is short
    assert _pick_chain(offered, "DST Root CA X3") is default
    # an intermediate's name (in both): the first chain that has it, the CA's default
    assert _pick_chain(offered, "R3") is default
    assert _pick_chain(offered, "No Such CA") is None


class MockCA:
    """Issues at once (the order is ready): finalize signs the CSR, the chains follow."""

    def __init__(self, alternates: list[int]) -> None:
        self.cross = CrossSignedCA()
        #: HTTP status of each alternate URL: 200 serves the short chain.
        self.alternates = alternates
        self.paths: list[str] = []
        self.nonce = 0
        self.pems: tuple[str, str] | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        response = self.answer(request)
        self.nonce += 1
        response.headers["Replay-Nonce"] = f"mock-nonce-{self.nonce:08d}"
        return response

    def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/dir":
            return httpx.Response(
                200,
                json={
                    "newNonce": f"{BASE}/nonce",
                    "newAccount": f"{BASE}/acct",
                    "newOrder": f"{BASE}/order",
                },
            )
        if path == "/nonce":
            return httpx.Response(200)
        raw = json.loads(request.content)["payload"]
        payload = json.loads(base64.urlsafe_b64decode(raw + "==")) if raw else None
        order = {
            "status": "ready",
            "identifiers": [{"type": "dns", "value": "example.com"}],
            "authorizations": [],
            "finalize": f"{BASE}/finalize",
        }
        if path == "/acct":
            return httpx.Response(201, json={"status": "valid"}, headers={"Location": f"{BASE}/a"})
        if path == "/order":
            return httpx.Response(201, json=order, headers={"Location": f"{BASE}/o"})
        if path == "/finalize":
            der = base64.urlsafe_b64decode(payload["csr"] + "==")
            csr = x509.load_der_x509_csr(der)
            self.pems = self.cross.chains(csr.public_key(), ["example.com"])
            valid = {**order, "status": "valid", "certificate": f"{BASE}/cert"}
            return httpx.Response(200, json=valid)
        assert self.pems is not None
        if path == "/cert":
            links = ", ".join(
                f'<{BASE}/cert/alt/{i}>;rel="alternate"' for i in range(len(self.alternates))
            )
            headers = {"Content-Type": "application/pem-certificate-chain", "Link": links}
            return httpx.Response(200, text=self.pems[0], headers=headers)
        status = self.alternates[int(path.rsplit("/", 1)[1])]
        if status != 200:
            problem = {"type": "urn:ietf:params:acme:error:malformed", "detail": "gone"}
            return httpx.Response(
                status, json=problem, headers={"Content-Type": "application/problem+json"}
            )
        return httpx.Response(
            200, text=self.pems[1], headers={"Content-Type": "application/pem-certificate-chain"}
        )


class NoSolverNeeded:
    challenge_type = "http-01"

    def supports(self, identifier: Identifier) -> bool:
        return True

    async def present(self, task: ChallengeTask) -> None:
        raise AssertionError("the order is ready: nothing to solve")  # pragma: no cover

    async def cleanup(self, task: ChallengeTask) -> None:
        return None  # pragma: no cover


def client_for(ca: MockCA) -> AcmeClient:
    clock = FakeClock(NOW)
    http = httpx.AsyncClient(transport=httpx.MockTransport(ca))
    transport = AcmeTransport(f"{BASE}/dir", client=http, clock=clock)
    return AcmeClient(f"{BASE}/dir", transport=transport, clock=clock)


async def test_the_preferred_root_is_chosen_over_the_cross_signed_default() -> None:
    ca = MockCA(alternates=[200])
    async with client_for(ca) as acme:
        issued = await acme.issue(
            ["example.com"], solver=NoSolverNeeded(), preferred_chain="ISRG Root X1"
        )
    assert issued.chain.root_issuer_name == "ISRG Root X1"
    assert len(issued.chain.certificates) == 2
    (default,) = issued.alternate_chains
    assert default.root_issuer_name == "DST Root CA X3"


async def test_an_alternate_that_cannot_be_downloaded_does_not_lose_the_certificate() -> None:
    ca = MockCA(alternates=[404, 200])
    async with client_for(ca) as acme:
        issued = await acme.issue(
            ["example.com"], solver=NoSolverNeeded(), preferred_chain="ISRG Root X1"
        )
        assert issued.chain.root_issuer_name == "ISRG Root X1"  # from the second alternate
        assert ca.paths.count("/cert/alt/0") == 1
        ca.alternates = [404, 404]
        issued = await acme.issue(
            ["example.com"], solver=NoSolverNeeded(), preferred_chain="ISRG Root X1"
        )
    assert issued.chain.root_issuer_name == "DST Root CA X3"  # the default, kept
    assert issued.alternate_chains == ()
