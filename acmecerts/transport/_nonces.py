"""The nonce pool (RFC 8555 §6.5): nonces from ``Replay-Nonce`` headers, used once each."""

from __future__ import annotations

import collections
import re

__all__ = ["NoncePool"]

# §6.5.1: the value is base64url; anything else is ignored rather than sent back.
_NONCE = re.compile(r"[A-Za-z0-9_-]{1,512}")  # fullmatch: "$" would allow a final "\n"


class NoncePool:
    """A bounded LIFO of fresh nonces.

    The newest nonce is used first (older ones are likelier to have expired); when more
    than ``capacity`` arrive, the oldest are dropped.
    """

    def __init__(self, capacity: int = 256) -> None:
        self._nonces: collections.deque[str] = collections.deque(maxlen=capacity)

    def put(self, nonce: str) -> None:
        """Add a nonce from a ``Replay-Nonce`` header (malformed values are dropped)."""
        valid = self.valid(nonce)
        if valid is not None:
            self._nonces.append(valid)

    @staticmethod
    def valid(nonce: str) -> str | None:
        """``nonce`` without surrounding blanks if it is well-formed base64url, else None."""
        nonce = nonce.strip()
        # a base64url string of length 4k+1 cannot be decoded: the CA sent junk
        if _NONCE.fullmatch(nonce) and len(nonce) % 4 != 1:
            return nonce
        return None

    def take(self) -> str | None:
        """Remove and return the newest nonce, or ``None`` if the pool is empty."""
        try:
            return self._nonces.pop()
        except IndexError:
            return None

    def clear(self) -> None:
        """Forget every nonce (e.g. after the server restarted)."""
        self._nonces.clear()

    def __len__(self) -> int:
        return len(self._nonces)
