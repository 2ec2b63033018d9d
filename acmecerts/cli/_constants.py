"""The exit codes (with their ``--json`` status words) and the default CA: what the
command definitions need at import time.

Kept apart from :mod:`acmecerts.cli._ca` (which imports the client and httpx) so
that ``acmecerts --version`` and ``acmecerts COMMAND --help`` start without the library;
a test (``tests/cli/test_cli_start.py``) holds :mod:`acmecerts.cli._app` to that.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "LETS_ENCRYPT",
    "STATUS_WORDS",
    "ExitCode",
]

#: Let's Encrypt's production directory, the default CA.
LETS_ENCRYPT: Final = "https://acme-v02.api.letsencrypt.org/directory"


class ExitCode(enum.IntEnum):
    """The exit codes of ``acmecerts`` (the table in ``docs/cli.md``, and every ``--help``)."""

    #: Issued, or nothing was due.
    OK = 0
    #: Failed: the CA refused (its problem detail is printed) or could not be reached, an
    #: order gave no certificate, or a hook failed. Anything that reached the CA is 1, never 2.
    FAILED = 1
    #: Bad input or unusable state; nothing was sent to the CA.
    INPUT = 2
    #: Deferred by rate limits, or the CA asked to wait longer than ``--max-wait``.
    DEFERRED = 3
    #: After SIGINT (128 + 2), as a shell reports a process Ctrl-C killed.
    INTERRUPTED = 130
    #: After SIGTERM (128 + 15).
    TERMINATED = 143


#: The ``status`` of a ``--json`` object for an exit code ("failed" for any other).
STATUS_WORDS: Final[dict[int, str]] = {
    ExitCode.OK: "ok",
    ExitCode.INPUT: "invalid-input",
    ExitCode.INTERRUPTED: "interrupted",
    ExitCode.TERMINATED: "interrupted",
    ExitCode.DEFERRED: "deferred",
}
