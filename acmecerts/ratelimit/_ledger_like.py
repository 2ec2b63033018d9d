"""``LedgerLike``: what :class:`~acmecerts.AcmeClient` asks of a rate-limit ledger.

The client accounts for its ``newAccount`` and ``newOrder`` requests in a ledger given as
``AcmeClient(ledger=...)``. It needs only the methods below, so it is typed against this
protocol, which lives in the policy layer beside the values it speaks of; the ledger the
library ships, :class:`~acmecerts.ratelimit.RateLimitLedger`, writes itself to storage and
lives beside the manager, a layer the client does not import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol, Unpack

if TYPE_CHECKING:
    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.ratelimit._changes import OrderKeywords
    from acmecerts.ratelimit._model import RateLimitModel
    from acmecerts.ratelimit._state import Decision

__all__ = ["LedgerLike"]


class LedgerLike(Protocol):
    """A rate-limit ledger, as :class:`~acmecerts.AcmeClient` uses it.

    :class:`~acmecerts.ratelimit.RateLimitLedger` is one; another (a ledger kept in a
    database, a test double) is accepted if it keeps this contract:

    * Every method MUST be safe to call concurrently from one event loop (the client's
      requests run in parallel) and SHOULD answer quickly: it runs before each
      ``newAccount``/``newOrder`` request and in the attempt's cleanup.
    * A reservation (the :class:`~acmecerts.ratelimit.Decision` that
      :meth:`reserve_new_account` or :meth:`preflight` returns) is handed back to
      exactly one of :meth:`release`, :meth:`account_refused` or :meth:`order_refused`
      when nothing was created; the ledger MUST accept each such return once.
    * :meth:`account_refused`, :meth:`release` and :meth:`attempt_ended` are called in
      cleanup (shielded from cancellation where the client must finish them); they
      SHOULD NOT raise for the CA's errors they are given. An
      :class:`~acmecerts.errors.AcmeCertsError` from :meth:`attempt_ended` is logged and
      does not undo the attempt.
    """

    @property
    def model(self) -> RateLimitModel:
        """The CA's limits; ``request_rates="auto"`` takes the request rates from it."""
        ...

    async def reserve_new_account(self, *, source: str = "local") -> Decision:
        """Before ``newAccount``: spend a new account's tokens if it fits, atomically.

        MUST return a refusal (``allowed`` false, with ``not_before``) rather than raise
        when there is no room; the client then looks for the key's existing account.
        """
        ...

    async def account_refused(
        self, decision: Decision, error: BaseException, *, source: str = "local"
    ) -> None:
        """``newAccount`` failed with ``error`` after :meth:`reserve_new_account`."""
        ...

    async def release(self, decision: Decision, *, certificate_only: bool = False) -> None:
        """Give back what ``decision`` reserved (``newAccount`` found an existing account)."""
        ...

    async def preflight(
        self, identifiers: Iterable[Identifier | str], **order: Unpack[OrderKeywords]
    ) -> Decision:
        """Before ``newOrder``: reserve the order's tokens, or raise.

        MUST raise :class:`~acmecerts.errors.RateLimitDeferred` (or
        :class:`~acmecerts.errors.IdentifierPaused`) when the order must not be sent now.
        """
        ...

    async def order_refused(
        self,
        decision: Decision,
        error: BaseException,
        identifiers: Iterable[Identifier | str],
        **order: Unpack[OrderKeywords],
    ) -> None:
        """``newOrder`` failed with ``error`` after :meth:`preflight`."""
        ...

    async def attempt_ended(
        self,
        identifiers: Iterable[Identifier | str],
        *,
        authorized: bool,
        finalized: bool,
        error: BaseException | None,
        **order: Unpack[OrderKeywords],
    ) -> None:
        """An issuance attempt after a successful :meth:`preflight` ended.

        ``authorized``: every authorization became valid; ``finalized``: the CSR was sent
        (the certificate counts); ``error``: what the attempt failed with, if it did.
        """
        ...
