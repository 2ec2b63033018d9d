"""Reading certbot's state: :func:`read_lineage` and :func:`read_account` (no writes here).

What a migration from certbot needs (the CLI's ``acmecerts import certbot``): each
lineage's certificate, key, CA, account and how it was renewed, checked, so that a
program can store it as acmecerts would have issued it.

certbot keeps, under its configuration directory (``/etc/letsencrypt``)::

    renewal/NAME.conf                         one lineage: paths, and [renewalparams]
    live/NAME/{cert,chain,fullchain,privkey}.pem -> ../../archive/NAME/*N.pem
    accounts/<server host[:port]>/<path>/<id>/private_key.json   the account key (a JWK)
                                             /regr.json         {"uri": account URL, ...}
                                             /meta.json

``renewal/NAME.conf`` is a ConfigObj file: ``key = value`` lines, ``[section]`` and
``[[subsection]]`` headers, ``#`` comments. What a lineage needs from it: ``fullchain`` and
``privkey`` (the live paths), and in ``[renewalparams]`` the CA (``server``), the account
(``account``), the key type (``key_type``, ``rsa_key_size``, ``elliptic_curve``), how http-01
was answered (``authenticator`` ``webroot`` with ``webroot_path`` or ``[[webroot_map]]``, or
``standalone`` with ``http01_port`` and ``http01_address``) and the hooks (``pre_hook``,
``post_hook``, ``renew_hook``: the deploy hook). Anything that cannot be read or makes no
sense is an :class:`~acmecerts.errors.InvalidInput` naming the file.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, rsa

from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.protocol.certificate import (
    CertificateChain,
    certificate_info,
    check_certificate_matches,
    parse_pem_chain,
)
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import AccountKey, KeyType, load_private_key
from acmecerts.storage.keys import certificate_slug

__all__ = ["CertbotLineage", "parse_conf", "read_account", "read_lineage", "renewal_confs"]


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class CertbotLineage:
    """One certbot lineage, read and checked (the chain belongs to the key and names)."""

    name: str
    conf: Path
    server: str
    identifiers: tuple[Identifier, ...]
    chain: CertificateChain
    private_key_pem: str
    key_type: KeyType
    account_id: str | None
    #: http-01 was answered from this document root (certbot's ``webroot``)...
    webroot: str | None
    #: ...or by a server listening here (``standalone``: ``host:port``, ``[v6]:port``).
    http_01_listen: str | None
    pre_hook: str | None
    post_hook: str | None
    deploy_hook: str | None

    def __repr__(self) -> str:
        return f"CertbotLineage({self.name!r}, {self.server!r})"


def _bad(path: Path, why: str) -> InvalidInput:
    return InvalidInput(f"certbot file {path}: {why}; nothing was imported for it")


def _value(raw: str) -> str | list[str]:
    text = raw.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if "," in text:  # a ConfigObj list: "a, b," (a trailing comma makes one item a list)
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


def parse_conf(path: Path) -> dict[str, Any]:
    """Read a certbot renewal configuration; sections are nested dicts."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(path, f"cannot read it ({exc})") from exc
    top: dict[str, Any] = {}
    stack: list[dict[str, Any]] = [top]
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            depth = len(stripped) - len(stripped.lstrip("["))
            name = stripped.strip("[]").strip()
            if not name or not stripped.endswith("]" * depth) or depth > len(stack):
                raise _bad(path, f"line {number} is not a section header: {stripped!r}")
            del stack[depth:]
            section: dict[str, Any] = {}
            stack[-1][name] = section
            stack.append(section)
            continue
        key, equals, raw = stripped.partition("=")
        if not equals or not key.strip():
            raise _bad(path, f"line {number} is not 'key = value': {stripped!r}")
        stack[-1][key.strip()] = _value(raw)
    return top


def _text(conf: dict[str, Any], key: str, path: Path) -> str | None:
    value = conf.get(key)
    if value is None or value == "None" or value == "":
        return None
    if not isinstance(value, str):
        raise _bad(path, f"{key} must be one value")
    return value


def _read_pem(path: Path, conf_path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise _bad(conf_path, f"cannot read its {what} {path}: {exc.strerror or exc}") from exc


def _key_type(params: dict[str, Any], key_pem: bytes, path: Path) -> KeyType:
    """The key type renewals use: the configuration's, else the current key's."""
    kind = _text(params, "key_type", path)
    if kind is None:
        key = load_private_key(key_pem)
        if isinstance(key, ec.EllipticCurvePrivateKey):
            kind, curve, size = "ecdsa", key.curve.name, None
        elif isinstance(key, rsa.RSAPrivateKey):
            kind, curve, size = "rsa", None, str(key.key_size)
        else:
            raise _bad(path, "its key is neither RSA nor ECDSA")
    else:
        curve = _text(params, "elliptic_curve", path)
        size = _text(params, "rsa_key_size", path)
    if kind == "ecdsa":
        names = {"secp256r1": KeyType.EC256, "secp384r1": KeyType.EC384}
        found = names.get(curve or "secp256r1")
        if found is None:
            raise _bad(path, f"elliptic_curve {curve} is not one acmecerts orders (P-256, P-384)")
        return found
    if kind == "rsa":
        try:
            return KeyType.parse(f"rsa{size or 2048}")
        except InvalidInput:
            raise _bad(path, f"rsa_key_size {size} is not one acmecerts orders") from None
    raise _bad(path, f"key_type {kind!r} is neither rsa nor ecdsa")


def _challenge(
    params: dict[str, Any], identifiers: tuple[Identifier, ...], path: Path
) -> tuple[str | None, str | None]:
    """The webroot, or the address a standalone http-01 server listened on."""
    authenticator = _text(params, "authenticator", path)
    if authenticator == "standalone":
        port = _text(params, "http01_port", path) or "80"
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise _bad(path, f"http01_port {port!r} is not a port")
        host = _text(params, "http01_address", path) or "::"
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return None, listen
    if authenticator == "webroot":
        mapping = params.get("webroot_map")
        roots: set[str] = set()
        if isinstance(mapping, dict) and mapping:
            for name in identifiers:
                root = mapping.get(name.value)
                if not isinstance(root, str):
                    raise _bad(path, f"webroot_map has no webroot for {name.value}")
                roots.add(root)
        else:
            given = params.get("webroot_path")
            items = [given] if isinstance(given, str) else given
            if not isinstance(items, list) or not items:
                raise _bad(path, "authenticator webroot without webroot_path or webroot_map")
            roots = set(items)
        if len(roots) != 1:
            raise _bad(
                path,
                f"its names are answered from {len(roots)} webroots ({', '.join(sorted(roots))})"
                "; acmecerts answers a certificate from one",
            )
        return roots.pop(), None
    raise _bad(
        path,
        f"authenticator {authenticator!r} is not imported (webroot and standalone are); "
        "issue this certificate with `acmecerts issue` and its challenge options",
    )


def read_lineage(conf_path: Path) -> CertbotLineage:
    """Read and check the lineage of ``renewal/NAME.conf``; :class:`InvalidInput` if unusable."""
    conf = parse_conf(conf_path)
    name = conf_path.name.removesuffix(".conf").strip().lower()
    try:
        certificate_slug(name)
    except InvalidInput as exc:
        raise _bad(conf_path, f"its name is no certificate name acmecerts stores ({exc})") from None
    params = conf.get("renewalparams")
    if not isinstance(params, dict):
        raise _bad(conf_path, "it has no [renewalparams] section")
    text = _text(params, "server", conf_path)
    try:
        server = DirectoryUrl(text or "")  # parsed once; the import passes it on
    except InvalidInput:
        raise _bad(conf_path, f"server {text!r} is not an https:// ACME directory URL") from None
    live = conf_path.parent.parent / "live" / name
    fullchain = Path(_text(conf, "fullchain", conf_path) or live / "fullchain.pem")
    privkey = Path(_text(conf, "privkey", conf_path) or live / "privkey.pem")
    chain_pem = _read_pem(fullchain, conf_path, "fullchain")
    key_pem = _read_pem(privkey, conf_path, "private key")
    try:
        chain = parse_pem_chain(chain_pem)
        identifiers = parse_identifiers(list(certificate_info(chain.leaf).names))
        key = load_private_key(key_pem)
        check_certificate_matches(chain, key=key, identifiers=identifiers)
        key_text = key_pem.decode("ascii")
    except (AcmeCertsError, UnicodeDecodeError) as exc:
        raise _bad(conf_path, f"its certificate {fullchain} and key {privkey}: {exc}") from exc
    webroot, listen = _challenge(params, identifiers, conf_path)
    return CertbotLineage(
        name=name,
        conf=conf_path,
        server=server,
        identifiers=identifiers,
        chain=chain,
        private_key_pem=key_text,
        key_type=_key_type(params, key_pem, conf_path),
        account_id=_text(params, "account", conf_path),
        webroot=webroot,
        http_01_listen=listen,
        pre_hook=_text(params, "pre_hook", conf_path),
        post_hook=_text(params, "post_hook", conf_path),
        deploy_hook=_text(params, "renew_hook", conf_path),
    )


def renewal_confs(directory: Path) -> list[Path]:
    """``DIR/renewal/*.conf``, sorted; :class:`InvalidInput` when there is none."""
    renewal = directory / "renewal"
    if not renewal.is_dir():
        raise InvalidInput(f"{directory} is not certbot's directory: it has no renewal/")
    confs = sorted(renewal.glob("*.conf"))
    if not confs:
        raise InvalidInput(f"{renewal} holds no certificate (no *.conf)")
    return confs


def _b64int(value: object, path: Path, field: str) -> int:
    if not isinstance(value, str):
        raise _bad(path, f"JWK member {field!r} is missing")
    try:
        return int.from_bytes(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)), "big")
    except ValueError as exc:
        raise _bad(path, f"JWK member {field!r} is not base64url") from exc


def _jwk_key(jwk: object, path: Path) -> AccountKey:
    if not isinstance(jwk, dict):
        raise _bad(path, "it is not a JWK (a JSON object)")
    try:
        if jwk.get("kty") == "RSA":
            n, e, d = (_b64int(jwk.get(f), path, f) for f in ("n", "e", "d"))
            p, q = _b64int(jwk.get("p"), path, "p"), _b64int(jwk.get("q"), path, "q")
            numbers = rsa.RSAPrivateNumbers(
                p, q, d, rsa.rsa_crt_dmp1(d, p), rsa.rsa_crt_dmq1(d, q), rsa.rsa_crt_iqmp(p, q),
                rsa.RSAPublicNumbers(e, n),
            )  # fmt: skip
            return AccountKey(numbers.private_key())
        if jwk.get("kty") == "EC":
            curves: dict[object, ec.EllipticCurve] = {
                "P-256": ec.SECP256R1(),
                "P-384": ec.SECP384R1(),
            }
            curve = curves.get(jwk.get("crv"))
            if curve is None:
                raise _bad(path, f"curve {jwk.get('crv')!r} is not supported")
            x, y, d = (_b64int(jwk.get(f), path, f) for f in ("x", "y", "d"))
            public = ec.EllipticCurvePublicNumbers(x, y, curve)
            return AccountKey(ec.EllipticCurvePrivateNumbers(d, public).private_key())
    except (ValueError, AcmeCertsError) as exc:
        if isinstance(exc, InvalidInput) and str(exc).startswith("certbot file"):
            raise
        raise _bad(path, f"not a usable private key ({exc})") from exc
    raise _bad(path, f"key type {jwk.get('kty')!r} is neither RSA nor EC")


def read_account(
    directory: Path, server: str | DirectoryUrl, account_id: str
) -> tuple[AccountKey, str]:
    """certbot's account ``account_id`` at ``server``: its key and URL."""
    parts = DirectoryUrl(server).parts
    base = directory / "accounts" / parts.netloc / parts.path.strip("/")
    folder = base / account_id
    if not folder.is_dir():
        found = sorted(p for p in (directory / "accounts").glob(f"**/{account_id}") if p.is_dir())
        if not found:
            raise InvalidInput(f"certbot's account {account_id} is not in {directory}/accounts")
        folder = found[0]
    documents: list[Any] = []
    for filename in ("private_key.json", "regr.json"):
        path = folder / filename
        try:
            documents.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise _bad(path, f"cannot read it as JSON ({exc})") from exc
    key = _jwk_key(documents[0], folder / "private_key.json")
    regr = documents[1]
    url = regr.get("uri") if isinstance(regr, dict) else None
    if not isinstance(url, str) or not url.startswith("https://"):
        raise _bad(folder / "regr.json", "it has no account URL (uri)")
    return key, url
