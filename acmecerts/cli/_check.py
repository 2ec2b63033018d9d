"""``acmecerts status --check``: which certificates fail the check, at an instant.

A certificate fails when, at the instant checked (now, or ``--at``):

* ``expired``: its ``notAfter`` is past;
* ``revoked``: it was revoked (``acmecerts revoke``) and not replaced yet;
* ``overdue``: it is still not renewed ``--check-grace`` (1 day by default) after the
  instant it should have been renewed by (:func:`renew_by`).

A certificate asked for and never issued (``pending``, ``deferred``) or being deleted has
no certificate to fail: it is not checked. The exit code is 1 when one fails
(:data:`ExitCode.FAILED <acmecerts.cli._constants.ExitCode.FAILED>`).
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Final

from rich.text import Text

from acmecerts.errors import InvalidInput
from acmecerts.protocol.ari import fallback_renewal_time

from ._report import Report, iso, when

__all__ = ["DEFAULT_GRACE", "check_certificates", "parse_at", "parse_grace", "print_check"]

#: ``--check-grace``'s default: two runs of a twice-daily ``renew`` may miss (or fail)
#: before a certificate counts as failing; a 160-hour certificate still has 56 hours.
DEFAULT_GRACE: Final = "1d"

_UNITS: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")


def parse_grace(text: str) -> _dt.timedelta:
    """``--check-grace``: seconds, or a number with ``s``, ``m``, ``h`` or ``d``."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise InvalidInput(
            f"--check-grace {text!r}: expected a duration, e.g. 86400, 12h or 2d"
        ) from None
    from acmecerts import duration_seconds  # the library's one duration parser

    seconds = duration_seconds(float(match[1]) * _UNITS[match[2]], "--check-grace")
    try:
        return _dt.timedelta(seconds=seconds)
    except OverflowError:  # more than a timedelta holds (999,999,999 days)
        raise InvalidInput(f"--check-grace {text!r}: too long") from None


def grace_text(grace: _dt.timedelta) -> str:
    """``--check-grace`` as written back: ``1d``, ``12h``, ``90m``, ``45s``."""
    seconds = grace.total_seconds()
    for unit in ("d", "h", "m"):
        if seconds and seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


def parse_at(text: str | None, now: _dt.datetime) -> _dt.datetime:
    """``--at``: an ISO 8601 date or date and time (UTC without an offset); ``now`` if
    none is given."""
    if text is None:
        return now
    try:
        at = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"--at {text!r}: expected an ISO 8601 instant, e.g. 2027-01-15T12:00:00+00:00"
        ) from None
    return (at if at.tzinfo is not None else at.replace(tzinfo=_dt.UTC)).astimezone(_dt.UTC)


def renew_by(certificate: dict[str, Any]) -> _dt.datetime | None:
    """The instant a ``status`` entry should have been renewed by: the end of the CA's ARI
    window (``--ari``), else the planned renewal instant (a third of the lifetime left,
    half of it under 10 days); ``None`` for an entry with no certificate."""
    if certificate.get("not_after") is None:
        return None
    window = certificate.get("renewal_window")
    if window is not None:
        return _dt.datetime.fromisoformat(window[1])
    return fallback_renewal_time(
        _dt.datetime.fromisoformat(certificate["not_before"]),
        _dt.datetime.fromisoformat(certificate["not_after"]),
    )


def _failure(
    certificate: dict[str, Any], at: _dt.datetime, grace: _dt.timedelta
) -> tuple[str, str] | None:
    """``(reason, detail)`` when the entry fails the check at ``at``, else ``None``."""
    by = renew_by(certificate)
    if by is None:
        return None
    not_after = _dt.datetime.fromisoformat(certificate["not_after"])
    if not_after <= at:
        return "expired", f"expired at {when(not_after)}"
    if certificate["status"] == "revoked":
        return "revoked", f"revoked and not replaced yet; expires at {when(not_after)}"
    if by + grace <= at:
        detail = f"not renewed since {when(by)} (grace {grace_text(grace)}); "
        detail += f"expires at {when(not_after)}"
        if certificate.get("until"):
            until = _dt.datetime.fromisoformat(certificate["until"])
            detail += f"; deferred until {when(until)}"
        if certificate.get("error"):
            detail += f"; last error: {certificate['error']}"
        return "overdue", detail
    return None


def check_certificates(
    certificates: list[dict[str, Any]], *, at: _dt.datetime, grace: _dt.timedelta
) -> dict[str, Any]:
    """The ``check`` object of ``status --json``: the instant, the grace, whether every
    certificate passed, and the ones that failed (name, CA, reason, detail...)."""
    failed = []
    checked = 0
    for certificate in certificates:
        found = _failure(certificate, at, grace)
        checked += certificate.get("not_after") is not None
        if found is not None:
            by = renew_by(certificate)
            failed.append(
                {
                    "name": certificate["name"],
                    "directory": certificate["directory"],
                    "reason": found[0],
                    "detail": found[1],
                    "not_after": certificate["not_after"],
                    "renew_by": iso(by),
                    "deferred_until": certificate.get("until"),
                    "last_error": certificate.get("error"),
                }
            )
    return {
        "at": iso(at),
        "grace_seconds": grace.total_seconds(),
        "ok": not failed,
        "checked": checked,
        "failed": failed,
    }


def print_check(report: Report, check: dict[str, Any]) -> None:
    """The summary line first (what Nagios shows), then one line per failure."""
    at = when(_dt.datetime.fromisoformat(check["at"]))
    failed = check["failed"]
    if not failed:
        line = f"CHECK OK: {check['checked']} certificates pass at {at}"
        report.out.print(Text(line, style="green"))
        return
    names = ", ".join(f"{f['name']} {f['reason']}" for f in failed)
    report.out.print(
        Text(f"CHECK FAILED: {len(failed)} of {check['checked']} at {at}: {names}", style="red")
    )
    for failure in failed:
        report.out.print(Text(f"  {failure['name']}: {failure['detail']}"))
