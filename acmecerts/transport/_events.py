"""Typed events and their subscribers: the one seam to observe and extend a client.

The transport emits :class:`RequestSent` and :class:`ResponseReceived` for every HTTP
request; the client's issuance driver emits the events of an order
(:mod:`acmecerts.client`). A subscriber is any callable taking the event; it may be a
plain function or a coroutine function:

- Subscribers are called in the order they subscribed, one after the other, at the
  moment the event happens; an ``async`` one is awaited before the client goes on. That
  is what makes a subscriber a "before" hook when it needs to be: whatever it does (a
  durable write of the order journal) is done before the next request is sent.
- A subscriber that raises fails the operation that emitted the event (a request, an
  issuance: it fails with the subscriber's exception, and the issuance still cleans up),
  never silently. Where the operation is failing already or is over (the events of a
  failed request, :class:`~acmecerts.client.AttemptEnded`), the subscriber's exception
  is logged instead (logger ``acmecerts.events``) and the original outcome stands.
- Subscribers SHOULD be quick: the request or the issuance waits for them.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, Protocol, TypeVar

from acmecerts._deprecation import _warn_deprecated

__all__ = [
    "EventSubscribers",
    "Observable",
    "RequestHook",
    "RequestSent",
    "ResponseHook",
    "ResponseReceived",
    "Subscriber",
    "TransportEvent",
]

log = logging.getLogger("acmecerts.events")

E = TypeVar("E")
E_contra = TypeVar("E_contra", contravariant=True)


class Subscriber(Protocol[E_contra]):
    """What hears events: a plain function or a coroutine function taking the event.

    The contract: a subscriber is called when the event happens, in the order of
    subscription, and the client waits for it (a coroutine is awaited) before it goes
    on: it SHOULD be quick, and it MAY do something durable first (that is what an
    awaited "before" hook is). It MUST NOT assume it hears only one issuance: subscribed
    to a client it hears all of them, told apart by their ``identifiers``. An exception
    it raises fails the request or issuance that emitted the event, except for the
    events that report an outcome, where it is logged; so a subscriber that only
    observes SHOULD NOT raise. It MUST honour cancellation (the attempt's deadline).
    """

    def __call__(self, event: E_contra, /) -> Awaitable[None] | None:
        """Hear ``event``."""


@dataclasses.dataclass(frozen=True, slots=True)
class RequestSent:
    """An HTTP request to the CA is about to be sent (every retry and ``newNonce`` too)."""

    method: str
    url: str


@dataclasses.dataclass(frozen=True, slots=True)
class ResponseReceived:
    """An HTTP request ended: ``status`` is the answer's, ``0`` when none came."""

    method: str
    url: str
    status: int


class EventSubscribers(Generic[E]):
    """An ordered set of subscribers and how events reach them (see the module)."""

    __slots__ = ("_subscribers",)

    def __init__(self) -> None:
        self._subscribers: tuple[Subscriber[E], ...] = ()

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def add(self, subscriber: Subscriber[E]) -> Callable[[], None]:
        """Subscribe; returns a function that unsubscribes (idempotent)."""
        self._subscribers = (*self._subscribers, subscriber)

        def unsubscribe() -> None:
            self.remove(subscriber)

        return unsubscribe

    def remove(self, subscriber: Subscriber[E]) -> None:
        """Unsubscribe ``subscriber`` (its first subscription); nothing if it is not in."""
        subscribers = list(self._subscribers)
        for index, present in enumerate(subscribers):
            if present is subscriber or present == subscriber:
                del subscribers[index]
                self._subscribers = tuple(subscribers)
                return

    async def emit(self, event: E, first: Iterable[Subscriber[E]] = ()) -> None:
        """Give ``event`` to ``first``, then to every subscriber; an exception propagates."""
        for subscriber in (*first, *self._subscribers):
            result = subscriber(event)
            if inspect.isawaitable(result):
                await result

    async def emit_quietly(self, event: E, first: Iterable[Subscriber[E]] = ()) -> None:
        """As :meth:`emit`, but each subscriber's exception is logged, not raised."""
        for subscriber in (*first, *self._subscribers):
            try:
                result = subscriber(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("a subscriber of %s failed", type(event).__name__)


#: What the transport emits.
TransportEvent = RequestSent | ResponseReceived
#: Called for every HTTP request sent: ``(method, url)`` (deprecated: subscribe instead).
RequestHook = Callable[[str, str], None]
#: Called after every HTTP request: ``(method, url, status)``; status 0 when none came
#: (deprecated: subscribe instead).
ResponseHook = Callable[[str, str, int], None]


#: The warning of the deprecated ``on_request`` hook (the transport's and the client's).
_ON_REQUEST_DEPRECATED = (
    "on_request is deprecated: subscribe() to RequestSent events instead "
    "(AcmeClient.subscribe(...) or AcmeTransport.subscribe(...))"
)


class Observable:
    """The events of a transport: :meth:`subscribe`, and the deprecated hooks on it."""

    def __init__(self, on_request: RequestHook | None = None) -> None:
        #: Subscribers of :class:`RequestSent` and :class:`ResponseReceived`.
        self._events: EventSubscribers[TransportEvent] = EventSubscribers()
        self._on_request: tuple[RequestHook, Callable[[], None]] | None = None
        if on_request is not None:
            _warn_deprecated(_ON_REQUEST_DEPRECATED)
            self._set_request_hook(on_request)

    def subscribe(self, subscriber: Subscriber[TransportEvent]) -> Callable[[], None]:
        """Call ``subscriber`` with a :class:`RequestSent` before every HTTP request and a
        :class:`ResponseReceived` after it; returns a function that unsubscribes.

        A coroutine function is awaited before the request goes on; an exception fails
        the request (logged instead when the request failed already). See
        :mod:`acmecerts.client` for the events of an issuance.
        """
        return self._events.add(subscriber)

    @property
    def on_request(self) -> RequestHook | None:
        """Called with ``(method, url)`` for every request sent.

        Deprecated (setting a hook emits a ``DeprecationWarning``): :meth:`subscribe` to
        :class:`RequestSent` instead. An adapter onto :meth:`subscribe`, kept for
        compatibility; its exceptions propagate. Setting ``None`` removes the adapter
        (no warning).
        """
        return self._on_request[0] if self._on_request is not None else None

    @on_request.setter
    def on_request(self, hook: RequestHook | None) -> None:
        if hook is not None:
            _warn_deprecated(_ON_REQUEST_DEPRECATED)
        self._set_request_hook(hook)

    def _set_request_hook(self, hook: RequestHook | None) -> None:
        """Replace the adapter of the deprecated ``on_request`` hook (no warning)."""
        if self._on_request is not None:
            self._on_request[1]()  # unsubscribe the adapter of the hook it replaces
            self._on_request = None
        if hook is not None:

            def adapter(event: TransportEvent) -> None:
                if isinstance(event, RequestSent):
                    hook(event.method, event.url)

            self._on_request = (hook, self._events.add(adapter))

    def add_response_hook(self, hook: ResponseHook) -> None:
        """Call ``hook(method, url, status)`` after every request (status 0: no answer).

        Deprecated (emits a ``DeprecationWarning``): :meth:`subscribe` to
        :class:`ResponseReceived` instead. An adapter onto :meth:`subscribe`, kept for
        compatibility; as before, an exception of ``hook`` is logged, never raised.
        """
        _warn_deprecated(
            "add_response_hook() is deprecated: subscribe() to ResponseReceived events "
            "instead (transport.subscribe(...) or AcmeClient.subscribe(...))"
        )

        def adapter(event: TransportEvent) -> None:
            if isinstance(event, ResponseReceived):
                try:
                    hook(event.method, event.url, event.status)
                except Exception:  # an observer must never break a request
                    logging.getLogger("acmecerts.transport").exception("response hook failed")

        self._events.add(adapter)
