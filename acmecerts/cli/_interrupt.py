"""Running a command's async work so that SIGINT and SIGTERM stop it cleanly.

Every command runs its async work through :func:`run_interruptible` instead of
``anyio.run``. The work runs in an anyio cancel scope that the
:class:`~acmecerts.cli._signals.SignalGuard` cancels at the first SIGINT or SIGTERM (a
scope, so the cancellation reaches every task and cannot be lost the way a single
``Task.cancel()`` can). What the work does in ``finally`` and in shielded scopes still
runs: the solvers remove their challenge responses, the client deactivates the
authorizations still pending, the state is saved, the connections close. Then
:class:`~acmecerts.cli._signals.Interrupted` is raised and the command reports
``interrupted`` (130) or ``terminated`` (143). The guard bounds that clean-up and turns
a second signal into an exit on the spot (see :mod:`acmecerts.cli._signals`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ._gc import settle
from ._signals import INTERRUPT_GRACE, FinalWords, Interrupted, SignalGuard, active_guard

__all__ = ["INTERRUPT_GRACE", "Interrupted", "run_interruptible"]

T = TypeVar("T")


def run_interruptible(
    func: Callable[[], Awaitable[T]],
    *,
    json_mode: bool,
    grace: float | None = None,
    final_words: FinalWords | None = None,
) -> T:
    """``anyio.run(func)`` under the CLI's signal rules (see the module docstring).

    The guard armed for the whole run (:func:`acmecerts.cli.main` arms one) is used;
    without one (``_app.main`` called in-process) one is armed for this call, with
    ``grace`` (default: ``ACMECERTS_INTERRUPT_GRACE`` or 15 s). ``final_words`` is what a
    forced exit adds to its report (e.g. the certificates of a batch that finished).

    Returns what ``func`` returned, also when a signal came too late to stop it. Raises
    :class:`Interrupted` when the work stopped because of a signal (whatever else went
    wrong while it stopped); otherwise what ``func`` raised. After the grace, or at a
    second signal, it does not return: the process exits with 130 or 143.
    """
    settle()  # the command's modules are imported (see acmecerts.cli._gc)
    guard = active_guard()
    owned: SignalGuard | None = None
    if guard is None:
        owned = SignalGuard(json_mode=json_mode, grace=grace)
        if not owned.arm():
            return anyio.run(func)
        guard = owned
    guard.final_words = final_words
    try:
        return anyio.run(_guarded, guard, func)
    except BaseException as exc:
        if guard.signum is not None:
            raise Interrupted(guard.signum) from exc
        raise
    finally:
        guard.detach()
        guard.final_words = None
        if owned is not None:
            owned.disarm()


async def _guarded(guard: SignalGuard, func: Callable[[], Awaitable[T]]) -> T:
    loop = asyncio.get_running_loop()
    with anyio.CancelScope() as scope:

        def cancel() -> None:
            # From the watchdog's thread: the event loop cancels at its next turn.
            loop.call_soon_threadsafe(scope.cancel)

        guard.attach(cancel)
        return await func()
    # only this scope's own cancellation gets here: a signal stopped the work
    assert guard.signum is not None
    raise Interrupted(guard.signum)
