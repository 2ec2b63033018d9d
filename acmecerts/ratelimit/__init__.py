"""Rate-limit-aware scheduling: a ledger of the CA's limits that keeps issuance under them.

* :mod:`~acmecerts.ratelimit._model`: :class:`Limit` and :class:`RateLimitModel`, the
  declarative token-bucket description of a CA's limits, with the :data:`LETS_ENCRYPT`
  and :data:`NO_LIMITS` presets, and :func:`model_for_directory` to pick one for a CA.
* :class:`RateLimitLedger`: records spends, answers "may this order be sent now, and if
  not, when", learns from the CA's ``rateLimited`` answers, persists in a ``Storage``.
  It writes to storage, so it lives beside the manager (``acmecerts.manager._ledger``);
  its state and the questions asked of it are pure and live here (``_state``,
  ``_changes``). The name is still imported from here, on first use (see below).
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

from __future__ import annotations

import importlib
from typing import Any

from acmecerts.ratelimit._ledger_like import LedgerLike
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
    "LedgerLike",
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


def __getattr__(name: str) -> Any:
    """``RateLimitLedger`` on first use (PEP 562), from the manager layer.

    The ledger writes itself to storage, so it lives beside the manager, above this
    policy layer, which imports no storage. It is still public here, where it always
    was (``from acmecerts.ratelimit import RateLimitLedger``); an import at the top of
    this module would make the policy layer load storage and the manager, and
    ``acmecerts.manager`` (which imports this package) would import itself. So the
    name is imported when it is first asked for, and kept. Type checkers read the
    names of this package from ``__init__.pyi``, which declares ``RateLimitLedger``.
    """
    if name != "RateLimitLedger":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = importlib.import_module("acmecerts.manager._ledger").RateLimitLedger
    globals()[name] = value
    return value
