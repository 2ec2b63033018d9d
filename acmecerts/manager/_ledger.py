"""``RateLimitLedger``: what may be spent now at the CA, and when the next slot opens.

The ledger keeps a :class:`~acmecerts.ratelimit._state.LedgerState` (the pure bucket
arithmetic, in the policy layer with the questions and records made on it,
:mod:`acmecerts.ratelimit._changes`) in memory, or in a :class:`~acmecerts.storage.Storage`
where every change is a read-modify-write with compare-and-swap, retried on
:class:`~acmecerts.storage.VersionConflict` (:func:`~acmecerts.storage.update`), so
that replicas sharing a store share one budget and a restart forgets nothing. Because
it writes to storage it lives here, beside the manager;
``acmecerts.ratelimit.RateLimitLedger`` names this same class.
"""

from __future__ import annotations

import datetime as _dt
import random
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal, TypeVar, Unpack, cast

import anyio

from acmecerts._time import Clock, SystemClock
from acmecerts.errors import (
    AcmeProblem,
    InvalidInput,
    RateLimitDeferred,
    RateLimited,
)
from acmecerts.protocol.identifiers import Identifier
from acmecerts.ratelimit import _changes as changes
from acmecerts.ratelimit._changes import OrderKeywords, order_request
from acmecerts.ratelimit._model import Event, RateLimitModel
from acmecerts.ratelimit._priority import IssuanceRequest, PlannedIssuance, prioritize
from acmecerts.ratelimit._scopes import as_identifiers
from acmecerts.ratelimit._state import BudgetLine, Decision, LedgerState, OrderRequest, to_us
from acmecerts.storage import UNREAD, UpdateConflict, UpdateMarker, update

if TYPE_CHECKING:
    from acmecerts.storage._base import Storage, StoredValue

__all__ = ["RateLimitLedger"]

T = TypeVar("T")

# Conflicting writes before a change gives up: more than UPDATE_TRIES, because this one
# key is written by every replica sharing the store at each order (group commit keeps
# it to one writer per process).
_LEDGER_TRIES = 50
# Without storage, full buckets are pruned at most this often (ledger time, µs).
_PRUNE_EVERY_US = 60 * 1_000_000
# ... and only after as many writes as the state had entries (amortised O(1) per write).
_MIN_PRUNE_WRITES = 256


class RateLimitLedger:
    """The CA's rate limits, the spends made against them, and what the CA told us.

    Args:
        model: The CA's limits (:data:`~acmecerts.ratelimit.LETS_ENCRYPT`,
            :data:`~acmecerts.ratelimit.NO_LIMITS`, or your own).
        clock: Where "now" comes from (a :class:`~acmecerts.FakeClock` in tests).
        storage: Keep the ledger in this store (shared by every replica using it);
            ``None`` keeps it in memory only.
        key: The storage key, normally ``KeyLayout(directory_url).ledger()`` (one
            ledger per CA: some limits count across accounts). Required with
            ``storage``.

    Every question and record of an order takes its identifiers (strings or
    :class:`~acmecerts.Identifier`) and the keywords of
    :class:`~acmecerts.ratelimit._changes.OrderKeywords`: the ``account`` (its URL,
    required) and the exemptions, ``replaces=True`` for an ARI renewal (exempt from
    every limit) and ``renewal_of``, the identifiers of the certificate being renewed
    (if they are exactly the order's, the order is exempt from the limits marked
    ``renewal_exempt``: new orders and certificates per registered domain).

    Methods are coroutines because the ledger may live in a store; without one, none
    of them waits for anything. Concurrent calls are serialised: :meth:`reserve` from
    many tasks (or replicas sharing the store) never spends more than the model allows.
    """

    def __init__(
        self,
        model: RateLimitModel,
        *,
        clock: Clock | None = None,
        storage: Storage | None = None,
        key: str | None = None,
    ) -> None:
        if not isinstance(model, RateLimitModel):
            raise InvalidInput(f"model must be a RateLimitModel, got {model!r}")
        if storage is not None and key is None:
            raise InvalidInput("a stored ledger needs key=, e.g. KeyLayout(directory_url).ledger()")
        self.model = model
        self.clock: Clock = clock or SystemClock()
        self.storage = storage
        self.key = key
        self._state = LedgerState()
        #: The stored value the cached state is (UNREAD: unknown, or holds unsaved changes).
        self._stored: StoredValue | Literal[UpdateMarker.UNREAD] | None = UNREAD
        #: Whether the store was read once (what :meth:`cached_budget` needs).
        self._loaded = False
        self._lock = anyio.Lock()
        #: Changes waiting for the lock, applied by whichever task takes it next.
        self._pending: list[_PendingChange] = []
        self._pruned_at = 0
        self._writes = 0
        self._prune_after = _MIN_PRUNE_WRITES
        self._rng = random.Random()

    def __repr__(self) -> str:
        where = "memory" if self.storage is None else repr(self.key)
        return f"RateLimitLedger({self.model!r}, {where})"

    # -- questions -----------------------------------------------------------------------

    async def check(
        self, identifiers: Iterable[Identifier | str], **order: Unpack[OrderKeywords]
    ) -> Decision:
        """Whether an order for ``identifiers`` fits the limits now; spends nothing."""
        request = order_request(identifiers, order)
        return await self._read(lambda state, now: state.evaluate(self.model, request, now))

    async def when(
        self, identifiers: Iterable[Identifier | str], **order: Unpack[OrderKeywords]
    ) -> _dt.datetime:
        """The earliest instant an order for ``identifiers`` fits (now if it fits now).

        This answers for one order alone; :meth:`plan` answers for a queue of them.

        Raises:
            IdentifierPaused: an identifier is paused; no instant will do.
        """
        decision = await self.check(identifiers, **order)
        changes.raise_if_paused(decision, order["account"])
        if decision.allowed or decision.not_before is None:
            return self.clock.now()
        return decision.not_before

    async def deferral(
        self, identifiers: Iterable[Identifier | str], **order: Unpack[OrderKeywords]
    ) -> RateLimitDeferred | None:
        """What :meth:`preflight` would raise for this order now, without spending.

        ``None``: the order may go on to :meth:`preflight`, which still decides (and
        spends); else the :class:`~acmecerts.errors.RateLimitDeferred` it would raise.
        A paused identifier answers ``None`` (:meth:`preflight` raises for it). A stored
        ledger answers first from the state it last read or wrote, with no request;
        only a refusal is read again from the store (another replica may have given
        tokens back), so asking costs a store request only when the answer is no.
        """
        request = order_request(identifiers, order)
        cached = self.storage is not None and self._stored is not UNREAD
        if cached and self._state.evaluate(self.model, request, self._now()).allowed:
            return None
        decision = await self._read(lambda state, now: state.evaluate(self.model, request, now))
        if decision.allowed or decision.paused:
            return None
        return changes.deferred(decision, request)

    async def check_new_account(self, *, source: str = "local") -> Decision:
        """Whether a new account may be created from ``source`` (an IP address) now."""
        return await self._read(lambda state, now: state.account_decision(self.model, source, now))

    async def reserve_new_account(self, *, source: str = "local") -> Decision:
        """Check and, if a new account fits, spend its tokens at once (atomically).

        What :class:`~acmecerts.AcmeClient` calls before ``newAccount``: replicas sharing
        the store never create more accounts together than the model allows. Give the
        tokens back with :meth:`release` when no account was created (the CA answered
        200 for an existing one) or with :meth:`account_refused` when the request failed.
        A refusal (``allowed`` false) has ``not_before``, ``limit`` and ``scope_key``.
        """
        return await self._write(changes.reserve_account(self.model, source))

    async def account_refused(
        self, decision: Decision, error: BaseException, *, source: str = "local"
    ) -> None:
        """``newAccount`` failed after :meth:`reserve_new_account`: give back, learn.

        The tokens go back when the CA answered with a problem or the request never
        reached it; after a request that may have created the account (a timeout, a
        cancellation) they stay spent. A ``rateLimited`` answer holds back new accounts
        from ``source`` until the CA's ``retry_after`` (one hour if it named none).
        """
        if changes.refused(error):
            await self.release(decision)
        if isinstance(error, RateLimited):
            await self._write(changes.learn_account(self.model, source, error))

    async def budget(self, *, limit: str | None = None) -> list[BudgetLine]:
        """Every bucket not full now (remaining tokens, next slot), learned blocks, pauses.

        Full buckets are not listed: a scope key absent from the list has its whole
        capacity. ``limit`` keeps only that limit's lines.
        """
        lines = await self._read(lambda state, now: state.budget(self.model, now))
        return [line for line in lines if limit is None or line.limit == limit]

    def cached_budget(self, *, limit: str | None = None) -> list[BudgetLine] | None:
        """:meth:`budget` from the state this object last read or wrote, without waiting.

        For a scrape (``acmecerts.metrics``) or anything else that cannot await. An
        in-memory ledger answers exactly. A stored one answers from its last read or
        write of the store: its own spends are in it, other replicas' only after the next
        read (any call of a coroutine method, e.g. :meth:`budget`); ``None`` until it has
        read the store once. Buckets refill by the clock's ``now``, as with
        :meth:`budget`. Safe to call from another thread (it works on a copy).
        """
        if self.storage is not None and not self._loaded:
            return None
        state = changes.snapshot(self._state)
        lines = state.budget(self.model, self._now())
        return [line for line in lines if limit is None or line.limit == limit]

    async def plan(
        self, requests: Sequence[IssuanceRequest], *, account: str
    ) -> list[PlannedIssuance]:
        """When each of ``requests`` would be issued if sent as soon as the limits allow.

        Requests are taken in :func:`~acmecerts.ratelimit.prioritize` order, each one
        spending (in a copy of the ledger; nothing is recorded) at the earliest instant
        it fits, so later ones queue behind earlier ones for the same buckets. The
        result is in that order; ``at`` is ``None`` for a paused request.
        """
        return await self._read(changes.plan(self.model, prioritize(requests), account))

    # -- reservations ------------------------------------------------------------------

    async def reserve(
        self, identifiers: Iterable[Identifier | str], **order: Unpack[OrderKeywords]
    ) -> Decision:
        """Check and, if the order fits, spend its tokens at once (atomically).

        Spends one token of every new-order and certificate limit the order touches
        (after exemptions). Give them back with :meth:`release` if the order is not
        sent or no certificate comes of it.
        """
        return await self._write(changes.reserve(self.model, order_request(identifiers, order)))

    async def release(self, decision: Decision, *, certificate_only: bool = False) -> None:
        """Give back what :meth:`reserve` spent for ``decision``.

        ``certificate_only=True`` gives back only the certificate tokens: the order was
        created (that token stays spent) but no certificate was finalized.
        """
        if not decision.allowed or not decision.charges:
            return
        events = changes.CERTIFICATE if certificate_only else None
        await self._write(
            lambda state, now: (
                None,
                state.release(self.model, decision.charges, now, events),
            )
        )

    # -- records of what happened --------------------------------------------------------

    async def order_created(
        self, identifiers: Iterable[Identifier | str], **order: Unpack[OrderKeywords]
    ) -> None:
        """Record an order created without :meth:`reserve` (e.g. by another tool)."""
        request = order_request(identifiers, order)
        await self._write(changes.record(self.model, request, Event.NEW_ORDER))

    async def certificate_issued(
        self, identifiers: Iterable[Identifier | str], **order: Unpack[OrderKeywords]
    ) -> None:
        """Record a certificate issued without :meth:`reserve` (e.g. by another tool)."""
        request = order_request(identifiers, order)
        await self._write(changes.record(self.model, request, Event.NEW_CERTIFICATE))

    async def authorization_failed(self, identifier: Identifier | str, *, account: str) -> bool:
        """Record a failed authorization; returns whether the identifier is now paused."""
        ident = as_identifiers([identifier])[0]

        def record(state: LedgerState, now: int) -> tuple[bool, bool]:
            return state.authorization_failed(self.model, account, ident, now), True

        return await self._write(record)

    async def authorization_succeeded(self, identifier: Identifier | str, *, account: str) -> None:
        """Record a valid authorization: it ends a run of consecutive failures."""
        ident = as_identifiers([identifier])[0]
        await self._write(
            lambda state, now: (None, state.authorization_succeeded(self.model, account, ident))
        )

    async def account_created(self, *, source: str = "local") -> None:
        """Record a new account created from ``source`` (an IP address)."""
        await self._write(changes.record_account(self.model, source))

    async def unpause(self, identifier: Identifier | str, *, account: str) -> bool:
        """Forget a pause once the CA lifted it; returns whether there was one."""
        ident = as_identifiers([identifier])[0]
        return await self._write(
            lambda state, now: (changed := state.unpause(account, ident), changed)
        )

    async def learn_from(
        self,
        error: AcmeProblem,
        identifiers: Iterable[Identifier | str] = (),
        *,
        source: str = "local",
        **order: Unpack[OrderKeywords],
    ) -> Decision:
        """Make the ledger agree with a ``rateLimited`` answer the CA gave to an order.

        The limit is recognised from the problem's detail (Let's Encrypt names it and
        links its documentation). Its buckets for this order are emptied until the
        CA's ``retry_after`` (from ``Retry-After``, else the "retry after" in the
        detail), so the ledger's view converges to the CA's even when the model is off.
        A limit the model lacks is remembered as a block until then; an answer naming
        no known limit holds back every order of the account until then; a pause
        marks the identifiers paused. Returns the resulting decision for this order.
        """
        idents = as_identifiers(identifiers) if identifiers else ()
        renewal_of = order.get("renewal_of")
        renewal = renewal_of is not None and set(as_identifiers(renewal_of)) == set(idents)
        request = OrderRequest(
            idents,
            changes.order_account(order),
            renewal=renewal,
            replaces=order.get("replaces", False),
            source=source,
        )
        return await self._write(changes.learn_order(self.model, error, request))

    # -- what AcmeClient calls around an issuance ---------------------------------------

    async def preflight(
        self, identifiers: Iterable[Identifier | str], **order: Unpack[OrderKeywords]
    ) -> Decision:
        """:meth:`reserve`, raising instead of returning a refusal (before ``newOrder``).

        Raises:
            RateLimitDeferred: the order does not fit now; ``retry_after`` says when.
            IdentifierPaused: an identifier is paused.
        """
        request = order_request(identifiers, order)
        decision = await self._write(changes.reserve(self.model, request))
        if decision.allowed:
            return decision
        changes.raise_if_paused(decision, request.account)
        raise changes.deferred(decision, request)

    async def order_refused(
        self,
        decision: Decision,
        error: BaseException,
        identifiers: Iterable[Identifier | str],
        **order: Unpack[OrderKeywords],
    ) -> None:
        """``newOrder`` failed after :meth:`preflight`: learn from it, give tokens back.

        Everything goes back when the CA answered with a problem or the request never
        reached it; after a request that may have created an order (a timeout), only
        the certificate tokens do.
        """
        await self.release(decision, certificate_only=not changes.refused(error))
        if isinstance(error, RateLimited):  # after the release: the CA's word is final
            await self.learn_from(error, identifiers, **order)

    async def attempt_ended(
        self,
        identifiers: Iterable[Identifier | str],
        *,
        authorized: bool,
        finalized: bool,
        error: BaseException | None,
        **order: Unpack[OrderKeywords],
    ) -> None:
        """Record how an issuance attempt after a successful :meth:`preflight` ended.

        ``authorized``: every authorization became valid (ends runs of consecutive
        failures). ``finalized``: the CSR was sent, so the certificate counts; if not,
        the certificate tokens go back. An :class:`~acmecerts.AuthorizationFailed`
        error records a failed authorization, a ``rateLimited`` one is learned from.
        """
        request = order_request(identifiers, order)
        failed = changes.failed_identifier(error)
        await self._write(
            changes.attempt_ended(
                self.model, request, authorized=authorized, finalized=finalized, failed=failed
            )
        )
        limited = changes.find(error, RateLimited)
        if limited is not None:
            await self.learn_from(limited, request.identifiers, **order)

    # -- the store -----------------------------------------------------------------------

    def _now(self) -> int:
        return to_us(self.clock.now())

    async def _read(self, fn: Callable[[LedgerState, int], T]) -> T:
        if self.storage is None:
            # Nothing awaits between reading and answering: no lock needed.
            return fn(self._state, self._now())
        async with self._lock:
            state, _ = await self._load()
            return fn(state, self._now())

    async def _write(self, fn: Callable[[LedgerState, int], tuple[T, bool]]) -> T:
        if self.storage is None:
            # The change is made without awaiting, so it is atomic for every task.
            now = self._now()
            result, changed = fn(self._state, now)
            if changed:
                self._writes += 1
                if self._writes >= self._prune_after and now - self._pruned_at >= _PRUNE_EVERY_US:
                    self._state.prune(self.model, now)
                    self._pruned_at, self._writes = now, 0
                    self._prune_after = max(_MIN_PRUNE_WRITES, self._state.size())
            return result
        # Group commit: changes asked for while another one is being stored wait in
        # ``_pending``; the next task to hold the lock applies all of them (in order) and
        # stores the ledger once, so each change is durable before its caller returns,
        # with one compare-and-swap (one fsync) for the group instead of one each.
        mine = _PendingChange(fn)
        self._pending.append(mine)
        try:
            await self._lock.acquire()
        except BaseException:
            if mine in self._pending:
                self._pending.remove(mine)  # not taken yet: a cancelled caller records nothing
            raise  # (taken by a group being stored: recorded, as if cancelled while storing)
        try:
            if not mine.done:
                batch, self._pending = self._pending, []
                try:
                    await self._commit(batch)
                except Exception as exc:
                    # the store failed (maybe after writing): each change of the group
                    # fails with it, as its own write would have; none is applied twice
                    for change in batch:
                        if not change.done:
                            change.error, change.done = exc, True
                except BaseException:
                    # cancelled before the group was written (the write is shielded):
                    # nothing of it is stored, the others ask again themselves
                    self._pending[:0] = [p for p in batch if p is not mine and not p.done]
                    raise
        finally:
            self._lock.release()
        return cast(T, mine.outcome())

    async def _commit(self, batch: list[_PendingChange]) -> None:
        """Apply every change of ``batch`` to the stored state and store it once (CAS)."""
        assert self.storage is not None
        left = list(batch)

        def apply(stored: StoredValue | None) -> bytes | None:
            while True:
                state, now, changed = self._state_of(stored), self._now(), False
                for change in left:
                    try:
                        change.result, changed_here = change.fn(state, now)
                    except Exception as exc:
                        # its partial change is in the cached state: drop it, start
                        # again without it
                        self._stored = UNREAD
                        change.error, change.done = exc, True
                        left.remove(change)
                        break
                    changed |= changed_here
                else:
                    if not changed:
                        return None
                    state.prune(self.model, now)
                    self._stored = UNREAD  # the cached state holds our unsaved changes
                    return state.to_bytes()

        async def pause(conflicts: int) -> None:
            await self.clock.sleep(self._rng.uniform(0, 0.002 * conflicts))

        # With the ledger's value known (this object wrote or read it last), the first
        # try applies the group to the cached state and stores it only if the stored
        # version is still that one (the compare-and-swap checks it): no read first.
        # Another writer in between makes it a conflict, and the next try reads; an
        # answer with no change is read again to check it was not a stale one. The
        # write is shielded: a cancellation arriving while the group is written must
        # not leave it stored but reported unknown (its changes would then be applied
        # again by their callers).
        try:
            stored = await update(
                self.storage,
                self._key(),
                apply,
                tries=_LEDGER_TRIES,
                current=self._stored,
                shield=True,
                on_conflict=pause,
            )
        except UpdateConflict as exc:
            for change in left:
                change.error, change.done = exc, True
            return
        self._stored = stored  # what the cached state now is
        for change in left:
            change.done = True

    def _state_of(self, stored: StoredValue | None) -> LedgerState:
        """The state ``stored`` holds: the cached one if it is that version, else parsed."""
        cached = self._stored
        if stored is None:
            if cached is not None:
                self._state = LedgerState()
        elif cached is UNREAD or cached is None or cached.version != stored.version:
            self._state = LedgerState.from_bytes(stored.data, where=self._key())
        self._stored = stored
        self._loaded = True
        return self._state

    async def _load(self) -> tuple[LedgerState, StoredValue | None]:
        assert self.storage is not None
        stored = await self.storage.load(self._key())
        return self._state_of(stored), stored

    def _key(self) -> str:
        assert self.key is not None
        return self.key


class _PendingChange:
    """One :meth:`RateLimitLedger._write` call waiting to be applied and stored."""

    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[LedgerState, int], tuple[object, bool]]) -> None:
        self.fn = fn
        self.result: object = None
        self.error: Exception | None = None
        #: Applied and stored (or failed): its caller returns ``result`` or raises ``error``.
        self.done = False

    def outcome(self) -> object:
        if self.error is not None:
            raise self.error
        return self.result
