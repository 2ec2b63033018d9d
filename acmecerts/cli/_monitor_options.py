"""The monitoring options (declared as in :mod:`._options`): ``--log-format`` (every
command) and ``status --check``, ``--check-grace``, ``--at``."""

from __future__ import annotations

import enum
from typing import Annotated

from ._options import Panel, opt

__all__ = ["At", "Check", "CheckGrace", "LogFormat", "LogFormatChoice"]


class LogFormatChoice(enum.StrEnum):
    """The values of ``--log-format``."""

    TEXT = "text"
    JSON = "json"


LogFormat = Annotated[
    LogFormatChoice,
    opt(
        "log-format",
        panel=Panel.OUTPUT,
        help="How log lines on stderr are written: text, or json (one JSON object per line: "
        "time, level, logger, message, and certificate, order_url, problem_type, attempt, "
        "next_at when the line is about one).",
    ),
]
Check = Annotated[
    bool,
    opt(
        "check",
        help="Exit 1 when a certificate fails the check: expired, revoked, or still not "
        "renewed longer than --check-grace after its renewal instant (for cron, Nagios, "
        "systemd OnFailure=).",
    ),
]
CheckGrace = Annotated[
    str,
    opt(
        "check-grace",
        metavar="DURATION",
        help="With --check: how long past its renewal instant a certificate may still be "
        "waiting for its renewal (seconds, or a number with s, m, h or d: 12h, 2d).",
    ),
]
At = Annotated[
    str | None,
    opt(
        "at",
        metavar="INSTANT",
        help="Show the status (and --check) as it will be at INSTANT instead of now "
        "(ISO 8601, e.g. 2027-01-15 or 2027-01-15T12:00:00+00:00; UTC without an offset).",
        show_default=False,
    ),
]
