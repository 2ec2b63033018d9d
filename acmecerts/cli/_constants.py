"""The exit codes (with their ``--json`` status words) and the default CA: what the
command definitions need at import time.

Kept apart from :mod:`acmecerts.cli._ca` (which imports the client and httpx) so
that ``acmecerts --version`` and ``acmecerts COMMAND --help`` start without the library;
a test (``tests/test_cli_start.py``) holds :mod:`acmecerts.cli._app` to that.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "EXIT_DEFERRED",
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "LETS_ENCRYPT",
    "STATUS_WORDS",
]

#: Let's Encrypt's production directory, the default CA.
LETS_ENCRYPT: Final = "https://acme-v02.api.letsencrypt.org/directory"

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_INPUT: Final = 2
EXIT_DEFERRED: Final = 3
#: Exit code after SIGINT (128 + 2), as a shell reports a process Ctrl-C killed.
EXIT_INTERRUPTED: Final = 130
#: Exit code after SIGTERM (128 + 15).
EXIT_TERMINATED: Final = 143
#: The ``status`` of a ``--json`` object for an exit code ("failed" for any other).
STATUS_WORDS: Final[dict[int, str]] = {
    EXIT_OK: "ok",
    EXIT_INPUT: "invalid-input",
    EXIT_INTERRUPTED: "interrupted",
    EXIT_TERMINATED: "interrupted",
    EXIT_DEFERRED: "deferred",
}
