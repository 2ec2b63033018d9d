"""``Retry-After`` (RFC 9110 §10.2.3) and Let's Encrypt's "retry after" detail text:
:func:`parse_retry_after` and :func:`retry_after_from_detail`, one rule for both. Import
them from :mod:`acmecerts._time`, which describes the rule.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import re

from ._clock import _MAX_INSTANT, _after, aware_utc
from ._durations import duration_seconds

#: The default limit on how far in the future a ``Retry-After`` may point.
DEFAULT_MAX_RETRY_AFTER = _dt.timedelta(days=30)

_UTC = _dt.UTC
_MIN_INSTANT = _dt.datetime.min.replace(tzinfo=_UTC)

# RFC 9110 §5.6.7: obsolete rfc850-date has a two-digit year ("Sunday, 06-Nov-94 ...").
_RFC850_YEAR = re.compile(r"-[a-z]{3}-(?P<year>[0-9]{2})\s", re.ASCII | re.IGNORECASE)
# RFC 9110 §5.6.7: delta-seconds = 1*DIGIT. A decimal fraction is not allowed by the
# grammar but is seen in the wild; it is accepted and rounded up (never sooner).
_DELTA_SECONDS = re.compile(r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?", re.ASCII)
# Let's Encrypt (Boulder) rate-limit detail text:
#   "..., retry after 2026-01-01 00:00:00 UTC: see https://letsencrypt.org/docs/rate-limits/"
# also ISO 8601 ("2026-01-01T00:00:00Z", "...00:00:00.123456+00:00") and Go's default
# time format ("2026-01-01 00:00:00.123456789 +0000 UTC").
_DETAIL_RETRY_AFTER = re.compile(
    r"retry[ -]after:?\s+"
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})(?:T|\s+)"
    r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})(?::(?P<second>[0-9]{2})(?:[.,](?P<frac>[0-9]+))?)?"
    r"(?:\s*(?P<offset>Z|(?P<sign>[+-])(?P<oh>[0-9]{2}):?(?P<om>[0-9]{2})))?"
    r"(?:\s*(?:UTC|GMT)\b)?",
    re.ASCII | re.IGNORECASE,
)


#: :data:`DEFAULT_MAX_RETRY_AFTER` in seconds (what nearly every call passes).
_DEFAULT_LIMIT = DEFAULT_MAX_RETRY_AFTER.total_seconds()
#: The most digits the fast path of :func:`parse_retry_after` reads (see
#: :func:`_parse_delta_seconds`: more is saturated there).
_FAST_DIGITS = 15


def _limit_seconds(max_delay: float | _dt.timedelta) -> float:
    """``max_delay`` in seconds: a duration >= 0, or ``inf`` for no limit."""
    if max_delay is DEFAULT_MAX_RETRY_AFTER:
        return _DEFAULT_LIMIT
    return duration_seconds(max_delay, "max_delay", unbounded=True)


def _clamp(instant: _dt.datetime, now: _dt.datetime, limit: float) -> _dt.datetime:
    """Apply the documented rule: past -> ``now``; beyond the limit -> ``now + limit``."""
    if instant <= now:
        return now
    latest = _after(now, limit)
    return latest if instant > latest else instant


def _parse_delta_seconds(text: str, now: _dt.datetime, limit: float) -> _dt.datetime | None:
    match = _DELTA_SECONDS.fullmatch(text)
    if match is None:
        return None
    whole, frac = match["int"], match["frac"]
    if not whole and not frac:
        return None  # "" or "."
    whole = whole.lstrip("0")
    # Avoid int() on huge digit strings (CPython refuses > 4300 digits, and it is slow):
    # anything with more than 15 significant digits is far beyond any limit we accept.
    if len(whole) > _FAST_DIGITS:
        return _after(now, limit)
    seconds = float(int(whole or "0"))
    if frac and frac.strip("0"):
        seconds += 1  # round a fraction up: never sooner than the server asked
    return _after(now, min(seconds, limit))


def _build_instant(
    year: int, month: int, day: int, hour: int, minute: int, second: int
) -> _dt.datetime | None:
    leap = second == 60  # a leap second (RFC 9110 §5.6.7 allows 60) means the next second
    try:
        instant = _dt.datetime(year, month, day, hour, minute, 59 if leap else second, tzinfo=_UTC)
        return instant + _dt.timedelta(seconds=1) if leap else instant
    except (ValueError, OverflowError):
        return None


def _parse_http_date(text: str, now: _dt.datetime) -> _dt.datetime | None:
    """An HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, RFC 850 or asctime), or ``None``.

    The standard library's e-mail date parser reads all three forms (it is what
    :func:`email.utils.parsedate_to_datetime` calls); its fields are taken rather than its
    ``datetime`` so that a leap second and RFC 9110's two-digit-year rule are honoured.
    """
    fields = email.utils.parsedate_tz(text)
    if fields is None:
        return None
    zone = text.rsplit(None, 1)[-1].upper()
    # GMT (or UTC) is the only zone an HTTP-date has; asctime has none (it ends in the year)
    if zone not in ("GMT", "UTC") and not (zone.isdigit() and zone.isascii()):
        return None
    year, month, day, hour, minute, second = fields[:6]
    two_digits = _RFC850_YEAR.search(text)
    if two_digits is not None:
        # RFC 9110 §5.6.7: a two-digit year that appears to be more than 50 years in
        # the future is the most recent past year with the same last two digits.
        year = int(two_digits["year"]) + now.year - now.year % 100
        if year > now.year + 50:
            year -= 100
    return _build_instant(year, month, day, hour, minute, second)


def parse_retry_after(
    value: str | None,
    *,
    now: _dt.datetime,
    max_delay: float | _dt.timedelta = DEFAULT_MAX_RETRY_AFTER,
) -> _dt.datetime | None:
    """Parse a ``Retry-After`` header value (RFC 9110 §10.2.3) into a UTC instant.

    Both forms of the field are understood::

        Retry-After: 120                              delta-seconds
        Retry-After: Fri, 31 Dec 1999 23:59:59 GMT    HTTP-date (IMF-fixdate)
        Retry-After: Friday, 31-Dec-99 23:59:59 GMT   obsolete RFC 850 date
        Retry-After: Fri Dec 31 23:59:59 1999         obsolete asctime date

    The rule, which never raises for any ``str``:

    * ``None``, empty, garbage, negative numbers, or impossible dates (``31 Feb``)
      return ``None``: the caller falls back to its own backoff.
    * delta-seconds are relative to ``now``. A decimal fraction (``"1.5"``, not allowed by
      the grammar but seen in the wild) is rounded *up* to whole seconds, so acmecerts
      never comes back sooner than asked. Digit strings of any length are accepted.
    * an HTTP-date in the past (or exactly ``now``) returns ``now``: retry at once.
    * anything more than ``max_delay`` after ``now`` (default 30 days) returns
      ``now + max_delay``: an absurd value cannot park a certificate forever.
    * the result is therefore ``None`` or an aware UTC instant in
      ``[now, now + max_delay]``.

    Surrounding whitespace is ignored; day and month names are matched
    case-insensitively, and ``UTC`` is accepted for ``GMT``. Per RFC 9110 §5.6.7, a
    two-digit RFC 850 year more than 50 years after ``now`` is taken from the past
    century.

    Args:
        value: the header value, or ``None`` when the header is absent.
        now: the current instant (timezone-aware; from the injected :class:`Clock`).
        max_delay: the longest wait accepted, seconds or ``timedelta``.

    Raises:
        InvalidInput: only for a naive ``now`` or a negative ``max_delay``
            (programming errors), never because of ``value``.
    """
    now = aware_utc(now, "now")
    limit = _limit_seconds(max_delay)
    if value is None:
        return None
    if value.isdigit() and value.isascii() and len(value) <= _FAST_DIGITS:
        # the common form (Let's Encrypt's "21600"): what the general path below makes
        # of it, without its regular expression (tests/time_and_errors/test_time.py checks
        # they agree)
        seconds = int(value)
        return _after(now, seconds if seconds < limit else limit)
    text = value.strip()
    if not text:
        return None
    if text[0] in "0123456789.":
        return _parse_delta_seconds(text, now, limit)
    instant = _parse_http_date(text, now)
    return None if instant is None else _clamp(instant, now, limit)


def retry_after_from_detail(
    detail: str | None,
    *,
    now: _dt.datetime,
    max_delay: float | _dt.timedelta = DEFAULT_MAX_RETRY_AFTER,
) -> _dt.datetime | None:
    """Read the "retry after" instant from a rate-limit problem's ``detail`` text.

    Let's Encrypt states the instant in the human-readable detail of a ``rateLimited``
    problem, which matters when no ``Retry-After`` header came with it::

        too many certificates (5) already issued for this exact set of identifiers in
        the last 168h0m0s, retry after 2026-01-01 00:00:00 UTC: see
        https://letsencrypt.org/docs/rate-limits/

    Also understood: ISO 8601 (``2026-01-01T00:00:00Z``, ``...00:00:00.25+00:00``), Go's
    default format (``2026-01-01 00:00:00.123456789 +0000 UTC``), and fractional seconds
    (rounded up to the microsecond). A time without a zone is taken as UTC; a numeric
    offset is honoured. The first ``retry after`` that names a valid instant is used.

    The same rule as :func:`parse_retry_after` applies and it never raises for any
    ``str``: no recognisable instant gives ``None``; a past instant gives ``now``; more
    than ``max_delay`` away gives ``now + max_delay``.
    """
    now = aware_utc(now, "now")
    limit = _limit_seconds(max_delay)
    if not detail:
        return None
    for match in _DETAIL_RETRY_AFTER.finditer(detail):
        instant = _build_instant(
            int(match["year"]),
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"] or 0),
        )
        if instant is None:
            continue
        frac = match["frac"]
        if frac:
            micro = int(frac[:6].ljust(6, "0"))
            if frac[6:].strip("0"):
                micro += 1  # round up: never sooner than the CA said
            instant = _shift(instant, _dt.timedelta(microseconds=micro))
        if match["sign"]:
            offset = _dt.timedelta(hours=int(match["oh"]), minutes=int(match["om"]))
            instant = _shift(instant, -offset if match["sign"] == "+" else offset)
        if instant is None:
            continue
        return _clamp(instant, now, limit)
    return None


def _shift(instant: _dt.datetime | None, delta: _dt.timedelta) -> _dt.datetime | None:
    if instant is None:
        return None
    try:
        return instant + delta
    except OverflowError:
        return _MAX_INSTANT if delta > _dt.timedelta(0) else _MIN_INSTANT
