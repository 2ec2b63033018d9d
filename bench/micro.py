"""CPU cost of each building block of one issuance: acmecerts against a minimal equivalent.

    python bench/micro.py              # protocol layer only (no I/O), a few seconds
    python bench/micro.py --transport  # also HTTP round-trips and signed POSTs against Pebble

Every figure is CPU time (``time.process_time``) per operation, in microseconds, so it does
not depend on how busy the machine is. The "minimal" column is what the same work costs done
directly with ``cryptography`` and ``json`` (what ``bench/clients/raw_client.py`` does); the
ratio says where acmecerts spends more than it must. The per-certificate line multiplies each
block by how often one single-name issuance needs it (7 signed requests, 3 answers parsed,
1 key, 1 CSR, 1 download check).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as _dt
import json
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "clients"))

from acmecerts.protocol.certificate import (  # noqa: E402
    certificate_info,
    check_certificate_matches,
    parse_pem_chain,
)
from acmecerts.protocol.csr import build_csr  # noqa: E402
from acmecerts.protocol.identifiers import Identifier  # noqa: E402
from acmecerts.protocol.jws import sign_request  # noqa: E402
from acmecerts.protocol.keys import AccountKey, generate_private_key, private_key_pem  # noqa: E402
from acmecerts.protocol.resources import (  # noqa: E402
    parse_authorization,
    parse_challenge,
    parse_order,
)

URL = "https://127.0.0.1:14000/my-order/3Bv2sBq0Uu7dPUyFbEZyZQ9qk1d4x0nU3h7m4wqHq0A"
NONCE = "2B2Ew3YB9jLhrCrsyTZAx0Xh1k4JbK0VlNhHZb4gQAk"
KID = "https://127.0.0.1:14000/my-account/4a1f8b2c"
ORDER = {
    "status": "ready",
    "expires": "2030-01-01T00:00:00Z",
    "identifiers": [{"type": "dns", "value": "c1-0.r1.bench.test"}],
    "finalize": "https://127.0.0.1:14000/finalize-order/3Bv2sBq0Uu7dPUyFbEZyZQ9qk1d4x0nU3h7m4wqHq0A",
    "authorizations": ["https://127.0.0.1:14000/authZ/tq1C4xBUrQe0i2b9Zx0m3nB7aLk5Jc8yW6vR1sD2fGh"],
}
AUTHZ = {
    "status": "pending",
    "identifier": {"type": "dns", "value": "c1-0.r1.bench.test"},
    "challenges": [
        {
            "type": t,
            "url": f"https://127.0.0.1:14000/chalZ/{t}-Zx0m3nB7aLk5Jc8yW6vR1sD2fGh",
            "token": "Yb5Lq3oU9xXyQ2cF8nVj1tK6mR0wZ4hE7gA3sD9fP2k",
            "status": "pending",
        }
        for t in ("http-01", "dns-01", "tls-alpn-01")
    ],
    "expires": "2030-01-01T00:00:00Z",
}
CHALLENGE = dict(AUTHZ["challenges"][0], status="processing")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def raw_jws(key: ec.EllipticCurvePrivateKey, url: str, payload: object | None) -> bytes:
    protected = _b64(_dumps({"alg": "ES256", "kid": KID, "nonce": NONCE, "url": url}))
    body = "" if payload is None else _b64(_dumps(payload))
    r, s = decode_dss_signature(key.sign(f"{protected}.{body}".encode(), ec.ECDSA(hashes.SHA256())))
    sig = _b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
    return _dumps({"protected": protected, "payload": body, "signature": sig})


def raw_csr(names: list[str], key: ec.EllipticCurvePrivateKey) -> bytes:
    return (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.DER)
    )


def _chain_for(key: ec.EllipticCurvePrivateKey, name: str) -> bytes:
    """A leaf for ``key`` plus an intermediate, like Pebble's answer to the download."""
    now = _dt.datetime.now(_dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Pebble Intermediate CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Pebble Root CA")]))
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + _dt.timedelta(days=90))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now)
        .not_valid_after(now + _dt.timedelta(days=90))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return leaf.public_bytes(pem) + ca.public_bytes(pem)


def cpu_us(fn: Callable[[], Any], *, seconds: float = 0.4) -> float:
    """CPU microseconds per call, repeated for about ``seconds`` of CPU."""
    fn()  # warm caches, lazy imports
    n, t0 = 0, time.process_time()
    while True:
        for _ in range(20):
            fn()
        n += 20
        spent = time.process_time() - t0
        if spent >= seconds:
            return 1e6 * spent / n


def protocol_rows() -> list[tuple[str, float, float, int]]:
    """(block, acmecerts µs, minimal µs, times per single-name certificate)."""
    account = AccountKey.generate()
    raw_key = account.private_key
    ident = (Identifier("dns", "c1-0.r1.bench.test"),)
    names = ["c1-0.r1.bench.test"]
    cert_key = ec.generate_private_key(ec.SECP256R1())
    chain = _chain_for(cert_key, names[0])
    order_text = _dumps(ORDER)
    authz_text = _dumps(AUTHZ)
    chall_text = _dumps(CHALLENGE)
    payload = {"csr": _b64(b"x" * 300)}
    rows = [
        (
            "certificate key (P-256)",
            cpu_us(lambda: generate_private_key("ec256")),
            cpu_us(lambda: ec.generate_private_key(ec.SECP256R1())),
            1,
        ),
        (
            "CSR (build + sign + DER)",
            cpu_us(lambda: build_csr(ident, cert_key)),
            cpu_us(lambda: raw_csr(names, cert_key)),
            1,
        ),
        (
            "JWS, POST-as-GET",
            cpu_us(lambda: sign_request(account, url=URL, nonce=NONCE, payload=None, kid=KID)),
            cpu_us(lambda: raw_jws(raw_key, URL, None)),
            4,
        ),
        (
            "JWS, with payload",
            cpu_us(lambda: sign_request(account, url=URL, nonce=NONCE, payload=payload, kid=KID)),
            cpu_us(lambda: raw_jws(raw_key, URL, payload)),
            3,
        ),
        (
            "parse order (json + checks)",
            cpu_us(lambda: parse_order(json.loads(order_text), url=URL)),
            cpu_us(lambda: json.loads(order_text)),
            3,
        ),
        (
            "parse authorization (3 challenges)",
            cpu_us(lambda: parse_authorization(json.loads(authz_text), url=URL)),
            cpu_us(lambda: json.loads(authz_text)),
            1,
        ),
        (
            "parse challenge answer",
            cpu_us(lambda: parse_challenge(json.loads(chall_text), url=URL)),
            cpu_us(lambda: json.loads(chall_text)),
            1,
        ),
        (
            "download: parse chain, check key+names, info",
            cpu_us(
                lambda: (
                    c := parse_pem_chain(chain),
                    check_certificate_matches(c, key=cert_key, identifiers=ident),
                    certificate_info(c.leaf),
                )
            ),
            cpu_us(lambda: chain.count(b"-----BEGIN CERTIFICATE-----")),
            1,
        ),
        (
            "private key PEM (PKCS#8)",
            cpu_us(lambda: private_key_pem(cert_key)),
            cpu_us(
                lambda: cert_key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            ),
            1,
        ),
    ]
    return rows


# -- transport (needs Pebble) -------------------------------------------------------------


async def _transport_rows(pebble: Any, concurrency: int, count: int) -> list[tuple[str, float]]:
    import httpx
    from raw_client import Http, RawAcme

    from acmecerts import AcmeClient
    from acmecerts.transport import AcmeTransport, Http11Pool

    class MinimalTransport(httpx.AsyncBaseTransport):
        """httpx's transport seam filled with raw_client's hand-rolled HTTP/1.1 pool."""

        def __init__(self, origin: str, ca: str) -> None:
            self.http = Http(origin, ca, 32)

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            body = await request.aread()
            target = request.url.raw_path.decode("ascii")
            got = await self.http.request(
                request.method, target, body, request.headers.get("accept", "").encode()
            )
            return httpx.Response(got.status, headers=list(got.headers.items()), content=got.body)

    ctx = ssl.create_default_context(cafile=str(pebble.ca_bundle))
    rows: list[tuple[str, float]] = []

    async def measure(label: str, one: Callable[[], Any]) -> None:
        await one()  # connect, warm up
        sem = asyncio.Semaphore(concurrency)

        async def guarded() -> None:
            async with sem:
                await one()

        t0 = time.process_time()
        await asyncio.gather(*(guarded() for _ in range(count)))
        rows.append((f"{label}, {concurrency} in flight", 1e6 * (time.process_time() - t0) / count))

    url = pebble.directory_url
    for http2 in (True, False):
        async with httpx.AsyncClient(verify=ctx, http2=http2) as client:
            await measure(f"httpx {'h2' if http2 else 'h1'} GET /dir", lambda c=client: c.get(url))
    async with httpx.AsyncClient(transport=Http11Pool(ssl_context=ctx)) as pooled:
        await measure("httpx client over Http11Pool GET /dir", lambda: pooled.get(url))
    pool = Http11Pool(ssl_context=ctx)
    parsed_url = httpx.URL(url)
    await measure(
        "Http11Pool alone GET /dir",
        lambda: pool.handle_async_request(httpx.Request("GET", parsed_url)),
    )
    await pool.aclose()
    raw = Http(url, str(pebble.ca_bundle), 32)
    await measure("raw asyncio h1 GET /dir", lambda: raw.request("GET", "/dir"))

    # signed POST-as-GET of the account: the unit of every ACME step
    for http2 in (True, False):
        async with AcmeClient(url, ca_bundle=pebble.ca_bundle, http2=http2) as acme:
            account = await acme.register()
            await measure(
                f"acmecerts {'h2 (httpx)' if http2 else 'h1 (Http11Pool, default)'} "
                "signed POST-as-GET",
                lambda a=acme, u=account.url: a.parts.signed.post_as_get(u),
            )
    # where httpx's cost is: its client layer over the minimal HTTP/1.1 connection pool
    lean = httpx.AsyncClient(transport=MinimalTransport(url, str(pebble.ca_bundle)))
    async with lean:
        await measure(
            "httpx client layer over minimal h1 transport GET /dir", lambda: lean.get(url)
        )
        transport = AcmeTransport(url, client=lean)
        async with AcmeClient(url, transport=transport) as acme:
            account = await acme.register()
            await measure(
                "acmecerts over minimal h1 transport signed POST-as-GET",
                lambda a=acme, u=account.url: a.parts.signed.post_as_get(u),
            )
    raw_acme = RawAcme(url, str(pebble.ca_bundle), 32)
    await raw_acme.start()
    await measure("raw signed POST-as-GET", lambda: raw_acme.post(raw_acme.kid, None))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transport", action="store_true", help="also measure HTTP against Pebble")
    parser.add_argument(
        "--concurrency", default="1,50,200", help="requests in flight (comma-separated)"
    )
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()

    rows = protocol_rows()
    print("| block | acmecerts µs | minimal µs | ratio | per cert | acmecerts ms/cert |")
    print("|---|---|---|---|---|---|")
    ours_total = minimal_total = 0.0
    for name, ours, minimal, per_cert in rows:
        ours_total += ours * per_cert
        minimal_total += minimal * per_cert
        print(
            f"| {name} | {ours:.0f} | {minimal:.0f} | {ours / minimal:.1f} | x{per_cert} "
            f"| {ours * per_cert / 1000:.2f} |"
        )
    print(
        f"| **protocol work per certificate** | | | {ours_total / minimal_total:.1f} | "
        f"| **{ours_total / 1000:.2f}** (minimal {minimal_total / 1000:.2f}) |"
    )
    if args.transport:
        from acmecerts.testing import PebbleServer

        with (
            tempfile.TemporaryDirectory() as tmp,
            PebbleServer(Path(tmp), authz_reuse_percent=0) as pebble,
        ):
            transport = [
                row
                for c in args.concurrency.split(",")
                for row in asyncio.run(_transport_rows(pebble, int(c), args.count))
            ]
        print()
        print("| request (client CPU only) | µs per request |")
        print("|---|---|")
        for name, us in transport:
            print(f"| {name} | {us:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
