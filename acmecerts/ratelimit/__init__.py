"""Rate-limit-aware scheduling: a ledger of the CA's limits that keeps issuance under them.

* :mod:`~acmecerts.ratelimit._model`: :class:`Limit` and :class:`RateLimitModel`, the
  declarative token-bucket description of a CA's limits, with the :data:`LETS_ENCRYPT`
  and :data:`NO_LIMITS` presets, and :func:`model_for_directory` to pick one for a CA.
* :class:`RateLimitLedger`: records spends, answers "may this order be sent now, and if
  not, when", learns from the CA's ``rateLimited`` answers, persists in a ``Storage``.
* :func:`prioritize` / :meth:`RateLimitLedger.plan`: who goes first when the budget is
  short, and when each certificate will be issued.
* :class:`RequestRates` (on :attr:`RateLimitModel.request_rates`), :class:`RequestRate`,
  :class:`EndpointClass`, :class:`RequestBucket` / :class:`RequestBuckets`: the request
  throttle's rates per ACME endpoint and its pure token-bucket arithmetic (the waiting is
  :class:`acmecerts.transport.RequestThrottle`); :func:`model_for_directory` picks a
  model for a CA.

This is policy: pure decisions from the model, the recorded spends and an injected
clock. See ``docs/rate-limits.md``.
"""

from acmecerts.ratelimit._ledger import RateLimitLedger
from acmecerts.ratelimit._model import (
    LETS_ENCRYPT,
    NO_LIMITS,
    Event,
    Limit,
    RateLimitModel,
    Scope,
    model_for_directory,
)
from acmecerts.ratelimit._priority import IssuanceRequest, PlannedIssuance, prioritize
from acmecerts.ratelimit._scopes import identifier_set_key, registered_domain
from acmecerts.ratelimit._state import BudgetLine, Decision
from acmecerts.ratelimit._throttle import (
    EndpointClass,
    RequestBucket,
    RequestBuckets,
    RequestRate,
    RequestRates,
)

__all__ = [
    "LETS_ENCRYPT",
    "NO_LIMITS",
    "BudgetLine",
    "Decision",
    "EndpointClass",
    "Event",
    "IssuanceRequest",
    "Limit",
    "PlannedIssuance",
    "RateLimitLedger",
    "RateLimitModel",
    "RequestBucket",
    "RequestBuckets",
    "RequestRate",
    "RequestRates",
    "Scope",
    "identifier_set_key",
    "model_for_directory",
    "prioritize",
    "registered_domain",
]
