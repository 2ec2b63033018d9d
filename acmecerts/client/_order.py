"""The order resource (RFC 8555 §7.1.3, §7.4) and the rate-limit ledger glue of orders."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from acmecerts._time import Again, Clock
from acmecerts.client._events import (
    AttemptEnded,
    IssuanceEvent,
    OrderCreated,
    OrderRefused,
    OrderRequested,
    ProfileFallback,
)
from acmecerts.client._polling import Polling
from acmecerts.client._signed import SignedRequests
from acmecerts.errors import (
    AcmeCertsError,
    BadServerResponse,
    InvalidInput,
    ProfileRefused,
    RateLimitDeferred,
)
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import PrivateKey
from acmecerts.protocol.resources import Directory, Order, parse_account, parse_order
from acmecerts.transport import Subscriber
from acmecerts.transport._events import EventSubscribers

if TYPE_CHECKING:
    from acmecerts.ratelimit import CaProfiles, Decision, LedgerLike

log = logging.getLogger("acmecerts.client")

#: Called with a new order and its certificate key before anything else is sent for it.
OrderHook = Callable[[Order, PrivateKey], Awaitable[None]]

#: Bounds of the search for an unrecorded order in the account's orders list.
_MAX_ORDER_PAGES = 5
_MAX_ORDERS_LOOKED_AT = 20


class OrderRequests:
    """Orders (RFC 8555 §7.4): create, look up, find an unrecorded one, poll; and the
    rate-limit ledger's accounting of them."""

    __slots__ = ("ca_profiles", "clock", "events", "ledger", "polling", "send_replaces", "signed")

    def __init__(
        self,
        signed: SignedRequests,
        polling: Polling,
        events: EventSubscribers[IssuanceEvent],
        *,
        clock: Clock,
        ledger: LedgerLike | None = None,
        ca_profiles: CaProfiles | None = None,
        send_replaces: bool = True,
    ) -> None:
        self.signed = signed
        self.polling = polling
        #: The client-wide subscribers of issuance events.
        self.events = events
        self.clock = clock
        self.ledger = ledger
        #: The rules of the CA's profiles orders are checked against (``None``: no check).
        self.ca_profiles = ca_profiles
        #: Whether orders send ``replaces`` (``AcmeClient(send_replaces=...)``).
        self.send_replaces = bool(send_replaces)

    def request(
        self,
        identifiers: Iterable[Identifier | str],
        *,
        profile: str | None = None,
        profile_required: bool = True,
        replaces: str | None = None,
        renewal_of: Sequence[Identifier | str] | None = None,
        private_key: PrivateKey | None = None,
    ) -> OrderRequested:
        """What ``newOrder`` is asked for; ``replaces`` dropped unless :attr:`send_replaces`."""
        return OrderRequested(
            identifiers=_as_identifiers(identifiers),
            profile=profile,
            profile_required=bool(profile_required),
            replaces=replaces if self.send_replaces else None,
            renewal_of=_as_identifiers(renewal_of) if renewal_of is not None else None,
            private_key=private_key,
        )

    async def create(
        self, request: OrderRequested, first: Sequence[Subscriber[IssuanceEvent]] = ()
    ) -> Order:
        """Send ``request``'s ``newOrder`` (see :meth:`AcmeClient.new_order`): its events
        to the subscribers (``first`` first), the ledger's reservation, then the order."""
        idents = request.identifiers
        directory = await self.signed.directory()
        request = await self._choose_profile(request, directory, first)
        payload: dict[str, Any] = {"identifiers": [i.to_json() for i in idents]}
        if request.profile is not None:
            payload["profile"] = request.profile
        if request.replaces is not None:
            payload["replaces"] = request.replaces
        await self.events.emit(request, first)
        reservation = await self._ledger_preflight(request)
        try:
            response = await self.signed.post(directory.new_order, payload, idempotent=False)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._ledger_order_refused(reservation, exc, request)
                refused = OrderRefused(identifiers=idents, request=request, error=exc)
                await self.events.emit_quietly(refused, first)
            raise
        order = parse_order(response.json(), url=response.require_location())
        created = OrderCreated(identifiers=idents, order=order, private_key=request.private_key)
        await self.events.emit(created, first)
        return order

    async def _choose_profile(
        self,
        request: OrderRequested,
        directory: Directory,
        first: Sequence[Subscriber[IssuanceEvent]],
    ) -> OrderRequested:
        """The request as it will be sent: its profile offered (or dropped, if only
        preferred), and within the profile's rules at this CA (:attr:`ca_profiles`)."""
        profile = request.profile
        # draft-aaron-acme-profiles: only a profile the directory's meta.profiles lists (a
        # CA without profiles would ignore the field and issue its default silently).
        if profile is not None and profile not in directory.profiles:
            offered = tuple(sorted(directory.profiles))
            listed = ", ".join(offered) or "none, it predates profiles"
            if request.profile_required:
                raise ProfileRefused(
                    f"the CA offers no profile {profile!r} (offered: {listed})", profile=profile
                )
            log.warning(
                "the CA offers no profile %r (offered: %s): ordering %s with its default",
                profile,
                listed,
                ", ".join(i.value for i in request.identifiers),
            )
            fallback = ProfileFallback(
                identifiers=request.identifiers, profile=profile, offered=offered
            )
            await self.events.emit(fallback, first)
            request = dataclasses.replace(request, profile=None)
        if self.ca_profiles is not None:
            rules = self.ca_profiles.get(request.profile, self.clock.now())
            if rules is not None:  # a profile this data does not know: the CA decides
                rules.check(request.identifiers, ca=self.ca_profiles.name)
        return request

    # -- rate-limit ledger (acmecerts.ratelimit): its accounting follows the events ------

    async def _ledger_preflight(self, request: OrderRequested) -> Decision | None:
        if self.ledger is None:
            return None
        return await self.ledger.preflight(
            request.identifiers,
            account=await self.signed.kid(),
            renewal_of=request.renewal_of,
            replaces=bool(request.replaces),
        )

    async def _ledger_order_refused(
        self, reservation: Decision | None, error: BaseException, request: OrderRequested
    ) -> None:
        account = self.signed.identity.url
        if self.ledger is None or reservation is None or account is None:
            return
        await self.ledger.order_refused(
            reservation,
            error,
            request.identifiers,
            account=account,
            renewal_of=request.renewal_of,
            replaces=bool(request.replaces),
        )

    async def attempt_ended(self, ended: AttemptEnded) -> None:
        """Tell the ledger how an issuance attempt ended (a failure of its own is logged)."""
        account = self.signed.identity.url
        if self.ledger is None or account is None:
            return
        status = ended.order.status
        try:
            await self.ledger.attempt_ended(
                ended.identifiers,
                account=account,
                renewal_of=ended.renewal_of,
                replaces=bool(ended.replaces),
                authorized=status in ("ready", "processing", "valid"),
                finalized=status in ("processing", "valid"),
                error=ended.error,
            )
        except AcmeCertsError as exc:
            # bookkeeping must not undo the attempt: raised here (in the attempt's
            # cleanup), it would drop a certificate already downloaded or hide the error
            # the attempt failed with (e.g. a store-backed ledger whose store is down)
            log.warning(
                "the ledger could not record the attempt for %s (%s): %s",
                ", ".join(i.value for i in ended.identifiers),
                "failed" if ended.error is not None else "issued",
                exc,
            )

    async def find_unfinished(self, identifiers: Iterable[Identifier | str]) -> Order | None:
        """An order of this account for exactly ``identifiers`` that is pending or ready.

        For a process that died between sending ``newOrder`` and recording the answer: the
        CA may hold an order nobody knows the URL of. RFC 8555 §7.1.2.1: the account's
        ``orders`` URL lists its orders (pending ones at least), paginated with ``Link:
        rel="next"``. Best effort and bounded (a few pages, at most 20 orders looked at,
        the last listed first): ``None`` when the CA keeps no such list (Let's Encrypt
        does not), nothing matches, or the list cannot be read. Only ``pending`` and
        ``ready`` orders qualify: their CSR, and so the certificate key, is not chosen yet.
        """
        wanted = set(_as_identifiers(identifiers))
        looked_at = 0
        try:
            account_url = await self.signed.kid()
            response = await self.signed.post_as_get(account_url)
            page = parse_account(response.json(), url=account_url).orders
            for _ in range(_MAX_ORDER_PAGES):
                if page is None:
                    break
                response = await self.signed.post_as_get(page)
                for url in reversed(_order_urls(response.json(), url=page)):
                    if looked_at >= _MAX_ORDERS_LOOKED_AT:
                        return None
                    looked_at += 1
                    order = await self.get(url)
                    if (
                        order.status in ("pending", "ready")
                        and set(order.identifiers) == wanted
                        and (order.expires is None or order.expires > self.clock.now())
                    ):
                        log.info("found unrecorded order %s (%s)", url, order.status)
                        return order
                following = response.links("next")
                page = following[0] if following else None
        except RateLimitDeferred:
            raise  # no account and no room for one: the order would be deferred too
        except AcmeCertsError as exc:
            log.info("could not look for an unrecorded order: %s", exc)
        return None

    async def get(self, url: str) -> Order:
        """Fetch an order (POST-as-GET)."""
        return (await self.fetch(url))[0]

    async def fetch(self, url: str) -> tuple[Order, _dt.datetime | None]:
        """:meth:`get`, with the answer's ``Retry-After`` (when to ask again)."""
        response = await self.signed.post_as_get(url)
        return parse_order(response.json(), url=url), response.retry_after

    async def wait(
        self,
        order: Order,
        *,
        until: frozenset[str],
        deadline: _dt.datetime,
        retry_after: _dt.datetime | None = None,
    ) -> Order:
        """Poll ``order`` until its status is in ``until`` (or ``invalid``)."""
        first = True

        async def check() -> Order | Again[Order]:
            nonlocal order, first
            if first:  # the order as given: the first poll waits like the others
                first, pause = False, retry_after
            else:
                order, pause = await self.fetch(order.url)
            return order if order.status in until or order.status == "invalid" else Again(pause)

        return await self.polling.until(check, deadline)


def _order_urls(data: object, *, url: str) -> list[str]:
    """The order URLs of an orders list object (RFC 8555 §7.1.2.1)."""
    orders = data.get("orders") if isinstance(data, dict) else None
    if not isinstance(orders, list) or not all(isinstance(u, str) for u in orders):
        raise BadServerResponse("an orders list without an array of URLs", url=url)
    return list(orders)


def _as_identifiers(values: Iterable[Identifier | str]) -> tuple[Identifier, ...]:
    """Validate strings; keep ready :class:`Identifier` objects as they are."""
    result: dict[Identifier, None] = {}
    for value in values:
        ident = value if isinstance(value, Identifier) else parse_identifiers([value])[0]
        result.setdefault(ident, None)
    if not result:
        raise InvalidInput("an order needs at least one identifier")
    return tuple(result)
