"""Natural order for certificate names: ``host2`` before ``host10``."""

from __future__ import annotations

import re

__all__ = ["natural_key"]

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[str | int, ...], str]:
    """A sort key that orders runs of digits by their value, letters case-insensitively.

    ``re.split`` with a capturing group alternates text and digits, always starting with
    text (maybe empty), so the pieces at one position are all ``str`` or all ``int`` and
    two keys always compare. The text itself breaks ties (``host01`` / ``host1``,
    ``A`` / ``a``), so the order is total and ``sorted`` is deterministic.
    """
    pieces = _DIGITS.split(text.casefold())
    key = tuple(int(p) if i % 2 else p for i, p in enumerate(pieces))
    return key, text
