"""Nonces (RFC 8555 §6.5): the pool of ``Replay-Nonce`` values, used once each, and the
supply that hands them to requests (from the pool, an answer on its way, or newNonce).
"""

from __future__ import annotations

import collections
import contextlib
import re
from collections.abc import Awaitable, Callable, Iterator

import anyio

from acmecerts.errors import InvalidInput

__all__ = ["NoncePool", "NonceSupply"]

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


class _Waiter:
    """A request waiting for a nonce from another request's answer."""

    __slots__ = ("event", "nonce")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.nonce: str | None = None


class NonceSupply:
    """Where a request's nonce comes from: the pool, an answer on its way, or newNonce.

    The bookkeeping of the nonces in circulation (RFC 8555 §6.5), apart from the requests
    that carry them. A nonce is *promised* while it is on its way: a POST in flight or
    held by the throttle (its answer brings a ``Replay-Nonce``), a newNonce request in
    flight (its requester will then POST), or a nonce handed to a waiting request that
    has not resumed yet. The transport tells the supply:

    * :meth:`expect`: a POST is on its way (:meth:`held` while the throttle holds it);
    * :meth:`arrived`: its answer came, with its ``Replay-Nonce`` or without one (or
      never: it failed), which goes to the longest-waiting request, else to the pool;
    * :meth:`take`: a nonce for a request, from the pool, else from an answer on its way
      that no other request waits for (bounded by ``wait`` seconds), else from ``fetch``
      (newNonce).

    Args:
        pool: Where spare nonces are kept.
        bound: The most nonces kept in circulation: a request that finds the pool empty
            also waits whenever this many are promised.
        wait: The longest a request waits for an answer's nonce before it fetches one.
    """

    def __init__(self, pool: NoncePool, *, bound: int, wait: float) -> None:
        #: The spare nonces.
        self.pool = pool
        self.bound = bound
        #: Seconds a request waits for an answer's nonce at most, once.
        self.wait = wait
        self._promised = 0
        self._waiters: collections.deque[_Waiter] = collections.deque()

    @property
    def bound(self) -> int:
        """The most nonces in circulation (see the class docstring); set it any time."""
        return self._bound

    @bound.setter
    def bound(self, bound: int) -> None:
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
            raise InvalidInput(f"nonce_circulation must be at least 1, got {bound!r}")
        self._bound = bound

    @property
    def promised(self) -> int:
        """Nonces on their way (see the class docstring)."""
        return self._promised

    @property
    def waiting(self) -> int:
        """Requests waiting for a nonce handed over by an answer."""
        return len(self._waiters)

    def expect(self) -> None:
        """A POST is on its way: its answer will bring a nonce (see :meth:`arrived`)."""
        self._promised += 1

    def arrived(self, nonce: str | None) -> None:
        """The answer to an expected POST came with ``nonce`` (``None``: without one, or
        no answer came at all).

        A well-formed nonce goes straight to the longest-waiting request, else to the
        pool; without one, that request is woken to look again (it counted on this one).
        """
        self._promised -= 1
        self._hand_over(self.pool.valid(nonce) if nonce else None)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """While the throttle holds a POST, it counts as a nonce on its way.

        A POST held by the throttle will bring a ``Replay-Nonce`` as surely as one in
        flight: requests that find the pool empty wait for it rather than spend newNonce
        requests (the CA's tightest request rate) on the wait. If the POST gives up
        there, a request that counted on it looks again.
        """
        self._promised += 1
        try:
            yield
        except BaseException:
            self.arrived(None)
            raise
        self._promised -= 1

    async def take(self, fetch: Callable[[], Awaitable[str]]) -> str:
        """A nonce for one request: from the pool, an answer on its way, or ``fetch()``.

        ``fetch`` asks newNonce; the nonce it returns is the caller's own (it never
        enters the pool), and while it runs it counts as a nonce on its way.
        """
        patient = True
        while True:
            nonce = self.pool.take()
            if nonce is not None:
                return nonce
            waiting = len(self._waiters)
            if not patient or (self._promised <= waiting and self._promised < self._bound):
                break
            # A nonce is on its way that no other request waits for: an answer to a POST
            # in flight, or the POST of a request whose newNonce is in flight. Waiting for
            # it takes no longer than a newNonce round-trip of our own would, and spares
            # the CA a request. The wait is bounded once: an answer that is slow to come
            # (a CA that takes its time with one request) must not hold up the others.
            handed, patient = await self._wait_for_answer()
            if handed is not None:
                return handed
        self._promised += 1
        try:
            return await fetch()
        except BaseException:
            self._hand_over(None)  # a waiter counted on this one: look again
            raise
        finally:
            self._promised -= 1

    def _hand_over(self, nonce: str | None) -> None:
        """Hand ``nonce`` to the longest-waiting request (or the pool); wake it either way."""
        if self._waiters:  # only waiters still waiting are in the queue
            waiter = self._waiters.popleft()
            if nonce is not None:
                self._promised += 1  # in the waiter's hands until it sends its POST
            waiter.nonce = nonce
            waiter.event.set()
        elif nonce is not None:
            self.pool.put(nonce)

    async def _wait_for_answer(self) -> tuple[str | None, bool]:
        """Wait (bounded) for a nonce handed over by an answer.

        Returns the nonce (``None`` to look again) and whether to keep waiting for
        answers: ``False`` once the bound ran out, so the caller asks ``newNonce``.
        """
        waiter = _Waiter()
        self._waiters.append(waiter)
        patient = True
        try:
            with anyio.move_on_after(self.wait) as scope:
                await waiter.event.wait()
            patient = not scope.cancelled_caught
        finally:
            if not waiter.event.is_set():
                # timed out or cancelled: nothing may be handed to it now, and it no longer
                # counts as waiting
                waiter.event.set()
                self._waiters.remove(waiter)
            nonce, waiter.nonce = waiter.nonce, None
            if nonce is not None:
                self._promised -= 1  # the caller signs and sends it without a pause
        return nonce, patient
