"""An HTTPS service that gets its own certificate when it starts and keeps it renewed.

    python examples/web_service.py --name www.example.com --listen 0.0.0.0:443

At start the service asks a CertificateManager for its certificate (the one kept in
``--state-dir`` if it is still good, else a new one), then serves HTTPS with it. The
manager keeps running in the background: when it renews the certificate (ARI window, or a
third of the lifetime left), the ``CertificateObtained`` event loads the new one into the
server's ``SSLContext``: new connections get it at once, open ones keep theirs, and the
listening socket never closes. Ctrl-C (or SIGTERM) stops it cleanly.

Plain anyio (``TLSListener``) and the standard library; no web framework.

Configuration (flag, else environment variable, else default):
  --directory   ACMECERTS_DIRECTORY   the CA (default: Let's Encrypt *staging*)
  --ca-bundle   ACMECERTS_CA_BUNDLE   extra CA certificate to trust for the CA's HTTPS
  --http-port   ACMECERTS_HTTP_PORT   where to answer http-01 (the CA connects to 80)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import ssl
import sys
from pathlib import Path

import anyio
import anyio.abc
from anyio.streams.tls import TLSListener

from acmecerts import AcmeClient, Http01Server, IssuedCertificate
from acmecerts.manager import (
    CertificateEvent,
    CertificateFailed,
    CertificateManager,
    CertificateObtained,
    CertificateSpec,
    IssuedResult,
)
from acmecerts.storage import (
    FileStorage,
    KeyLayout,
    load_account_url,
    load_or_create_account_key,
    save_account_url,
)

STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"


def say(text: str) -> None:
    print(text, flush=True)


class ServingCertificate:
    """The server's ``SSLContext`` and the certificate it currently presents."""

    def __init__(self, files: Path) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.current: IssuedCertificate | None = None
        # load_cert_chain wants files: they go to a private directory (0700)
        self._files = files

    def install(self, cert: IssuedCertificate) -> None:
        """Serve ``cert`` from the next TLS handshake on."""
        chain, key = self._files / "fullchain.pem", self._files / "privkey.pem"
        chain.write_text(cert.fullchain_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as key_file:
            key_file.write(cert.private_key_pem)
        # --8<-- [start:swap]
        # The same SSLContext gets the new pair: every handshake from now on presents it,
        # connections already open keep the certificate they started with.
        self.context.load_cert_chain(chain, key)
        # --8<-- [end:swap]
        self.current = cert


async def handle(stream: anyio.abc.ByteStream, serving: ServingCertificate, name: str) -> None:
    """Answer one HTTP/1.1 request with a line about the certificate in use."""
    async with stream:
        request = b""
        with anyio.move_on_after(10):
            while b"\r\n\r\n" not in request and len(request) < 16384:
                try:
                    request += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError):
                    return
        cert = serving.current
        assert cert is not None
        body = f"hello from {name}: certificate serial {cert.serial}, until {cert.not_after}\n"
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body.encode())}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(anyio.BrokenResourceError, ssl.SSLError):
            await stream.send((head + body).encode())


async def stop_on_signals(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            say(f"{signal.Signals(signum).name}: stopping")
            scope.cancel()
            return


async def run(args: argparse.Namespace) -> None:
    host, _, port = args.listen.rpartition(":")
    layout = KeyLayout(args.directory)
    async with (
        FileStorage(args.state_dir) as storage,
        anyio.TemporaryDirectory(prefix="web-service-") as files,
        Http01Server(port=args.http_port) as solver,
    ):
        # one account, kept with the certificate: a restart reuses both
        account_key = await load_or_create_account_key(storage, layout)
        account_url = await load_account_url(storage, layout, account_key=account_key)
        client = AcmeClient(
            args.directory,
            ca_bundle=args.ca_bundle,
            account_key=account_key,
            account_url=account_url,
        )
        manager = CertificateManager(
            client,
            solvers=[solver],
            storage=storage,
            layout=layout,
            renewal_fraction=args.renewal_fraction,
        )
        serving = ServingCertificate(Path(files))

        # --8<-- [start:renewals]
        def on_event(event: CertificateEvent) -> None:
            if isinstance(event, CertificateObtained) and event.certificate is not None:
                serving.install(event.certificate)
                kind = "renewal" if event.renewal else "new certificate"
                say(f"installed certificate {event.certificate.serial} ({kind})")
            elif isinstance(event, CertificateFailed):
                say(f"attempt failed: {event.error}; next at {event.next_attempt_at}")

        manager.subscribe(on_event)
        # --8<-- [end:renewals]

        async with client:
            # --8<-- [start:startup]
            # The certificate first (stored and still good, or issued now), then the
            # manager's background work, which renews it when it is due.
            spec = CertificateSpec.of(args.name, args.names or [args.name])
            [result] = await manager.issue_many([spec])
            if not isinstance(result, IssuedResult):
                raise SystemExit(f"no certificate for {args.name}: {result}")
            if serving.current is None:  # taken from the store: no event for it
                serving.install(result.certificate)
                say(f"installed certificate {result.certificate.serial} (stored)")
            # --8<-- [end:startup]
            if client.account_url is not None:  # the same account next time
                await save_account_url(storage, layout, client.account_url, account_key=account_key)
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg, manager:
                    tg.start_soon(stop_on_signals, scope)
                    listener = TLSListener(
                        await anyio.create_tcp_listener(
                            local_host=host or None, local_port=int(port)
                        ),
                        serving.context,
                        standard_compatible=False,
                    )
                    say(f"serving https://{args.name}:{port}/ on {host or '*'}:{port}")
                    await listener.serve(lambda stream: handle(stream, serving, args.name))
    say("stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the service's DNS name")
    parser.add_argument("--also", dest="names", action="append", help="more names")
    parser.add_argument("--listen", default="0.0.0.0:443", help="HOST:PORT for HTTPS")
    parser.add_argument("--state-dir", type=Path, default=Path("web-service-state"))
    parser.add_argument(
        "--renewal-fraction",
        type=float,
        default=None,
        help="without ARI, renew when this fraction of the lifetime remains "
        "[default: a third, half for certificates of under 10 days]",
    )
    parser.add_argument("--directory", default=os.environ.get("ACMECERTS_DIRECTORY", STAGING))
    parser.add_argument("--ca-bundle", default=os.environ.get("ACMECERTS_CA_BUNDLE"))
    parser.add_argument(
        "--http-port", type=int, default=int(os.environ.get("ACMECERTS_HTTP_PORT", "80"))
    )
    args = parser.parse_args(argv)
    if args.names:
        args.names = [args.name, *args.names]
    anyio.run(run, args)


if __name__ == "__main__":
    sys.exit(main())
