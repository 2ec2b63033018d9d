"""``AcmeClient``: one account on one CA, driving RFC 8555 over the transport.

The client turns the protocol layer's requests into HTTP through
:class:`~acmecerts.transport.AcmeTransport`, polls with the server's ``Retry-After``
(or a short growing interval, never a tight loop), runs every issuance attempt under a
deadline (30 minutes by default) and cleans up after itself: challenge responses are
removed and pending authorizations deactivated however an attempt ends.

``AcmeClient`` (``_client``) is a facade over parts it holds, wired by ``_build``; no
part inherits from another. ``_signed``: the account's identity (key, URL) and the
requests signed for it (``kid``, JWS and nonces through the transport, POST-as-GET);
``_registration``: ``newAccount`` and the key's account lookup (§7.3, §7.3.1). One module
per RFC resource: ``_account`` (§7.3), ``_order`` (§7.4), ``_authorization`` (§7.5),
``_certificate`` (finalize, download, revoke: §7.4, §7.4.2, §7.6), ``_renewal_info``
(RFC 9773). ``_polling`` waits between polls; ``_issue`` (with ``_attempt``) drives the
issuance flow of :mod:`acmecerts.protocol._flow` (which decides every step and does no
I/O) over the resources.

The client's one seam to observe and extend it is its events (``_events``):
:meth:`AcmeClient.subscribe` hears every event (an issuance's, :class:`OrderRequested`
to :class:`AttemptEnded`, and the transport's :class:`RequestSent` and
:class:`ResponseReceived`); ``issue(..., events=...)`` those of one issuance. A
subscriber may be a plain or a coroutine function; a coroutine is awaited before the
client goes on (so it can make something durable first: the manager's order journal
does); one that raises fails the issuance, except for the events that report an outcome
(:class:`OrderRefused`, :class:`AttemptEnded`), where it is logged::

    seen = []
    client.subscribe(seen.append)                      # every event, in order
    await client.issue(["example.com"], solver=solver, events=journal.record)
"""

from __future__ import annotations

from acmecerts.client._certificate import RevocationReason
from acmecerts.client._client import AcmeClient
from acmecerts.client._events import (
    AttemptEnded,
    CertificateDownloaded,
    ChallengeAnswered,
    ChallengePresented,
    ChallengeRetried,
    ClientEvent,
    IssuanceEvent,
    OrderAuthorized,
    OrderCreated,
    OrderFinalized,
    OrderRefused,
    OrderRequested,
    OrderResumed,
    ProfileFallback,
)
from acmecerts.client._order import OrderHook
from acmecerts.client._registration import ExternalAccountBinding, TermsOfServiceNotAgreed
from acmecerts.protocol._polling import PollPolicy
from acmecerts.transport import RequestSent, ResponseReceived, Subscriber

__all__ = [
    "AcmeClient",
    "AttemptEnded",
    "CertificateDownloaded",
    "ChallengeAnswered",
    "ChallengePresented",
    "ChallengeRetried",
    "ClientEvent",
    "ExternalAccountBinding",
    "IssuanceEvent",
    "OrderAuthorized",
    "OrderCreated",
    "OrderFinalized",
    "OrderHook",
    "OrderRefused",
    "OrderRequested",
    "OrderResumed",
    "PollPolicy",
    "ProfileFallback",
    "RequestSent",
    "ResponseReceived",
    "RevocationReason",
    "Subscriber",
    "TermsOfServiceNotAgreed",
]
