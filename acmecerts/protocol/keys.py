"""Private keys: account keys (which sign JWS) and certificate keys (which go in CSRs).

Account keys are ES256 (P-256, the default), ES384 (P-384) or RS256 (RSA). Certificate
keys are P-256 by default; P-384 and RSA 2048/3072/4096 on request.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import TypeAlias

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from josepy.b64 import b64encode
from josepy.jwa import ES256, ES384, RS256, JWASignature
from josepy.jwk import JWK, JWKEC, JWKRSA

from acmecerts.errors import InvalidInput

__all__ = [
    "AccountKey",
    "KeyType",
    "PrivateKey",
    "generate_private_key",
    "key_type_of",
    "load_private_key",
    "private_key_pem",
]

#: The private key types acmecerts signs with.
PrivateKey: TypeAlias = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class KeyType(enum.StrEnum):
    """Key algorithms for account and certificate keys."""

    EC256 = "ec256"
    EC384 = "ec384"
    RSA2048 = "rsa2048"
    RSA3072 = "rsa3072"
    RSA4096 = "rsa4096"

    @classmethod
    def parse(cls, value: str | KeyType) -> KeyType:
        """Parse ``value`` (case-insensitive), raising :class:`InvalidInput` if unknown."""
        try:
            return cls(str(value).lower())
        except ValueError:
            choices = ", ".join(k.value for k in cls)
            raise InvalidInput(f"unknown key type {value!r} (choose one of {choices})") from None


def generate_private_key(key_type: KeyType | str = KeyType.EC256) -> PrivateKey:
    """Generate a fresh private key of ``key_type``."""
    kt = KeyType.parse(key_type)
    if kt is KeyType.EC256:
        return ec.generate_private_key(ec.SECP256R1())
    if kt is KeyType.EC384:
        return ec.generate_private_key(ec.SECP384R1())
    bits = int(kt.value.removeprefix("rsa"))
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def load_private_key(pem: bytes | str) -> PrivateKey:
    """Load a PEM private key (PKCS#8, SEC1 or PKCS#1), raising :class:`InvalidInput`."""
    data = pem.encode("ascii") if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnicodeError) as exc:
        raise InvalidInput(f"not a usable PEM private key: {exc}") from exc
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if key.curve.name not in ("secp256r1", "secp384r1"):
            raise InvalidInput(f"unsupported EC curve {key.curve.name}")
        return key
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < 2048:
            raise InvalidInput(f"RSA key of {key.key_size} bits is too small (2048 at least)")
        return key
    raise InvalidInput(f"unsupported private key type {type(key).__name__}")


def key_type_of(pem: bytes | str) -> KeyType | None:
    """The :class:`KeyType` of a PEM private key; ``None`` for an RSA size acmecerts
    does not make. Raises :class:`InvalidInput` like :func:`load_private_key`."""
    key = load_private_key(pem)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return KeyType.EC384 if key.curve.name == "secp384r1" else KeyType.EC256
    try:
        return KeyType(f"rsa{key.key_size}")
    except ValueError:
        return None


def private_key_pem(key: PrivateKey) -> bytes:
    """Serialise ``key`` as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _ecdsa_signer(
    key: ec.EllipticCurvePrivateKey, hash_algorithm: hashes.HashAlgorithm, size: int
) -> Callable[[bytes], bytes]:
    """RFC 7518 §3.4: the JWS signature is ``r || s``, each big-endian of ``size`` octets."""
    scheme = ec.ECDSA(hash_algorithm)
    sign = key.sign

    def signer(data: bytes) -> bytes:
        r, s = decode_dss_signature(sign(data, scheme))
        return r.to_bytes(size, "big") + s.to_bytes(size, "big")

    return signer


def _rsa_signer(key: rsa.RSAPrivateKey) -> Callable[[bytes], bytes]:
    """RFC 7518 §3.3: RS256 is RSASSA-PKCS1-v1_5 with SHA-256."""
    pad = padding.PKCS1v15()
    digest = hashes.SHA256()
    sign = key.sign

    def signer(data: bytes) -> bytes:
        return sign(data, pad, digest)

    return signer


class AccountKey:
    """An ACME account key: the private key, its JWK, JWS algorithm and thumbprint.

    What every signed request needs is computed once here: the JWS ``alg`` name, the
    public JWK as JSON text, and a signing function giving the JWS signature octets.
    The repr never shows key material.
    """

    __slots__ = (
        "_private_key",
        "algorithm",
        "jwk",
        "jwk_header_json",
        "jws_alg",
        "jws_sign",
        "public_jwk_json",
        "thumbprint",
    )

    def __init__(self, private_key: PrivateKey) -> None:
        self._private_key = private_key
        if isinstance(private_key, ec.EllipticCurvePrivateKey):
            self.jwk: JWK = JWKEC(key=private_key)
            curve = private_key.curve.name
            if curve == "secp256r1":
                self.algorithm: JWASignature = ES256
                sign = _ecdsa_signer(private_key, hashes.SHA256(), 32)
            elif curve == "secp384r1":
                self.algorithm = ES384
                sign = _ecdsa_signer(private_key, hashes.SHA384(), 48)
            else:
                raise InvalidInput(f"unsupported EC curve {curve} for an account key")
        elif isinstance(private_key, rsa.RSAPrivateKey):
            self.jwk = JWKRSA(key=private_key)
            self.algorithm = RS256
            sign = _rsa_signer(private_key)
        else:  # pragma: no cover - guarded by the type
            raise InvalidInput(f"unsupported account key type {type(private_key).__name__}")
        public = self.jwk.public_key()
        #: The public JWK as a JSON-ready dict (RFC 7517).
        self.public_jwk_json: dict[str, str] = dict(public.to_partial_json())
        #: base64url SHA-256 JWK thumbprint (RFC 7638), used in key authorizations.
        self.thumbprint: str = b64encode(public.thumbprint()).decode("ascii")
        #: The JWS ``alg`` header value (RFC 7518 §3.1).
        self.jws_alg: str = self.algorithm.name
        #: The public JWK as JSON text, as it appears in a ``jwk`` protected header.
        self.jwk_header_json: str = json.dumps(self.public_jwk_json)
        #: Signs a JWS signing input, returning the signature octets (``r || s`` for EC).
        self.jws_sign: Callable[[bytes], bytes] = sign

    @classmethod
    def generate(cls, key_type: KeyType | str = KeyType.EC256) -> AccountKey:
        """Create a new account key (P-256 by default)."""
        return cls(generate_private_key(key_type))

    @classmethod
    def from_pem(cls, pem: bytes | str) -> AccountKey:
        """Load an account key from PEM."""
        return cls(load_private_key(pem))

    @property
    def private_key(self) -> PrivateKey:
        """The underlying ``cryptography`` private key."""
        return self._private_key

    def to_pem(self) -> bytes:
        """The private key as PKCS#8 PEM (keep it secret, write it 0600)."""
        return private_key_pem(self._private_key)

    def __repr__(self) -> str:
        return f"AccountKey(alg={self.algorithm.name}, thumbprint={self.thumbprint})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AccountKey) and other.thumbprint == self.thumbprint

    def __hash__(self) -> int:
        return hash(self.thumbprint)
