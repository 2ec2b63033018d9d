"""Is a Pebble still answering? The health check behind the session ``pebble`` fixture.

Pebble 2.4 deadlocks when an authorization is deactivated while its validation is in
flight (and has been seen to under heavy concurrency): from then on it accepts
connections and answers ``GET /dir`` and ``newNonce``, but ``newAccount`` and ``newOrder``
never come back. :class:`PebbleProbe` asks for an order, the cheapest request that shows
it (about 2 ms on a healthy Pebble). See docs/contributing.md, "The test bed".
"""

from __future__ import annotations

import http.client
import json
import ssl
from typing import TYPE_CHECKING, Any

from acmecerts.protocol.jws import sign_request
from acmecerts.protocol.keys import AccountKey

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

#: How long a healthy Pebble may take to answer the probe, even on a loaded machine.
PROBE_TIMEOUT = 15.0


class PebbleProbe:
    """Asks a Pebble for a new order, which a deadlocked Pebble 2.4 never answers.

    One account per Pebble, registered on first use; a probe is one keep-alive connection
    and at most four requests, each allowed ``timeout`` seconds.
    """

    def __init__(self) -> None:
        self.key = AccountKey.generate()
        self.kid: str | None = None
        self.directory_url: str | None = None

    def answers(self, server: PebbleServer, *, timeout: float = PROBE_TIMEOUT) -> str | None:
        """``None`` if ``server`` created an order within ``timeout`` s, else what failed."""
        if server.directory_url != self.directory_url:  # a new server: a new account
            self.kid, self.directory_url = None, server.directory_url
        context = ssl.create_default_context(cafile=str(server.ca_bundle))
        port = int(server.directory_url.split(":")[2].split("/")[0])
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
        step = "GET /dir"
        try:
            directory = self._call(conn, "GET", "/dir")[1]
            step = "HEAD newNonce"
            nonce = self._call(conn, "HEAD", directory["newNonce"])[0]
            if self.kid is None:
                step = "POST newAccount"
                body = sign_request(
                    self.key,
                    url=directory["newAccount"],
                    nonce=nonce,
                    payload={"termsOfServiceAgreed": True},
                    kid=None,
                )
                nonce, _, self.kid = self._call(conn, "POST", directory["newAccount"], body)
            step = "POST newOrder"
            order = {"identifiers": [{"type": "dns", "value": "probe.health.example.test"}]}
            body = sign_request(
                self.key, url=directory["newOrder"], nonce=nonce, payload=order, kid=self.kid
            )
            self._call(conn, "POST", directory["newOrder"], body)
        except (OSError, http.client.HTTPException, ValueError, KeyError) as exc:
            return f"{step}: {type(exc).__name__}: {exc}"
        finally:
            conn.close()
        return None

    @staticmethod
    def _call(
        conn: http.client.HTTPSConnection, method: str, url: str, body: bytes | None = None
    ) -> tuple[str, Any, str]:
        """``(Replay-Nonce, JSON body or None, Location)``; a status >= 400 raises."""
        path = url.split("/", 3)[3] if url.startswith("https://") else url.lstrip("/")
        headers = {"User-Agent": "acmecerts-tests"}  # Pebble 2.10 refuses requests without
        if body is not None:
            headers["Content-Type"] = "application/jose+json"
        conn.request(method, "/" + path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        if response.status >= 400:
            raise ValueError(f"HTTP {response.status}: {data[:200]!r}")
        parsed = json.loads(data) if data and method != "HEAD" else None
        return response.getheader("Replay-Nonce", ""), parsed, response.getheader("Location", "")
