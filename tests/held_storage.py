"""A real FileStorage that can hold one read: to interleave a race exactly in a test."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from acmecerts.storage import FileStorage, StoredValue

if TYPE_CHECKING:
    from pathlib import Path


class HeldLoad(FileStorage):
    """A real FileStorage whose next read of a key containing ``matching``, once ``armed``,
    sets ``held`` and waits for ``release``."""

    def __init__(self, root: Path, *, matching: str = "") -> None:
        super().__init__(root)
        self.matching = matching
        self.armed = False
        self.held = anyio.Event()
        self.release = anyio.Event()

    async def load(self, key: str) -> StoredValue | None:
        if self.armed and self.matching in f"/{key}":
            self.armed = False
            self.held.set()
            await self.release.wait()
        return await super().load(key)
