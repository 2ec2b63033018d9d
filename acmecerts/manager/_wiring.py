"""Wiring one account from a store: its client, its ledger, its registration.

:func:`~acmecerts.manager.open_manager` does these steps for a manager; a program that
needs only the client (a command that revokes, shows the account, reads ARI) takes the
same path through the functions here, so that every client of an account records in the
same ledger and registers the account once:

* :func:`store_ledger`: the rate-limit ledger kept in the store
  (``KeyLayout(directory).ledger()``), every replica spending one budget;
* :func:`account_client`: the :class:`~acmecerts.AcmeClient` of the layout's CA on that
  ledger, from :class:`ClientOptions`;
* :func:`register_account`: the stored account URL of the client's key, else one
  registration under the store's account lock, its URL stored.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypedDict, Unpack

from acmecerts._time import Clock, SystemClock
from acmecerts.client import AcmeClient, ExternalAccountBinding, PollPolicy
from acmecerts.errors import InvalidInput
from acmecerts.manager._ledger import RateLimitLedger
from acmecerts.protocol.keys import AccountKey
from acmecerts.ratelimit import CaProfiles, RateLimitModel, model_for_directory
from acmecerts.ratelimit._throttle import RatesTable
from acmecerts.retry import RequestRetry
from acmecerts.storage import KeyLayout, Storage, load_account_url, save_account_url
from acmecerts.transport import AcmeTransport, ProxySetting, RequestHook, RequestThrottle, UrlPolicy

__all__ = ["ClientOptions", "account_client", "register_account", "store_ledger"]

#: What ``rate_limits=`` takes: a model, ``"auto"`` (chosen from the directory URL), or
#: ``None`` (no ledger).
RateLimits = RateLimitModel | Literal["auto"] | None


class ClientOptions(TypedDict, total=False):
    """The :class:`~acmecerts.AcmeClient` arguments :func:`open_manager` passes through.

    Each means what it means to :class:`~acmecerts.AcmeClient`. ``clock`` is shared by
    the client, the ledger and the manager. ``contact`` and ``eab`` are used when the
    account is registered (a stored account is not changed: see
    :meth:`~acmecerts.AcmeClient.update_contact`). ``on_request`` is deprecated (it
    emits a ``DeprecationWarning``): subscribe to the manager's client instead.
    """

    contact: Sequence[str]
    eab: ExternalAccountBinding | None
    ca_bundle: str | Path | None
    clock: Clock | None
    request_timeout: float | _dt.timedelta
    request_retry: RequestRetry | None
    attempt_timeout: float | _dt.timedelta
    poll: PollPolicy | None
    http2: bool
    transport: AcmeTransport | None
    request_rates: RatesTable | RateLimitModel | RequestThrottle | Literal["auto"] | None
    on_request: RequestHook | None
    url_policy: UrlPolicy | None
    proxy: ProxySetting
    ca_profiles: CaProfiles | Literal["auto"] | None
    send_replaces: bool


def store_ledger(
    storage: Storage,
    layout: KeyLayout,
    rate_limits: RateLimits = "auto",
    *,
    clock: Clock | None = None,
) -> RateLimitLedger | None:
    """The rate-limit ledger of ``layout``'s CA, kept in ``storage`` (``None``: no ledger).

    ``rate_limits`` ``"auto"``: :func:`~acmecerts.ratelimit.model_for_directory` of the
    layout's directory URL; a :class:`~acmecerts.ratelimit.RateLimitModel`; ``None``.
    """
    if rate_limits is None:
        return None
    if isinstance(rate_limits, str) and rate_limits == "auto":
        model = model_for_directory(layout.directory_url)
    elif isinstance(rate_limits, RateLimitModel):
        model = rate_limits
    else:
        raise InvalidInput(
            'rate_limits must be "auto", a RateLimitModel (e.g. acmecerts.ratelimit.'
            f"LETS_ENCRYPT) or None for no ledger, not {rate_limits!r}"
        )
    return RateLimitLedger(
        model, clock=clock or SystemClock(), storage=storage, key=layout.ledger()
    )


def account_client(
    storage: Storage,
    layout: KeyLayout,
    *,
    rate_limits: RateLimits = "auto",
    account_key: AccountKey | None = None,
    account_url: str | None = None,
    terms_of_service_agreed: bool = True,
    **options: Unpack[ClientOptions],
) -> AcmeClient:
    """The client of ``layout``'s CA and account, on the ledger kept in ``storage``.

    Checks its arguments and does no I/O (the client is not entered). ``account_key``
    and ``account_url`` are the account's (``None``: a throwaway key until one is set,
    and no URL yet: see :func:`register_account`). ``options`` mean what they mean to
    :class:`~acmecerts.AcmeClient`; ``clock`` is the ledger's too.
    """
    ledger = store_ledger(storage, layout, rate_limits, clock=options.get("clock"))
    return AcmeClient(
        layout.directory_url,
        account_key=account_key,
        account_url=account_url,
        ledger=ledger,
        terms_of_service_agreed=terms_of_service_agreed,
        **options,
    )


async def register_account(
    storage: Storage,
    layout: KeyLayout,
    client: AcmeClient,
    *,
    lock_timeout: float | None = 120.0,
) -> str:
    """The stored account URL of the client's key, else register once and store it.

    The client's ``account_url`` is set to it. Under the account lock the store is read
    again first: of several processes registering at once, one sends ``newAccount``.

    Raises:
        LockTimeout: another process held the account lock for ``lock_timeout`` seconds.
        AcmeCertsError: the registration failed (nothing is stored then).
    """
    key = client.account_key
    url = await load_account_url(storage, layout, account_key=key)
    if url is None:
        # Under the account lock, re-read: a replica that held it before us registered.
        async with storage.lock(layout.account_lock(), timeout=lock_timeout):
            url = await load_account_url(storage, layout, account_key=key)
            if url is None:
                # A key whose account the CA already has (its URL was never stored) gets
                # that account back (RFC 8555 §7.3.1): a key is never more than one account.
                await client.register()
                url = client.account_url
                assert url is not None
                await save_account_url(storage, layout, url, account_key=key)
    client.account_url = url
    return url
