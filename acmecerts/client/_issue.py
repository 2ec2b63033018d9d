"""The issuer: one certificate, new order through download.

:class:`Issuer` drives :class:`~acmecerts.protocol._flow.IssuanceFlow` (which decides
every step and does no I/O) over the resource objects it is given: it carries out each
action the flow names and reports the answer back.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import anyio
import httpx

from acmecerts._issued import IssuedCertificate
from acmecerts._time import cancel_at, duration_seconds
from acmecerts.client._attempt import Attempt, BeforeOrder, checked_inputs, subscribers_of
from acmecerts.client._authorization import AuthorizationRequests
from acmecerts.client._certificate import CertificateRequests
from acmecerts.client._events import (
    AttemptEnded,
    CertificateDownloaded,
    ChallengeAnswered,
    ChallengePresented,
    ChallengeRetried,
    IssuanceEvent,
    OrderAuthorized,
    OrderCreated,
    OrderFinalized,
    OrderResumed,
)
from acmecerts.client._order import OrderHook, OrderRequests
from acmecerts.client._polling import Polling
from acmecerts.client._signed import AccountIdentity
from acmecerts.errors import (
    AcmeCertsError,
    AcmeProblem,
    AttemptTimeout,
    AuthorizationFailed,
    ErrorKind,
    OrderNotReady,
)
from acmecerts.protocol._flow import (
    Answer,
    Authorize,
    CleanUp,
    Diagnose,
    Download,
    DownloadAlternates,
    Fail,
    Finalize,
    Finish,
    IssuanceFlow,
    Poll,
    Present,
    answer_refusal_settled,
    finalize_refusal_settled,
    needs_deactivation,
    order_resumable,
)
from acmecerts.protocol._solver import Solver
from acmecerts.protocol.certificate import (
    CertificateChain,
    certificate_info,
    check_certificate_matches,
)
from acmecerts.protocol.csr import parse_csr
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import KeyType, PrivateKey, private_key_pem
from acmecerts.protocol.resources import Challenge, Order
from acmecerts.transport import Subscriber
from acmecerts.transport._events import EventSubscribers

if TYPE_CHECKING:
    from acmecerts._time import Clock

log = logging.getLogger("acmecerts.client")

_CLEANUP_SECONDS = 15.0
#: Order states after every authorization is valid (RFC 8555 §7.1.6).
_AUTHORIZED = frozenset({"ready", "processing", "valid"})


class Issuer:
    """Issues certificates: :meth:`issue` runs the flow over the resource objects."""

    __slots__ = (
        "attempt_timeout",
        "authorizations",
        "certificates",
        "clock",
        "events",
        "identity",
        "orders",
        "polling",
    )

    def __init__(
        self,
        identity: AccountIdentity,
        orders: OrderRequests,
        authorizations: AuthorizationRequests,
        certificates: CertificateRequests,
        *,
        polling: Polling,
        events: EventSubscribers[IssuanceEvent],
        clock: Clock,
        attempt_timeout: float,
    ) -> None:
        self.identity = identity
        self.orders = orders
        self.authorizations = authorizations
        self.certificates = certificates
        self.polling = polling
        #: The client-wide subscribers of issuance events.
        self.events = events
        self.clock = clock
        #: The deadline of one attempt, in seconds (``AcmeClient.attempt_timeout``).
        self.attempt_timeout = attempt_timeout

    async def issue(
        self,
        names: Iterable[str | Identifier],
        *,
        solver: Solver | None = None,
        solvers: Iterable[Solver] = (),
        key_type: KeyType | str = KeyType.EC256,
        private_key: PrivateKey | None = None,
        csr: bytes | None = None,
        profile: str | None = None,
        profile_required: bool = True,
        replaces: str | None = None,
        preferred_chain: str | None = None,
        attempt_timeout: float | _dt.timedelta | None = None,
        renewal_of: Sequence[Identifier | str] | None = None,
        resume_order_url: str | None = None,
        on_order: OrderHook | None = None,
        before_order: BeforeOrder | None = None,
        recover_order: bool = False,
        events: Subscriber[IssuanceEvent] | None = None,
    ) -> IssuedCertificate:
        """Issue one certificate (see :meth:`AcmeClient.issue`, which documents the
        arguments); bad input raises :class:`InvalidInput` before any request is sent."""
        inputs = checked_inputs(
            names,
            solver=solver,
            solvers=solvers,
            key_type=key_type,
            private_key=private_key,
            csr=csr,
            hooked=on_order is not None or before_order is not None,
        )
        identifiers, key = inputs.identifiers, inputs.key
        timeout = (
            duration_seconds(attempt_timeout, "attempt_timeout", positive=True)
            if attempt_timeout is not None
            else self.attempt_timeout
        )
        deadline = self.clock.now() + _dt.timedelta(seconds=timeout)
        flow = IssuanceFlow(
            identifiers,
            inputs.solvers,
            thumbprint=self.identity.key.thumbprint,
            deadline=deadline,
            poll=self.polling.policy,
            preferred_chain=preferred_chain,
        )
        attempt = Attempt(
            request=self.orders.request(
                identifiers,
                profile=profile,
                profile_required=profile_required,
                replaces=replaces,
                renewal_of=renewal_of,
                private_key=key,
            ),
            resume_order_url=resume_order_url,
            recover_order=recover_order,
            subscribers=subscribers_of(on_order, before_order, events),
            timed_out=AttemptTimeout(
                f"issuance for {', '.join(i.value for i in identifiers)} did not finish "
                f"within {timeout:g} s"
            ),
        )
        # One deadline on one clock: the flow compares it with ``self.clock.now()`` at
        # every step, and the same instant on the same clock cancels whatever hangs in
        # between (a solver's present(), a request).
        with cancel_at(self.clock, deadline) as attempt.deadline_scope:
            order = await self._order_for(attempt)
            flow.account_url = self.identity.url  # known once an order was sent or found
            return await self._issue_attempt(flow, order, inputs.csr_der, attempt)
        # only the deadline's own cancel scope gets here (a solver's TimeoutError does not)
        raise attempt.timed_out

    async def _order_for(self, attempt: Attempt) -> Order:
        """The order to continue (resumed, or recovered) or a new one, with its events."""
        identifiers = attempt.identifiers
        order = None
        if attempt.resume_order_url is not None:
            order = await self._resumable_order(attempt.resume_order_url, identifiers)
            if order is not None:
                await self._emit(attempt, OrderResumed(identifiers=identifiers, order=order))
        if order is None and attempt.recover_order:
            order = await self.orders.find_unfinished(identifiers)
            if order is not None:
                found = OrderCreated(
                    identifiers=identifiers, order=order, private_key=attempt.key, found=True
                )
                await self._emit(attempt, found)
        if order is None:
            order = await self.orders.create(attempt.request, attempt.subscribers)
        log.debug("order %s for %s is %s", order.url, identifiers, order.status)
        return order

    async def _emit(self, attempt: Attempt, event: IssuanceEvent) -> None:
        await self.events.emit(event, attempt.subscribers)

    async def _issue_attempt(
        self, flow: IssuanceFlow, order: Order, csr_der: bytes, attempt: Attempt
    ) -> IssuedCertificate:
        """Drive ``flow`` from ``order`` to the certificate; clean up however it ends."""
        flow.order_received(order)
        outcome: BaseException | None = None
        try:
            finish = await self._drive(flow, csr_der, attempt)
            issued = self._issued(finish, attempt, csr_der, flow.identifiers)
            downloaded = CertificateDownloaded(
                identifiers=flow.identifiers,
                order=finish.order,
                chain=finish.chain,
                alternates=finish.alternates,
            )
            await self._emit(attempt, downloaded)
            return issued
        except BaseException as exc:
            outcome = exc
            if attempt.cut_by_deadline(exc):
                # names the CA's reason when a challenge it kept failing ran out the clock
                outcome = attempt.timed_out = flow.timeout_error(attempt.timed_out)
            raise
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS):
                await self._cleanup(flow.cleanup())
                request = attempt.request
                ended = AttemptEnded(
                    identifiers=flow.identifiers,
                    order=flow.order or order,
                    replaces=request.replaces,
                    renewal_of=request.renewal_of,
                    error=outcome,
                )
                await self.orders.attempt_ended(ended)
                await self.events.emit_quietly(ended, attempt.subscribers)

    async def _drive(self, flow: IssuanceFlow, csr_der: bytes, attempt: Attempt) -> Finish:
        """Do what ``flow`` says until it says :class:`Finish` (or fails: raised)."""
        authorized = False
        while True:
            action = flow.next_action(self.clock.now())
            order = flow.order
            if (
                not authorized
                and order is not None
                and (order.status in _AUTHORIZED or isinstance(action, Finalize))
            ):
                authorized = True
                await self._emit(
                    attempt, OrderAuthorized(identifiers=attempt.identifiers, order=order)
                )
            if isinstance(action, Poll):
                log.info("%s", action)  # -v: the wait and its reason
                await self.clock.sleep(action.after)
                polled, retry_after = await self.orders.fetch(action.url)
                flow.order_received(polled, retry_after=retry_after)
            elif isinstance(action, Authorize):
                await self._authorize(flow, action.urls, attempt)
                flow.authorized()
            elif isinstance(action, Finalize):
                finalized, retry_after = await self._finalize_once(action.order, csr_der)
                flow.order_received(finalized, retry_after=retry_after)
                finished = OrderFinalized(identifiers=attempt.identifiers, order=finalized)
                await self._emit(attempt, finished)
            elif isinstance(action, Download):
                chain, alternate_urls = await self.certificates.download(action.url)
                flow.chain_received(chain, alternate_urls)
            elif isinstance(action, DownloadAlternates):
                flow.alternates_received(await self._alternate_chains(action.urls))
            elif isinstance(action, Diagnose):
                for url in action.urls:
                    try:
                        authz = await self.authorizations.get(url)
                    except AcmeCertsError:
                        continue
                    if flow.diagnose(authz):
                        break
                flow.diagnosed()
            elif isinstance(action, Fail):
                raise action.error
            else:
                return action

    async def _authorize(self, flow: IssuanceFlow, urls: tuple[str, ...], attempt: Attempt) -> None:
        """Run each authorization's machine, all at once; the first failure cancels all."""
        identifiers = attempt.identifiers

        async def run(url: str) -> None:
            step = flow.authorization_start(url)
            while step is not None:
                if isinstance(step, Poll):
                    if step.after > 0:
                        log.info("%s", step)
                        await self.clock.sleep(step.after)
                    authz, retry_after = await self.authorizations.fetch(url)
                    step = flow.authorization_received(
                        authz, retry_after=retry_after, now=self.clock.now()
                    )
                elif isinstance(step, Present):
                    await step.solver.present(step.task)
                    presented = ChallengePresented(
                        identifiers=identifiers, authorization_url=url, task=step.task
                    )
                    await self._emit(attempt, presented)
                    step = flow.presented(url)
                elif isinstance(step, Answer):
                    if step.attempt > 1:
                        await self._answer_again(step, attempt)
                    answered = await self._answer_challenge_once(step.challenge, url)
                    told = ChallengeAnswered(
                        identifiers=identifiers, authorization_url=url, challenge=answered
                    )
                    await self._emit(attempt, told)
                    step = flow.challenge_answered(url, answered)
                else:
                    raise step.error

        try:
            async with anyio.create_task_group() as tg:
                for url in urls:
                    tg.start_soon(run, url)
        except BaseExceptionGroup as group:
            # one authorization's failure cancels the others; report the root cause
            raise _first_error(group) from None

    async def _resumable_order(self, url: str, identifiers: tuple[Identifier, ...]) -> Order | None:
        """The order at ``url`` if it can still lead to a certificate for ``identifiers``."""
        try:
            order = await self.orders.get(url)
        except AcmeCertsError as exc:
            if exc.kind is not ErrorKind.PERMANENT:
                raise
            log.info("order %s cannot be resumed (%s); ordering anew", url, exc)
            return None
        why = order_resumable(order, identifiers, self.clock.now())
        if why is not None:
            log.info("order %s cannot be resumed (%s); ordering anew", url, why)
            return None
        log.info("resuming order %s (%s)", url, order.status)
        return order

    async def _answer_again(self, step: Answer, attempt: Attempt) -> None:
        """Say why a challenge is answered again (the CA's reason), then wait as asked."""
        problem = step.challenge.error
        log.warning(
            "the CA could not validate %s (%s); answering the challenge again (%d of %d)",
            ", ".join(i.value for i in attempt.identifiers),
            problem,
            step.attempt,
            self.polling.policy.challenge_answers,
        )
        retried = ChallengeRetried(
            identifiers=attempt.identifiers,
            authorization_url=step.authorization_url,
            challenge=step.challenge,
            attempt=step.attempt,
        )
        await self._emit(attempt, retried)
        if step.after > 0:
            await self.clock.sleep(step.after)

    async def _finalize_once(
        self, order: Order, csr_der: bytes
    ) -> tuple[Order, _dt.datetime | None]:
        """Finalize ``order`` (with the answer's ``Retry-After``); a refusal because it is
        already finalized is no failure.

        The transport replays a finalize whose answer was lost; the first copy may have
        got through, and the CA then refuses the replay (``orderNotReady``: the order is
        ``processing`` or ``valid`` already). The order's state decides.
        """
        try:
            return await self.certificates.finalize(order, csr_der)
        except OrderNotReady as exc:
            try:
                current = await self.orders.get(order.url)
            except AcmeCertsError:
                raise exc from None
            if current.status == "ready":
                # finalized on the authorizations' word before the order said ready
                return await self.certificates.finalize(current, csr_der)
            if not finalize_refusal_settled(current):
                raise
            log.info("order %s was finalized already (%s)", order.url, current.status)
            return current, None

    async def _answer_challenge_once(self, challenge: Challenge, authz_url: str) -> Challenge:
        """Answer ``challenge``; a refusal because it was answered already is no failure.

        The transport replays an answer whose response was lost; if the first copy got
        through, the CA refuses the replay (the challenge is no longer ``pending``). The
        challenge's state decides: ``processing``/``valid`` (or ``invalid``, reported by
        the caller) is returned, a challenge still ``pending`` re-raises the refusal.
        """
        try:
            return await self.authorizations.answer(challenge)
        except AcmeProblem as exc:
            if exc.kind is not ErrorKind.PERMANENT:
                raise
            try:
                authz = await self.authorizations.get(authz_url)
            except AcmeCertsError:
                raise exc from None
            current = answer_refusal_settled(challenge, authz)
            if current is None:
                raise
            log.info("challenge %s was answered already (%s)", challenge.url, current.status)
            return current

    async def _alternate_chains(self, urls: tuple[str, ...]) -> list[CertificateChain]:
        chains: list[CertificateChain] = []
        for url in urls:
            try:
                chains.append((await self.certificates.download(url))[0])
            except AcmeCertsError as exc:  # the certificate is issued: never lose it
                log.warning("could not download alternate chain %s: %s", url, exc)
        return chains

    def _issued(
        self,
        finish: Finish,
        attempt: Attempt,
        csr_der: bytes,
        identifiers: tuple[Identifier, ...],
    ) -> IssuedCertificate:
        order, chain = finish.order, finish.chain
        assert order.certificate is not None
        key = attempt.key
        expected = key if key is not None else parse_csr(csr_der).public_key
        check_certificate_matches(chain, key=expected, identifiers=identifiers)
        return IssuedCertificate(
            identifiers=identifiers,
            chain=chain,
            private_key_pem=private_key_pem(key).decode("ascii") if key is not None else None,
            info=certificate_info(chain.leaf),
            order_url=order.url,
            certificate_url=order.certificate,
            alternate_chains=finish.alternates,
        )

    async def _cleanup(self, cleanup: CleanUp) -> None:
        for solver, task in cleanup.tasks:
            try:
                await solver.cleanup(task)
            except Exception:  # a broken solver must not hide the attempt's outcome
                log.exception("cleanup of %s for %s failed", task.type, task.identifier)
        for url in cleanup.deactivate:
            try:
                authz = await self.authorizations.get(url)
                if needs_deactivation(authz):
                    await self.authorizations.deactivate(url)
                    log.info("deactivated pending authorization %s", url)
            except (AcmeCertsError, httpx.HTTPError) as exc:
                log.warning("could not deactivate authorization %s: %s", url, exc)


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The most telling error in a task group's exception group.

    An acmecerts error beats cancellation noise; an authorization failure beats the
    rest (it explains why the order cannot finish).
    """
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    for wanted in (AuthorizationFailed, AcmeCertsError, Exception):
        for leaf in leaves:
            if isinstance(leaf, wanted):
                return leaf
    return leaves[0] if leaves else group
