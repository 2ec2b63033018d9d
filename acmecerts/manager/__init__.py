"""The certificate manager: many certificates, parallel, single-flight, cancellable.

:func:`open_manager` wires one from a shared store in one call (account key, account,
rate-limit ledger); :class:`CertificateManager` is the manager itself.

Beside it, for programs that need the account or the store without a running manager:
:func:`account_client`, :func:`store_ledger` and :func:`register_account` (the wiring
``open_manager`` uses); :func:`roll_over_account_key`, :func:`finish_account_rollover`,
:func:`load_pending_key` and :func:`deactivate_stored_account` (the stored account key's
life); :func:`list_stored_certificates`, :func:`load_stored_certificate`,
:func:`load_attempt_state`, :func:`save_attempt_state` and
:func:`delete_stored_certificate` (what a manager stored); :class:`CaSettings`
(:func:`save_ca_settings`, :func:`load_ca_settings`, :func:`find_ca_dirs`: how a later
run reaches each CA); :class:`CertificateRecord` and :class:`StoredChallenge`
(:func:`save_certificate_record`, :func:`load_certificate_record`,
:func:`list_certificate_records`, :func:`known_certificates`,
:func:`delete_recorded_certificate`, :func:`import_certificate`, :func:`mark_revoked`:
how each certificate was asked for, so a later run
renews it the same way); :func:`call_within_wait` (a CA's
``Retry-After`` at the start of work, waited out within a budget).
"""

from acmecerts.manager._account_keys import (
    deactivate_stored_account,
    finish_account_rollover,
    load_pending_key,
    pending_key_name,
    roll_over_account_key,
)
from acmecerts.manager._cas import (
    CA_SETTINGS_FILE,
    CaSettings,
    find_ca_dirs,
    load_ca_settings,
    save_ca_settings,
)
from acmecerts.manager._certificate_records import (
    CertificateRecord,
    Removal,
    StoredChallenge,
    certificate_for,
    certificate_identifiers,
    certificate_record_key,
    delete_recorded_certificate,
    import_certificate,
    known_certificates,
    known_identifiers,
    list_certificate_records,
    load_certificate_record,
    mark_revoked,
    save_certificate_record,
)
from acmecerts.manager._events import (
    CertificateCancelled,
    CertificateDeferred,
    CertificateEvent,
    CertificateFailed,
    CertificateLoaded,
    CertificateObtained,
    CertificateObtaining,
    CertificateRateLimited,
    CertificateReplacementRequested,
    CertificateReplacesRefused,
    Subscriber,
)
from acmecerts.manager._fleet import ManagerOptions, OpenOptions, open_manager
from acmecerts.manager._manager import CancellationHook, CertificateManager
from acmecerts.manager._reading import (
    StoredCertificate,
    delete_stored_certificate,
    list_stored_certificates,
    load_attempt_state,
    load_json_object,
    load_stored_certificate,
    natural_key,
    save_attempt_state,
)
from acmecerts.manager._spec import (
    CancelledResult,
    CertificateSpec,
    CertificateState,
    CertificateStatus,
    DeferredResult,
    FailedResult,
    IssuedResult,
    IssueResult,
    OwnerGuard,
)
from acmecerts.manager._start_wait import WaitBeyondBudget, call_within_wait, told_to_wait
from acmecerts.manager._wiring import (
    ClientOptions,
    account_client,
    register_account,
    store_ledger,
)

__all__ = [
    "CA_SETTINGS_FILE",
    "CaSettings",
    "CancellationHook",
    "CancelledResult",
    "CertificateCancelled",
    "CertificateDeferred",
    "CertificateEvent",
    "CertificateFailed",
    "CertificateLoaded",
    "CertificateManager",
    "CertificateObtained",
    "CertificateObtaining",
    "CertificateRateLimited",
    "CertificateRecord",
    "CertificateReplacementRequested",
    "CertificateReplacesRefused",
    "CertificateSpec",
    "CertificateState",
    "CertificateStatus",
    "ClientOptions",
    "DeferredResult",
    "FailedResult",
    "IssueResult",
    "IssuedResult",
    "ManagerOptions",
    "OpenOptions",
    "OwnerGuard",
    "Removal",
    "StoredCertificate",
    "StoredChallenge",
    "Subscriber",
    "WaitBeyondBudget",
    "account_client",
    "call_within_wait",
    "certificate_for",
    "certificate_identifiers",
    "certificate_record_key",
    "deactivate_stored_account",
    "delete_recorded_certificate",
    "delete_stored_certificate",
    "find_ca_dirs",
    "finish_account_rollover",
    "import_certificate",
    "known_certificates",
    "known_identifiers",
    "list_certificate_records",
    "list_stored_certificates",
    "load_attempt_state",
    "load_ca_settings",
    "load_certificate_record",
    "load_json_object",
    "load_pending_key",
    "load_stored_certificate",
    "mark_revoked",
    "natural_key",
    "open_manager",
    "pending_key_name",
    "register_account",
    "roll_over_account_key",
    "save_attempt_state",
    "save_ca_settings",
    "save_certificate_record",
    "store_ledger",
    "told_to_wait",
]
