"""acmecerts.logging.JsonFormatter: the fields of a record, from ``extra``, an event or an
error (the end-to-end test, the manager's failed attempt on Pebble through the CLI's
``--log-format json``, is in tests/cli/test_cli_monitoring.py)."""

from __future__ import annotations

import datetime as _dt
import json
import logging

from acmecerts.errors import AcmeProblem, AuthorizationFailed
from acmecerts.logging import FIELDS, JsonFormatter
from acmecerts.manager import CertificateFailed

AT = _dt.datetime(2027, 1, 2, 3, 4, 5, tzinfo=_dt.UTC)


def formatted(message: str, *, exc: BaseException | None = None, **extra: object) -> dict:
    record = logging.LogRecord("acmecerts.test", logging.WARNING, __file__, 1, message, (), None)
    if exc is not None:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    record.__dict__.update(extra)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    document: dict = json.loads(line)
    return document


def test_fields_come_from_the_event_its_error_and_extra_in_that_order() -> None:
    problem = AcmeProblem("urn:ietf:params:acme:error:connection", "refused")
    error = AuthorizationFailed(
        "a.example", problem, authorization_url="https://ca/authz/1", order_url="https://ca/o/1"
    )
    event = CertificateFailed("a.example", AT, error=error, next_attempt_at=AT, attempt=3)
    line = formatted("attempt failed", event=event)
    assert line["logger"] == "acmecerts.test"
    assert (line["level"], line["message"]) == ("WARNING", "attempt failed")
    assert _dt.datetime.fromisoformat(line["time"]).utcoffset() == _dt.timedelta(0)
    assert {k: line[k] for k in FIELDS} == {
        "certificate": "a.example",
        "order_url": "https://ca/o/1",
        "problem_type": "urn:ietf:params:acme:error:connection",
        "attempt": 3,
        "next_at": "2027-01-02T03:04:05+00:00",
    }
    # extra= wins over the event; a field with nothing to say is absent
    line = formatted("x", event=CertificateFailed("b.example", AT), certificate="c.example")
    assert line["certificate"] == "c.example"
    assert not {"order_url", "problem_type", "attempt", "next_at"} & set(line)


def test_an_error_alone_gives_its_problem_type_and_a_traceback_is_kept() -> None:
    try:
        raise AcmeProblem("urn:ietf:params:acme:error:rateLimited", "slow down")
    except AcmeProblem as exc:
        line = formatted("no", exc=exc, error=exc)
    assert line["problem_type"] == "urn:ietf:params:acme:error:rateLimited"
    assert "Traceback" in line["exception"]
    assert "slow down" in line["exception"]
