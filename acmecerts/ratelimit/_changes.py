"""The ledger's questions and records as pure changes of a :class:`LedgerState`.

Each function here answers one question of :class:`~acmecerts.ratelimit.RateLimitLedger`
or makes one of its records, on a state and an instant (integer microseconds) it is
given: a *change* returns ``(result, changed)``, ``changed`` saying whether the state
must be stored again. The ledger decides where the state lives (memory or a store) and
when it is read and written; nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NotRequired, Required, TypedDict, TypeVar

from acmecerts._time import retry_after_from_detail, show_instant
from acmecerts.errors import (
    AcmeCertsError,
    AcmeProblem,
    AuthorizationFailed,
    IdentifierPaused,
    InvalidInput,
    RateLimitDeferred,
)
from acmecerts.protocol.identifiers import Identifier
from acmecerts.ratelimit._model import Event, RateLimitModel
from acmecerts.ratelimit._priority import IssuanceRequest, PlannedIssuance
from acmecerts.ratelimit._scopes import as_identifiers
from acmecerts.ratelimit._state import Decision, LedgerState, OrderRequest, from_us, to_us

T = TypeVar("T")
#: A change of the ledger's state at an instant: ``(result, whether it changed)``.
Change = Callable[[LedgerState, int], tuple[T, bool]]

CERTIFICATE = frozenset({Event.NEW_CERTIFICATE})
ORDER = (Event.NEW_ORDER, Event.NEW_CERTIFICATE)
_KEYWORDS = frozenset({"account", "renewal_of", "replaces"})


class OrderKeywords(TypedDict, total=False):
    """The keywords that say whose order it is and what it renews (every order method).

    ``account``: the account URL. ``renewal_of``: the identifiers of the certificate
    being renewed (exactly the order's: exempt from the limits marked
    ``renewal_exempt``). ``replaces``: an ARI renewal (exempt from every limit).
    """

    account: Required[str]
    renewal_of: NotRequired[Iterable[Identifier | str] | None]
    replaces: NotRequired[bool]


def order_account(order: OrderKeywords) -> str:
    """``order``'s account; a keyword missing or unknown is a ``TypeError``, as in a call."""
    unknown = set(order) - _KEYWORDS
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    if "account" not in order:
        raise TypeError("missing required keyword argument: 'account'")
    return order["account"]


def order_request(identifiers: Iterable[Identifier | str], order: OrderKeywords) -> OrderRequest:
    """The order of ``identifiers`` with ``order``'s keywords, checked."""
    account = order_account(order)
    idents = as_identifiers(identifiers)
    if not idents:
        raise InvalidInput("an order needs at least one identifier")
    if not isinstance(account, str) or not account:
        raise InvalidInput(f"account must be a non-empty string (the account URL), got {account!r}")
    renewal_of = order.get("renewal_of")
    renewal = renewal_of is not None and set(as_identifiers(renewal_of)) == set(idents)
    return OrderRequest(idents, account, renewal=renewal, replaces=bool(order.get("replaces")))


def refused(error: BaseException) -> bool:
    """Whether the CA refused (a problem) or never saw the request ``error`` ended."""
    return isinstance(error, AcmeProblem) or (
        isinstance(error, AcmeCertsError) and not error.reached_ca
    )


def _learned_until(error: AcmeProblem, now: int) -> int | None:
    """When the CA said to come back: its ``retry_after``, else the detail's instant."""
    instant = error.retry_after or retry_after_from_detail(error.detail or "", now=from_us(now))
    return None if instant is None else to_us(instant)


def reserve(model: RateLimitModel, request: OrderRequest) -> Change[Decision]:
    """Spend the order's tokens if it fits now; the decision either way."""

    def change(state: LedgerState, now: int) -> tuple[Decision, bool]:
        decision = state.evaluate(model, request, now)
        if decision.allowed:
            state.apply(model, decision.charges, now)
        return decision, decision.allowed and bool(decision.charges)

    return change


def reserve_account(model: RateLimitModel, source: str) -> Change[Decision]:
    """Spend a new account's tokens for ``source`` if one fits now."""

    def change(state: LedgerState, now: int) -> tuple[Decision, bool]:
        decision = state.account_decision(model, source, now)
        if not decision.allowed:
            return decision, False
        charges = state.account_charges(model, source)
        state.apply(model, charges, now)
        return Decision(True, charges=charges), bool(charges)

    return change


def learn_account(model: RateLimitModel, source: str, error: AcmeProblem) -> Change[Decision]:
    """Hold back new accounts from ``source`` as the CA's ``rateLimited`` answer says."""
    return lambda state, now: (
        state.learn_account(model, source, now, _learned_until(error, now)),
        True,
    )


def learn_order(
    model: RateLimitModel, error: AcmeProblem, request: OrderRequest
) -> Change[Decision]:
    """Make the state agree with a ``rateLimited`` answer to ``request``."""
    return lambda state, now: (
        state.learn(model, error, request, now, _learned_until(error, now)),
        True,
    )


def record(model: RateLimitModel, request: OrderRequest, event: Event) -> Change[None]:
    """Spend what one ``event`` (an order, a certificate) of ``request`` costs."""

    def change(state: LedgerState, now: int) -> tuple[None, bool]:
        charges = state.order_charges(model, request, (event,))
        for limit, key in charges:
            state.spend(limit, key, now)
        return None, bool(charges)

    return change


def record_account(model: RateLimitModel, source: str) -> Change[None]:
    """Spend what one new account from ``source`` costs."""

    def change(state: LedgerState, now: int) -> tuple[None, bool]:
        charges = state.account_charges(model, source)
        for name, key in charges:
            state.spend(model[name], key, now)
        return None, bool(charges)

    return change


def attempt_ended(
    model: RateLimitModel,
    request: OrderRequest,
    *,
    authorized: bool,
    finalized: bool,
    failed: Identifier | None,
) -> Change[None]:
    """Record an attempt's end: valid authorizations, a failed one, certificate tokens back."""
    account = request.account

    def change(state: LedgerState, now: int) -> tuple[None, bool]:
        changed = False
        if authorized:
            for ident in request.identifiers:
                changed |= state.authorization_succeeded(model, account, ident)
        if failed is not None:
            state.authorization_failed(model, account, failed, now)
            changed = True
        if not finalized:
            for limit, key in state.order_charges(model, request, CERTIFICATE):
                if key in state.buckets.get(limit.name, {}):
                    state.refund(limit, key, now)
                    changed = True
        return None, changed

    return change


def plan(
    model: RateLimitModel, ordered: Sequence[IssuanceRequest], account: str
) -> Callable[[LedgerState, int], list[PlannedIssuance]]:
    """When each of ``ordered`` would be issued, each spending (in a copy) when it fits."""

    def simulate(state: LedgerState, now: int) -> list[PlannedIssuance]:
        scratch = state.copy()
        planned: list[PlannedIssuance] = []
        for item in ordered:
            request = OrderRequest(
                item.identifiers, account, renewal=item.is_exact_renewal, replaces=item.replaces
            )
            decision = scratch.evaluate(model, request, now)
            if decision.paused:
                planned.append(PlannedIssuance(item, None, decision))
                continue
            at = now
            if not decision.allowed and decision.not_before is not None:
                at = to_us(decision.not_before)
            for limit, key in scratch.order_charges(model, request, ORDER):
                scratch.spend(limit, key, at)
            planned.append(PlannedIssuance(item, from_us(at), decision))
        return planned

    return simulate


def snapshot(state: LedgerState) -> LedgerState:
    """A copy of ``state`` that is safe to take while another thread changes it.

    Copying a dict is one step under the GIL (and a per-object lock without it), so the
    outer dicts are copied first and only those copies are iterated.
    """
    copy = LedgerState()
    copy.buckets = {name: dict(bucket) for name, bucket in dict(state.buckets).items()}
    copy.blocks = {name: dict(bucket) for name, bucket in dict(state.blocks).items()}
    copy.paused = dict(state.paused)
    return copy


E = TypeVar("E", bound=BaseException)


def find(error: BaseException | None, cls: type[E]) -> E | None:
    """``error`` if it is a ``cls``, else the first ``cls`` inside an exception group."""
    if isinstance(error, cls):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = find(inner, cls)
            if found is not None:
                return found
    return None


def failed_identifier(error: BaseException | None) -> Identifier | None:
    """The identifier whose authorization failed, if ``error`` says one did."""
    denied = find(error, AuthorizationFailed)
    return as_identifiers([denied.identifier])[0] if denied is not None else None


def raise_if_paused(decision: Decision, account: str) -> None:
    """Raise :class:`IdentifierPaused` for a decision that names paused identifiers."""
    if decision.paused:
        raise IdentifierPaused(
            f"issuance for {', '.join(decision.paused)} is paused by the CA after too many "
            "consecutive failed validations; fix validation, have the pause lifted at the "
            "CA, then call ledger.unpause()",
            identifiers=decision.paused,
            account=account,
        )


def deferred(decision: Decision, request: OrderRequest) -> RateLimitDeferred:
    """The error for an order the ledger refused (nothing was sent)."""
    idents = request.identifiers
    names = ", ".join(i.value for i in idents)
    when = show_instant(decision.not_before) if decision.not_before else "later"
    return RateLimitDeferred(
        f"order for {names} deferred to {when}: it would exceed {decision.limit} "
        f"for {decision.scope_key} (nothing was sent)",
        retry_after=decision.not_before,
        limit=decision.limit,
        scope_key=decision.scope_key,
        identifiers=[i.value for i in idents],
    )
