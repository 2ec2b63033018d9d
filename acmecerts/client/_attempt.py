"""One issuance attempt: its inputs checked before anything is sent, and its state.

:func:`checked_inputs` turns the arguments of ``issue()`` into what the attempt needs
(identifiers, solvers, the certificate key and the CSR) or raises
:class:`~acmecerts.errors.InvalidInput`; :class:`Attempt` is what the issuer carries
from the order to the certificate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import NamedTuple

import anyio

from acmecerts._deprecation import _warn_deprecated
from acmecerts.client._events import IssuanceEvent, OrderCreated, OrderRequested
from acmecerts.client._order import OrderHook, _as_identifiers
from acmecerts.errors import AttemptTimeout, InvalidInput, UnsupportedChallenge
from acmecerts.protocol._solver import Solver
from acmecerts.protocol.csr import build_csr, parse_csr
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import KeyType, PrivateKey, generate_private_key
from acmecerts.transport import Subscriber

#: The deprecated hook called with the certificate key before ``newOrder``.
BeforeOrder = Callable[[PrivateKey], Awaitable[None]]


class AttemptInputs(NamedTuple):
    """What ``issue()`` was asked for, checked."""

    identifiers: tuple[Identifier, ...]
    solvers: list[Solver]
    #: The certificate key (``None``: the caller's CSR, the key stays with them).
    key: PrivateKey | None
    csr_der: bytes


def checked_inputs(
    names: Iterable[str | Identifier],
    *,
    solver: Solver | None,
    solvers: Iterable[Solver],
    key_type: KeyType | str,
    private_key: PrivateKey | None,
    csr: bytes | None,
    hooked: bool,
) -> AttemptInputs:
    """The identifiers, solvers, key and CSR of an issuance, or :class:`InvalidInput`
    (:class:`UnsupportedChallenge` for a name no solver answers); ``hooked``: the
    deprecated ``on_order``/``before_order`` hooks were given (they need a key)."""
    request_csr = None
    if csr is not None:
        if private_key is not None:
            raise InvalidInput("give private_key or csr, not both")
        if hooked:
            raise InvalidInput("on_order/before_order take a private key: not with csr")
        request_csr = parse_csr(bytes(csr))
        given = list(names)
        identifiers = request_csr.identifiers
        if given and set(_as_identifiers(given)) != set(identifiers):
            raise InvalidInput(
                f"the names {', '.join(i.value for i in _as_identifiers(given))} differ "
                f"from the CSR's: {', '.join(i.value for i in identifiers)}"
            )
    else:
        identifiers = _as_identifiers(names)
    solver_list = ([solver] if solver is not None else []) + list(solvers)
    if not solver_list:
        raise InvalidInput("issue() needs a solver (e.g. Http01Server)")
    for ident in identifiers:
        if not any(s.supports(ident) for s in solver_list):
            types = ", ".join(s.challenge_type for s in solver_list)
            raise UnsupportedChallenge(
                f"no solver for {ident.value} among {types}"
                + (" (wildcards need dns-01)" if ident.is_wildcard else "")
            )
    if request_csr is not None:
        return AttemptInputs(identifiers, solver_list, None, request_csr.der)
    key = private_key or generate_private_key(key_type)
    return AttemptInputs(identifiers, solver_list, key, build_csr(identifiers, key))


@dataclasses.dataclass(slots=True, kw_only=True)
class Attempt:
    """One call of :meth:`Issuer.issue`: how it gets its order, who hears its events."""

    request: OrderRequested
    resume_order_url: str | None
    recover_order: bool
    #: The subscribers of this issuance only (before the client's).
    subscribers: tuple[Subscriber[IssuanceEvent], ...]
    #: What the attempt fails with when its deadline cuts it short (also the ``error``
    #: of its :class:`AttemptEnded`, not the cancellation that did the cutting).
    timed_out: AttemptTimeout
    #: The attempt's deadline scope (set when it is entered).
    deadline_scope: anyio.CancelScope | None = None

    def cut_by_deadline(self, error: BaseException | None) -> bool:
        """Whether ``error`` is the cancellation of this attempt's own deadline."""
        scope = self.deadline_scope
        return (
            scope is not None
            and scope.cancel_called
            and isinstance(error, anyio.get_cancelled_exc_class())
        )

    @property
    def identifiers(self) -> tuple[Identifier, ...]:
        return self.request.identifiers

    @property
    def key(self) -> PrivateKey | None:
        """The certificate key (``None``: the caller's CSR, the key stays with them)."""
        return self.request.private_key


def subscribers_of(
    on_order: OrderHook | None,
    before_order: BeforeOrder | None,
    events: Subscriber[IssuanceEvent] | None,
) -> tuple[Subscriber[IssuanceEvent], ...]:
    """The subscribers of one issuance: the deprecated ``on_order``/``before_order``
    hooks of ``issue()`` adapted onto the events (with a warning), then ``events``."""
    extra = () if events is None else (events,)
    if on_order is None and before_order is None:
        return extra
    given = " and ".join(
        f"{name}="
        for name, hook in (("on_order", on_order), ("before_order", before_order))
        if hook is not None
    )
    _warn_deprecated(
        f"issue({given}) is deprecated: pass events= a subscriber of OrderCreated "
        "(for on_order) and OrderRequested (for before_order) events instead"
    )

    async def adapter(event: IssuanceEvent) -> None:
        if isinstance(event, OrderRequested) and before_order is not None:
            assert event.private_key is not None
            await before_order(event.private_key)
        elif isinstance(event, OrderCreated) and on_order is not None:
            assert event.private_key is not None
            await on_order(event.order, event.private_key)

    return (adapter, *extra)
