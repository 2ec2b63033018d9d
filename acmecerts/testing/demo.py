"""``python -m acmecerts.testing.demo``: the CLI issues a real certificate from a local Pebble.

What it does, step by step (``bash scripts/demo.sh`` installs what it needs first):

1. starts :class:`~acmecerts.testing.PebbleServer` (Pebble plus its DNS server, on loopback
   ports, in a temporary directory);
2. runs the real ``acmecerts issue --agree-tos`` command as a subprocess for two names
   (Pebble publishes terms of service), answering http-01 on the port where Pebble
   validates, and prints its output;
3. checks the files it wrote: the names, the key pair, the modes, and that the chain leads
   to Pebble's issuing root;
4. runs the command again, without ``--agree-tos``, to show the stored account is reused
   (no new account request, no agreement needed);
5. stops Pebble and removes the temporary directory.

Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import datetime as _dt
import shlex
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from acmecerts.testing._pebble import PebbleServer

__all__ = ["NAMES", "main"]

#: The names the demo certificate is issued for (Pebble's DNS answers 127.0.0.1 for all).
NAMES: tuple[str, ...] = ("demo.example.test", "www.demo.example.test")

_NEW_ACCOUNT = ("POST", "/sign-me-up")
_RUN_TIMEOUT = 120.0


class DemoFailed(Exception):
    """A step of the demo did not do what it should."""


def _cli_command() -> list[str]:
    """The installed ``acmecerts`` script next to this Python, else ``python -m acmecerts.cli``."""
    script = Path(sys.executable).parent / "acmecerts"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "acmecerts.cli"]


def _say(text: str = "") -> None:
    print(text, flush=True)


def _run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    command = [*_cli_command(), *args]
    _say("$ " + shlex.join(command))
    started = time.monotonic()
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=_RUN_TIMEOUT, check=False
    )
    for line in (result.stdout + result.stderr).splitlines():
        _say("  | " + line)
    _say(f"  exit status {result.returncode} after {time.monotonic() - started:.1f} s")
    if result.returncode != 0:
        raise DemoFailed(f"acmecerts issue exited with status {result.returncode}")
    return result


def _load_chain(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def _verify(out: Path, root_pem: str) -> str:
    """Check the files in ``out``; return the leaf's serial (hex)."""
    leaf_list = _load_chain(out / "cert.pem")
    intermediates = _load_chain(out / "chain.pem")
    fullchain = _load_chain(out / "fullchain.pem")
    if len(leaf_list) != 1 or fullchain != leaf_list + intermediates or not intermediates:
        raise DemoFailed("cert.pem + chain.pem do not make up fullchain.pem")
    leaf = leaf_list[0]

    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(san.get_values_for_type(x509.DNSName))
    if names != set(NAMES):
        raise DemoFailed(f"the certificate names {sorted(names)}, expected {sorted(NAMES)}")
    _say(f"  names         {', '.join(sorted(names))}")

    now = _dt.datetime.now(_dt.UTC)
    if not leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc:
        raise DemoFailed("the certificate is not valid now")
    _say(f"  valid until   {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")

    key = serialization.load_pem_private_key((out / "privkey.pem").read_bytes(), password=None)
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, public) != leaf.public_key().public_bytes(der, public):
        raise DemoFailed("privkey.pem does not belong to cert.pem")
    _say("  key pair      privkey.pem matches cert.pem")

    mode = stat.S_IMODE((out / "privkey.pem").stat().st_mode)
    if mode != 0o600:
        raise DemoFailed(f"privkey.pem has mode {mode:o}, expected 600")
    _say("  privkey.pem   mode 0600")

    root = x509.load_pem_x509_certificate(root_pem.encode("ascii"))
    chain = [leaf, *intermediates]
    try:
        for child, parent in zip(chain, [*intermediates, root], strict=True):
            child.verify_directly_issued_by(parent)
    except (ValueError, TypeError) as exc:
        raise DemoFailed(f"the chain does not lead to Pebble's root: {exc}") from exc
    _say(
        f"  chain         leaf -> {len(intermediates)} intermediate(s) -> Pebble's root "
        f"({root.subject.rfc4514_string()})"
    )
    return format(leaf.serial_number, "x")


def _account_url(state: Path, directory_url: str) -> str:
    """The account URL the CLI stored for ``directory_url`` (read through the library)."""
    from acmecerts.storage import FileStorage, KeyLayout, load_account_url

    async def read() -> str | None:
        async with FileStorage(state) as storage:
            return await load_account_url(storage, KeyLayout(directory_url))

    url = anyio.run(read)
    if url is None:
        raise DemoFailed(f"no account URL stored in {state}")
    return url


def run_demo(workdir: Path) -> None:
    """Run the demo in ``workdir``; raise :class:`DemoFailed` when a check fails."""
    state = workdir / "state"
    out = workdir / "certificates"
    _say("Starting Pebble (Let's Encrypt's ACME test server) on 127.0.0.1 ...")
    with PebbleServer(workdir / "pebble") as pebble:
        _say(f"  directory     {pebble.directory_url}")
        _say(f"  http-01 port  {pebble.http_port} (where Pebble's validation connects)")
        args = [
            "issue",
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
            *NAMES,
        ]

        _say()
        _say("1. Issue a certificate with the acmecerts CLI (Pebble publishes terms of service:")
        _say("   --agree-tos agrees to them for the new account):")
        _run_cli([*args[:1], "--agree-tos", *args[1:]])
        _say()
        _say(f"2. Check the files in {out}:")
        first_serial = _verify(out, pebble.root_pem())
        first_account = _account_url(state, pebble.directory_url)
        _say(f"  account       {first_account}")

        _say()
        _say("3. Run it again with --force: the stored account is reused (no --agree-tos")
        _say("   needed), a new certificate is issued (without --force the stored, still")
        _say("   valid one is kept).")
        accounts_before = pebble.requests_seen().count(_NEW_ACCOUNT)
        _run_cli([*args[:1], "--force", *args[1:]])
        second_serial = _verify(out, pebble.root_pem())
        second_account = _account_url(state, pebble.directory_url)
        new_accounts = pebble.requests_seen().count(_NEW_ACCOUNT) - accounts_before
        if second_account != first_account or new_accounts:
            raise DemoFailed(
                f"the account was not reused ({first_account} -> {second_account}, "
                f"{new_accounts} newAccount request(s))"
            )
        if second_serial == first_serial:
            raise DemoFailed("the second run did not issue a new certificate")
        _say(f"  account       {second_account} (same account, no newAccount request)")
        _say(f"  serial        {first_serial} -> {second_serial} (a fresh certificate)")
        _say()
        _say("Stopping Pebble.")


def main() -> int:
    """Run the demo in a temporary directory; return the exit status."""
    with tempfile.TemporaryDirectory(prefix="acmecerts-demo-") as tmp:
        try:
            run_demo(Path(tmp))
        except (DemoFailed, RuntimeError, subprocess.TimeoutExpired) as exc:
            _say(f"demo FAILED: {exc}")
            return 1
    _say("Demo OK: the acmecerts CLI issued a certificate from Pebble and reused its account.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
