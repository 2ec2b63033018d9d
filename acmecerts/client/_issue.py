"""The issuance driver: one certificate, new order through download."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

import anyio
import httpx

from acmecerts._deprecation import _warn_deprecated
from acmecerts._issued import IssuedCertificate
from acmecerts._time import cancel_at, duration_seconds
from acmecerts.client._authorization import _AuthorizationRequests
from acmecerts.client._certificate import _CertificateRequests
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
    OrderRequested,
    OrderResumed,
)
from acmecerts.client._order import OrderHook, _as_identifiers, _OrderRequests
from acmecerts.errors import (
    AcmeCertsError,
    AcmeProblem,
    AttemptTimeout,
    AuthorizationFailed,
    ErrorKind,
    InvalidInput,
    OrderNotReady,
    UnsupportedChallenge,
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
from acmecerts.protocol.csr import build_csr, parse_csr
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import KeyType, PrivateKey, generate_private_key, private_key_pem
from acmecerts.protocol.resources import Challenge, Order, parse_order
from acmecerts.transport import Subscriber

log = logging.getLogger("acmecerts.client")

_CLEANUP_SECONDS = 15.0
#: Order states after every authorization is valid (RFC 8555 §7.1.6).
_AUTHORIZED = frozenset({"ready", "processing", "valid"})


@dataclasses.dataclass(slots=True, kw_only=True)
class _Attempt:
    """One call of :meth:`_Issuance.issue`: how it gets its order, who hears its events."""

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


class _Issuance(_OrderRequests, _AuthorizationRequests, _CertificateRequests):
    """The issuance driver: :meth:`issue` runs the flow over the resource requests."""

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
        before_order: Callable[[PrivateKey], Awaitable[None]] | None = None,
        recover_order: bool = False,
        events: Subscriber[IssuanceEvent] | None = None,
    ) -> IssuedCertificate:
        """Issue one certificate for ``names``: order, validate, finalize, download.

        Every authorization of the order is solved concurrently. The attempt runs under
        ``attempt_timeout`` (default: the client's, 30 minutes); however it ends,
        challenge responses are cleaned up and authorizations still pending are
        deactivated. Bad input raises :class:`InvalidInput` before any request is sent.

        Args:
            names: DNS names (``*.`` wildcards allowed with dns-01) and IP addresses.
            solver: The solver to use; ``solvers`` gives several (one per challenge type,
                tried in order of preference).
            key_type: Certificate key type when ``private_key`` is not given.
            private_key: Reuse this key for the certificate.
            csr: The caller's own certificate signing request, PEM or DER (not with
                ``private_key``): finalize sends it as it is, so the private key never
                reaches acmecerts, and the :class:`IssuedCertificate` has none
                (``private_key_pem`` is ``None``). Its names (subjectAltName entries and
                common name) are the certificate's: ``names`` must be the same set, or
                empty. A CSR whose signature does not verify, or that names nothing,
                raises :class:`InvalidInput` before any request is sent.
            profile: A certificate profile the CA offers (``meta.profiles``), e.g.
                ``"tlsserver"``; ``None``: the CA's default.
            profile_required: With ``True`` (the default), a ``profile`` the CA does not
                offer raises :class:`~acmecerts.ProfileRefused` before anything is
                ordered; with ``False`` it is only preferred: the CA's default is ordered
                instead, with a warning and a :class:`ProfileFallback` event. Either way
                an order its profile's rules at the CA forbid (:attr:`ca_profiles`: names
                per order, IP identifiers) is refused before ``newOrder``.
            replaces: ARI certID of the certificate this one renews (RFC 9773 §5).
            renewal_of: The identifiers of the certificate this one renews (for the
                rate-limit ledger's renewal exemptions; see :meth:`new_order`).
            resume_order_url: An order a previous attempt created (pass the same
                ``private_key``): it is continued where it stands (pending, ready,
                processing or valid) instead of sending a new ``newOrder``; if the CA no
                longer has it usable, a new order is created.
            events: A subscriber of this issuance's events (:mod:`acmecerts.client`),
                called before the client's own (:meth:`subscribe`). A coroutine is
                awaited before the client goes on: persist the order journal here, an
                intent at :class:`OrderRequested` (so that a process that dies before
                the order is recorded knows to pass ``recover_order`` when it restarts)
                and the order at :class:`OrderCreated`, so that it can be resumed.
            on_order: Deprecated (emits a ``DeprecationWarning``): ``events``
                (:class:`OrderCreated`). Awaited with the order and the certificate key
                right after a new order is created (or an unrecorded one found), before
                anything else is sent.
            before_order: Deprecated (emits a ``DeprecationWarning``): ``events``
                (:class:`OrderRequested`). Awaited with the certificate key right
                before ``newOrder`` is sent.
            recover_order: A previous attempt may have created an order it never
                recorded (it died between ``newOrder`` and :class:`OrderCreated`): before
                ordering, look for it with :meth:`find_unfinished_order`.
            preferred_chain: The common name of the root (or else of an intermediate)
                the chain should lead to; among the chains the CA offers (``Link:
                rel="alternate"``) the one whose root issuer has this name wins, then one
                with an intermediate so named; the CA's default chain when none matches.
        """
        request_csr = None
        if csr is not None:
            if private_key is not None:
                raise InvalidInput("give private_key or csr, not both")
            if on_order is not None or before_order is not None:
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
        key: PrivateKey | None
        if request_csr is not None:
            key, csr_der = None, request_csr.der
        else:
            key = private_key or generate_private_key(key_type)
            csr_der = build_csr(identifiers, key)
        timeout = (
            duration_seconds(attempt_timeout, "attempt_timeout", positive=True)
            if attempt_timeout is not None
            else self.attempt_timeout
        )
        deadline = self.clock.now() + _dt.timedelta(seconds=timeout)
        flow = IssuanceFlow(
            identifiers,
            solver_list,
            thumbprint=self.account_key.thumbprint,
            deadline=deadline,
            poll=self.poll,
            preferred_chain=preferred_chain,
        )
        subscribers = _order_hooks(on_order, before_order)
        if events is not None:
            subscribers.append(events)
        attempt = _Attempt(
            request=OrderRequested(
                identifiers=identifiers,
                profile=profile,
                profile_required=bool(profile_required),
                replaces=replaces if self.send_replaces else None,
                renewal_of=_as_identifiers(renewal_of) if renewal_of is not None else None,
                private_key=key,
            ),
            resume_order_url=resume_order_url,
            recover_order=recover_order,
            subscribers=tuple(subscribers),
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
            flow.account_url = self.account_url  # known once an order was sent or found
            return await self._issue_attempt(flow, order, csr_der, attempt)
        # only the deadline's own cancel scope gets here (a solver's TimeoutError does not)
        raise attempt.timed_out

    async def _order_for(self, attempt: _Attempt) -> Order:
        """The order to continue (resumed, or recovered) or a new one, with its events."""
        identifiers = attempt.identifiers
        order = None
        if attempt.resume_order_url is not None:
            order = await self._resumable_order(attempt.resume_order_url, identifiers)
            if order is not None:
                await self._emit(attempt, OrderResumed(identifiers=identifiers, order=order))
        if order is None and attempt.recover_order:
            order = await self.find_unfinished_order(identifiers)
            if order is not None:
                found = OrderCreated(
                    identifiers=identifiers, order=order, private_key=attempt.key, found=True
                )
                await self._emit(attempt, found)
        if order is None:
            order = await self._new_order(attempt.request, attempt.subscribers)
        log.debug("order %s for %s is %s", order.url, identifiers, order.status)
        return order

    async def _emit(self, attempt: _Attempt, event: IssuanceEvent) -> None:
        await self._issuance_events.emit(event, attempt.subscribers)

    async def _issue_attempt(
        self, flow: IssuanceFlow, order: Order, csr_der: bytes, attempt: _Attempt
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
                await self._ledger_attempt_ended(ended)
                await self._issuance_events.emit_quietly(ended, attempt.subscribers)

    async def _drive(self, flow: IssuanceFlow, csr_der: bytes, attempt: _Attempt) -> Finish:
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
                response = await self._post(action.url, None)
                polled = parse_order(response.json(), url=action.url)
                flow.order_received(polled, retry_after=response.retry_after)
            elif isinstance(action, Authorize):
                await self._authorize(flow, action.urls, attempt)
                flow.authorized()
            elif isinstance(action, Finalize):
                finalized, retry_after = await self._finalize_once(action.order, csr_der)
                flow.order_received(finalized, retry_after=retry_after)
                finished = OrderFinalized(identifiers=attempt.identifiers, order=finalized)
                await self._emit(attempt, finished)
            elif isinstance(action, Download):
                chain, alternate_urls = await self.download_certificate(action.url)
                flow.chain_received(chain, alternate_urls)
            elif isinstance(action, DownloadAlternates):
                flow.alternates_received(await self._alternate_chains(action.urls))
            elif isinstance(action, Diagnose):
                for url in action.urls:
                    try:
                        authz = await self.get_authorization(url)
                    except AcmeCertsError:
                        continue
                    if flow.diagnose(authz):
                        break
                flow.diagnosed()
            elif isinstance(action, Fail):
                raise action.error
            else:
                return action

    async def _authorize(
        self, flow: IssuanceFlow, urls: tuple[str, ...], attempt: _Attempt
    ) -> None:
        """Run each authorization's machine, all at once; the first failure cancels all."""
        identifiers = attempt.identifiers

        async def run(url: str) -> None:
            step = flow.authorization_start(url)
            while step is not None:
                if isinstance(step, Poll):
                    if step.after > 0:
                        log.info("%s", step)
                        await self.clock.sleep(step.after)
                    authz, retry_after = await self._fetch_authorization(url)
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
            order = await self.get_order(url)
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

    async def _answer_again(self, step: Answer, attempt: _Attempt) -> None:
        """Say why a challenge is answered again (the CA's reason), then wait as asked."""
        problem = step.challenge.error
        log.warning(
            "the CA could not validate %s (%s); answering the challenge again (%d of %d)",
            ", ".join(i.value for i in attempt.identifiers),
            problem,
            step.attempt,
            self.poll.challenge_answers,
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
            return await self._finalize(order, csr_der)
        except OrderNotReady as exc:
            try:
                current = await self.get_order(order.url)
            except AcmeCertsError:
                raise exc from None
            if current.status == "ready":
                # finalized on the authorizations' word before the order said ready
                return await self._finalize(current, csr_der)
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
            return await self.answer_challenge(challenge)
        except AcmeProblem as exc:
            if exc.kind is not ErrorKind.PERMANENT:
                raise
            try:
                authz = await self.get_authorization(authz_url)
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
                chains.append((await self.download_certificate(url))[0])
            except AcmeCertsError as exc:  # the certificate is issued: never lose it
                log.warning("could not download alternate chain %s: %s", url, exc)
        return chains

    def _issued(
        self,
        finish: Finish,
        attempt: _Attempt,
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
                authz = await self.get_authorization(url)
                if needs_deactivation(authz):
                    await self.deactivate_authorization(url)
                    log.info("deactivated pending authorization %s", url)
            except (AcmeCertsError, httpx.HTTPError) as exc:
                log.warning("could not deactivate authorization %s: %s", url, exc)


def _order_hooks(
    on_order: OrderHook | None, before_order: Callable[[PrivateKey], Awaitable[None]] | None
) -> list[Subscriber[IssuanceEvent]]:
    """The deprecated ``on_order``/``before_order`` hooks of ``issue()`` as a subscriber."""
    if on_order is None and before_order is None:
        return []
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

    return [adapter]


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
