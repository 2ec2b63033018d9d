"""``python -m acmecerts.cli``: the same as the ``acmecerts`` command."""

from __future__ import annotations

from acmecerts.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
