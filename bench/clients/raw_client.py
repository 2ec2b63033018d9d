"""A minimal hand-rolled ACME client: the reference for what the protocol costs here.

No ACME or HTTP library: asyncio streams with TLS, HTTP/1.1 keep-alive over a small connection
pool written out by hand, JSON from the standard library, JWS (ES256) and CSRs with
``cryptography``. It sends exactly the requests acmecerts sends, which is the RFC floor with a
warm nonce pool: ``newOrder``, each authorization, each challenge, poll the order until
``ready``, ``finalize``, poll the order until ``valid``, download (7 requests for one name,
``4 + 3k`` for ``k`` names when the polls find the state reached). Nonces come from
``Replay-Nonce``; ``newNonce`` only when the pool is empty. Polls sleep first, on acmecerts'
default schedule (0.25 s, x1.6), so the comparison isolates CPU and transport costs rather than
polling policy. No retries beyond ``badNonce`` and a stale kept-alive connection: this is a
measuring stick, not a client to use.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import json
import ssl
import sys
from pathlib import Path
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ChallengeResponder, LoopLag, Phase, count_certificates, names_for, parse_args

_ECDSA = ec.ECDSA(hashes.SHA256())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Response:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> dict:
        return json.loads(self.body)


class Http:
    """HTTP/1.1 over TLS to one origin, with a pool of kept-alive connections."""

    def __init__(self, origin: str, ca: str, max_connections: int) -> None:
        parts = urlsplit(origin)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 443
        self.authority = parts.netloc.encode()
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.set_alpn_protocols(["http/1.1"])
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.slots = asyncio.Semaphore(max_connections)
        self.opened = 0

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.opened += 1
        return await asyncio.open_connection(
            self.host, self.port, ssl=self.ctx, server_hostname=self.host
        )

    async def request(
        self, method: str, path: str, body: bytes = b"", accept: bytes = b""
    ) -> Response:
        head = (
            method.encode()
            + b" "
            + path.encode()
            + b" HTTP/1.1\r\nHost: "
            + self.authority
            + b"\r\nUser-Agent: bench-raw\r\n"
            + (b"Accept: " + accept + b"\r\n" if accept else b"")
            + (
                b"Content-Type: application/jose+json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n"
                if method == "POST"
                else b""
            )
            + b"\r\n"
        )
        async with self.slots:
            for attempt in (1, 2):
                reused = bool(self.idle)
                conn = self.idle.pop() if reused else await self._connect()
                try:
                    response, keep = await self._exchange(conn, head + body, method == "HEAD")
                except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
                    conn[1].close()
                    if reused and attempt == 1:
                        continue  # the server closed an idle connection: once more, fresh
                    raise
                if keep:
                    self.idle.append(conn)
                else:
                    conn[1].close()
                return response
        raise AssertionError("unreachable")

    @staticmethod
    async def _exchange(
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], data: bytes, head_only: bool
    ) -> tuple[Response, bool]:
        reader, writer = conn
        writer.write(data)
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw[:-4].decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        keep = headers.get("connection", "").lower() != "close"
        if head_only or status in (204, 304):
            body = b""
        elif "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers from Pebble
                    break
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(chunks)
        else:
            body = await reader.read()
            keep = False
        return Response(status, headers, body), keep


class RawAcme:
    def __init__(self, directory_url: str, ca: str, max_connections: int) -> None:
        self.directory_url = directory_url
        self.http = Http(directory_url, ca, max_connections)
        self.key = ec.generate_private_key(ec.SECP256R1())
        numbers = self.key.public_key().public_numbers()
        self.jwk = {
            "crv": "P-256",
            "kty": "EC",
            "x": _b64(numbers.x.to_bytes(32, "big")),
            "y": _b64(numbers.y.to_bytes(32, "big")),
        }
        self.thumbprint = _b64(hashlib.sha256(_dumps(self.jwk)).digest())  # keys sorted already
        self.nonces: collections.deque[str] = collections.deque()
        self.kid: str | None = None
        self.directory: dict = {}
        self.requests = 0

    @staticmethod
    def _path(url: str) -> str:
        parts = urlsplit(url)
        return parts.path + ("?" + parts.query if parts.query else "")

    async def _send(self, method: str, url: str, body: bytes = b"", accept: bytes = b""):
        self.requests += 1
        response = await self.http.request(method, self._path(url), body, accept)
        nonce = response.headers.get("replay-nonce")
        if nonce:
            self.nonces.append(nonce)
        return response

    async def start(self) -> None:
        self.directory = (await self._send("GET", self.directory_url)).json()
        response = await self.post(self.directory["newAccount"], {"termsOfServiceAgreed": True})
        self.kid = response.headers["location"]

    def _jws(self, url: str, nonce: str, payload: object | None) -> bytes:
        protected: dict = {"alg": "ES256", "nonce": nonce, "url": url}
        if self.kid is None:
            protected["jwk"] = self.jwk
        else:
            protected["kid"] = self.kid
        p64 = _b64(_dumps(protected))
        b64 = "" if payload is None else _b64(_dumps(payload))
        r, s = decode_dss_signature(self.key.sign(f"{p64}.{b64}".encode(), _ECDSA))
        sig = _b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
        return _dumps({"protected": p64, "payload": b64, "signature": sig})

    async def post(self, url: str, payload: object | None, accept: bytes = b"") -> Response:
        for _ in range(5):
            if self.nonces:
                nonce = self.nonces.popleft()
            else:
                head = await self._send("HEAD", self.directory["newNonce"])
                nonce = head.headers["replay-nonce"]
                self.nonces.remove(nonce)
            response = await self._send("POST", url, self._jws(url, nonce, payload), accept)
            if response.status < 400:
                return response
            problem = response.json() if response.body else {}
            if problem.get("type") != "urn:ietf:params:acme:error:badNonce":
                raise RuntimeError(f"POST {url}: {response.status} {problem}")
        raise RuntimeError(f"POST {url}: too many badNonce")

    async def wait_order(self, url: str, order: dict, until: set[str], first: float) -> dict:
        delay = first
        while order["status"] not in until:
            if order["status"] == "invalid":
                raise RuntimeError(f"order invalid: {order.get('error')}")
            await asyncio.sleep(delay)
            delay = min(delay * 1.6, 10.0)
            order = (await self.post(url, None)).json()
        return order

    async def issue(self, names: list[str], responder: ChallengeResponder, first: float) -> str:
        key = ec.generate_private_key(ec.SECP256R1())
        csr = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
            )
            .sign(key, hashes.SHA256())
            .public_bytes(serialization.Encoding.DER)
        )
        response = await self.post(
            self.directory["newOrder"],
            {"identifiers": [{"type": "dns", "value": n} for n in names]},
        )
        order_url = response.headers["location"]
        order = response.json()

        async def solve(authz_url: str) -> None:
            authz = (await self.post(authz_url, None)).json()
            if authz["status"] == "valid":
                return
            chall = next(c for c in authz["challenges"] if c["type"] == "http-01")
            responder.tokens[chall["token"]] = f"{chall['token']}.{self.thumbprint}"
            await self.post(chall["url"], {})

        await asyncio.gather(*(solve(u) for u in order["authorizations"]))
        order = await self.wait_order(order_url, order, {"ready", "processing", "valid"}, first)
        if order["status"] == "ready":
            order = (await self.post(order["finalize"], {"csr": _b64(csr)})).json()
        order = await self.wait_order(order_url, order, {"valid"}, first)
        cert = await self.post(order["certificate"], None, b"application/pem-certificate-chain")
        return cert.body.decode("ascii")


def _extra(parser) -> None:
    parser.add_argument("--connections", type=int, default=32, help="connection pool size")
    parser.add_argument("--poll", type=float, default=0.25, help="first poll delay (s)")


async def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], _extra)
    responder = ChallengeResponder(args.http_port)
    await responder.start()
    acme = RawAcme(args.directory, args.ca, args.connections)
    await acme.start()
    phase = Phase()
    phase.ready_and_wait()
    lag = LoopLag()
    lag.start()
    requests0 = acme.requests
    results = await asyncio.gather(
        *(acme.issue(names_for(args, i), responder, args.poll) for i in range(args.count)),
        return_exceptions=True,
    )
    errors = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    issued = sum(count_certificates(r) > 0 for r in results if isinstance(r, str))
    phase.done(
        issued=issued,
        errors=errors,
        client_requests=acme.requests - requests0,
        connections_opened=acme.http.opened,
        **lag.stop(),
    )
    await responder.stop()


if __name__ == "__main__":
    asyncio.run(main())
