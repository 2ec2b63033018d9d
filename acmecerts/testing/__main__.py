"""``python -m acmecerts.testing pebble``: run a local test CA until Ctrl-C.

It starts :class:`~acmecerts.testing.PebbleServer` (Pebble 2.10 with Let's Encrypt's
profiles when installed, else Debian's Pebble 2.4) on loopback ports, prints the shell lines
that point the acmecerts CLI at it, and waits. Ctrl-C (or ``SIGTERM``) stops Pebble and
removes its temporary directory; the exit status is then 0.

::

    $ python -m acmecerts.testing pebble
    export ACMECERTS_DIRECTORY=https://127.0.0.1:40313/dir
    export ACMECERTS_CA_BUNDLE=/tmp/acmecerts-pebble-k2j1/pebble-https-ca.pem
    export ACMECERTS_HTTP_01_LISTEN=127.0.0.1:36677
    ...

``--env-file PATH`` also writes those lines to *PATH*, so another shell can ``source`` it.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from acmecerts.testing._binaries import PebbleNotFound
from acmecerts.testing._pebble import PebbleServer

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m acmecerts.testing",
        description="Run a local test CA (Pebble) on loopback until Ctrl-C.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pebble = commands.add_parser(
        "pebble",
        help="Pebble with Let's Encrypt's profiles (classic, tlsserver, shortlived).",
        description="Start Pebble and its DNS server on 127.0.0.1, print the variables to "
        "export for the acmecerts CLI, and run until Ctrl-C.",
    )
    pebble.add_argument(
        "--release",
        choices=("2.10", "2.4"),
        default=None,
        help="Which Pebble (default: 2.10 if installed, else Debian's 2.4).",
    )
    pebble.add_argument(
        "--retry-after",
        type=int,
        default=0,
        metavar="SECONDS",
        help="Retry-After that Pebble 2.10 sends on polls of a busy order or authorization "
        "(default: 0, none).",
    )
    pebble.add_argument(
        "--env-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="Also write the export lines to PATH (for `source PATH` in another shell).",
    )
    return parser


def _exports(server: PebbleServer) -> list[str]:
    values = {
        "ACMECERTS_DIRECTORY": server.directory_url,
        "ACMECERTS_CA_BUNDLE": str(server.ca_bundle),
        "ACMECERTS_HTTP_01_LISTEN": f"127.0.0.1:{server.http_port}",
        "ACMECERTS_TLS_ALPN_01_LISTEN": f"127.0.0.1:{server.tls_port}",
        # the examples/ programs take the http-01 port alone
        "ACMECERTS_HTTP_PORT": str(server.http_port),
    }
    return [f"export {name}={shlex.quote(value)}" for name, value in values.items()]


def _describe(server: PebbleServer) -> list[str]:
    profiles = ", ".join(
        f"{name} ({p.validity_seconds // 3600} h)" for name, p in server.profiles.items()
    )
    lines = [
        f"Pebble {server.release} is running: {server.directory_url}",
        f"  profiles: {profiles}" if profiles else "  profiles: none (Pebble 2.4)",
        "  every name resolves to 127.0.0.1; Pebble validates http-01 on "
        f"127.0.0.1:{server.http_port} and tls-alpn-01 on 127.0.0.1:{server.tls_port}",
        f"  issuing root (new at every start): {server.management_url}/roots/0",
        "Then, for example:",
        "  acmecerts issue --agree-tos --state-dir ./pebble-state example.test",
        "Ctrl-C stops it.",
    ]
    return lines


def _serve(release: str | None, retry_after: int, env_file: Path | None) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    previous_int = signal.getsignal(signal.SIGINT)
    try:
        with tempfile.TemporaryDirectory(prefix="acmecerts-pebble-") as workdir:
            server = PebbleServer(
                Path(workdir),
                release=release,  # type: ignore[arg-type]
                retry_after_authz=retry_after,
                retry_after_order=retry_after,
            )
            if release is None and server.release == "2.4":
                print(
                    "note: Pebble 2.10 is not installed (bash scripts/pebble-2.10.sh unpacks "
                    "it); running Debian's Pebble 2.4, without profiles or ARI",
                    file=sys.stderr,
                )
            with server:
                exports = _exports(server)
                print("\n".join(exports), flush=True)
                if env_file is not None:
                    env_file.write_text("\n".join(exports) + "\n", encoding="utf-8")
                print("\n".join(_describe(server)), file=sys.stderr, flush=True)
                try:
                    while not stop.wait(0.5):
                        if not server.running:
                            print("Pebble exited; see its log above", file=sys.stderr)
                            return 1
                except KeyboardInterrupt:
                    pass
                # a second Ctrl-C (or the terminal's signal to the whole group) must not
                # cut the clean-up short and leave Pebble running
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                print("stopping Pebble", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m acmecerts.testing`` with *argv*; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.retry_after < 0:
        print("--retry-after must be 0 or more", file=sys.stderr)
        return 2
    try:
        return _serve(args.release, args.retry_after, args.env_file)
    except (PebbleNotFound, RuntimeError) as exc:
        print(f"cannot start Pebble: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
