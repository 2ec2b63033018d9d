"""Saying what a program waits for, while it waits: the CA's answer to a request.

:class:`RequestWatch` hears every request of a client's transport (the CLI attaches one
to its client). A request the CA
(or the proxy before it) has not answered after :data:`FIRST_REPORT` seconds is:

* logged (info: the CLI's ``-v``) with the request and the time so far, at
  :data:`FIRST_REPORT` s and again at :data:`REPORTS` (then every minute), e.g.
  ``waiting for the CA to answer POST https://ca/finalize/7 (1 s so far)``;
* shown by a live display (:meth:`RequestWatch.waiting_line`, the CLI's on a terminal)
  with its elapsed time, until the answer comes.

The waits the client chooses itself (a ``Retry-After``, the poll interval, a backoff
before trying again) are logged where they are decided (:mod:`acmecerts._time`,
:mod:`acmecerts.transport`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable

from acmecerts.transport._events import RequestSent, ResponseReceived, TransportEvent
from acmecerts.transport._http import AcmeTransport

__all__ = ["FIRST_REPORT", "REPORTS", "RequestWatch"]

log = logging.getLogger("acmecerts.transport.waits")

#: Seconds without an answer before a request is reported (the promise is "within 2 s").
FIRST_REPORT = 1.0
#: The later reports of one request, in seconds since it was sent; then every minute.
REPORTS = (5.0, 15.0, 30.0, 60.0)
#: How often the watch looks at the requests in flight.
_TICK = 0.25


@dataclasses.dataclass
class _InFlight:
    method: str
    url: str
    sent: float
    #: How many times it was reported.
    reports: int = 0


def _report_at(index: int) -> float:
    """Seconds after sending at which the ``index``-th report (0 = first) is due."""
    if index == 0:
        return FIRST_REPORT
    if index <= len(REPORTS):
        return REPORTS[index - 1]
    return REPORTS[-1] + 60.0 * (index - len(REPORTS))


def elapsed(seconds: float) -> str:
    """``"7 s"``, ``"2 min 05 s"``: how long a request has waited, to the second."""
    whole = max(0, math.floor(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    return f"{minutes} min {secs:02d} s"


class RequestWatch:
    """The client's requests in flight; reports the ones the CA is slow to answer.

    :meth:`attach` subscribes to a transport; used as a context manager, it reports. Everything
    is read under a lock: the live display reads it from its own thread.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, *, logger: logging.Logger = log
    ) -> None:
        """``clock``: seconds, monotonic; ``logger``: where :meth:`report` logs (by default
        ``acmecerts.transport.waits``)."""
        self._clock = clock
        self._log = logger
        self._lock = threading.Lock()
        self._flights: list[_InFlight] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def attach(self, transport: AcmeTransport) -> Callable[[], None]:
        """Hear the requests of ``transport``; returns a function that stops it."""
        return transport.subscribe(self.on_event)

    def on_event(self, event: TransportEvent) -> None:
        """A request was sent, or it ended (answered or failed)."""
        with self._lock:
            if isinstance(event, RequestSent):
                self._flights.append(_InFlight(event.method, event.url, self._clock()))
            elif isinstance(event, ResponseReceived):
                for index, flight in enumerate(self._flights):
                    if (flight.method, flight.url) == (event.method, event.url):
                        del self._flights[index]
                        break

    def due(self) -> list[tuple[str, str, float]]:
        """The requests whose next report is due now: ``(method, url, seconds so far)``;
        each is counted as reported."""
        now = self._clock()
        reports = []
        with self._lock:
            for flight in self._flights:
                waited = now - flight.sent
                if waited >= _report_at(flight.reports):
                    flight.reports += 1
                    reports.append((flight.method, flight.url, waited))
        return reports

    def report(self) -> None:
        """Log every request whose report is due (info: ``-v``)."""
        for method, url, waited in self.due():
            self._log.info(
                "waiting for the CA to answer %s %s (%s so far)", method, url, elapsed(waited)
            )

    def waiting_line(self) -> str | None:
        """For the live display: the oldest request unanswered for :data:`FIRST_REPORT`
        seconds or more, ``waiting for the CA to answer POST URL: 4 s`` (``None``: none)."""
        now = self._clock()
        with self._lock:
            slow = [f for f in self._flights if now - f.sent >= FIRST_REPORT]
        if not slow:
            return None
        oldest = min(slow, key=lambda f: f.sent)
        more = f" (and {len(slow) - 1} more)" if len(slow) > 1 else ""
        return (
            f"waiting for the CA to answer {oldest.method} {oldest.url}: "
            f"{elapsed(now - oldest.sent)}{more}"
        )

    def __enter__(self) -> RequestWatch:
        """Report due requests from a thread of its own (also while the event loop is
        busy), until the block is left."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="acmecerts-waits", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(_TICK):
            self.report()
