"""http-01 solvers (RFC 8555 §8.3): a built-in HTTP server and a webroot writer.

The CA fetches ``http://<identifier>:80/.well-known/acme-challenge/<token>`` and expects
the key authorization as the body. Two ways to answer:

* :class:`Http01Server` listens itself: a small asyncio/trio HTTP/1.1 server (``h11`` for
  the protocol) that serves the tokens of every order in flight. Under asyncio each
  connection is an :class:`asyncio.Protocol` answered straight from the event loop's
  callbacks (no task per connection); under trio, a task per connection over anyio streams.
* :class:`Http01Webroot` writes the file into the document root of a web server that is
  already running, and removes it afterwards.

Neither can answer for a wildcard name: RFC 8555 §8.3 validates a host name over HTTP,
and a wildcard is not one (use dns-01).

Errors specific to this module::

    InvalidInput
    ├── ListenError      Http01Server could not bind its address (in use, no permission)
    └── WebrootError     Http01Webroot could not write into its document root
"""

from __future__ import annotations

from acmecerts.solvers._listener import ListenError
from acmecerts.solvers.http01._server import Http01Server
from acmecerts.solvers.http01._webroot import Http01Webroot, WebrootError

__all__ = ["Http01Server", "Http01Webroot", "ListenError", "WebrootError"]
