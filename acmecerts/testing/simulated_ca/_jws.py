"""Verifying the client's JWS requests for real (RFC 8555 §6.2), and nonces (§6.5).

Every POST is a flattened JWS. The simulated CA checks what a real CA checks: the
protected header names ``alg``, ``nonce``, ``url`` (equal to the URL requested) and
exactly one of ``jwk`` (``newAccount``) or ``kid`` (an account URL); the nonce is one it
issued and not used before; the signature verifies with the account's key
(``cryptography``: ES256/ES384/ES512 and RS256). A failure is a :class:`JwsRejected`
carrying the ACME problem type to answer with.
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

__all__ = ["JwsRejected", "Nonces", "PublicKey", "decode", "thumbprint", "verify"]

PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey

_EC = {
    "ES256": (ec.SECP256R1(), hashes.SHA256(), 32),
    "ES384": (ec.SECP384R1(), hashes.SHA384(), 48),
    "ES512": (ec.SECP521R1(), hashes.SHA512(), 66),
}
_CURVES = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}


class JwsRejected(Exception):
    """The request's JWS is not acceptable: answer with ``problem`` (a short type)."""

    def __init__(self, problem: str, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail


def b64decode(text: str) -> bytes:
    """base64url without padding."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise JwsRejected("malformed", f"bad base64url: {exc}") from None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def decode(body: bytes) -> tuple[dict[str, Any], bytes, bytes, bytes]:
    """``(protected header, payload bytes, signing input, signature)`` of a flattened JWS."""
    try:
        jws = json.loads(body)
        protected_b64 = jws["protected"]
        payload_b64 = jws["payload"]
        signature = b64decode(jws["signature"])
        header = json.loads(b64decode(protected_b64))
    except (ValueError, KeyError, TypeError) as exc:
        raise JwsRejected("malformed", f"not a flattened JWS: {exc}") from None
    if not isinstance(header, dict):
        raise JwsRejected("malformed", "the protected header is not an object")
    payload = b64decode(payload_b64) if payload_b64 else b""
    signing_input = f"{protected_b64}.{payload_b64}".encode("ascii")
    return header, payload, signing_input, signature


def public_key(jwk: Any) -> PublicKey:
    """The public key of a JWK (EC P-256/384/521 or RSA)."""
    try:
        if jwk["kty"] == "EC":
            x = int.from_bytes(b64decode(jwk["x"]), "big")
            y = int.from_bytes(b64decode(jwk["y"]), "big")
            return ec.EllipticCurvePublicNumbers(x, y, _CURVES[jwk["crv"]]).public_key()
        if jwk["kty"] == "RSA":
            e = int.from_bytes(b64decode(jwk["e"]), "big")
            n = int.from_bytes(b64decode(jwk["n"]), "big")
            return rsa.RSAPublicNumbers(e, n).public_key()
    except (KeyError, TypeError, ValueError) as exc:
        raise JwsRejected("badPublicKey", f"unusable JWK: {exc}") from None
    raise JwsRejected("badPublicKey", f"unsupported key type {jwk.get('kty')!r}")


def thumbprint(jwk: dict[str, Any]) -> str:
    """The JWK's RFC 7638 thumbprint, base64url (what key authorizations end with)."""
    members = ("crv", "kty", "x", "y") if jwk.get("kty") == "EC" else ("e", "kty", "n")
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    return _b64(hashlib.sha256(canonical.encode("utf-8")).digest())


def verify(key: PublicKey, alg: str, signing_input: bytes, signature: bytes) -> None:
    """Check the signature; :class:`JwsRejected` (``badSignatureAlgorithm`` or
    ``unauthorized``) if it does not verify."""
    try:
        if alg in _EC and isinstance(key, ec.EllipticCurvePublicKey):
            curve, digest, size = _EC[alg]
            if key.curve.name != curve.name or len(signature) != 2 * size:
                raise JwsRejected("malformed", f"{alg} signature does not fit the key")
            r = int.from_bytes(signature[:size], "big")
            s = int.from_bytes(signature[size:], "big")
            key.verify(encode_dss_signature(r, s), signing_input, ec.ECDSA(digest))
            return
        if alg == "RS256" and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
            return
    except InvalidSignature:
        raise JwsRejected("unauthorized", "JWS signature verification failed") from None
    raise JwsRejected("badSignatureAlgorithm", f"algorithm {alg!r} is not accepted")


class Nonces:
    """Issues nonces and accepts each once (RFC 8555 §6.5)."""

    __slots__ = ("_next", "_outstanding", "limit")

    def __init__(self, limit: int = 100_000) -> None:
        self._next = 0
        # ordered by issue, oldest first: forgetting the oldest is O(1) (a dict's first
        # key, after many deletions at its front, is found by a scan: 57 us a nonce once
        # 100,000 were issued)
        self._outstanding: collections.OrderedDict[str, None] = collections.OrderedDict()
        #: The most nonces kept; the oldest are forgotten first (then ``badNonce``).
        self.limit = limit

    def issue(self) -> str:
        """A fresh nonce."""
        self._next += 1
        nonce = _b64(self._next.to_bytes(8, "big"))
        outstanding = self._outstanding
        outstanding[nonce] = None
        if len(outstanding) > self.limit:
            outstanding.popitem(last=False)
        return nonce

    def redeem(self, nonce: Any) -> None:
        """Accept ``nonce`` once; :class:`JwsRejected` (``badNonce``) otherwise."""
        if not isinstance(nonce, str) or self._outstanding.pop(nonce, 0) is not None:
            raise JwsRejected("badNonce", f"JWS has an invalid anti-replay nonce: {nonce!r}")
