"""The asyncio fast path of the http-01 server: one connection served by loop callbacks."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

import h11

from acmecerts.solvers._listener import _CallbackConnection
from acmecerts.solvers.http01._messages import (
    _LINGER_SECONDS,
    _MAX_REQUESTS_PER_CONNECTION,
    _Responder,
)
from acmecerts.solvers.http01._tokens import _CHALLENGE_TYPE

if TYPE_CHECKING:
    from acmecerts.solvers._listener import _Running
    from acmecerts.solvers.http01._server import Http01Server

logger = logging.getLogger("acmecerts.solvers.http01")


class _Http01Connection(_CallbackConnection):
    """One connection to :class:`Http01Server`, served by asyncio callbacks (no task).

    Bytes go into ``h11`` as they arrive; every complete request is answered at once, from
    ``data_received``, so pipelined requests are answered in order within one callback.
    The behaviour is :meth:`Http01Server._converse`'s, with one timer instead of a task:

    * serving: the timer is the request's deadline (``timeout``, from the end of the
      previous answer); when it fires, a started request gets ``408`` and an idle
      connection is closed;
    * closing (after an answer with ``Connection: close``, a protocol error, the client's
      EOF): the server half-closes and drains the client's input until it hangs up, at
      most ``min(1 s, timeout)`` and ``4 * max_request_size`` bytes (a lingering close,
      RFC 9112 §9.6), then closes.
    """

    __slots__ = (
        "_body_size",
        "_closing",
        "_deadline",
        "_drained",
        "_http",
        "_loop",
        "_out",
        "_peer_eof",
        "_request",
        "_served",
        "_timer",
    )

    def __init__(
        self, server: Http01Server, running: _Running, loop: asyncio.AbstractEventLoop
    ) -> None:
        super().__init__(server, running)
        self._http = server
        self._loop = loop
        #: The h11 state and the method of the request being answered.
        self._out = _Responder(
            h11.Connection(h11.SERVER, max_incomplete_event_size=server._max_request_size)
        )
        #: The request being received (``None`` between requests).
        self._request: h11.Request | None = None
        self._body_size = 0
        self._served = 0
        #: Loop time by which the current request must be answered.
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._drained = 0
        self._peer_eof = False

    # -- asyncio callbacks ----------------------------------------------------

    def _opened(self) -> None:
        timeout = self._http._timeout
        self._deadline = self._loop.time() + timeout
        self._timer = self._loop.call_at(self._deadline, self._on_timer)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            self._drained += len(data)
            if self._drained > 4 * self._http._max_request_size and self.transport is not None:
                self.transport.close()
            return
        try:
            conn = self._out.h11
            while True:
                room = self._http._max_request_size - len(conn.trailing_data[0])
                if len(data) <= room:
                    conn.receive_data(data)
                    self._process()
                    return
                # h11 limits only what is still incomplete: fed a long head at once, it
                # would parse it. Fed no more than the room left, it refuses (431) any
                # head longer than max_request_size.
                cut = max(room, 1)
                conn.receive_data(data[:cut])
                data = data[cut:]
                self._process()
                if self._closing:
                    return
        except Exception as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        self._peer_eof = True
        if self._closing:
            return False  # the client has read the answer and hung up: close
        try:
            self._out.h11.receive_data(b"")
            self._process()  # ends in ConnectionClosed or a protocol error
        except Exception as exc:
            self._fail(exc)
            return True
        self._shutdown()
        return True

    def pause_writing(self) -> None:
        # A client that sends but does not read: stop reading its requests too.
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    def _lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if exc is not None:
            logger.debug("%s connection ended: %r", _CHALLENGE_TYPE, exc)

    # -- the conversation -----------------------------------------------------

    def _process(self) -> None:
        """Handle every complete event received so far: answer each complete request."""
        conn = self._out.h11
        while not self._closing:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    self._respond(self._out.render(exc.error_status_hint, close=True))
                self._shutdown()
                return
            if event is h11.NEED_DATA:
                if self._request is not None and conn.they_are_waiting_for_100_continue:
                    # Answer without the body; the connection is closed after the answer.
                    self._answer(self._request)
                return
            event_type = type(event)
            if event_type is h11.Request:
                self._request = cast("h11.Request", event)
                self._out.method = self._request.method
                self._body_size = 0
            elif event_type is h11.Data:
                self._body_size += len(cast("h11.Data", event).data)
                if self._body_size > self._http._max_request_size:
                    self._respond(self._out.render(413, close=True))
                    self._shutdown()
                    return
            elif event_type is h11.EndOfMessage and self._request is not None:
                self._answer(self._request)
            else:  # ConnectionClosed (PAUSED cannot happen: each cycle ends answered)
                self._shutdown()
                return

    def _answer(self, request: h11.Request) -> None:
        """Answer a request, then prepare for the next one or close."""
        self._served += 1
        status, headers, body = self._http._route(request)
        self._respond(
            self._out.render(
                status,
                headers=headers,
                body=body,
                close=self._served >= _MAX_REQUESTS_PER_CONNECTION,
            )
        )
        if status == 200 and self.transport is not None:
            info = self.transport.get_extra_info
            self._http._answered(info("peername"), info("sockname"))
        conn = self._out.h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            self._request = None
            self._out.method = None
            # The next request's deadline; the timer catches up when it fires.
            self._deadline = self._loop.time() + self._http._timeout
        else:
            self._shutdown()

    def _respond(self, data: bytes) -> None:
        """Write one rendered response (:meth:`_Responder.render`)."""
        if self.transport is not None:
            self.transport.write(data)

    def _on_timer(self) -> None:
        self._timer = None
        transport = self.transport
        if transport is None:
            return
        if self._closing:  # the lingering close is over
            if transport.get_write_buffer_size():
                transport.abort()  # the client does not even read its answer
            else:
                transport.close()
            return
        if self._loop.time() < self._deadline:  # answered since: wait for the next request
            self._timer = self._loop.call_at(self._deadline, self._on_timer)
            return
        conn = self._out.h11
        pending, _closed = conn.trailing_data
        try:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE) and (
                conn.their_state is not h11.IDLE or pending
            ):
                # A request was started but not finished in time (RFC 9110 §15.5.9).
                self._respond(self._out.render(408, close=True))
                self._shutdown()
                return
        except Exception as exc:
            self._fail(exc)
            return
        # An idle keep-alive connection is simply closed (RFC 9112 §9.8).
        if transport.get_write_buffer_size():
            transport.abort()
        else:
            transport.close()

    def _shutdown(self) -> None:
        """Close after the last answer: half-close, drain the client's input, then close."""
        if self._closing:
            return
        self._closing = True
        transport = self.transport
        if transport is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(
            min(_LINGER_SECONDS, self._http._timeout), self._on_timer
        )
        if self._peer_eof:
            transport.close()  # after sending what is buffered
        else:
            transport.write_eof()  # likewise; reading goes on (data_received drains)

    def _fail(self, exc: Exception) -> None:
        """A bug triggered by a hostile client, or a broken connection: it ends this one."""
        logger.debug("%s connection ended: %r", _CHALLENGE_TYPE, exc)
        self._closing = True
        if self.transport is not None:
            self.transport.abort()

    def _stop(self) -> None:
        self._closing = True
        super()._stop()
