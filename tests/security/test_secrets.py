"""Secrets stay secret: private keys and EAB MAC keys never reach logs, reprs, errors, events
or metrics.

The tests issue real certificates from the session Pebble (with an EAB-less account) with
every logger at DEBUG (acmecerts, httpx, httpcore, h2/hpack), keep every public object and
exception they meet, and then search all of that text for key material: ``PRIVATE KEY``
PEM markers, every base64 line of the keys' PEM encodings (PKCS#8 and traditional), the
JWK private members (``d``, and ``p``/``q``/``dp``/``dq``/``qi`` for RSA) and the private
numbers in decimal and hex. The EAB MAC key is searched for likewise (against a fake CA,
since Pebble's session server has no EAB).

Also here: file modes (keys 0600 in 0700 directories: FileStorage, and the CLI's state
directory and ``--out``, even under ``umask 0``), and TLS verification that cannot be
turned off silently.
"""

from __future__ import annotations

import base64
import inspect
import json
import logging
import os
import stat
import subprocess
import sys
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from josepy.jwk import JWK

from acmecerts import (
    AccountKey,
    AcmeCertsError,
    AcmeClient,
    ChallengeTask,
    ConnectError,
    ExternalAccountBinding,
    Http01Server,
    InvalidInput,
    IssuedCertificate,
    KeyType,
    StorageError,
)
from acmecerts.manager import CertificateEvent, CertificateManager
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import load_private_key
from acmecerts.storage import FileStorage, KeyLayout, load_or_create_account_key
from acmecerts.testing import PebbleServer
from acmecerts.transport import AcmeTransport
from tests.security._fake_ca import CA, FakeCa

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

REPO = Path(__file__).resolve().parents[2]
#: Loggers that are quiet by default but may show headers or bodies at DEBUG.
NOISY_LOGGERS = ("acmecerts", "httpx", "httpcore", "h2", "hpack", "h11", "anyio", "asyncio")


# --------------------------------------------------------------------------- key material


def key_needles(key_or_pem: Any) -> set[str]:
    """Every string that would betray ``key_or_pem`` (a private key or its PEM)."""
    if isinstance(key_or_pem, str | bytes):
        key = load_private_key(key_or_pem)
    elif isinstance(key_or_pem, AccountKey):
        key = key_or_pem.private_key
    else:
        key = key_or_pem
    needles: set[str] = set()
    for fmt in (serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL):
        pem = key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
        for line in pem.decode().splitlines():
            if not line.startswith("-----") and len(line) >= 16:
                needles.add(line)
        der = key.private_bytes(serialization.Encoding.DER, fmt, serialization.NoEncryption())
        needles.add(der.hex()[:64])
        needles.add(base64.b64encode(der).decode()[:64])
    private_json = JWK.load(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    ).to_partial_json()
    for member in ("d", "p", "q", "dp", "dq", "qi"):
        if member in private_json:
            needles.add(private_json[member])
    if isinstance(key, ec.EllipticCurvePrivateKey):
        secret = key.private_numbers().private_value
    else:
        assert isinstance(key, rsa.RSAPrivateKey)
        secret = key.private_numbers().d
    needles.add(str(secret)[:40])
    needles.add(format(secret, "x")[:40])
    return needles


def assert_no_secrets(haystack: str, needles: Iterable[str], *, where: str) -> None:
    assert "PRIVATE KEY" not in haystack, f"a private key PEM marker in {where}"
    found = sorted(n for n in needles if n and n in haystack)
    assert not found, f"key material in {where}: {found[:3]}"


def texts_of(*objects: object) -> Iterator[str]:
    """``repr`` and ``str`` of each object, and the full traceback of each exception."""
    for obj in objects:
        yield repr(obj)
        yield str(obj)
        if isinstance(obj, BaseException):
            yield "".join(traceback.format_exception(obj))


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Capture every record at DEBUG, the chatty third-party loggers included."""
    caplog.set_level(logging.DEBUG)
    for name in NOISY_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    parts = [caplog.text]
    for record in caplog.records:
        parts.append(record.getMessage())
        parts.append(repr(record.args))
        if record.exc_info:
            parts.append("".join(traceback.format_exception(*record.exc_info)))
    return "\n".join(parts)


class _NotServing:
    """An http-01 "solver" that answers nothing, so Pebble's validation fails."""

    challenge_type = "http-01"

    def supports(self, identifier: Identifier) -> bool:
        return True

    async def present(self, task: ChallengeTask) -> None:
        return None

    async def cleanup(self, task: ChallengeTask) -> None:
        return None


# --------------------------------------------------------------------------- Pebble


def _stored_key(data: bytes) -> bytes:
    """The private key PEM in a stored value: the value, or a record's ``private_key_pem``."""
    if data.startswith(b"{"):
        return str(json.loads(data)["private_key_pem"]).encode("ascii")
    return data


async def test_no_key_material_in_logs_reprs_errors_or_events(
    pebble: PebbleServer,
    http01: Http01Server,
    tmp_path: Path,
    debug_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    storage = FileStorage(tmp_path / "state")
    layout = KeyLayout(pebble.directory_url)
    account_key = await load_or_create_account_key(storage, layout)
    events: list[CertificateEvent] = []
    errors: list[BaseException] = []
    keep: list[object] = [account_key, account_key.jwk, storage, layout]

    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, account_key=account_key
    ) as client:
        keep.append(client)
        issued = await client.issue(["secrets.example.test"], solver=http01)
        rsa_issued = await client.issue(
            ["rsa.secrets.example.test"], solver=http01, key_type=KeyType.RSA2048
        )
        keep += [issued, rsa_issued, issued.chain, issued.info]

        manager = CertificateManager(client, solvers=[http01], storage=storage, layout=layout)
        manager.subscribe(events.append)
        # imported here: a module-level import makes ``acmecerts.metrics`` an attribute of
        # the package for the whole session (tests/project/test_exported_members.py sees it)
        from acmecerts.metrics import PrometheusMetrics

        metrics = PrometheusMetrics()
        metrics.attach(manager)
        results = await manager.issue_many(["managed.secrets.example.test"])
        keep += [manager, *results]

        for names, solver in (
            (["fails.secrets.example.test"], _NotServing()),
            (["bad..name"], http01),
        ):
            try:
                await client.issue(names, solver=solver)
            except AcmeCertsError as exc:
                errors.append(exc)

    stored = [await storage.load(k) for k in await storage.list(layout.account_prefix)]
    keep += stored
    private_pems = [
        issued.private_key_pem,
        rsa_issued.private_key_pem,
        account_key.to_pem(),
        *(_stored_key(v.data) for v in stored if v is not None and b"PRIVATE KEY" in v.data),
    ]
    assert len(private_pems) >= 4  # the manager stored its certificate key too
    needles = set().union(*(key_needles(pem) for pem in private_pems))

    # corrupt and truncated key files give errors that name the file, not its content
    layout_b = KeyLayout(pebble.directory_url, account="truncated")
    await storage.store(layout_b.account_key(), account_key.to_pem()[:-40], secret=True)
    with pytest.raises(StorageError) as corrupt:
        await load_or_create_account_key(storage, layout_b)
    errors.append(corrupt.value)
    with pytest.raises(InvalidInput) as unloadable:
        load_private_key(account_key.to_pem()[:-40])
    errors.append(unloadable.value)

    assert len(errors) == 4
    assert events
    haystack = "\n".join(
        [
            log_text(debug_logs),
            *texts_of(*keep, *events, *errors),
            metrics.render().decode(),
            *capfd.readouterr(),
        ]
    )
    assert "secrets.example.test" in haystack  # the scan does see what was logged
    assert_no_secrets(haystack, needles, where="logs, reprs, errors and events")


async def test_no_eab_mac_key_anywhere(
    tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    """EAB against a fake CA (Pebble's session server has no EAB configured)."""
    mac = os.urandom(32)
    hmac_key = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    eab = ExternalAccountBinding("kid-123", hmac_key)
    ca = FakeCa()
    client = ca.client(eab=eab)
    client.account_url = None
    account = await client.register()
    errors: list[BaseException] = []
    for bad in (hmac_key[:5], ""):  # an impossible base64 length, and nothing
        try:
            await ca.client(eab=ExternalAccountBinding("kid-123", bad)).register()
        except AcmeCertsError as exc:
            errors.append(exc)
    assert len(errors) == 2
    needles = {
        hmac_key,
        hmac_key[:24],
        base64.b64encode(mac).decode()[:24],
        mac.hex()[:32],
    }
    haystack = "\n".join(
        [log_text(debug_logs), *texts_of(eab, client, account, ca.client(eab=eab), *errors)]
    )
    assert "kid-123" in haystack
    assert_no_secrets(haystack, needles, where="logs, reprs and errors")
    assert hmac_key not in repr(ExternalAccountBinding("k", hmac_key))
    # It did reach the CA, MACed: the binding is in the newAccount body, the key is not.
    body = next(r.content for r in ca.requests if r.url.path == "/account")
    payload = json.loads(body)["payload"]
    decoded = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    assert b"externalAccountBinding" in decoded
    assert hmac_key.encode() not in decoded + body


# --------------------------------------------------------------------------- file modes


def _modes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    dirs = {str(root): stat.S_IMODE(root.stat().st_mode)}
    files: dict[str, int] = {}
    for path in root.rglob("*"):
        # a symlink's own bits mean nothing on Linux (always 0777): what counts is its
        # target's (the exported set is OUT/cert.pem -> .live/cert.pem, .live -> .vN)
        mode = stat.S_IMODE((path.stat() if path.is_symlink() else path.lstat()).st_mode)
        (dirs if path.is_dir() else files)[str(path.relative_to(root))] = mode
    return dirs, files


async def test_file_storage_keys_are_0600_in_0700_directories_even_with_umask_0(
    tmp_path: Path,
) -> None:
    root = tmp_path / "state"
    storage = FileStorage(root)
    layout = KeyLayout("https://ca.test/directory")
    old = os.umask(0)
    try:
        key = await load_or_create_account_key(storage, layout)
        await storage.store(layout.certificate("example.com").privkey, key.to_pem(), secret=True)
        await storage.store(layout.ledger(), b"{}")
        async with storage.lock(layout.account_lock()):
            dirs, files = _modes(root)
    finally:
        os.umask(old)
    assert files
    assert set(dirs.values()) == {0o700}, dirs
    assert set(files.values()) == {0o600}, files


def test_cli_state_and_out_files_keep_keys_private(pebble: PebbleServer, tmp_path: Path) -> None:
    """The real CLI at ``-vv`` under ``umask 0``: keys 0600 in 0700 directories, none printed."""
    state, out = tmp_path / "state", tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACMECERTS_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg-config")
    env["ACMECERTS_AGREE_TOS"] = "1"  # Pebble publishes terms of service
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "acmecerts.cli",
            "issue",
            "-vv",
            "--directory",
            pebble.directory_url,
            "--ca-bundle",
            str(pebble.ca_bundle),
            "--state-dir",
            str(state),
            "--out",
            str(out),
            "--http-01-listen",
            f"127.0.0.1:{pebble.http_port}",
            "cli.secrets.example.test",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.umask(0),
    )
    assert result.returncode == 0, result.stderr
    state_dirs, state_files = _modes(state)
    assert set(state_dirs.values()) == {0o700}, state_dirs
    assert set(state_files.values()) == {0o600}, state_files
    out_dirs, out_files = _modes(out)
    assert set(out_dirs.values()) == {0o700}
    assert out_files["privkey.pem"] == 0o600
    keys = [(out / "privkey.pem").read_bytes()]
    keys += [p.read_bytes() for p in state.rglob("*.pem") if b"PRIVATE KEY" in p.read_bytes()]
    assert len(keys) >= 2  # the certificate key and the account key
    needles = set().union(*(key_needles(k[k.index(b"-----BEGIN") :]) for k in keys))
    assert "cli.secrets.example.test" in result.stdout + result.stderr
    assert_no_secrets(result.stdout + result.stderr, needles, where="the CLI's output")


# --------------------------------------------------------------------------- TLS


def test_there_is_no_option_to_turn_tls_verification_off() -> None:
    for func in (AcmeClient.__init__, AcmeTransport.__init__):
        for name in inspect.signature(func).parameters:
            assert not any(w in name.lower() for w in ("verify", "insecure", "ssl", "tls")), name


async def test_an_untrusted_server_certificate_is_a_typed_tls_error(pebble: PebbleServer) -> None:
    """Pebble's certificate is signed by a throwaway CA that is not in the system store."""
    async with AcmeClient(pebble.directory_url) as client:
        with pytest.raises(ConnectError, match="TLS certificate verification") as caught:
            await client.directory()
    assert caught.value.reached_ca is False
    assert "ca_bundle" in str(caught.value)


async def test_trusting_another_ca_does_not_help(pebble: PebbleServer, tmp_path: Path) -> None:
    from tests.security._fake_ca import make_chain

    other_ca = make_chain(ec.generate_private_key(ec.SECP256R1()).public_key(), ["x.test"])
    bundle = tmp_path / "other-ca.pem"
    bundle.write_bytes(other_ca[other_ca.index(b"-----BEGIN", 10) :])
    async with AcmeClient(pebble.directory_url, ca_bundle=bundle) as client:
        with pytest.raises(ConnectError, match="TLS"):
            await client.directory()


async def test_a_callers_unverified_client_is_warned_about_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="acmecerts"):
        async with httpx.AsyncClient(verify=False) as insecure:  # noqa: S501 - the point
            AcmeTransport(f"{CA}/directory", client=insecure)
        async with httpx.AsyncClient() as secure:
            AcmeTransport(f"{CA}/directory", client=secure)
    warnings = [r for r in caplog.records if "TLS VERIFICATION" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING


def test_issued_certificate_repr_hides_the_key() -> None:
    """Covered end to end above; this pins the dataclass field itself."""
    import dataclasses

    field = {f.name: f for f in dataclasses.fields(IssuedCertificate)}["private_key_pem"]
    assert field.repr is False
