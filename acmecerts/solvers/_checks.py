"""The check every built-in solver makes first: is this a task it can present?"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acmecerts.errors import UnsupportedChallenge

if TYPE_CHECKING:
    from collections.abc import Callable

    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask


def _refuse_unsupported(
    solver: object,
    task: ChallengeTask,
    challenge_type: str,
    supports: Callable[[Identifier], bool],
) -> None:
    """Raise :class:`~acmecerts.errors.UnsupportedChallenge` unless ``solver`` can present ``task``.

    It can when the task is a ``challenge_type`` challenge and ``supports`` accepts its
    identifier; the message names the solver, or the identifier and what could validate it.
    """
    if task.type != challenge_type:
        raise UnsupportedChallenge(
            f"{type(solver).__name__} answers {challenge_type} challenges, not {task.type!r}"
        )
    identifier = task.identifier
    if not supports(identifier):
        if identifier.is_wildcard:
            hint = " (wildcard names need dns-01)"
        elif identifier.type == "ip":
            hint = " (IP addresses need http-01 or tls-alpn-01, RFC 8738)"
        else:
            hint = ""
        raise UnsupportedChallenge(f"{challenge_type} cannot validate {identifier.value!r}{hint}")
