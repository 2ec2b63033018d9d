"""JWS request bodies (RFC 8555 §6.2): every POST to an ACME server is a flattened JWS.

A request is signed with the account URL as ``kid`` once the account exists, and with
the public ``jwk`` for ``newAccount`` and certificate-key revocation (§6.2). A
POST-as-GET (§6.3) has the empty string as payload.

:func:`sign_request` runs for every request, so it builds the JWS itself with
``cryptography`` and ``json`` (byte for byte what ``acme.jws`` produced); the rare
external account binding and key-change bodies still go through ``acme.jws``, imported
when one is made (``acme`` imports ``requests``: ~45 ms of CPU at every CLI start otherwise).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

from josepy.b64 import b64decode
from josepy.jwa import HS256, HS384, HS512
from josepy.jwk import JWKOct

from acmecerts.errors import BadServerResponse, InvalidInput
from acmecerts.protocol.keys import AccountKey

__all__ = ["eab_binding", "key_change_inner", "sign_request"]

_HMAC_ALGORITHMS = {"HS256": HS256, "HS384": HS384, "HS512": HS512}

# RFC 8555 §6.5.1: a nonce is base64url octets (no padding). fullmatch: "$" would allow a
# final "\n". A length of 4k+1 cannot be the encoding of any octet string.
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
# Escapes a string as a JSON string literal exactly as json.dumps does (ASCII-only).
_json_str = json.encoder.encode_basestring_ascii
_urlsafe_b64encode = base64.urlsafe_b64encode


def _b64(data: bytes) -> str:
    return _urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _dumps(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode("utf-8")


def sign_request(
    key: AccountKey,
    *,
    url: str,
    nonce: str | None,
    payload: Mapping[str, Any] | None,
    kid: str | None,
) -> bytes:
    """Return the flattened-JSON JWS body for a POST to ``url``.

    ``payload=None`` makes a POST-as-GET (§6.3). ``kid=None`` embeds the public JWK
    (§6.2, for ``newAccount`` and revocation with the certificate key).
    """
    # The protected header is the JSON text acme.jws wrote: members in this order,
    # json.dumps' default separators, non-ASCII escaped.
    header = f'{{"alg": "{key.jws_alg}", '
    if kid is None:
        header += f'"jwk": {key.jwk_header_json}, '
    else:
        header += f'"kid": {_json_str(kid)}, '
    if nonce is not None:
        if not isinstance(nonce, str) or not _B64URL.fullmatch(nonce) or len(nonce) % 4 == 1:
            raise BadServerResponse(f"the CA's nonce {nonce!r} is not base64url")
        header += f'"nonce": "{nonce}", '
    header += f'"url": {_json_str(url)}}}'
    protected = _b64(header.encode("ascii"))
    body = "" if payload is None else _b64(_dumps(payload))
    signature = _b64(key.jws_sign(f"{protected}.{body}".encode("ascii")))
    return (
        f'{{"protected": "{protected}", "signature": "{signature}", "payload": "{body}"}}'
    ).encode("ascii")


def eab_binding(
    account_key: AccountKey, *, kid: str, hmac_key_b64url: str, url: str, algorithm: str = "HS256"
) -> dict[str, Any]:
    """The ``externalAccountBinding`` member of a ``newAccount`` payload (§7.3.4).

    A JWS over the account's public JWK, MACed with the CA-issued key, ``kid`` in the
    protected header, no nonce.
    """
    alg = _HMAC_ALGORITHMS.get(algorithm.upper())
    if alg is None:
        raise InvalidInput(f"unsupported EAB algorithm {algorithm!r} (HS256, HS384, HS512)")
    try:
        mac_key = b64decode(hmac_key_b64url)
    except (ValueError, TypeError) as exc:
        raise InvalidInput("the EAB HMAC key is not valid base64url") from exc
    if not mac_key:
        raise InvalidInput("the EAB HMAC key is empty")
    from acme import jws as acme_jws  # see the module docstring

    signed = acme_jws.JWS.sign(
        _dumps(account_key.public_jwk_json), JWKOct(key=mac_key), alg, None, url=url, kid=kid
    )
    result: dict[str, Any] = signed.to_partial_json()
    return result


def key_change_inner(
    *, old_key: AccountKey, new_key: AccountKey, account_url: str, url: str
) -> dict[str, Any]:
    """The inner JWS of a key rollover (§7.3.5), signed by the new key with its ``jwk``."""
    from acme import jws as acme_jws  # see the module docstring

    payload = {"account": account_url, "oldKey": old_key.public_jwk_json}
    signed = acme_jws.JWS.sign(_dumps(payload), new_key.jwk, new_key.algorithm, None, url=url)
    result: dict[str, Any] = signed.to_partial_json()
    return result
