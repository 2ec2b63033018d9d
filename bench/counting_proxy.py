"""A counting HTTPS reverse proxy for Pebble: every ACME request, by method and Pebble route.

    python bench/counting_proxy.py --upstream 127.0.0.1:14000 \\
        --cert pebble-https-cert.pem --key pebble-https-key.pem --ca pebble-https-ca.pem

prints ``{"port": P}`` once it listens on ``127.0.0.1:P`` and serves until killed. Clients use
``https://127.0.0.1:P/dir``: the proxy presents Pebble's own certificate (same CA, same SANs),
forwards every request unchanged (``Host`` included, so the URLs Pebble builds point back at the
proxy) over a kept-alive upstream connection, and counts it as ``"<METHOD> <route>"`` with
Pebble's route names (``/dir``, ``/nonce-plz``, ``/sign-me-up``, ``/order-plz``, ``/authZ/``,
``/chalZ/``, ``/finalize-order/``, ``/my-order/``, ``/certZ/``, ...). ``GET /__bench/counts``
answers the counts as JSON and ``POST /__bench/reset`` zeroes them; neither is forwarded.

Design: standard library only, asyncio streams, HTTP/1.1 with keep-alive (ALPN offers only
``http/1.1``, so HTTP/2 clients fall back to HTTP/1.1 through it: every client is then measured
over the same protocol, which is fair but not how acmecerts talks to Pebble by default). One
upstream connection per downstream connection, opened on the first request; request and
response heads are parsed just enough to frame bodies (``Content-Length`` or chunked) and are
relayed byte for byte. Per request it costs roughly 0.2-0.4 ms of CPU (two TLS record
layers); ``bench/run.py`` reports its CPU separately and, by default, counts from Pebble's
own log instead so that nothing sits between client and server (``--count proxy`` uses this).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import ssl
import sys

#: Pebble's routes (wfe.go): a request path is counted under the first one it starts with.
ROUTES = (
    "/dir",
    "/nonce-plz",
    "/sign-me-up",
    "/order-plz",
    "/authZ/",
    "/chalZ/",
    "/finalize-order/",
    "/my-order/",
    "/certZ/",
    "/revoke-cert",
    "/rollover-account-key",
)
_CONTROL = b"/__bench/"
_MAX_HEAD = 64 * 1024


def route_of(path: str) -> str:
    path = path.split("?", 1)[0]
    for route in ROUTES:
        if route.endswith("/") and path.startswith(route):
            return route
        if path == route:
            return route
    return "other"


def _headers(head: bytes) -> dict[bytes, bytes]:
    fields: dict[bytes, bytes] = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    return fields


async def _relay_body(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, fields: dict[bytes, bytes]
) -> bool:
    """Copy one message body; False when it is delimited by the connection closing."""
    if b"content-length" in fields:
        remaining = int(fields[b"content-length"])
        while remaining:
            chunk = await reader.read(min(remaining, 65536))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", remaining)
            writer.write(chunk)
            remaining -= len(chunk)
        return True
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        while True:
            line = await reader.readuntil(b"\r\n")
            writer.write(line)
            size = int(line.split(b";")[0], 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = await reader.readuntil(b"\r\n")
                    writer.write(trailer)
                    if trailer == b"\r\n":
                        return True
            writer.write(await reader.readexactly(size + 2))
    return False


class CountingProxy:
    """The proxy; :meth:`start` inside a running loop, then :attr:`port`."""

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        cert: str,
        key: str,
        ca: str,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.host = host
        self.port = port
        self.counts: collections.Counter[str] = collections.Counter()
        self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_ctx.load_cert_chain(cert, key)
        self._server_ctx.set_alpn_protocols(["http/1.1"])
        self._client_ctx = ssl.create_default_context(cafile=ca)
        self._client_ctx.set_alpn_protocols(["http/1.1"])
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, ssl=self._server_ctx, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _control(self, method: bytes, path: bytes) -> bytes:
        if path == _CONTROL + b"reset" and method == b"POST":
            self.counts.clear()
        body = json.dumps(dict(sorted(self.counts.items()))).encode()
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                request_line = head[: head.index(b"\r\n")]
                method, path, _ = request_line.split(b" ", 2)
                if path.startswith(_CONTROL):
                    writer.write(self._control(method, path))
                    await writer.drain()
                    continue
                self.counts[f"{method.decode()} {route_of(path.decode('latin-1'))}"] += 1
                fields = _headers(head[:-4])
                if upstream is None:
                    upstream = await asyncio.open_connection(
                        *self.upstream, ssl=self._client_ctx, server_hostname=self.upstream[0]
                    )
                up_reader, up_writer = upstream
                up_writer.write(head)
                await _relay_body(reader, up_writer, fields)
                await up_writer.drain()

                response_head = await up_reader.readuntil(b"\r\n\r\n")
                writer.write(response_head)
                status = int(response_head.split(b" ", 2)[1])
                response_fields = _headers(response_head[:-4])
                framed = True
                if method != b"HEAD" and status not in (204, 304) and status >= 200:
                    framed = await _relay_body(up_reader, writer, response_fields)
                    if not framed:  # body until EOF
                        while chunk := await up_reader.read(65536):
                            writer.write(chunk)
                await writer.drain()
                if (
                    not framed
                    or response_fields.get(b"connection", b"").lower() == b"close"
                    or fields.get(b"connection", b"").lower() == b"close"
                ):
                    return
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            return
        finally:
            writer.close()
            if upstream is not None:
                upstream[1].close()


async def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT of Pebble's ACME API")
    parser.add_argument("--cert", required=True, help="TLS certificate to present (Pebble's)")
    parser.add_argument("--key", required=True, help="its private key")
    parser.add_argument("--ca", required=True, help="CA to verify the upstream with")
    parser.add_argument("--port", type=int, default=0, help="listen port (0: a free one)")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    proxy = CountingProxy(host, int(port), cert=args.cert, key=args.key, ca=args.ca, port=args.port)
    await proxy.start()
    sys.stdout.write(json.dumps({"port": proxy.port}) + "\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await proxy.stop()


if __name__ == "__main__":
    asyncio.run(_main())
