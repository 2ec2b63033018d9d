"""The actions of the issuance flow (:mod:`acmecerts.protocol._flow`), and the pure
decisions its driver's helpers share. No I/O."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence

from acmecerts.errors import OrderFailed
from acmecerts.protocol._polling import Fail, Poll
from acmecerts.protocol._solver import ChallengeTask, Solver
from acmecerts.protocol.certificate import CertificateChain
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
    "Finalize",
    "Finish",
    "Present",
    "answer_refusal_settled",
    "finalize_refusal_settled",
    "needs_deactivation",
    "order_failed",
    "order_resumable",
    "pick_chain",
    "solver_hint",
]

_FINALIZED = frozenset({"processing", "valid"})
#: Orders that can no longer lead to a certificate (a resumed one is ordered anew).
_DEAD_ORDER = frozenset({"invalid", "expired", "deactivated", "revoked"})


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
    #: Wait this many seconds first (the CA's ``Retry-After`` before answering again).
    after: float = 0.0
    #: Which answer of this challenge it is: ``1``, or more when the CA put the challenge
    #: back to ``pending`` after a failed validation (``challenge.error`` says why).
    attempt: int = 1


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


# -- pure helpers of the flow -----------------------------------------------------------


#: The library's solvers for each challenge type (named in :class:`NoSolverForChallenges`).
_BUILT_IN_SOLVERS = {
    "http-01": "Http01Server or Http01Webroot",
    "dns-01": "Rfc2136Solver or DnsHookSolver",
    "tls-alpn-01": "TlsAlpn01Server",
}


def solver_hint(offered: Sequence[str]) -> str:
    """What would answer ``offered``: the library's solvers of those types, if any."""
    known = [f"{t} ({_BUILT_IN_SOLVERS[t]})" for t in offered if t in _BUILT_IN_SOLVERS]
    if known:
        return f"a solver of an offered type would: {', '.join(known)}"
    if offered:
        return "acmecerts has no built-in solver of an offered type (write a Solver)"
    return ""


def pick_chain(chains: Sequence[CertificateChain], issuer: str) -> CertificateChain | None:
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


def order_failed(order: Order) -> OrderFailed:
    problem = order.error
    return OrderFailed(
        f"order {order.url} became {order.status}" + (f": {problem}" if problem else ""),
        order_url=order.url,
        problem=problem,
    )
