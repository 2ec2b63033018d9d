"""Challenge solvers: the :class:`Solver` protocol and the built-in solvers."""

from acmecerts.solvers._base import ChallengeTask, Solver

__all__ = ["ChallengeTask", "Solver"]
