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
    AuthorizationFailed,
    BadServerResponse,
    NoSolverForChallenges,
    OrderFailed,
    UnsupportedChallenge,
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
_FINALIZED = frozenset({"processing", "valid"})
#: Orders that can no longer lead to a certificate (a resumed one is ordered anew).
_DEAD_ORDER = frozenset({"invalid", "expired", "deactivated", "revoked"})


#: The library's solvers for each challenge type (named in :class:`NoSolverForChallenges`).
_BUILT_IN_SOLVERS = {
    "http-01": "Http01Server or Http01Webroot",
    "dns-01": "Rfc2136Solver or DnsHookSolver",
    "tls-alpn-01": "TlsAlpn01Server",
}


def _solver_hint(offered: Sequence[str]) -> str:
    """What would answer ``offered``: the library's solvers of those types, if any."""
    known = [f"{t} ({_BUILT_IN_SOLVERS[t]})" for t in offered if t in _BUILT_IN_SOLVERS]
    if known:
        return f"a solver of an offered type would: {', '.join(known)}"
    if offered:
        return "acmecerts has no built-in solver of an offered type (write a Solver)"
    return ""


# -- actions -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Authorize:
    """Run the machine of each of these authorizations, all at once (see the module)."""

    urls: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Present:
    """Have ``solver`` make ``task`` visible to the CA (then :meth:`IssuanceFlow.presented`)."""

    authorization_url: str
    solver: Solver
    task: ChallengeTask


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """Tell the CA ``challenge`` is ready (§7.5.1; then :meth:`IssuanceFlow.challenge_answered`)."""

    authorization_url: str
    challenge: Challenge


@dataclasses.dataclass(frozen=True, slots=True)
class Finalize:
    """Send the CSR to ``order``'s finalize URL (§7.4), then report the order."""

    order: Order


@dataclasses.dataclass(frozen=True, slots=True)
class Diagnose:
    """The order became invalid: fetch these authorizations in turn (skipping any that
    cannot be read) and report each to :meth:`IssuanceFlow.diagnose` until it says stop."""

    order: Order
    urls: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Download:
    """Download the certificate chain at ``url`` (§7.4.2), then report it."""

    url: str


@dataclasses.dataclass(frozen=True, slots=True)
class DownloadAlternates:
    """Download the alternate chains (``Link: rel="alternate"``) in turn, skipping any that
    fail, then report those obtained to :meth:`IssuanceFlow.alternates_received`."""

    urls: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Finish:
    """The certificate is issued: ``chain`` is the one chosen, ``alternates`` the others."""

    order: Order
    chain: CertificateChain
    alternates: tuple[CertificateChain, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class CleanUp:
    """Undo the attempt: clean up every task presented (in this order, each even if
    another fails), then deactivate each authorization that is still pending (§7.5.2):
    fetch it and ask :func:`needs_deactivation`."""

    tasks: tuple[tuple[Solver, ChallengeTask], ...]
    deactivate: tuple[str, ...]


#: What :meth:`IssuanceFlow.next_action` may say.
Action = Authorize | Poll | Finalize | Diagnose | Download | DownloadAlternates | Finish | Fail
#: What an authorization's machine may say (``None``: nothing more to do for it).
AuthorizationAction = Poll | Present | Answer | Fail | None


# -- pure decisions shared by the driver's helpers ------------------------------------


def order_resumable(
    order: Order, identifiers: Sequence[Identifier], now: _dt.datetime
) -> str | None:
    """Why ``order`` cannot be resumed for ``identifiers`` (``None``: it can)."""
    if order.status in _DEAD_ORDER:
        return f"it is {order.status}"
    if set(order.identifiers) != set(identifiers):
        return "it is for other identifiers"
    if order.expires is not None and order.expires <= now:
        return "it has expired"
    return None


def finalize_refusal_settled(current: Order) -> bool:
    """Whether a finalize the CA refused (``orderNotReady``) had got through already.

    The transport replays a finalize whose answer was lost; the CA refuses the replay of
    one that arrived. The order's state decides: ``processing`` or ``valid``.
    """
    return current.status in _FINALIZED


def answer_refusal_settled(challenge: Challenge, current: Authorization) -> Challenge | None:
    """The challenge's state when a refused answer had got through already, else ``None``.

    A challenge no longer ``pending`` (or in an authorization already ``valid``) was
    answered by an earlier copy of the request.
    """
    state = current.challenge(challenge.type) or challenge
    if current.status != "valid" and state.status == "pending":
        return None
    return state


def needs_deactivation(authorization: Authorization) -> bool:
    """Whether cleanup deactivates ``authorization`` (§7.5.2): only a pending one."""
    return authorization.status == "pending"


def _pick_chain(chains: Sequence[CertificateChain], issuer: str) -> CertificateChain | None:
    """The first chain whose root is issued by ``issuer`` (a common name), else the first
    that passes through a certificate issued by it (an intermediate's name), else ``None``.

    Roots win so that a cross-signed chain that merely passes through the preferred root
    does not shadow the chain that ends there (certbot's ``--preferred-chain``).
    """
    for chain in chains:
        if chain.root_issuer_name == issuer:
            return chain
    for chain in chains:
        if issuer in chain.issuer_names:
            return chain
    return None


def _order_failed(order: Order) -> OrderFailed:
    problem = order.error
    return OrderFailed(
        f"order {order.url} became {order.status}" + (f": {problem}" if problem else ""),
        order_url=order.url,
        problem=problem,
    )


# -- the machine ------------------------------------------------------------------------


class _Phase(enum.Enum):
    START = "start"  # no order yet
    AUTHORIZE = "authorize"  # pending order: solve its authorizations
    AWAIT_AUTHORIZED = "await-authorized"  # poll until ready/processing/valid
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
    DONE = "done"


@dataclasses.dataclass(slots=True)
class _AuthzState:
    step: _Step = _Step.FETCH
    authorization: Authorization | None = None
    challenge: Challenge | None = None
    solver: Solver | None = None
    task: ChallengeTask | None = None


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
        """Report the order: as created or resumed, polled (with the answer's
        ``Retry-After``, if any), or as the finalize request answered."""
        self.order = order
        phase = self._phase
        if phase in (_Phase.FINISHED, _Phase.FAILED):
            return
        if order.status not in _ORDER_STATES:
            self._fail(_order_failed(order))
            return
        if phase is _Phase.START:
            if order.status == "pending":
                # any of them may be left pending if the attempt ends early; cleanup
                # looks at each and deactivates only those still pending
                self._pending.update(order.authorizations)
                self._authz = {url: _AuthzState() for url in order.authorizations}
                self._phase = _Phase.AUTHORIZE
            elif order.status == "invalid":
                self._fail(_order_failed(order))
            else:
                self._after_authorized(order)
        elif phase is _Phase.AWAIT_AUTHORIZED:
            if order.status == "invalid":
                self._phase = _Phase.DIAGNOSE
            elif order.status in _AUTHORIZED:
                self._pending.clear()
                self._after_authorized(order)
            else:
                self._retry_after = retry_after
        elif phase is _Phase.FINALIZE:
            self._await_issued(order)
        elif phase is _Phase.AWAIT_ISSUED:
            if order.status in ("valid", "invalid"):
                self._await_issued(order)
            else:
                self._retry_after = retry_after

    def _after_authorized(self, order: Order) -> None:
        if order.status == "ready":
            self._phase = _Phase.FINALIZE
        else:
            self._await_issued(order)

    def _await_issued(self, order: Order) -> None:
        if order.status == "valid" and order.certificate is not None:
            self._phase = _Phase.DOWNLOAD
        elif order.status in ("valid", "invalid"):
            self._fail(_order_failed(order))
        else:
            self._phase = _Phase.AWAIT_ISSUED
            self._attempt = 0
            self._retry_after = None

    def authorized(self) -> None:
        """Every authorization's machine has ended without failing: wait for the order."""
        if self._phase is _Phase.AUTHORIZE:
            self._phase = _Phase.AWAIT_AUTHORIZED
            self._attempt = 0
            self._retry_after = None

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
        if phase in (_Phase.AWAIT_AUTHORIZED, _Phase.AWAIT_ISSUED):
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
                self._fail(decision.error)
            return decision
        if phase is _Phase.FINALIZE:
            return Finalize(order)
        if phase is _Phase.DIAGNOSE:
            return Diagnose(order, order.authorizations)
        if phase is _Phase.DOWNLOAD:
            assert order.certificate is not None
            return Download(order.certificate)
        assert phase is _Phase.ALTERNATES
        return DownloadAlternates(self._alternate_urls)

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
            self._fail(_order_failed(self.order))

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
        chosen = _pick_chain(offered, self.preferred_chain) or self._chain
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
        """The first action of the machine of authorization ``url`` (fetch it now)."""
        if url not in self._authz:
            raise KeyError(f"{url} is not an authorization of the order")
        return Poll("authorization", url, 0.0)

    def authorization_received(self, authorization: Authorization) -> AuthorizationAction:
        """Report a fetched authorization; says to present a challenge, or fail, or nothing
        (``None``: it is valid already)."""
        state = self._authz[authorization.url]
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
            state.step = _Step.DONE  # processing or valid already (e.g. a resumed order)
            return None
        state.step = _Step.AWAIT_ANSWER
        return Answer(url, state.challenge)

    def challenge_answered(self, url: str, challenge: Challenge) -> AuthorizationAction:
        """Report the challenge as the CA answered it."""
        state = self._authz[url]
        state.step = _Step.DONE
        if challenge.status != "invalid":
            return None
        # A CA that validates inside the challenge POST (acme2certifier) may answer
        # "invalid" and leave the order "pending" for good: decide from the challenge
        # instead of polling the order until the deadline.
        self._pending.discard(url)
        assert state.authorization is not None
        sent = state.challenge
        problem = challenge.error or (sent.error if sent is not None else None)
        return Fail(self._authorization_failed(state.authorization, problem))

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
            hint=_solver_hint(offered),
        )

    def _authorization_failed(
        self, authorization: Authorization, problem: AcmeProblem | None
    ) -> AuthorizationFailed:
        return AuthorizationFailed(
            authorization.dns_name,
            problem,
            authorization_url=authorization.url,
            order_url=self.order.url if self.order is not None else None,
        )

    # -- the end ------------------------------------------------------------------------

    def cleanup(self) -> CleanUp:
        """What to undo, however the attempt ended."""
        pending = () if self.finished else tuple(sorted(self._pending))
        return CleanUp(tuple(self._presented), pending)
