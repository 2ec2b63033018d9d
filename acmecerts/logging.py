"""Structured logs: :class:`JsonFormatter` writes each log record as one line of JSON.

Install it on a handler of your own to get the library's logs (the ``acmecerts`` logger
and its children) as JSON lines, ready for a log collector (journald, Loki, Elastic...)::

    import logging
    from acmecerts.logging import JsonFormatter

    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.getLogger("acmecerts").addHandler(handler)

Each line is one object with ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``
and ``message``, then the fields of :data:`FIELDS` the record carries: ``certificate``
(its name), ``order_url``, ``problem_type`` (the CA's problem type URN), ``attempt`` (the
number of the failed attempt since the last success) and ``next_at`` (when the next
attempt may start: a retry, a deferral, a rate limit's end). They come from the record's
``extra=`` (the keys of :data:`FIELDS`, or ``event``: a manager event such as
:class:`~acmecerts.manager.CertificateFailed`, whose fields fill them) or from an
``error`` the record names (``extra={"error": exc}``: its problem type and order URL);
``extra`` wins over the event, the event over the error. A field with nothing to say is
left out. A record logged with ``exc_info`` adds ``exception``, the formatted traceback.

The manager logs each failed attempt with its event, so these fields are there without
any set-up; the command line's ``--log-format json`` uses this formatter.
Standard library only: importing this module imports nothing else of acmecerts.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from typing import Any, Final

__all__ = ["FIELDS", "JsonFormatter", "record_fields"]

#: The certificate fields a JSON line may carry, in the order they are written.
FIELDS: Final = ("certificate", "order_url", "problem_type", "attempt", "next_at")


def _instant(value: Any) -> Any:
    """A datetime as ISO 8601 (UTC when it has a zone); anything else as it is."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC)
        return value.isoformat()
    return value


def _from_error(error: Any) -> dict[str, Any]:
    """``problem_type`` and ``order_url`` of an acmecerts error (read by attribute)."""
    found: dict[str, Any] = {}
    problem = getattr(error, "problem", None)  # IssuanceError: the CA's problem behind it
    problem_type = getattr(error, "type", None) or getattr(problem, "type", None)
    if isinstance(problem_type, str):
        found["problem_type"] = problem_type
    order_url = getattr(error, "order_url", None)
    if isinstance(order_url, str):
        found["order_url"] = order_url
    return found


def _from_event(event: Any) -> dict[str, Any]:
    """The fields of a manager event (read by attribute: any object with them will do)."""
    found: dict[str, Any] = {}
    name = getattr(event, "name", None)
    if isinstance(name, str):
        found["certificate"] = name
    attempt = getattr(event, "attempt", None)
    if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt > 0:
        found["attempt"] = attempt
    for attribute in ("next_attempt_at", "until"):
        instant = getattr(event, attribute, None)
        if isinstance(instant, _dt.datetime):
            found["next_at"] = instant
            break
    certificate = getattr(event, "certificate", None)
    order_url = getattr(certificate, "order_url", None)
    if isinstance(order_url, str):
        found["order_url"] = order_url
    error = getattr(event, "error", None)
    if error is not None:
        found = {**_from_error(error), **found}
    return found


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The :data:`FIELDS` a log record carries (``extra``, its ``event``, its ``error``).

    Instants are ISO 8601 strings in UTC; a field with nothing to say is absent.
    """
    found: dict[str, Any] = {}
    error = getattr(record, "error", None)
    if error is not None:
        found.update(_from_error(error))
    event = getattr(record, "event", None)
    if event is not None:
        found.update(_from_event(event))
    for field in FIELDS:
        value = getattr(record, field, None)
        if value is not None:
            found[field] = value
    return {field: _instant(found[field]) for field in FIELDS if field in found}


class JsonFormatter(logging.Formatter):
    """Formats a log record as one line of JSON (see :mod:`acmecerts.logging`).

    ``time``, ``level``, ``logger``, ``message``, the certificate fields the record
    carries (:func:`record_fields`) and ``exception`` when there is a traceback. A value
    JSON cannot hold is written as its ``str()``. The line never contains a newline.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON object, without a trailing newline."""
        document: dict[str, Any] = {
            "time": _dt.datetime.fromtimestamp(record.created, _dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **record_fields(record),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            document["exception"] = record.exc_text
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, default=str, ensure_ascii=False)
