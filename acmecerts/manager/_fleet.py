"""``open_manager``: a running certificate manager wired from a store in one call.

Every replica of a fleet needs the same things from the store it shares with the others,
in the same order, and each step is easy to get wrong by hand::

    async with (
        FileStorage("/var/lib/acmecerts") as storage,
        open_manager(storage, DIRECTORY, solvers=[solver], contact=[...]) as manager,
    ):
        manager.manage("default.web", ["web.example.com"])

1. the account key: loaded from the store, or created there once under the store's
   account lock (:func:`~acmecerts.storage.load_or_create_account_key`);
2. the account URL: the stored one, or the account is registered once under the same
   lock and its URL stored, so replicas starting together send one ``newAccount``;
3. the rate-limit ledger, kept in the same store (``KeyLayout(directory).ledger()``) so
   every replica spends one budget, with the CA's limits chosen from its directory URL;
4. the client and the manager on that key, URL, ledger, store and layout.

On leaving the block the manager stops (in-flight work is cancelled and cleaned up) and
the client's connections are closed; the same happens when a step fails part-way. The
store itself is the caller's: it is neither entered nor closed here.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, TypedDict, Unpack

import anyio

from acmecerts._time import Clock, SystemClock, duration_seconds
from acmecerts.client import AcmeClient
from acmecerts.errors import InvalidInput
from acmecerts.manager._manager import CertificateManager
from acmecerts.manager._wiring import ClientOptions, account_client, register_account
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.protocol.keys import KeyType
from acmecerts.ratelimit import RateLimitModel
from acmecerts.retry import AttemptSchedule
from acmecerts.solvers._base import Solver
from acmecerts.storage import KeyLayout, Storage, load_or_create_account_key

__all__ = ["ManagerOptions", "OpenOptions", "open_manager"]


class ManagerOptions(TypedDict, total=False):
    """The :class:`~acmecerts.manager.CertificateManager` arguments passed through.

    Each means what it means to the manager (``concurrency``, ``schedule``,
    ``renewal_fraction``, ``rng``, ``limiter``, ``error_backoff``, ``retention``,
    ``lock_lease``, ``replica_recheck_factor``, ``first_ari_check``); its clock is the
    client's.
    ``renewal_fraction`` ``None`` (or absent) is the lifetime-aware default: a third,
    half under 10 days of lifetime.
    """

    concurrency: int
    schedule: AttemptSchedule | None
    renewal_fraction: float | None
    rng: random.Random | None
    limiter: anyio.CapacityLimiter | None
    error_backoff: AttemptSchedule | None
    retention: float | _dt.timedelta | None
    lock_lease: float | _dt.timedelta
    replica_recheck_factor: float
    first_ari_check: float | _dt.timedelta


class OpenOptions(ClientOptions, ManagerOptions, total=False):
    """Every option :func:`open_manager` passes through: the client's and the manager's."""


#: The arguments :func:`open_manager` wires itself, and what to use instead.
_WIRED = {
    "account_key": "the account key is the store's (account_key_type= for a new one)",
    "account_url": "the account URL is the store's (registered once if there is none)",
    "ledger": "the ledger is kept in the store: choose its limits with rate_limits=",
    "layout": "the layout is KeyLayout(directory_url, account): pass account=",
    "storage": "the store is the first argument",
    "client": "the client is made here from the client options",
}


def _split(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` split into the client's and the manager's; unknown ones are refused."""
    client_keys = ClientOptions.__optional_keys__
    manager_keys = ManagerOptions.__optional_keys__
    for name in options:
        if name in _WIRED:
            raise InvalidInput(f"open_manager() does not take {name}=: {_WIRED[name]}")
        if name not in client_keys and name not in manager_keys:
            known = ", ".join(sorted(client_keys | manager_keys))
            raise InvalidInput(f"open_manager() got an unknown option {name!r} (options: {known})")
    client = {k: v for k, v in options.items() if k in client_keys}
    manager = {k: v for k, v in options.items() if k in manager_keys}
    return client, manager


async def _close(client: AcmeClient) -> None:
    # also when the block was cancelled: connections left open would leak
    with anyio.CancelScope(shield=True):
        await client.aclose()


@contextlib.asynccontextmanager
async def open_manager(
    storage: Storage,
    directory_url: str | DirectoryUrl,
    *,
    solvers: Sequence[Solver],
    account: str = "default",
    rate_limits: RateLimitModel | Literal["auto"] | None = "auto",
    account_key_type: KeyType | str = KeyType.EC256,
    terms_of_service_agreed: bool = True,
    lock_timeout: float | None = 120.0,
    **options: Unpack[OpenOptions],
) -> AsyncIterator[CertificateManager]:
    """A running :class:`CertificateManager` for the account kept in ``storage``.

    ::

        async with open_manager(storage, DIRECTORY, solvers=[solver]) as manager:
            manager.manage("default.web", ["web.example.com"])

    Every replica that opens a manager on the same store and CA uses one account key and
    one account (created once, under the store's lock, by whichever replica comes
    first), one rate-limit ledger, and the certificates, orders and attempt state of
    the others. Nothing is sent to the CA when the account's URL is stored; otherwise
    one ``newAccount`` is.

    Args:
        storage: The shared store (:class:`~acmecerts.storage.FileStorage`,
            :class:`~acmecerts.storage.kubernetes.KubernetesStorage`...). It stays open:
            close it after the block.
        directory_url: The CA's directory URL: an https URL string or a :class:`DirectoryUrl`.
        solvers: The challenge solvers (at least one).
        account: The account's name in the store (:class:`~acmecerts.storage.KeyLayout`):
            several accounts on one CA may share a store under different names.
        rate_limits: The ledger's limits model. ``"auto"``:
            :func:`~acmecerts.ratelimit.model_for_directory` (Let's Encrypt's limits for
            its production directory, none known for other CAs, where the ledger still
            learns from ``rateLimited`` answers); a
            :class:`~acmecerts.ratelimit.RateLimitModel` (e.g. after an override was
            granted); ``None``: no ledger. The ledger lives in the store under
            ``KeyLayout(directory_url).ledger()`` and is ``manager.client.ledger``.
        account_key_type: The type of the account key if one is created (a stored key is
            used whatever its type).
        terms_of_service_agreed: The client's (:class:`~acmecerts.AcmeClient`): sent when
            the account is registered; ``False`` creates no account at a CA that
            publishes terms of service (:class:`~acmecerts.TermsOfServiceNotAgreed`).
        lock_timeout: How long to wait for another replica holding the account lock
            (seconds; ``None``: forever), else :class:`~acmecerts.storage.LockTimeout`.
        **options: Passed to :class:`~acmecerts.AcmeClient` (:class:`ClientOptions`:
            ``contact``, ``eab``, ``ca_bundle``, ``clock``, ``proxy``, timeouts...) and to
            :class:`CertificateManager` (:class:`ManagerOptions`: ``concurrency``,
            ``schedule``, ``renewal_fraction``, ``limiter``...).

    Yields:
        The manager, entered (its scheduler runs) and subscribed to nothing yet; its
        client is ``manager.client``. On leaving the block the manager is stopped and
        the client closed, also when opening fails part-way.

    Raises:
        InvalidInput: a bad argument, before anything is read or written.
        RateLimitDeferred: the ledger holds the new account back (its limit on new
            accounts is spent); nothing was sent, ``retry_after`` says when opening may
            succeed. The account key stays stored, so the next try registers that key.
        RateLimited: the CA refused the new account for its rate limits (``retry_after``).
        ExternalAccountRequired: the CA requires EAB and no ``eab`` option was given.
        StorageError: the store failed, or holds a corrupt account key (never replaced).
        LockTimeout: another replica held the account lock for ``lock_timeout`` seconds.
    """
    if not isinstance(storage, Storage):
        raise InvalidInput(f"storage must be a Storage (FileStorage...), got {storage!r}")
    directory_url = DirectoryUrl(directory_url)  # parsed here once, then passed on
    layout = KeyLayout(directory_url, account)
    key_type = KeyType.parse(account_key_type)
    if not isinstance(terms_of_service_agreed, bool):
        raise InvalidInput("terms_of_service_agreed must be True or False")
    if lock_timeout is not None:
        lock_timeout = duration_seconds(lock_timeout, "lock_timeout")
    client_options, manager_options = _split(dict(options))
    clock: Clock = client_options.pop("clock", None) or SystemClock()
    body_error: BaseException | None = None
    unwrapped: BaseException | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            # Both constructors check their arguments and do no I/O. The client's own
            # throwaway key is replaced by the store's before anything is signed.
            client = account_client(
                storage,
                layout,
                rate_limits=rate_limits,
                clock=clock,
                terms_of_service_agreed=terms_of_service_agreed,
                **client_options,
            )
            stack.push_async_callback(_close, client)
            manager = CertificateManager(
                client, solvers=solvers, storage=storage, layout=layout, **manager_options
            )
            client.account_key = await load_or_create_account_key(
                storage, layout, key_type=key_type, lock_timeout=lock_timeout
            )
            await register_account(storage, layout, client, lock_timeout=lock_timeout)
            await stack.enter_async_context(manager)
            try:
                yield manager
            except BaseException as exc:
                body_error = exc
                raise
    except BaseExceptionGroup as group:
        # The manager's task group wraps what the block raised; the caller gets it back
        # as it raised it (a group with anything else in it stays a group).
        if body_error is None or not _only(group, body_error):
            raise
        unwrapped = body_error
    if unwrapped is not None:
        raise unwrapped


def _only(group: BaseExceptionGroup[BaseException], error: BaseException) -> bool:
    """Whether ``group`` holds ``error`` and nothing else (at any depth)."""
    inner: tuple[BaseException, ...] = (group,)
    while len(inner) == 1 and isinstance(inner[0], BaseExceptionGroup):
        inner = inner[0].exceptions
    return len(inner) == 1 and inner[0] is error
