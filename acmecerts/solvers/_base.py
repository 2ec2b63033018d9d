"""The :class:`Solver` plug-in contract (it lives in :mod:`acmecerts.protocol._solver`)."""

from __future__ import annotations

from acmecerts.protocol._solver import ChallengeTask, Solver

__all__ = ["ChallengeTask", "Solver"]
