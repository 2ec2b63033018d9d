"""Challenge arithmetic: key authorizations (RFC 8555 §8.1) and dns-01 values (§8.4)."""

from __future__ import annotations

import base64
import hashlib
import re

from acmecerts.errors import BadServerResponse

__all__ = ["dns01_txt_value", "key_authorization", "validate_token"]

# RFC 8555 §8.3: the token is base64url without padding, at least 128 bits of entropy.
# fullmatch, not match with ^...$: "$" also matches before a trailing newline.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,256}")


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 8555 §6.1 / RFC 7515 §2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def validate_token(token: object) -> str:
    """Return ``token`` if it is a well-formed challenge token, else raise.

    Tokens become URL paths and file names, so anything but the base64url alphabet is
    refused (a hostile CA must not be able to make us write ``../`` anywhere).
    """
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise BadServerResponse(f"challenge token {token!r} is not base64url")
    return token


def key_authorization(token: str, thumbprint: str) -> str:
    """RFC 8555 §8.1: ``token || '.' || base64url(Thumbprint(accountKey))``."""
    return f"{validate_token(token)}.{thumbprint}"


def dns01_txt_value(key_authorization: str) -> str:
    """RFC 8555 §8.4: the TXT value, base64url(SHA-256(key authorization))."""
    return b64url(hashlib.sha256(key_authorization.encode("ascii")).digest())
