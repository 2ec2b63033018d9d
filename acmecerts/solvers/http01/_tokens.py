"""What both http-01 solvers share: which identifiers, which tokens, who holds each token."""

from __future__ import annotations

import abc
import contextlib
from typing import TYPE_CHECKING, Final

from acmecerts.errors import AcmeCertsError
from acmecerts.protocol.challenges import validate_token
from acmecerts.solvers._checks import _refuse_unsupported

if TYPE_CHECKING:
    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask

_CHALLENGE_TYPE: Final = "http-01"
#: RFC 8555 §8.3: the path the CA requests, followed by the token.
_WELL_KNOWN: Final = (".well-known", "acme-challenge")
_PATH_PREFIX: Final = b"/.well-known/acme-challenge/"


def _supports(identifier: Identifier) -> bool:
    # RFC 8555 §8.3 validates a host name or (RFC 8738 §3) an IP address; never a wildcard.
    return identifier.type in ("dns", "ip") and not identifier.is_wildcard


def _is_valid_token(token: object) -> bool:
    try:
        validate_token(token)
    except AcmeCertsError:
        return False
    return True


class _Holders:
    """Which tasks currently want each token answered.

    Several orders may share one authorization (the CA reuses pending ones), so the same
    token can be presented more than once; it stays answered until the last holder is
    cleaned up. Tasks are counted by equality: equal tasks carry the same answer.
    """

    def __init__(self) -> None:
        self._by_token: dict[str, list[ChallengeTask]] = {}

    def add(self, task: ChallengeTask) -> None:
        self._by_token.setdefault(task.token, []).append(task)

    def discard(self, task: ChallengeTask) -> bool:
        """Forget one ``add(task)`` if there was one; return whether the token is now free."""
        holders = self._by_token.get(task.token)
        if holders is None:
            return True
        with contextlib.suppress(ValueError):
            holders.remove(task)
        if holders:
            return False
        del self._by_token[task.token]
        return True

    def answer(self, token: str) -> str | None:
        """The key authorization to serve for ``token`` (the latest holder's), if any."""
        holders = self._by_token.get(token)
        return holders[-1].key_authorization if holders else None

    def __len__(self) -> int:
        return len(self._by_token)


class _Http01Solver(abc.ABC):
    """What both http-01 solvers share: the challenge type, the identifiers, the held tokens.

    A subclass sets ``_holders`` in its constructor.
    """

    #: The challenge type this solver answers.
    challenge_type: str = _CHALLENGE_TYPE
    _holders: _Holders

    def supports(self, identifier: Identifier) -> bool:
        """DNS names and IP addresses, but not wildcard names (RFC 8555 §8.3)."""
        return _supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        """Answer ``task.token`` with ``task.key_authorization`` at the well-known path.

        Raises :class:`~acmecerts.errors.UnsupportedChallenge` for a wildcard or a non
        http-01 task and :class:`~acmecerts.errors.BadServerResponse` for a malformed
        token, before anything is served; then whatever the solver raises when it cannot
        serve (:class:`~acmecerts.solvers.http01.ListenError`,
        :class:`~acmecerts.solvers.http01.WebrootError`).
        """
        await self._answer(task, self._token(task))

    @abc.abstractmethod
    async def _answer(self, task: ChallengeTask, token: str) -> None:
        """Start answering the (checked) ``token`` for ``task``: each solver's own way."""

    def _token(self, task: ChallengeTask) -> str:
        """Refuse a task this solver cannot present; return its (validated) token."""
        _refuse_unsupported(self, task, _CHALLENGE_TYPE, _supports)
        return validate_token(task.token)

    def _release(self, task: ChallengeTask) -> bool:
        """Forget one hold of ``task``'s token: whether nobody holds it now.

        ``False`` for a malformed token, which was never held (its present() failed).
        """
        return _is_valid_token(task.token) and self._holders.discard(task)
