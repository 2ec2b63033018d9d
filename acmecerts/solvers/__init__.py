"""Challenge solvers: the :class:`Solver` protocol and the built-in solvers."""

from acmecerts.solvers._base import ChallengeTask, Solver
from acmecerts.solvers.http01 import Http01Server, Http01Webroot, ListenError, WebrootError

__all__ = [
    "ChallengeTask",
    "Http01Server",
    "Http01Webroot",
    "ListenError",
    "Solver",
    "WebrootError",
]
