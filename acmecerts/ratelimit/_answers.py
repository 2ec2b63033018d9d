"""What a CA's ``rateLimited`` answer says: which limit, which scope, which names.

The ledger learns from these answers (:meth:`LedgerState.learn
<acmecerts.ratelimit._state.LedgerState.learn>`); the limit is recognised from the
detail text (Let's Encrypt's wording and the links to its documentation), the names it
concerns from the quoted words in it.
"""

from __future__ import annotations

import datetime as _dt
import re

from acmecerts.errors import InvalidInput
from acmecerts.ratelimit._instants import ONE_US
from acmecerts.ratelimit._model import Event, Scope
from acmecerts.ratelimit._scopes import registered_domain

__all__ = [
    "DEFAULT_LEARNED_WAIT",
    "NEW_ACCOUNT_BLOCK",
    "UNKNOWN_LIMIT",
    "classify",
    "event_of",
    "known_scope",
    "learned_until",
    "names_key",
    "quoted_names",
]

#: The name under which a ``rateLimited`` answer that names no known limit is learned;
#: it holds back every order of the account until the CA's ``Retry-After``.
UNKNOWN_LIMIT = "rate_limited"
#: The name under which a ``rateLimited`` answer to ``newAccount`` is learned when the
#: model has no new-account limit (Let's Encrypt's name for it).
NEW_ACCOUNT_BLOCK = "new_accounts_per_ip"
#: How long an unexplained ``rateLimited`` answer without any ``Retry-After`` holds back.
DEFAULT_LEARNED_WAIT = _dt.timedelta(hours=1)

# (patterns in the detail, canonical limit name, scope, renewal exempt). The first match
# wins; Let's Encrypt's details end with a link to the limit's section of its docs.
_KNOWN: tuple[tuple[tuple[str, ...], str, Scope, bool], ...] = (
    (
        ("consecutive-authorization-failures", "paused", "temporarily prevented"),
        "consecutive_authorization_failures_per_identifier_per_account",
        Scope.ACCOUNT_IDENTIFIER,
        False,
    ),
    (
        ("exact-set-of", "exact set"),
        "certificates_per_exact_identifier_set",
        Scope.IDENTIFIER_SET,
        False,
    ),
    (
        ("per-registered-domain", "already issued for", "certificates per registered domain"),
        "certificates_per_registered_domain",
        Scope.REGISTERED_DOMAIN,
        True,
    ),
    (
        ("new-orders-per-account", "too many new orders"),
        "new_orders_per_account",
        Scope.ACCOUNT,
        True,
    ),
    (
        ("authorization-failures-per", "failed authorization", "failed validation"),
        "authorization_failures_per_identifier_per_account",
        Scope.ACCOUNT_IDENTIFIER,
        False,
    ),
    (
        ("registrations-per-ipv6-range", "ipv6 range", "/48"),
        "new_accounts_per_ipv6_range",
        Scope.SOURCE_IPV6_RANGE,
        False,
    ),
    (
        ("registrations-per-ip", "new registrations", "new accounts"),
        "new_accounts_per_ip",
        Scope.SOURCE_ADDRESS,
        False,
    ),
)
_KNOWN_BY_NAME = {name: (scope, exempt) for _, name, scope, exempt in _KNOWN}
_QUOTED = re.compile(r'"([^"\s]+)"')


def classify(detail: str) -> tuple[str, Scope, bool] | None:
    """The canonical limit a ``rateLimited`` detail text names (name, scope, exempt)."""
    text = detail.lower()
    for patterns, name, scope, exempt in _KNOWN:
        if any(p in text for p in patterns):
            return name, scope, exempt
    return None


def known_scope(name: str) -> tuple[Scope, bool]:
    """The scope and renewal exemption of a learned limit ``name`` (else per account)."""
    return _KNOWN_BY_NAME.get(name, (Scope.ACCOUNT, False))


def event_of(scope: Scope) -> Event:
    """The event a limit of ``scope`` counts, for a limit known only from an answer."""
    return {
        Scope.REGISTERED_DOMAIN: Event.NEW_CERTIFICATE,
        Scope.IDENTIFIER_SET: Event.NEW_CERTIFICATE,
        Scope.ACCOUNT: Event.NEW_ORDER,
        Scope.ACCOUNT_IDENTIFIER: Event.AUTHORIZATION_FAILURE,
        Scope.SOURCE_ADDRESS: Event.NEW_ACCOUNT,
        Scope.SOURCE_IPV6_RANGE: Event.NEW_ACCOUNT,
    }[scope]


def learned_until(now: int, until: int | None) -> int:
    """Until when an answer holds back (µs): the CA's ``until``, else an hour from ``now``."""
    return until if until is not None else now + DEFAULT_LEARNED_WAIT // ONE_US


def quoted_names(detail: str) -> set[str]:
    """The words a detail text quotes (the names it concerns), lower-case."""
    return {q.lower().rstrip(".") for q in _QUOTED.findall(detail)}


def names_key(quoted: set[str], key: str) -> bool:
    """Whether the ``quoted`` names concern the scope ``key`` (a name, or its domain)."""
    return (
        key in quoted
        or key.split(" ", 1)[0] in quoted
        or any(_registered_domain_or_none(q) == key for q in quoted)
    )


def _registered_domain_or_none(text: str) -> str | None:
    try:
        return registered_domain(text)
    except InvalidInput:
        return None
