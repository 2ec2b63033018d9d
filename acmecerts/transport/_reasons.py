"""Why a connection failed, in words a person reads: ``connection refused``, ``unknown
host ca.invalid``, ``network is unreachable`` (not ``[Errno -2] Name or service not
known`` or ``Connect call failed ('127.0.0.1', 1)``)."""

from __future__ import annotations

import os
import socket

__all__ = ["connection_failure", "is_unknown_host"]

#: getaddrinfo's answers for a name that does not exist (as opposed to ``EAI_AGAIN``, a
#: resolver that could not answer this time).
_NO_SUCH_NAME = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)


def is_unknown_host(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) says the host name does not exist."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, socket.gaierror) and seen.errno in _NO_SUCH_NAME:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def connection_failure(exc: OSError, host: str) -> str:
    """``exc``, a failed connection to ``host``, in words: ``unknown host HOST``,
    ``connection refused``, ``cannot resolve HOST: ...`` and so on."""
    if isinstance(exc, socket.gaierror):
        if exc.errno in _NO_SUCH_NAME:
            return f"unknown host {host}"
        return f"cannot resolve {host}: {(exc.strerror or str(exc)).lower()}"
    if isinstance(exc.errno, int) and exc.errno > 0:
        return os.strerror(exc.errno).lower()
    return str(exc) or type(exc).__name__
