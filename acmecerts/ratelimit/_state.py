"""The ledger's state and its pure arithmetic: token buckets as GCRA, no I/O, no clock.

Every bucket is one number, its *theoretical arrival time* (TAT, the Generic Cell Rate
Algorithm Let's Encrypt's Boulder uses): with ``T = period / capacity``, a request at
``now`` conforms when ``max(TAT, now) + T - now <= capacity * T`` and then moves TAT to
``max(TAT, now) + T``. A bucket whose TAT is in the past is full and is not stored, so the
state holds only buckets that were spent recently: one integer per bucket.

Instants are integer microseconds since the Unix epoch (exact arithmetic, compact
JSON). Every function takes ``now`` from its caller.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from acmecerts.errors import AcmeProblem, StorageError
from acmecerts.protocol.identifiers import Identifier
from acmecerts.ratelimit._answers import (
    NEW_ACCOUNT_BLOCK,
    UNKNOWN_LIMIT,
    classify,
    event_of,
    known_scope,
    learned_until,
    names_key,
    quoted_names,
)
from acmecerts.ratelimit._instants import from_us, to_us
from acmecerts.ratelimit._model import Event, Limit, RateLimitModel, Scope
from acmecerts.ratelimit._scopes import identifier_set_key, registered_domain, source_range

__all__ = [
    "BudgetLine",
    "Decision",
    "LedgerState",
    "OrderRequest",
    "from_us",
    "to_us",
]

_FORMAT = 1


def source_keys(scope: Scope, source: str) -> tuple[str, ...]:
    """The bucket keys of a new-account limit of ``scope`` for requests from ``source``.

    The source address itself, or its IPv6 /48 (none for an IPv4 source or an unknown one:
    Let's Encrypt counts /48 ranges of IPv6 addresses only).
    """
    if scope is Scope.SOURCE_IPV6_RANGE:
        network = source_range(source)
        return (network,) if network is not None else ()
    return (source,)


@dataclasses.dataclass(frozen=True, slots=True)
class OrderRequest:
    """An order as the ledger sees it: identifiers, account and its exemptions."""

    identifiers: tuple[Identifier, ...]
    account: str
    #: A renewal of the exact same identifier set (exempt from ``renewal_exempt`` limits).
    renewal: bool = False
    #: An ARI renewal with ``replaces`` (exempt from every limit).
    replaces: bool = False
    #: Where the requests come from (for :attr:`Scope.SOURCE_ADDRESS` limits).
    source: str = "local"

    def keys(self, scope: Scope) -> tuple[str, ...]:
        """The bucket keys this request touches for a limit of ``scope``."""
        if scope is Scope.REGISTERED_DOMAIN:
            return tuple(dict.fromkeys(registered_domain(i) for i in self.identifiers))
        if scope is Scope.IDENTIFIER_SET:
            return (identifier_set_key(self.identifiers),)
        if scope is Scope.ACCOUNT:
            return (self.account,)
        if scope is Scope.ACCOUNT_IDENTIFIER:
            return tuple(
                dict.fromkeys(account_identifier_key(self.account, i) for i in self.identifiers)
            )
        return source_keys(scope, self.source)


def account_identifier_key(account: str, identifier: Identifier) -> str:
    """The key of an identifier for an account: ``"<name> <account>"`` (wildcard removed)."""
    return f"{identifier.base_name} {account}"


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """The ledger's answer: may this order be sent now, and if not, from when.

    ``allowed`` true: send it now (after :meth:`~RateLimitLedger.reserve`, its tokens
    are already spent). Otherwise ``not_before`` is the earliest instant it fits (aware
    UTC) and ``limit`` / ``scope_key`` name the limit that binds and what it counts.
    ``paused`` lists identifiers the CA has paused: then ``not_before`` is ``None``, as
    waiting does not help.
    """

    allowed: bool
    not_before: _dt.datetime | None = None
    limit: str | None = None
    scope_key: str | None = None
    paused: tuple[str, ...] = ()
    #: The ``(limit, scope key)`` tokens a reservation spent (for ``release``).
    charges: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False, compare=False)

    def __bool__(self) -> bool:
        return self.allowed


@dataclasses.dataclass(frozen=True, slots=True)
class BudgetLine:
    """One bucket that is not full (or a learned block, or a pause), for ``status``."""

    limit: str
    scope_key: str
    #: Tokens in a full bucket (``None`` for a block learned from the CA).
    capacity: int | None
    #: Tokens that may be spent now.
    remaining: int
    #: The earliest instant one more may be spent (now if ``remaining > 0``;
    #: ``None`` while paused).
    next_slot: _dt.datetime | None
    #: When the bucket is full again (``None`` while paused).
    full_at: _dt.datetime | None
    #: Whether this line is a pause (needs an unpause, not time).
    paused: bool = False


# -- the state -------------------------------------------------------------------------


class LedgerState:
    """Buckets, learned blocks and pauses; mutable, pure (every method takes ``now``)."""

    __slots__ = ("blocks", "buckets", "paused")

    def __init__(self) -> None:
        #: limit name -> scope key -> TAT (µs).
        self.buckets: dict[str, dict[str, int]] = {}
        #: limit name -> scope key -> until (µs): learned for limits the model lacks.
        self.blocks: dict[str, dict[str, int]] = {}
        #: account-identifier key -> since (µs).
        self.paused: dict[str, int] = {}

    # -- buckets (GCRA) ----------------------------------------------------------------

    def not_before(self, limit: Limit, key: str, now: int) -> int | None:
        """When one token of ``limit`` at ``key`` may be spent (``None``: now)."""
        tat = self.buckets.get(limit.name, {}).get(key)
        if tat is None or tat <= now:
            return None
        t = limit.interval_us
        earliest = tat + t - limit.capacity * t
        return earliest if earliest > now else None

    def remaining(self, limit: Limit, key: str, now: int) -> int:
        """Whole tokens left in the bucket at ``now`` (0 when in debt)."""
        tat = self.buckets.get(limit.name, {}).get(key)
        if tat is None or tat <= now:
            return limit.capacity
        t = limit.interval_us
        return max(0, limit.capacity - -(-(tat - now) // t))

    def spend(self, limit: Limit, key: str, now: int) -> None:
        """Spend one token, conforming or not (a fact that already happened)."""
        bucket = self.buckets.setdefault(limit.name, {})
        tat = bucket.get(key, now)
        bucket[key] = (tat if tat > now else now) + limit.interval_us

    def refund(self, limit: Limit, key: str, now: int) -> None:
        """Give one token back (a reservation that was not used)."""
        bucket = self.buckets.get(limit.name)
        if not bucket or key not in bucket:
            return
        tat = bucket[key] - limit.interval_us
        if tat <= now:
            del bucket[key]
        else:
            bucket[key] = tat

    def empty_until(self, limit: Limit, key: str, until: int) -> bool:
        """Make the bucket empty with its next token at ``until`` (learned from the CA)."""
        t = limit.interval_us
        tat = until + limit.capacity * t - t
        bucket = self.buckets.setdefault(limit.name, {})
        if bucket.get(key, 0) >= tat:
            return False
        bucket[key] = tat
        return True

    # -- orders ------------------------------------------------------------------------

    def order_charges(
        self, model: RateLimitModel, request: OrderRequest, events: Iterable[Event]
    ) -> list[tuple[Limit, str]]:
        """The tokens an order spends for ``events``, after exemptions."""
        if request.replaces:
            return []  # ARI renewals are exempt from every limit
        wanted = frozenset(events)
        return [
            (limit, key)
            for limit in model
            if limit.event in wanted and not (request.renewal and limit.renewal_exempt)
            for key in request.keys(limit.scope)
        ]

    def evaluate(self, model: RateLimitModel, request: OrderRequest, now: int) -> Decision:
        """Whether ``request`` fits now; with the tokens it would spend when it does."""
        paused = self._paused(model, request)
        if paused:
            pausing = next((limit.name for limit in model if limit.pauses), UNKNOWN_LIMIT)
            return Decision(False, None, pausing, request.account, paused=tuple(sorted(paused)))
        charges = self.order_charges(model, request, (Event.NEW_ORDER, Event.NEW_CERTIFICATE))
        checks: list[tuple[Limit, str]] = []
        if not request.replaces:
            checks = [
                (limit, key)
                for limit in model.for_event(Event.AUTHORIZATION_FAILURE)
                if not limit.pauses
                for key in request.keys(limit.scope)
            ]
        worst = 0
        worst_limit: str | None = None
        worst_key: str | None = None
        for limit, key in (*charges, *checks):
            earliest = self.not_before(limit, key, now)
            if earliest is not None and earliest > worst:
                worst, worst_limit, worst_key = earliest, limit.name, key
        for name, bucket in self.blocks.items():
            for key in self._blocked_keys(model, request, name):
                until = bucket.get(key)
                if until is not None and until > now and until > worst:
                    worst, worst_limit, worst_key = until, name, key
        if worst_limit is not None:
            return Decision(False, from_us(worst), worst_limit, worst_key)
        return Decision(True, charges=tuple((limit.name, key) for limit, key in charges))

    def _paused(self, model: RateLimitModel, request: OrderRequest) -> list[str]:
        if not self.paused:
            return []
        return [
            ident.base_name
            for ident in request.identifiers
            if account_identifier_key(request.account, ident) in self.paused
        ]

    def _blocked_keys(
        self, model: RateLimitModel, request: OrderRequest, name: str
    ) -> tuple[str, ...]:
        if name == UNKNOWN_LIMIT:
            return (request.account,)  # unexplained: the whole account waits
        limit = model.get(name)
        if limit is not None:
            scope, exempt, event = limit.scope, limit.renewal_exempt, limit.event
        else:
            scope, exempt = known_scope(name)
            event = event_of(scope)
        if request.replaces or (request.renewal and exempt) or event is Event.NEW_ACCOUNT:
            return ()
        return request.keys(scope)

    def apply(self, model: RateLimitModel, charges: Iterable[tuple[str, str]], now: int) -> None:
        """Spend the tokens of an allowed :class:`Decision`."""
        for name, key in charges:
            limit = model.get(name)
            if limit is not None:
                self.spend(limit, key, now)

    def release(
        self,
        model: RateLimitModel,
        charges: Iterable[tuple[str, str]],
        now: int,
        events: frozenset[Event] | None = None,
    ) -> bool:
        """Give back tokens of a reservation (only those of ``events`` if given)."""
        changed = False
        for name, key in charges:
            limit = model.get(name)
            if (
                limit is not None
                and (events is None or limit.event in events)
                and key in self.buckets.get(name, {})
            ):
                self.refund(limit, key, now)
                changed = True
        return changed

    # -- authorizations and accounts ---------------------------------------------------

    def authorization_failed(
        self, model: RateLimitModel, account: str, identifier: Identifier, now: int
    ) -> bool:
        """Record a failed authorization; returns whether the identifier is now paused."""
        key = account_identifier_key(account, identifier)
        paused = False
        for limit in model.for_event(Event.AUTHORIZATION_FAILURE):
            self.spend(limit, key, now)
            if limit.pauses and self.remaining(limit, key, now) == 0:
                self.paused.setdefault(key, now)
                paused = True
        return paused

    def authorization_succeeded(
        self, model: RateLimitModel, account: str, identifier: Identifier
    ) -> bool:
        """A valid authorization ends a run of consecutive failures (and any pause)."""
        key = account_identifier_key(account, identifier)
        changed = self.paused.pop(key, None) is not None
        for limit in model.for_event(Event.AUTHORIZATION_FAILURE):
            if limit.pauses:
                bucket = self.buckets.get(limit.name)
                if bucket is not None and bucket.pop(key, None) is not None:
                    changed = True
        return changed

    def unpause(self, account: str, identifier: Identifier) -> bool:
        """Forget a pause (after it was lifted at the CA); returns whether there was one."""
        return self.paused.pop(account_identifier_key(account, identifier), None) is not None

    def account_decision(self, model: RateLimitModel, source: str, now: int) -> Decision:
        """Whether a new account may be created from ``source`` now."""
        worst = 0
        worst_limit: str | None = None
        worst_key = source
        for limit in model.for_event(Event.NEW_ACCOUNT):
            for key in source_keys(limit.scope, source):
                earliest = self.not_before(limit, key, now)
                if earliest is not None and earliest > worst:
                    worst, worst_limit, worst_key = earliest, limit.name, key
        for name, bucket in self.blocks.items():
            scope = known_scope(name)[0]
            until = bucket.get(source)
            if scope is Scope.SOURCE_ADDRESS and until is not None and until > max(now, worst):
                worst, worst_limit, worst_key = until, name, source
        if worst_limit is not None:
            return Decision(False, from_us(worst), worst_limit, worst_key)
        return Decision(True)

    def account_charges(self, model: RateLimitModel, source: str) -> tuple[tuple[str, str], ...]:
        """The ``(limit, scope key)`` tokens a new account from ``source`` spends."""
        return tuple(
            (limit.name, key)
            for limit in model.for_event(Event.NEW_ACCOUNT)
            for key in source_keys(limit.scope, source)
        )

    def learn_account(
        self, model: RateLimitModel, source: str, now: int, until: int | None
    ) -> Decision:
        """Make the state agree with a ``rateLimited`` answer to ``newAccount``.

        Whatever the detail says, the answer was to an account creation: every new-account
        bucket of ``source`` is emptied until ``until`` (a learned block when the model has
        no new-account limit), so no account is created from there before then.
        """
        until = learned_until(now, until)
        limits = model.for_event(Event.NEW_ACCOUNT)
        for limit in limits:
            for key in source_keys(limit.scope, source):
                self.empty_until(limit, key, until)
        if not limits:
            bucket = self.blocks.setdefault(NEW_ACCOUNT_BLOCK, {})
            bucket[source] = max(bucket.get(source, 0), until)
        return self.account_decision(model, source, now)

    # -- learning ----------------------------------------------------------------------

    def learn(
        self,
        model: RateLimitModel,
        problem: AcmeProblem,
        request: OrderRequest,
        now: int,
        until: int | None,
    ) -> Decision:
        """Make the state agree with a ``rateLimited`` answer to ``request``.

        The limit is recognised from the detail text (Let's Encrypt's wording and
        documentation links). A limit of the model gets its buckets emptied until
        ``until``; a limit the model lacks becomes a learned block; an unrecognised
        answer holds back the whole account. A pause marks the identifiers paused.
        """
        known = classify(problem.detail or "")
        quoted = quoted_names(problem.detail or "")
        if known is not None and known[0] == (
            "consecutive_authorization_failures_per_identifier_per_account"
        ):
            named = [i for i in request.identifiers if i.base_name in quoted or i.value in quoted]
            for ident in named or request.identifiers:
                self.paused.setdefault(account_identifier_key(request.account, ident), now)
            return self.evaluate(model, request, now)
        until = learned_until(now, until)
        if known is None:
            name, scope = UNKNOWN_LIMIT, Scope.ACCOUNT
            limit = None
        else:
            name, scope, _ = known
            limit = model.get(name) or next(
                (
                    candidate
                    for candidate in model
                    if candidate.scope is scope and candidate.event is event_of(scope)
                ),
                None,
            )
        keys = request.keys(scope)
        if quoted and scope in (Scope.REGISTERED_DOMAIN, Scope.ACCOUNT_IDENTIFIER):
            narrowed = tuple(key for key in keys if names_key(quoted, key))
            keys = narrowed or keys
        for key in keys:
            if limit is not None:
                self.empty_until(limit, key, until)
            else:
                bucket = self.blocks.setdefault(name, {})
                bucket[key] = max(bucket.get(key, 0), until)
        label = limit.name if limit is not None else name
        return Decision(False, from_us(until), label, keys[0] if keys else None)

    # -- housekeeping ------------------------------------------------------------------

    def prune(self, model: RateLimitModel, now: int) -> None:
        """Drop full buckets, expired blocks and buckets of limits the model lacks."""
        names = {limit.name for limit in model}
        for name in list(self.buckets):
            bucket = self.buckets[name]
            if name not in names:
                del self.buckets[name]
                continue
            stale = [key for key, tat in bucket.items() if tat <= now]
            for key in stale:
                del bucket[key]
            if not bucket:
                del self.buckets[name]
        for name in list(self.blocks):
            bucket = self.blocks[name]
            for key in [key for key, until in bucket.items() if until <= now]:
                del bucket[key]
            if not bucket:
                del self.blocks[name]

    def size(self) -> int:
        """How many buckets, blocks and pauses are stored."""
        return (
            sum(len(bucket) for bucket in self.buckets.values())
            + sum(len(bucket) for bucket in self.blocks.values())
            + len(self.paused)
        )

    def budget(self, model: RateLimitModel, now: int) -> list[BudgetLine]:
        """Every bucket that is not full, every live block and every pause."""
        lines: list[BudgetLine] = []
        for limit in model:
            for key, tat in self.buckets.get(limit.name, {}).items():
                if tat <= now:
                    continue
                remaining = self.remaining(limit, key, now)
                earliest = self.not_before(limit, key, now)
                lines.append(
                    BudgetLine(
                        limit=limit.name,
                        scope_key=key,
                        capacity=limit.capacity,
                        remaining=remaining,
                        next_slot=from_us(now if earliest is None else earliest),
                        full_at=from_us(tat),
                    )
                )
        for name, bucket in self.blocks.items():
            for key, until in bucket.items():
                if until > now:
                    lines.append(BudgetLine(name, key, None, 0, from_us(until), from_us(until)))
        pausing = next((limit.name for limit in model if limit.pauses), UNKNOWN_LIMIT)
        for key in self.paused:
            lines.append(BudgetLine(pausing, key, None, 0, None, None, paused=True))
        lines.sort(key=lambda line: (line.limit, line.scope_key))
        return lines

    def copy(self) -> LedgerState:
        """An independent copy (for planning)."""
        other = LedgerState()
        other.buckets = {name: dict(bucket) for name, bucket in self.buckets.items()}
        other.blocks = {name: dict(bucket) for name, bucket in self.blocks.items()}
        other.paused = dict(self.paused)
        return other

    # -- persistence -------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The compact JSON form (instants as integer microseconds since the epoch)."""
        return {
            "format": _FORMAT,
            "buckets": self.buckets,
            "blocks": self.blocks,
            "paused": self.paused,
        }

    def to_bytes(self) -> bytes:
        """:meth:`to_json` as compact UTF-8 JSON."""
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str = "ledger") -> LedgerState:
        """Parse :meth:`to_bytes` output; anything else raises :class:`StorageError`."""
        try:
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise StorageError(
                f"the rate-limit ledger {where} is not JSON: {exc}", path=where
            ) from exc
        return cls.from_json(document, where=where)

    @classmethod
    def from_json(cls, document: Any, *, where: str = "ledger") -> LedgerState:
        """Validate and rebuild a state from :meth:`to_json` output."""
        if not isinstance(document, Mapping) or document.get("format") != _FORMAT:
            raise StorageError(
                f"the rate-limit ledger {where} is not a format-{_FORMAT} ledger", path=where
            )
        state = cls()
        state.buckets = _table(document.get("buckets", {}), where, "buckets")
        state.blocks = _table(document.get("blocks", {}), where, "blocks")
        state.paused = _instants(document.get("paused", {}), where, "paused")
        return state


def _instants(value: Any, where: str, what: str) -> dict[str, int]:
    if not isinstance(value, dict):
        raise StorageError(f"the rate-limit ledger {where}: {what} must be an object", path=where)
    for key, instant in value.items():
        if type(instant) is not int:
            raise StorageError(
                f"the rate-limit ledger {where}: {what}[{key!r}] must be an integer", path=where
            )
    return value


def _table(value: Any, where: str, what: str) -> dict[str, dict[str, int]]:
    if not isinstance(value, dict):
        raise StorageError(f"the rate-limit ledger {where}: {what} must be an object", path=where)
    for name, bucket in value.items():
        _instants(bucket, where, f"{what}[{name!r}]")
    return value
