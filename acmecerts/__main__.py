"""``python -m acmecerts``: the same as the ``acmecerts`` command.

Import-light like the command itself: only :mod:`acmecerts.cli` (whose ``main`` imports
what each command needs when it runs), so ``python -m acmecerts --version`` starts as
fast as ``acmecerts --version``.
"""

from __future__ import annotations

from acmecerts.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
