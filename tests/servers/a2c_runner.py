"""Serve acme2certifier's WSGI app over HTTPS on 127.0.0.1 (run by its own venv's python).

:class:`tests.servers.a2c.Acme2CertifierServer` runs this file as a script with the
interpreter of the virtualenv acme2certifier is installed in::

    V/bin/python -I a2c_runner.py --config acme_srv.cfg --cert tls.pem --key tls-key.pem \\
        --port-file port

It imports nothing from acmecerts (the venv does not have it) and only the standard library
besides ``acme2certifier.share.acme2certifier_wsgi``, which reads ``$ACME_SRV_CONFIGFILE``
when it is imported. acme2certifier's own ``__main__`` binds ``0.0.0.0:80``; this runner
binds ``127.0.0.1`` on the given port (0: a free one), serves every request in its own
thread, terminates TLS in that thread (a stalled handshake blocks nobody else), and writes
the bound port to ``--port-file`` once it accepts connections. SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import socket
import socketserver
import ssl
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer


class _Handler(WSGIRequestHandler):
    """wsgiref's handler, telling the app the scheme is https and not resolving names."""

    def get_environ(self) -> dict[str, str]:
        env: dict[str, str] = super().get_environ()
        env["HTTPS"] = "on"  # wsgiref derives wsgi.url_scheme from it
        return env

    def address_string(self) -> str:
        return str(self.client_address[0])


class _TLSThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    tls: ssl.SSLContext

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Runs in the request's thread: the TLS handshake happens here, not in accept().
        request.settimeout(30)
        try:
            tls_sock = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        try:
            super().finish_request(tls_sock, client_address)
        finally:
            with contextlib.suppress(OSError):
                tls_sock.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError)):
            return  # a client that went away is not worth a traceback
        super().handle_error(request, client_address)


def _write_port(path: str, port: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="acme_srv.cfg")
    parser.add_argument("--cert", required=True, help="TLS certificate (PEM)")
    parser.add_argument("--key", required=True, help="TLS private key (PEM)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any)")
    parser.add_argument("--port-file", required=True, help="where to write the bound port")
    args = parser.parse_args(argv)

    os.environ["ACME_SRV_CONFIGFILE"] = os.path.abspath(args.config)
    signal.signal(signal.SIGTERM, _stop)
    wsgi = importlib.import_module("acme2certifier.share.acme2certifier_wsgi")

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(args.cert, args.key)
    tls.set_alpn_protocols(["http/1.1"])

    server = _TLSThreadingServer(("127.0.0.1", args.port), _Handler)
    server.tls = tls
    server.set_app(wsgi.application)
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        _write_port(args.port_file, server.server_address[1])
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
