"""The in-process solver: the client's real solver path, answered to the simulated CA.

:class:`SimulatedSolver` is an ordinary :class:`~acmecerts.solvers.Solver`: the client
hands it a :class:`~acmecerts.solvers.ChallengeTask` as it would any solver, and
``present`` publishes the task's key authorization where the simulated CA looks
(:class:`Published`), as a web server or a DNS zone would; ``cleanup`` removes it. The CA
validates a challenge by checking that exactly the expected key authorization (token and
account key thumbprint, RFC 8555 §8.1) is published for that identifier, so a client
that computes it wrongly, or never presents, fails validation as it would at a real CA.
"""

from __future__ import annotations

from acmecerts.protocol.identifiers import Identifier
from acmecerts.solvers import ChallengeTask

__all__ = ["Published", "SimulatedSolver"]


class Published:
    """What solvers made visible to the CA: ``(type, identifier value, token) -> key
    authorization``; shared by a :class:`SimulatedCA` and its solvers."""

    __slots__ = ("presented", "records")

    def __init__(self) -> None:
        self.records: dict[tuple[str, str, str], str] = {}
        #: How many times a solver presented (the solver path ran).
        self.presented = 0

    def get(self, challenge_type: str, identifier: str, token: str) -> str | None:
        """The key authorization published for this challenge, if any."""
        return self.records.get((challenge_type, identifier, token))


class SimulatedSolver:
    """A :class:`~acmecerts.solvers.Solver` publishing to a simulated CA (see module).

    Args:
        published: The CA's :attr:`SimulatedCA.published`.
        challenge_type: The one challenge type it answers (``http-01`` by default;
            ``dns-01`` also answers wildcards).
    """

    def __init__(self, published: Published, *, challenge_type: str = "http-01") -> None:
        self.published = published
        self.challenge_type = challenge_type

    def supports(self, identifier: Identifier) -> bool:
        """http-01 and tls-alpn-01 cannot answer a wildcard; dns-01 answers every name."""
        return self.challenge_type == "dns-01" or not identifier.is_wildcard

    async def present(self, task: ChallengeTask) -> None:
        """Publish the task's key authorization."""
        key = (task.type, task.identifier.base_name, task.token)
        self.published.records[key] = task.key_authorization
        self.published.presented += 1

    async def cleanup(self, task: ChallengeTask) -> None:
        """Remove it (idempotent)."""
        self.published.records.pop((task.type, task.identifier.base_name, task.token), None)

    def __repr__(self) -> str:
        return f"SimulatedSolver({self.challenge_type!r})"
