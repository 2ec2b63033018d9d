"""Helpers of the hostile-input tests: run a parser under a time bound, typed errors only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from acmecerts.errors import AcmeCertsError

__all__ = ["HANG_SECONDS", "Hang", "bounded", "typed_or_success"]

_T = TypeVar("_T")

#: The longest any parser may take for one input (a generous bound: they take microseconds).
HANG_SECONDS = 5.0


class Hang(AssertionError):
    """A parser did not return within :data:`HANG_SECONDS`."""


def bounded(
    func: Callable[..., _T], *args: Any, seconds: float = HANG_SECONDS, **kwargs: Any
) -> _T:
    """Call ``func`` in a daemon thread; raise :class:`Hang` if it runs past ``seconds``.

    Whatever ``func`` raises is re-raised here. A hung call leaves its thread behind (a
    daemon, so it does not keep the interpreter alive) and fails the test at once. C code
    that holds the GIL (a runaway regular expression) cannot be interrupted from another
    thread: such a call fails the test when it finally returns (the elapsed time is
    checked too), or pytest-timeout ends it.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, func(*args, **kwargs)))
        except BaseException as exc:  # re-raised in the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name=f"bounded {getattr(func, '__name__', func)}")
    thread.daemon = True
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    if thread.is_alive() or time.monotonic() - started > seconds:
        raise Hang(f"{getattr(func, '__qualname__', func)} did not return within {seconds} s")
    ok, value = outcome[0]
    if not ok:
        raise value
    result: _T = value
    return result


def typed_or_success(func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T | AcmeCertsError:
    """Call ``func`` under the time bound; return its result or the typed error it raised.

    Any exception that is not an :class:`~acmecerts.errors.AcmeCertsError` propagates and
    fails the test (with hypothesis' shrunk example).
    """
    try:
        return bounded(func, *args, **kwargs)
    except AcmeCertsError as exc:
        error = exc
    # A typed error must also render: messages end up in logs and events.
    assert isinstance(str(error), str)
    assert isinstance(repr(error), str)
    return error
