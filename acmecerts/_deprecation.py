"""Deprecation warnings that point at the caller's line, outside acmecerts."""

from __future__ import annotations

import sys
import types
import warnings

__all__ = ["_warn_deprecated"]


def _warn_deprecated(message: str) -> None:
    """Emit ``DeprecationWarning(message)`` at the caller's line outside acmecerts.

    The warning points at the first frame that is not acmecerts' own code, so it names
    the user's line however deep inside the package the deprecated path was reached
    (``AcmeClient(on_request=...)`` goes through the transport's constructor; the
    manager's ``open_manager(on_request=...)`` through the client's).
    """
    level = 1
    frame: types.FrameType | None = sys._getframe(0)
    while frame is not None and _is_ours(frame):
        frame = frame.f_back
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def _is_ours(frame: types.FrameType) -> bool:
    return str(frame.f_globals.get("__name__", "")).partition(".")[0] == "acmecerts"
