"""Priorities under scarcity: which certificate spends the next token.

When the budget is short, work is ordered by :func:`prioritize`:

1. a higher ``priority`` first (default 0; configurable per certificate);
2. then renewals, the one whose current certificate expires first leading;
3. then new certificates, in the order they were requested (``requested_at``, else
   their position in the list).

:meth:`RateLimitLedger.plan <acmecerts.ratelimit.RateLimitLedger.plan>` walks this
order to say when each certificate will be issued.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Iterable, Sequence

from acmecerts._time import aware_utc
from acmecerts.errors import InvalidInput
from acmecerts.protocol.identifiers import Identifier
from acmecerts.ratelimit._scopes import as_identifiers
from acmecerts.ratelimit._state import Decision

__all__ = ["IssuanceRequest", "PlannedIssuance", "prioritize"]


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class IssuanceRequest:
    """A certificate waiting to be issued, as far as scheduling cares.

    Args:
        identifiers: The names (and IP addresses) of the certificate.
        expires_at: For a renewal: when the certificate being replaced expires.
        renewal_of: For a renewal: the identifiers of the certificate being replaced
            (default: the same as ``identifiers`` when ``expires_at`` is given). A
            renewal of exactly the same set is exempt from some limits.
        replaces: An ARI renewal (``replaces``): exempt from every limit.
        priority: Higher goes first, before the renewal/new ordering (default 0).
        requested_at: When it was requested (default: its position in the list).
        name: A label for people (e.g. the managed certificate's name).
    """

    identifiers: tuple[Identifier, ...]
    expires_at: _dt.datetime | None
    renewal_of: tuple[Identifier, ...] | None
    replaces: bool
    priority: int
    requested_at: _dt.datetime | None
    name: str | None

    def __init__(
        self,
        identifiers: Iterable[Identifier | str],
        *,
        expires_at: _dt.datetime | None = None,
        renewal_of: Iterable[Identifier | str] | None = None,
        replaces: bool = False,
        priority: int = 0,
        requested_at: _dt.datetime | None = None,
        name: str | None = None,
    ) -> None:
        idents = as_identifiers(identifiers)
        if not idents:
            raise InvalidInput("a certificate needs at least one identifier")
        for what, instant in (("expires_at", expires_at), ("requested_at", requested_at)):
            if instant is not None and not isinstance(instant, _dt.datetime):
                raise InvalidInput(f"{what} must be a timezone-aware datetime, got {instant!r}")
            if instant is not None:
                aware_utc(instant, what)
        if type(priority) is not int:
            raise InvalidInput(f"priority must be an int, got {priority!r}")
        previous = as_identifiers(renewal_of) if renewal_of is not None else None
        if previous is None and expires_at is not None:
            previous = idents
        object.__setattr__(self, "identifiers", idents)
        object.__setattr__(self, "expires_at", expires_at)
        object.__setattr__(self, "renewal_of", previous)
        object.__setattr__(self, "replaces", bool(replaces))
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "requested_at", requested_at)
        object.__setattr__(self, "name", name)

    @property
    def is_renewal(self) -> bool:
        """Whether this replaces an existing certificate."""
        return self.renewal_of is not None or self.replaces

    @property
    def is_exact_renewal(self) -> bool:
        """Whether this renews a certificate with exactly the same identifiers."""
        return self.renewal_of is not None and set(self.renewal_of) == set(self.identifiers)


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedIssuance:
    """When a request would be issued: ``at`` (``None`` if paused), and why not sooner."""

    request: IssuanceRequest
    #: The earliest instant the order fits, queued behind higher-priority work.
    at: _dt.datetime | None
    #: The ledger's answer for it at planning time (``limit`` says what binds).
    decision: Decision


_LATEST = _dt.datetime.max.replace(tzinfo=_dt.UTC)


def prioritize(requests: Sequence[IssuanceRequest]) -> list[IssuanceRequest]:
    """``requests`` in the order they should spend a scarce budget (a new list).

    Higher ``priority`` first; within one priority, renewals (closest expiry first,
    unknown expiry last) before new certificates (earliest ``requested_at`` first,
    then list order). The sort is stable.
    """

    def key(item: tuple[int, IssuanceRequest]) -> tuple[int, int, _dt.datetime, int]:
        index, request = item
        if request.is_renewal:
            return (-request.priority, 0, request.expires_at or _LATEST, index)
        return (-request.priority, 1, request.requested_at or _LATEST, index)

    return [request for _, request in sorted(enumerate(requests), key=key)]
