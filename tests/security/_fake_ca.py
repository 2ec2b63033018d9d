"""A scriptable fake ACME CA behind ``httpx.MockTransport``: a malicious CA on demand.

It answers the RFC 8555 requests of one issuance (directory, newNonce, newAccount,
newOrder, order, finalize, certificate) with documents the test may rewrite first: point
a URL at another host, keep an order ``processing`` forever, return a certificate for
another key. Signatures are not checked; every request is recorded in :attr:`requests`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts import AcmeClient, PollPolicy, RequestRetry
from acmecerts.protocol.keys import PrivateKey
from acmecerts.transport import AcmeTransport, UrlPolicy

__all__ = ["CA", "EVIL", "FakeCa", "make_chain"]

CA = "https://ca.test"
EVIL = "https://evil.test"
NOW = dt.datetime.now(dt.UTC)
_ROOT_KEY = ec.generate_private_key(ec.SECP256R1())


def make_chain(public_key: Any, names: Sequence[str], *, root_cn: str = "Fake Root") -> bytes:
    """A PEM chain (leaf, then a self-signed root) for ``public_key`` and ``names``."""
    root_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, root_cn)])
    root = (
        x509.CertificateBuilder()
        .subject_name(root_name)
        .issuer_name(root_name)
        .public_key(_ROOT_KEY.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(_ROOT_KEY, hashes.SHA256())
    )
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(root_name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(hours=1))
        .not_valid_after(NOW + dt.timedelta(days=90))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(_ROOT_KEY, hashes.SHA256())
    )
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (leaf, root))


class FakeCa:
    """One fake CA at :data:`CA`; edit its documents, then build a client with :meth:`client`."""

    def __init__(self, names: Sequence[str] = ("example.com",)) -> None:
        self.names = list(names)
        self.requests: list[httpx.Request] = []
        self._nonces = itertools.count()
        self.directory: dict[str, Any] = {
            "newNonce": f"{CA}/nonce",
            "newAccount": f"{CA}/account",
            "newOrder": f"{CA}/order",
            "revokeCert": f"{CA}/revoke",
            "keyChange": f"{CA}/key-change",
        }
        identifiers = [{"type": "dns", "value": n} for n in self.names]
        #: Answer of newOrder (its Location is ``order_url``).
        self.new_order: dict[str, Any] = {
            "status": "ready",
            "identifiers": identifiers,
            "authorizations": [],
            "finalize": f"{CA}/finalize/1",
        }
        self.order_url = f"{CA}/order/1"
        #: Answer of finalize.
        self.finalized: dict[str, Any] = {
            **self.new_order,
            "status": "valid",
            "certificate": f"{CA}/cert/1",
        }
        #: Answer of every POST-as-GET of the order URL (default: what finalize said).
        self.polled: dict[str, Any] | None = None
        #: Extra headers of order answers (e.g. a huge ``Retry-After``).
        self.order_headers: dict[str, str] = {}
        #: The certificate chain served at any ``/cert/`` URL (set it, or it is made
        #: for ``certificate_key`` when one is given to :meth:`client`).
        self.chain_pem: bytes | None = None
        #: ``Link`` headers of the certificate answer.
        self.cert_links: list[str] = []
        #: Per-path overrides: ``path -> handler``.
        self.routes: dict[str, Callable[[httpx.Request], httpx.Response]] = {}

    # -- what was sent -------------------------------------------------------------

    def hosts(self) -> set[str]:
        """Every host a request was sent to."""
        return {r.url.host for r in self.requests}

    def paths(self) -> list[str]:
        """The paths requested, in order."""
        return [r.url.path for r in self.requests]

    # -- the CA ----------------------------------------------------------------------

    def json_response(
        self, doc: Any, status: int = 200, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """``doc`` as an ACME answer (JSON, a fresh ``Replay-Nonce``, extra ``headers``)."""
        headers = {"Replay-Nonce": f"nonce-{next(self._nonces)}", **(headers or {})}
        return httpx.Response(
            status,
            content=json.dumps(doc).encode(),
            headers={"Content-Type": "application/json", **headers},
        )

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if request.url.host != "ca.test":
            return self.json_response({"status": "valid"})  # what a hostile host would answer
        if path in self.routes:
            return self.routes[path](request)
        if path == "/directory":
            return self.json_response(self.directory)
        if path == "/nonce":
            return httpx.Response(200, headers={"Replay-Nonce": f"nonce-{next(self._nonces)}"})
        if path == "/account":
            return self.json_response({"status": "valid"}, 201, {"Location": f"{CA}/acct/1"})
        if path == "/order":
            return self.json_response(self.new_order, 201, {"Location": self.order_url})
        if path.startswith("/finalize/"):
            return self.json_response(self.finalized, headers=self.order_headers)
        if path.startswith("/order/"):
            return self.json_response(self.polled or self.finalized, headers=self.order_headers)
        if path.startswith("/cert/"):
            assert self.chain_pem is not None, "set chain_pem or pass certificate_key"
            headers = [("Content-Type", "application/pem-certificate-chain")]
            headers += [("Replay-Nonce", f"nonce-{next(self._nonces)}")]
            headers += [("Link", link) for link in self.cert_links]
            return httpx.Response(200, content=self.chain_pem, headers=headers)
        return self.json_response({"type": "urn:ietf:params:acme:error:malformed"}, 404)

    def client(
        self,
        *,
        certificate_key: PrivateKey | None = None,
        url_policy: UrlPolicy | None = None,
        **options: Any,
    ) -> AcmeClient:
        """A client of this CA (account already known), fast polling and retries."""
        if certificate_key is not None and self.chain_pem is None:
            self.chain_pem = make_chain(certificate_key.public_key(), self.names)
        transport = AcmeTransport(
            f"{CA}/directory",
            client=httpx.AsyncClient(transport=httpx.MockTransport(self.handle)),
            retry=RequestRetry(floor=0.01, cap=0.05, max_attempts=2),
            url_policy=url_policy,
        )
        options.setdefault("poll", PollPolicy(initial=0.01, max_interval=0.05, floor=0.01))
        return AcmeClient(
            f"{CA}/directory", transport=transport, account_url=f"{CA}/acct/1", **options
        )
