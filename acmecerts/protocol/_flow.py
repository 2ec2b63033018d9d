"""The issuance flow of RFC 8555 as a state machine with no I/O.

:class:`IssuanceFlow` holds what one issuance attempt knows (the order, each
authorization, the challenges presented, the deadline) and says what to do next; a
driver (``acmecerts.client``) does it and reports back. The flow never sends, sleeps or
reads a clock: the driver tells it ``now``, it answers with an action::

    flow = IssuanceFlow(identifiers, solvers, thumbprint=..., deadline=..., poll=...)
    flow.order_received(order)
    while True:
        action = flow.next_action(clock.now())
        ...  # Authorize, Poll (the order), Finalize, Diagnose, Download, Finish or Fail

Each authorization of a ``pending`` order runs its own small machine, concurrently with
the others (``Authorize`` names them): :meth:`IssuanceFlow.authorization_start` gives its
first action (``Poll`` the authorization now), and each answer
(:meth:`~IssuanceFlow.authorization_received`, :meth:`~IssuanceFlow.presented`,
:meth:`~IssuanceFlow.challenge_answered`) gives the next one: ``Present``, ``Answer``,
``Fail``, or ``None`` once that authorization needs nothing more. However the attempt
ends, :meth:`IssuanceFlow.cleanup` says what to undo (``CleanUp``).

Polling (RFC 8555 §7.4, §7.5.1): the CA's ``Retry-After`` (order poll, finalize answer,
authorization) sets the next wait, within :class:`PollPolicy` and the deadline. Every
:attr:`PollPolicy.authorization_look`-th poll of a ``pending`` order is an ``Authorize``
of the authorizations still being validated instead (each fetched once, after the same
wait); a challenge put back to ``pending`` with an ``error`` (§8.2) is answered again
(``Answer.attempt`` > 1) up to :attr:`PollPolicy.challenge_answers` times; when every
authorization is valid, ``Finalize`` follows without another poll (§7.4).

The order's states (RFC 8555 §7.1.6)::

    pending --(authorizations valid)--> ready --(finalize)--> processing --> valid
       \\________________________________\\_______________________\\------> invalid

A state the RFC does not give an order (``expired``, ``deactivated``, ``revoked``) is a
typed failure (:class:`~acmecerts.errors.OrderFailed`), never a reason to poll on.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
from collections.abc import Sequence

from acmecerts.errors import (
    AcmeCertsError,
    AcmeProblem,
    AttemptTimeout,
    AuthorizationFailed,
    BadServerResponse,
    NoSolverForChallenges,
    UnsupportedChallenge,
)
from acmecerts.protocol._actions import (
    Action,
    Answer,
    AuthorizationAction,
    Authorize,
    CleanUp,
    Diagnose,
    Download,
    DownloadAlternates,
    Finalize,
    Finish,
    Present,
    answer_refusal_settled,
    finalize_refusal_settled,
    needs_deactivation,
    order_failed,
    order_resumable,
    pick_chain,
    solver_hint,
)
from acmecerts.protocol._polling import Fail, Poll, PollPolicy, next_poll
from acmecerts.protocol._solver import ChallengeTask, Solver
from acmecerts.protocol.certificate import CertificateChain
from acmecerts.protocol.challenges import (
    DNS_ACCOUNT_01,
    DNS_PERSIST_01,
    check_issuer_domain_names,
    key_authorization,
)
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.resources import Authorization, Challenge, Order

__all__ = [
    "Action",
    "Answer",
    "AuthorizationAction",
    "Authorize",
    "CleanUp",
    "Diagnose",
    "Download",
    "DownloadAlternates",
    "Fail",
    "Finalize",
    "Finish",
    "IssuanceFlow",
    "Poll",
    "PollPolicy",
    "Present",
    "answer_refusal_settled",
    "finalize_refusal_settled",
    "needs_deactivation",
    "next_poll",
    "order_resumable",
]

#: Order states the RFC gives an order (§7.1.6); any other is a failure.
_ORDER_STATES = frozenset({"pending", "ready", "processing", "valid", "invalid"})
_AUTHORIZED = frozenset({"ready", "processing", "valid"})


# -- the machine ------------------------------------------------------------------------


class _Phase(enum.Enum):
    START = "start"  # no order yet
    AUTHORIZE = "authorize"  # pending order: solve its authorizations
    AWAIT_AUTHORIZED = "await-authorized"  # poll until ready/processing/valid
    LOOK = "look"  # a poll of the pending order's authorizations instead of the order
    FINALIZE = "finalize"
    AWAIT_ISSUED = "await-issued"  # poll until valid
    DIAGNOSE = "diagnose"  # invalid after authorizing: find the authorization to blame
    DOWNLOAD = "download"
    ALTERNATES = "alternates"
    FINISHED = "finished"
    FAILED = "failed"


class _Step(enum.Enum):
    FETCH = "fetch"
    PRESENT = "present"
    ANSWER = "answer"
    AWAIT_ANSWER = "await-answer"
    ANSWERED = "answered"  # the CA validates: looked at while the order stays pending
    DONE = "done"


@dataclasses.dataclass(slots=True)
class _AuthzState:
    step: _Step = _Step.FETCH
    authorization: Authorization | None = None
    challenge: Challenge | None = None
    solver: Solver | None = None
    task: ChallengeTask | None = None
    #: How many times the challenge was answered.
    answers: int = 0


class IssuanceFlow:
    """What one issuance attempt knows, and the next thing to do (see the module).

    Args:
        identifiers: What the certificate is for.
        solvers: The solvers, in order of preference.
        thumbprint: The account key's JWK thumbprint (for key authorizations, §8.1).
        deadline: When the attempt must be over (on the driver's clock).
        poll: How to pace polling.
        preferred_chain: The root (or else intermediate) common name the chain should
            lead to, if any.
        account_url: The account URL, which dns-account-01 and dns-persist-01 tasks carry
            (the driver may set :attr:`account_url` later, before the first authorization).
    """

    def __init__(
        self,
        identifiers: Sequence[Identifier],
        solvers: Sequence[Solver],
        *,
        thumbprint: str,
        deadline: _dt.datetime,
        poll: PollPolicy | None = None,
        preferred_chain: str | None = None,
        account_url: str | None = None,
    ) -> None:
        self.identifiers = tuple(identifiers)
        #: The account URL given to the tasks (dns-account-01, dns-persist-01).
        self.account_url = account_url
        self.solvers = tuple(solvers)
        self.thumbprint = thumbprint
        self.deadline = deadline
        self.poll = poll or PollPolicy()
        self.preferred_chain = preferred_chain
        #: The latest state of the order (``None`` before :meth:`order_received`).
        self.order: Order | None = None
        self._phase = _Phase.START
        self._failure: AcmeCertsError | None = None
        self._attempt = 0
        self._retry_after: _dt.datetime | None = None
        #: The authorizations of the current look, its wait, the latest Retry-After seen.
        self._looking: tuple[str, ...] = ()
        self._look_wait = 0.0
        self._look_retry_after: _dt.datetime | None = None
        #: The identifier and problem of the CA's latest failed validation, if any.
        self._last_problem: tuple[str, AcmeProblem] | None = None
        self._authz: dict[str, _AuthzState] = {}
        self._presented: list[tuple[Solver, ChallengeTask]] = []
        #: Authorizations that may be left pending if the attempt ends early.
        self._pending: set[str] = set()
        self._chain: CertificateChain | None = None
        self._alternate_urls: tuple[str, ...] = ()
        self._finish: Finish | None = None

    def __repr__(self) -> str:
        url = self.order.url if self.order is not None else None
        return f"IssuanceFlow(order={url!r}, phase={self._phase.value})"

    @property
    def finished(self) -> bool:
        """Whether the certificate was obtained (:class:`Finish` was said)."""
        return self._phase is _Phase.FINISHED

    # -- the order ----------------------------------------------------------------------

    def order_received(self, order: Order, *, retry_after: _dt.datetime | None = None) -> None:
        """Report the order: as created or resumed, polled, or as the finalize request
        answered (each with the answer's ``Retry-After``, if any: it paces the polls)."""
        self.order = order
        phase = self._phase
        if phase in (_Phase.FINISHED, _Phase.FAILED):
            return
        if order.status not in _ORDER_STATES:
            self._fail(order_failed(order))
            return
        if phase is _Phase.START:
            if order.status == "pending":
                # any of them may be left pending if the attempt ends early; cleanup
                # looks at each and deactivates only those still pending
                self._pending.update(order.authorizations)
                self._authz = {url: _AuthzState() for url in order.authorizations}
                self._phase = _Phase.AUTHORIZE
            elif order.status == "invalid":
                self._fail(order_failed(order))
            else:
                self._after_authorized(order)
        elif phase is _Phase.AWAIT_AUTHORIZED:
            if order.status == "invalid":
                self._phase = _Phase.DIAGNOSE
            elif order.status in _AUTHORIZED:
                self._pending.clear()
                self._after_authorized(order, retry_after)
            else:
                self._retry_after = retry_after
        elif phase is _Phase.FINALIZE:
            # §7.4: a "processing" answer's Retry-After says when to poll first
            self._await_issued(order, retry_after)
        elif phase is _Phase.AWAIT_ISSUED:
            if order.status in ("valid", "invalid"):
                self._await_issued(order)
            else:
                self._retry_after = retry_after

    def _after_authorized(self, order: Order, retry_after: _dt.datetime | None = None) -> None:
        if order.status == "ready":
            self._phase = _Phase.FINALIZE
        else:
            self._await_issued(order, retry_after)

    def _await_issued(self, order: Order, retry_after: _dt.datetime | None = None) -> None:
        if order.status == "valid" and order.certificate is not None:
            self._phase = _Phase.DOWNLOAD
        elif order.status in ("valid", "invalid"):
            self._fail(order_failed(order))
        else:
            self._phase = _Phase.AWAIT_ISSUED
            self._attempt = 0
            self._retry_after = retry_after

    def authorized(self) -> None:
        """Every authorization's machine (of an ``Authorize``) has ended without failing:
        wait for the order."""
        if self._phase is _Phase.AUTHORIZE:
            self._phase = _Phase.AWAIT_AUTHORIZED
            self._attempt = 0
            self._retry_after = None
        elif self._phase is _Phase.LOOK:
            if any(s.step is _Step.ANSWERED for s in self._authz.values()):
                # the look stood for one poll of the order: the count goes on
                self._phase = _Phase.AWAIT_AUTHORIZED
                self._retry_after = self._look_retry_after
            else:
                # every authorization is valid: §7.4 lets a client finalize once it
                # believes the order is ready, so no extra poll of the order
                self._pending.clear()
                self._phase = _Phase.FINALIZE

    def next_action(self, now: _dt.datetime) -> Action:
        """What to do next, ``now`` being the driver's clock's time."""
        phase = self._phase
        if phase is _Phase.FAILED:
            assert self._failure is not None
            return Fail(self._failure)
        if phase is _Phase.FINISHED:
            assert self._finish is not None
            return self._finish
        order = self.order
        if order is None:
            raise RuntimeError("IssuanceFlow.next_action() before order_received()")
        if phase is _Phase.AUTHORIZE:
            return Authorize(order.authorizations)
        if phase is _Phase.LOOK:
            return Authorize(self._looking)
        if phase in (_Phase.AWAIT_AUTHORIZED, _Phase.AWAIT_ISSUED):
            return self._next_poll(order, now)
        if phase is _Phase.FINALIZE:
            return Finalize(order)
        if phase is _Phase.DIAGNOSE:
            return Diagnose(order, order.authorizations)
        if phase is _Phase.DOWNLOAD:
            assert order.certificate is not None
            return Download(order.certificate)
        assert phase is _Phase.ALTERNATES
        return DownloadAlternates(self._alternate_urls)

    def _next_poll(self, order: Order, now: _dt.datetime) -> Poll | Fail | Authorize:
        self._attempt += 1
        decision = next_poll(
            self.poll,
            resource="order",
            url=order.url,
            attempt=self._attempt,
            retry_after=self._retry_after,
            now=now,
            deadline=self.deadline,
        )
        if isinstance(decision, Fail):
            error = decision.error
            if self._last_problem is not None and isinstance(error, AttemptTimeout):
                error = self.timeout_error(error)
            self._fail(error)
            return Fail(error)
        if (
            self._phase is _Phase.AWAIT_AUTHORIZED
            and self._attempt % self.poll.authorization_look == 0
        ):
            looking = tuple(u for u, s in self._authz.items() if s.step is _Step.ANSWERED)
            if looking:
                self._phase = _Phase.LOOK
                self._looking = looking
                self._look_wait = decision.after
                self._look_retry_after = None
                return Authorize(looking)
        return decision

    def timeout_error(self, error: AttemptTimeout) -> AttemptTimeout:
        """``error``, naming the CA's reason of the latest failed validation if there was
        one (a challenge answered again that the deadline cut short)."""
        if self._last_problem is None:
            return error
        name, problem = self._last_problem
        return AttemptTimeout(
            f"{error}; the CA's last validation error for {name}: {problem}",
            order_url=self.order.url if self.order is not None else None,
            problem=problem,
        )

    def diagnose(self, authorization: Authorization) -> bool:
        """Report an authorization of an invalid order; ``True``: it explains the failure
        (stop fetching). After the last one, call :meth:`diagnosed`."""
        if self._phase is not _Phase.DIAGNOSE or authorization.status != "invalid":
            return False
        self._fail(self._authorization_failed(authorization, authorization.error))
        return True

    def diagnosed(self) -> None:
        """No authorization explained the invalid order: the order's own error does."""
        if self._phase is _Phase.DIAGNOSE and self.order is not None:
            self._fail(order_failed(self.order))

    # -- the certificate -----------------------------------------------------------------

    def chain_received(self, chain: CertificateChain, alternate_urls: Sequence[str]) -> None:
        """Report the default chain and the URLs of the alternates the CA offers."""
        if self._phase is not _Phase.DOWNLOAD:
            return
        self._chain = chain
        preferred = self.preferred_chain
        if preferred is not None and chain.root_issuer_name != preferred:
            # §7.4.2: the other chains are behind Link: rel="alternate"; fetched only
            # when the default one does not already lead to the preferred root.
            self._alternate_urls = tuple(alternate_urls)
            self._phase = _Phase.ALTERNATES
        else:
            self._finished(chain, ())

    def alternates_received(self, chains: Sequence[CertificateChain]) -> None:
        """Report the alternate chains that could be downloaded, in the CA's order."""
        if self._phase is not _Phase.ALTERNATES or self._chain is None:
            return
        assert self.preferred_chain is not None
        offered = [self._chain, *chains]
        chosen = pick_chain(offered, self.preferred_chain) or self._chain
        self._finished(chosen, tuple(c for c in offered if c is not chosen))

    def _finished(self, chain: CertificateChain, alternates: tuple[CertificateChain, ...]) -> None:
        assert self.order is not None
        self._finish = Finish(self.order, chain, alternates)
        self._phase = _Phase.FINISHED

    def _fail(self, error: AcmeCertsError) -> None:
        if self._phase is not _Phase.FAILED:
            self._failure = error
            self._phase = _Phase.FAILED

    # -- each authorization ----------------------------------------------------------------

    def authorization_start(self, url: str) -> AuthorizationAction:
        """The first action of the machine of authorization ``url``: fetch it (now, or in
        a look after the wait the order's poll would have had)."""
        state = self._authz.get(url)
        if state is None:
            raise KeyError(f"{url} is not an authorization of the order")
        if self._phase is _Phase.LOOK and state.step is _Step.ANSWERED:
            return Poll("authorization", url, self._look_wait)
        return Poll("authorization", url, 0.0)

    def authorization_received(
        self,
        authorization: Authorization,
        *,
        retry_after: _dt.datetime | None = None,
        now: _dt.datetime | None = None,
    ) -> AuthorizationAction:
        """Report a fetched authorization (with the answer's ``Retry-After`` and the
        time, if known); says to present a challenge, to answer one again, or fail, or
        nothing (``None``: it is valid already, or still being validated)."""
        state = self._authz[authorization.url]
        if state.step is _Step.ANSWERED:
            return self._looked_at(state, authorization, retry_after, now)
        state.authorization = authorization
        if authorization.status == "valid":
            state.step = _Step.DONE
            return None
        if authorization.status != "pending":
            return Fail(self._authorization_failed(authorization, authorization.error))
        self._pending.add(authorization.url)
        ident = Identifier(authorization.identifier.type, authorization.dns_name)
        for candidate in self.solvers:
            challenge = authorization.challenge(candidate.challenge_type)
            if challenge is not None and candidate.supports(ident):
                break
        else:
            return Fail(self._no_solver(authorization, ident))
        made = self._task(challenge, ident, authorization.url)
        if isinstance(made, Fail):
            return made
        task = made
        state.challenge, state.solver, state.task = challenge, candidate, task
        state.step = _Step.PRESENT
        # recorded before it is presented: cleanup must not assume present succeeded
        self._presented.append((candidate, task))
        return Present(authorization.url, candidate, task)

    def _task(
        self, challenge: Challenge, ident: Identifier, authz_url: str
    ) -> ChallengeTask | Fail:
        """The task for ``challenge``, or why there can be none."""
        account_url = self.account_url
        if challenge.type in (DNS_ACCOUNT_01, DNS_PERSIST_01) and account_url is None:
            return Fail(UnsupportedChallenge(f"{challenge.type} needs the account URL"))
        if challenge.type == DNS_PERSIST_01:
            # draft-ietf-acme-dns-persist §3: no token; the record names the CA (one of
            # issuer-domain-names) and the account ("accounturi", when the CA sends it).
            try:
                issuers = check_issuer_domain_names(challenge.issuer_domain_names, url=authz_url)
            except BadServerResponse as exc:
                return Fail(exc)
            return ChallengeTask(
                type=challenge.type,
                identifier=ident,
                token="",
                key_authorization="",
                url=challenge.url,
                account_url=challenge.account_uri or account_url,
                issuer_domain_names=issuers,
            )
        if challenge.token is None:
            return Fail(
                BadServerResponse(f"{challenge.type} challenge without a token", url=authz_url)
            )
        return ChallengeTask(
            type=challenge.type,
            identifier=ident,
            token=challenge.token,
            key_authorization=key_authorization(challenge.token, self.thumbprint),
            url=challenge.url,
            account_url=account_url,
        )

    def presented(self, url: str) -> AuthorizationAction:
        """The solver has presented the challenge of ``url``: answer it if the CA waits."""
        state = self._authz[url]
        if state.step is not _Step.PRESENT or state.challenge is None:
            return None
        if state.challenge.status != "pending":
            # processing or valid already (e.g. a resumed order)
            processing = state.challenge.status == "processing"
            state.step = _Step.ANSWERED if processing else _Step.DONE
            return None
        state.step = _Step.AWAIT_ANSWER
        state.answers += 1
        return Answer(url, state.challenge)

    def challenge_answered(self, url: str, challenge: Challenge) -> AuthorizationAction:
        """Report the challenge as the CA answered it."""
        state = self._authz[url]
        state.step = _Step.DONE if challenge.status == "valid" else _Step.ANSWERED
        if challenge.status != "invalid":
            return None
        state.step = _Step.DONE
        # A CA that validates inside the challenge POST (acme2certifier) may answer
        # "invalid" and leave the order "pending" for good: decide from the challenge
        # instead of polling the order until the deadline.
        self._pending.discard(url)
        assert state.authorization is not None
        sent = state.challenge
        problem = challenge.error or (sent.error if sent is not None else None)
        return Fail(self._authorization_failed(state.authorization, problem))

    def _looked_at(
        self,
        state: _AuthzState,
        authorization: Authorization,
        retry_after: _dt.datetime | None,
        now: _dt.datetime | None,
    ) -> AuthorizationAction:
        """An authorization being validated, fetched in a look (see the module)."""
        state.authorization = authorization
        if authorization.status == "valid":
            state.step = _Step.DONE
            return None
        sent = state.challenge
        current = authorization.challenge(sent.type) if sent is not None else None
        if authorization.status != "pending":
            problem = (current.error if current is not None else None) or authorization.error
            return Fail(self._authorization_failed(authorization, problem))
        if current is None or current.status != "pending" or current.error is None:
            # still being validated: back to polling the order, at the authorization's
            # own pace if the CA gave one (the latest Retry-After of the look wins)
            if retry_after is not None and (
                self._look_retry_after is None or retry_after > self._look_retry_after
            ):
                self._look_retry_after = retry_after
            return None
        # §8.2: the validation failed and the CA waits to be asked to try again
        problem = current.error
        self._last_problem = (authorization.dns_name, problem)
        if state.answers >= self.poll.challenge_answers:
            return Fail(
                self._authorization_failed(
                    authorization, problem, note=f"after {state.answers} answers"
                )
            )
        after = 0.0
        if retry_after is not None and now is not None:
            left = (self.deadline - now).total_seconds()
            wanted = (retry_after - now).total_seconds()
            after = max(0.0, min(wanted, self.poll.max_retry_after, left))
        state.step = _Step.AWAIT_ANSWER
        state.challenge = current
        state.answers += 1
        return Answer(authorization.url, current, after=after, attempt=state.answers)

    def _no_solver(self, authorization: Authorization, ident: Identifier) -> NoSolverForChallenges:
        """The CA offered only types no solver answers for ``ident``: not bad input (the
        CA chose them; another solver may answer), a failure that follows the schedule."""
        offered = tuple(dict.fromkeys(c.type for c in authorization.challenges))
        ours = tuple(dict.fromkeys(s.challenge_type for s in self.solvers))
        return NoSolverForChallenges(
            identifier=ident.value,
            offered=offered,
            solver_types=ours,
            authorization_url=authorization.url,
            order_url=self.order.url if self.order is not None else None,
            hint=solver_hint(offered),
        )

    def _authorization_failed(
        self, authorization: Authorization, problem: AcmeProblem | None, *, note: str = ""
    ) -> AuthorizationFailed:
        return AuthorizationFailed(
            authorization.dns_name,
            problem,
            authorization_url=authorization.url,
            order_url=self.order.url if self.order is not None else None,
            note=note,
        )

    # -- the end ------------------------------------------------------------------------

    def cleanup(self) -> CleanUp:
        """What to undo, however the attempt ended."""
        pending = () if self.finished else tuple(sorted(self._pending))
        return CleanUp(tuple(self._presented), pending)
