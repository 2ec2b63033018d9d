"""Waiting in tests: for a condition, with a generous limit that says what it waited for.

No test depends on how fast the machine is: a limit is there so that a broken test ends,
not to measure speed, and when it is hit the failure names the condition, not just
``TimeoutError``. (How long things take is checked with a fake clock, or by counting.)
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import anyio
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextlib.contextmanager
def within(seconds: float, what: str) -> Iterator[None]:
    """Like ``anyio.fail_after(seconds)``; past the limit the test fails naming ``what``."""
    with anyio.move_on_after(seconds) as scope:
        yield
    if scope.cancelled_caught:
        pytest.fail(f"waited {seconds:g} s for {what}; it did not happen", pytrace=False)
