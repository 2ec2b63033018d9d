"""What type checkers read for :mod:`acmecerts.ratelimit` (a declaration, never run).

``__init__.py`` imports each name on first use (PEP 562) from the module its ``_LAZY``
table names; ``RateLimitLedger`` from the manager layer, which the policy layer does not
import. tests/ratelimit/test_public_names.py holds the two files to the same names,
modules and objects.
"""

from acmecerts.manager._ledger import RateLimitLedger as RateLimitLedger
from acmecerts.ratelimit._ledger_like import LedgerLike
from acmecerts.ratelimit._model import (
    LETS_ENCRYPT,
    LETS_ENCRYPT_STAGING,
    NO_LIMITS,
    Event,
    Limit,
    RateLimitModel,
    Scope,
    model_for_directory,
)
from acmecerts.ratelimit._priority import IssuanceRequest, PlannedIssuance, prioritize
from acmecerts.ratelimit._profiles import (
    LETS_ENCRYPT_PROFILES,
    LETS_ENCRYPT_STAGING_PROFILES,
    CaProfiles,
    ProfileRules,
    profile_rules,
)
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
    "LETS_ENCRYPT_PROFILES",
    "LETS_ENCRYPT_STAGING",
    "LETS_ENCRYPT_STAGING_PROFILES",
    "NO_LIMITS",
    "BudgetLine",
    "CaProfiles",
    "Decision",
    "EndpointClass",
    "Event",
    "IssuanceRequest",
    "LedgerLike",
    "Limit",
    "PlannedIssuance",
    "ProfileRules",
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
    "profile_rules",
    "registered_domain",
]
