"""Rate-limit-aware scheduling: a ledger of the CA's limits that keeps issuance under them.

* :mod:`~acmecerts.ratelimit._model`: :class:`Limit` and :class:`RateLimitModel`, the
  declarative token-bucket description of a CA's limits, with the :data:`LETS_ENCRYPT`,
  :data:`LETS_ENCRYPT_STAGING` and :data:`NO_LIMITS` presets, and
  :func:`model_for_directory` to pick one for a CA.
* :mod:`~acmecerts.ratelimit._profiles`: :class:`CaProfiles`, a CA's certificate profiles
  as data with dates (:data:`LETS_ENCRYPT_PROFILES`), and :func:`profile_rules`: what
  profile P at CA X issues at instant T (:class:`ProfileRules`).
* :class:`RateLimitLedger`: records spends, answers "may this order be sent now, and if
  not, when", learns from the CA's ``rateLimited`` answers, persists in a ``Storage``.
  It writes to storage, so it lives beside the manager (``acmecerts.manager._ledger``);
  its state and the questions asked of it are pure and live here (``_state``,
  ``_changes``). The name is still public here (see below).
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

from typing import Any

from acmecerts._lazy import import_lazily

_MODEL = "acmecerts.ratelimit._model"
_THROTTLE = "acmecerts.ratelimit._throttle"
_PROFILES = "acmecerts.ratelimit._profiles"

#: Each public name and the module that defines it. Type checkers read the same names
#: from ``__init__.pyi`` (tests/ratelimit/test_public_names.py holds the two together).
_LAZY: dict[str, str] = {
    "LETS_ENCRYPT": _MODEL,
    "LETS_ENCRYPT_PROFILES": _PROFILES,
    "LETS_ENCRYPT_STAGING": _MODEL,
    "LETS_ENCRYPT_STAGING_PROFILES": _PROFILES,
    "NO_LIMITS": _MODEL,
    "BudgetLine": "acmecerts.ratelimit._state",
    "CaProfiles": _PROFILES,
    "Decision": "acmecerts.ratelimit._state",
    "EndpointClass": _THROTTLE,
    "Event": _MODEL,
    "IssuanceRequest": "acmecerts.ratelimit._priority",
    "LedgerLike": "acmecerts.ratelimit._ledger_like",
    "Limit": _MODEL,
    "PlannedIssuance": "acmecerts.ratelimit._priority",
    "ProfileRules": _PROFILES,
    # the manager layer: see __getattr__
    "RateLimitLedger": "acmecerts.manager._ledger",
    "RateLimitModel": _MODEL,
    "RequestBucket": _THROTTLE,
    "RequestBuckets": _THROTTLE,
    "RequestRate": _THROTTLE,
    "RequestRates": _THROTTLE,
    "Scope": _MODEL,
    "identifier_set_key": "acmecerts.ratelimit._scopes",
    "model_for_directory": _MODEL,
    "prioritize": "acmecerts.ratelimit._priority",
    "profile_rules": _PROFILES,
    "registered_domain": "acmecerts.ratelimit._scopes",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    """Each public name on first use (PEP 562), from the module that defines it.

    ``RateLimitLedger`` writes itself to storage, so it lives beside the manager, above
    this policy layer, which imports no storage. It is still public here, where it always
    was (``from acmecerts.ratelimit import RateLimitLedger``); an import at the top of
    this module would make the policy layer load storage and the manager, and
    ``acmecerts.manager`` (which imports this package) would import itself. So every
    name is imported when it is first asked for, and kept; type checkers read them all
    from ``__init__.pyi``, which is for them only (a declaration, never run).
    """
    return import_lazily(globals(), _LAZY, name)


def __dir__() -> list[str]:
    """The public names and whatever this package holds so far."""
    return sorted(set(globals()) | set(__all__))
