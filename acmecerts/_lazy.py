"""Names a package imports on first use (PEP 562 module ``__getattr__``).

A package whose public names would cost an import it does not always need (a solver's
dependencies), or would come from a layer above it (``acmecerts.ratelimit.RateLimitLedger``),
keeps a table of each name's module and answers its module ``__getattr__`` with
:func:`import_lazily`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["import_lazily"]


def import_lazily(namespace: dict[str, Any], table: Mapping[str, str], name: str) -> Any:
    """``name`` from the module ``table`` gives for it, kept in ``namespace`` from now on.

    ``namespace`` is the package's ``globals()``: once kept there, the name is found
    without calling the package's ``__getattr__`` again. A name not in ``table`` raises
    the :class:`AttributeError` an attribute lookup expects.
    """
    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
