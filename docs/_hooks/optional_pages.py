"""mkdocs hook: leave out nav entries of optional pages that do not exist (yet).

``docs/security.md`` and ``docs/performance.md`` are written separately; until one exists
its nav entry is dropped instead of failing ``mkdocs build --strict``. Any other missing
page still fails the build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Pages whose absence is not an error.
OPTIONAL = frozenset({"security.md", "performance.md"})


def _keep(entry: Any, docs_dir: Path) -> bool:
    if isinstance(entry, dict):
        (target,) = entry.values()
    else:
        target = entry
    return not (
        isinstance(target, str) and target in OPTIONAL and not (docs_dir / target).is_file()
    )


def _filter(nav: list[Any], docs_dir: Path) -> list[Any]:
    kept = []
    for entry in nav:
        if isinstance(entry, dict):
            ((title, target),) = entry.items()
            if isinstance(target, list):
                entry = {title: _filter(target, docs_dir)}
        if _keep(entry, docs_dir):
            kept.append(entry)
    return kept


def on_config(config: Any) -> Any:
    """Drop the nav entries of missing optional pages."""
    if config.nav:
        config.nav = _filter(config.nav, Path(config.docs_dir))
    return config
