"""The events of an issuance, as :meth:`AcmeClient.issue` drives it.

One seam to observe and extend the client: :meth:`AcmeClient.subscribe` (every event of
the client: these, and the transport's :class:`~acmecerts.transport.RequestSent` and
:class:`~acmecerts.transport.ResponseReceived`), or ``issue(..., events=subscriber)``
(the events of that one issuance; called before the client's subscribers). How
subscribers are called (in order, awaited, what their exceptions do) is written in
:mod:`acmecerts.transport._events`; in short: an ``async`` subscriber is awaited before
the client sends anything more, and one that raises fails the issuance (logged instead
for :class:`OrderRefused` and :class:`AttemptEnded`, which report an outcome).

The events of one issuance, in order (those in brackets only when they happen)::

    [ProfileFallback]                       a preferred profile the CA does not offer
    OrderRequested -> OrderCreated          (or OrderResumed, or OrderCreated(found=True))
    [ChallengePresented -> ChallengeAnswered]   per authorization still pending
    [ChallengeRetried -> ChallengeAnswered]     per failed validation the CA retries (§8.2)
    OrderAuthorized -> [OrderFinalized] -> CertificateDownloaded
    AttemptEnded                            however the attempt ended, once it had an order

Every event carries the ``identifiers`` of the issuance, to tell concurrent issuances
apart. A certificate key never appears in a repr.
"""

from __future__ import annotations

import dataclasses

from acmecerts.protocol._solver import ChallengeTask
from acmecerts.protocol.certificate import CertificateChain
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import PrivateKey
from acmecerts.protocol.resources import Challenge, Order
from acmecerts.transport import TransportEvent

__all__ = [
    "AttemptEnded",
    "CertificateDownloaded",
    "ChallengeAnswered",
    "ChallengePresented",
    "ChallengeRetried",
    "ClientEvent",
    "IssuanceEvent",
    "OrderAuthorized",
    "OrderCreated",
    "OrderFinalized",
    "OrderRefused",
    "OrderRequested",
    "OrderResumed",
    "ProfileFallback",
]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OrderRequested:
    """A ``newOrder`` is about to be sent (RFC 8555 §7.4); nothing is sent until every
    subscriber has returned. A subscriber that raises stops the order (not sent).

    ``private_key`` is the certificate key the order is for (``None`` when
    :meth:`AcmeClient.new_order` is called by itself); ``renewal_of`` the identifiers of
    the certificate it renews, if it is a renewal; ``replaces`` its ARI certID.
    ``profile`` is the profile the order names (``None``: the CA's default, also after a
    preferred profile the CA does not offer: :class:`ProfileFallback`);
    ``profile_required``: whether it was asked for as required or only preferred.
    """

    identifiers: tuple[Identifier, ...]
    profile: str | None = None
    profile_required: bool = True
    replaces: str | None = None
    renewal_of: tuple[Identifier, ...] | None = None
    private_key: PrivateKey | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProfileFallback:
    """The preferred ``profile`` is not among those the CA offers (``offered``, empty for
    a CA that predates profiles): the order names no profile, and the CA issues its
    default. Emitted (and logged as a warning) before :class:`OrderRequested`."""

    identifiers: tuple[Identifier, ...]
    profile: str
    offered: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OrderCreated:
    """The CA created ``order``: nothing more is sent for it until every subscriber has
    returned (record it here to resume it after a crash). ``found``: it is an order an
    earlier attempt created and never recorded, found again (``recover_order``)."""

    identifiers: tuple[Identifier, ...]
    order: Order
    private_key: PrivateKey | None = dataclasses.field(default=None, repr=False)
    found: bool = False


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OrderRefused:
    """The ``newOrder`` of ``request`` failed with ``error`` (no order was created, as far
    as the client knows). Reported after the fact: a subscriber's exception is logged."""

    identifiers: tuple[Identifier, ...]
    request: OrderRequested
    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OrderResumed:
    """An order of an earlier attempt (``resume_order_url``) is continued as it stands."""

    identifiers: tuple[Identifier, ...]
    order: Order


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ChallengePresented:
    """A solver made ``task`` visible to the CA, for the authorization at
    ``authorization_url``; the CA is told next (unless it validated already)."""

    identifiers: tuple[Identifier, ...]
    authorization_url: str
    task: ChallengeTask


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ChallengeAnswered:
    """The CA was told the challenge is ready (§7.5.1); ``challenge`` is its answer (the
    validation runs now; ``invalid`` ends the attempt)."""

    identifiers: tuple[Identifier, ...]
    authorization_url: str
    challenge: Challenge


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ChallengeRetried:
    """A validation failed and the CA put the challenge back to ``pending`` (RFC 8555
    §8.2): it is answered again now. ``challenge.error`` is the CA's reason; ``attempt``
    the number of this answer (at most :attr:`PollPolicy.challenge_answers`)."""

    identifiers: tuple[Identifier, ...]
    authorization_url: str
    challenge: Challenge
    attempt: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OrderAuthorized:
    """Every authorization of ``order`` is valid: it is ``ready`` (finalized next), or
    ``processing``/``valid`` already (or still ``pending`` as last polled, when a look at
    its authorizations found them all valid: finalized next, RFC 8555 §7.4)."""

    identifiers: tuple[Identifier, ...]
    order: Order


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OrderFinalized:
    """The CA accepted the CSR (§7.4): ``order`` as it answered (``processing`` or
    ``valid``, as a rule)."""

    identifiers: tuple[Identifier, ...]
    order: Order


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CertificateDownloaded:
    """The certificate is downloaded and matches the key and identifiers: ``chain`` is
    the chain chosen (``preferred_chain``), ``alternates`` the others obtained."""

    identifiers: tuple[Identifier, ...]
    order: Order
    chain: CertificateChain
    alternates: tuple[CertificateChain, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AttemptEnded:
    """An attempt that had an order ended, after its cleanup: ``error`` is why it failed
    (``None``: the certificate was obtained); ``order`` its last known state. Reported
    after the fact: a subscriber's exception is logged, the outcome stands."""

    identifiers: tuple[Identifier, ...]
    order: Order
    replaces: str | None = None
    renewal_of: tuple[Identifier, ...] | None = None
    error: BaseException | None = None


#: The events of an issuance.
IssuanceEvent = (
    ProfileFallback
    | OrderRequested
    | OrderCreated
    | OrderRefused
    | OrderResumed
    | ChallengePresented
    | ChallengeAnswered
    | ChallengeRetried
    | OrderAuthorized
    | OrderFinalized
    | CertificateDownloaded
    | AttemptEnded
)
#: Every event a client emits: an issuance's and its transport's.
ClientEvent = IssuanceEvent | TransportEvent
