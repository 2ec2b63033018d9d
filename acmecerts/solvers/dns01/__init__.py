"""dns-01 solvers (RFC 8555 §8.4): RFC 2136 dynamic updates, user hooks, propagation check.

For dns-01 the CA looks up the TXT record ``_acme-challenge.<name>`` (for a wildcard
``*.<name>``, the same ``_acme-challenge.<name>``) and expects
``base64url(SHA-256(key authorization))`` among its values. Three pieces:

* :class:`Rfc2136Solver` publishes the record with a TSIG-signed dynamic UPDATE
  (RFC 2136, RFC 8945): the generic provider for BIND, Knot, PowerDNS and most self-hosted
  DNS. It finds the zone by SOA queries and follows a CNAME at ``_acme-challenge.<name>``
  (CNAME delegation), so the update lands in the zone the CA will really read.
* :class:`DnsHookSolver` calls your async callables (or a command) to set and clear the
  record, for every other DNS provider.
* :class:`LexiconSolver` writes the record through a DNS provider's API (Cloudflare,
  Route 53, Google Cloud DNS, Azure, PowerDNS and 100 more) with dns-lexicon (the ``dns``
  extra).
* :class:`PropagationCheck` is run by both at the end of ``present``: it polls the zone's
  authoritative servers (or the resolvers you name) until every one of them serves the
  value, so the CA is not asked to validate before the record is visible.

Two newer DNS challenge types (drafts that Let's Encrypt and Pebble 2.10 offer):

* dns-account-01 (draft-ietf-acme-dns-account-label): the dns-01 value at
  ``_<account label>._acme-challenge.<name>``, the label derived from the account URL.
  ``Rfc2136Solver(..., challenge_type="dns-account-01")`` and ``DnsHookSolver(...,
  challenge_type="dns-account-01")`` write there, so clusters with different accounts
  validate one name at once without removing each other's records.
* dns-persist-01 (draft-ietf-acme-dns-persist): one persistent TXT record at
  ``_validation-persist.<name>`` names the CA and the account;
  :class:`DnsPersistSolver` checks that it is published and writes nothing (or
  publishes it once through an :class:`Rfc2136Solver`).

A wildcard and its base name (``*.example.com`` + ``example.com``) need two values at one
name at the same time. Both solvers add and remove single values, never the whole record
set, and count who holds a value: it is removed when the last task that presented it is
cleaned up.

Errors specific to this module (every one is an :class:`~acmecerts.errors.AcmeCertsError`;
foreign dnspython and OS errors never escape)::

    AcmeCertsError
    └── DnsError                  a DNS operation for dns-01 failed (``server``, ``rcode``)
        ├── DnsUpdateRefused      an UPDATE was answered with an error rcode
        │                         (REFUSED, NOTAUTH, NOTZONE, SERVFAIL; BADSIG, BADKEY, BADTIME)
        ├── DnsZoneNotFound       no zone (SOA) could be found for a record name
        ├── DnsPropagationTimeout the value was not visible everywhere before the deadline
        ├── DnsPersistRecordMissing no _validation-persist record authorizes CA and account
        ├── DnsProviderError      a LexiconSolver call to the provider's API failed
        └── DnsHookError          a DnsHookSolver callable or command failed
"""

from __future__ import annotations

from acmecerts.solvers.dns01._errors import (
    DnsError,
    DnsHookError,
    DnsPersistRecordMissing,
    DnsPropagationTimeout,
    DnsProviderError,
    DnsUpdateRefused,
    DnsZoneNotFound,
)
from acmecerts.solvers.dns01._hook import DnsHookSolver
from acmecerts.solvers.dns01._hook import RecordHook as RecordHook  # a type alias, not in __all__
from acmecerts.solvers.dns01._lexicon import LexiconSolver
from acmecerts.solvers.dns01._persist import DnsPersistSolver
from acmecerts.solvers.dns01._propagation import PropagationCheck
from acmecerts.solvers.dns01._records import DnsRecordLocation
from acmecerts.solvers.dns01._rfc2136 import Rfc2136Solver

__all__ = [
    "DnsError",
    "DnsHookError",
    "DnsHookSolver",
    "DnsPersistRecordMissing",
    "DnsPersistSolver",
    "DnsPropagationTimeout",
    "DnsProviderError",
    "DnsRecordLocation",
    "DnsUpdateRefused",
    "DnsZoneNotFound",
    "LexiconSolver",
    "PropagationCheck",
    "Rfc2136Solver",
]
