"""What every command that talks to a CA shares: its validated options, the client, the account.

Order of work in every command, so that bad input never costs a request: every option is
validated first (names, files, listen addresses, keys); then the state directory is read;
then challenge servers bind their ports; only then is anything written or the CA contacted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import anyio

from acmecerts import duration_seconds
from acmecerts.client import AcmeClient, ExternalAccountBinding
from acmecerts.errors import (
    AcmeCertsError,
    ErrorKind,
    InvalidInput,
)
from acmecerts.manager import (
    WaitBeyondBudget,
    account_client,
    call_within_wait,
    finish_account_rollover,
    load_pending_key,
    register_account,
)
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.ratelimit import LETS_ENCRYPT as LETS_ENCRYPT_LIMITS
from acmecerts.ratelimit import NO_LIMITS, RateLimitModel, model_for_directory
from acmecerts.retry import RequestRetry
from acmecerts.transport import ProxyConfig

from ._args import AccountArgs, CommonArgs
from ._engine import Deferred
from ._firstcontact import agree_to_terms, can_prompt, resolve_directory
from ._proxy import cli_proxy
from ._report import log, when
from ._state import State, default_state_dir

__all__ = ["CaPlan", "ca_client", "ensure_registered", "open_client", "plan_ca", "wait_or_defer"]

_EMAIL = re.compile(r"[^@\s,;:<>()\[\]\\\"]+@[^@\s,;:<>()\[\]\\\"]+")
#: The longest a request waits inside the transport for a rateLimited/503 Retry-After;
#: longer waits come up to the command, which shows a countdown (or defers).
_REQUEST_MAX_WAIT = 2.0


# -- what the commands were given ----------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class CaPlan:
    """Validated CA options."""

    directory: str
    ca_bundle: Path | None
    state: State
    model: RateLimitModel
    timeout: float
    contact: tuple[str, ...] = ()
    eab: ExternalAccountBinding | None = None
    max_wait: float = 120.0
    #: The proxies to the CA (``None``: direct), worked out from ``--proxy`` and the
    #: environment once.
    proxy: ProxyConfig | None = None
    #: The user agreed to the CA's terms of service (``--agree-tos``).
    agree_tos: bool = False
    #: A question may be asked on the terminal (terms of service).
    prompt: bool = False
    #: ``renew --dry-run``'s run (:mod:`._dryrenew`): orders never send ``replaces``.
    dry_run: bool = False


def _contacts(emails: Sequence[str]) -> tuple[str, ...]:
    contacts: list[str] = []
    for email in emails:
        address = email.strip().removeprefix("mailto:")
        if not _EMAIL.fullmatch(address):
            raise InvalidInput(f"--email {email!r} is not an e-mail address")
        contacts.append(f"mailto:{address}")
    return tuple(dict.fromkeys(contacts))


def _rate_limit_model(value: str, directory: str) -> RateLimitModel:
    choice = value.strip().lower()
    if choice == "auto":
        # Let's Encrypt's production limits; staging's are far higher, so learn them.
        return model_for_directory(directory)
    if choice in ("letsencrypt", "lets-encrypt", "le"):
        return LETS_ENCRYPT_LIMITS
    if choice == "none":
        return NO_LIMITS
    raise InvalidInput(f"--rate-limits {value!r}: choose auto, letsencrypt or none")


def plan_ca(
    common: CommonArgs, account: AccountArgs | None = None, *, max_wait: float = 120.0
) -> CaPlan:
    """Validate the CA options (raises :class:`InvalidInput`; touches nothing)."""
    # InvalidInput for a URL a CA cannot have; parsed once, then passed on
    directory = resolve_directory(common.directory, staging=common.staging)
    timeout = duration_seconds(common.timeout, "--timeout", positive=True)
    ca_bundle = common.ca_bundle.expanduser() if common.ca_bundle is not None else None
    if ca_bundle is not None:
        try:
            with ca_bundle.open("rb") as file:
                file.read(1)
        except OSError as exc:
            raise InvalidInput(
                f"cannot read --ca-bundle {ca_bundle}: {exc.strerror or exc}"
            ) from exc
    account = account or AccountArgs()
    eab = None
    if (account.eab_kid is None) != (account.eab_hmac_key is None):
        raise InvalidInput("--eab-kid and --eab-hmac-key go together")
    if account.eab_kid is not None and account.eab_hmac_key is not None:
        if not re.fullmatch(r"[A-Za-z0-9_-]+=*", account.eab_hmac_key):
            raise InvalidInput("--eab-hmac-key must be base64url, as the CA gave it")
        eab = ExternalAccountBinding(kid=account.eab_kid, hmac_key=account.eab_hmac_key)
    root = common.state_dir if common.state_dir is not None else default_state_dir()
    return CaPlan(
        directory=directory,
        ca_bundle=ca_bundle,
        state=State(root, directory),
        model=_rate_limit_model(common.rate_limits, directory),
        timeout=timeout,
        contact=_contacts(account.emails),
        eab=eab,
        max_wait=duration_seconds(max_wait, "--max-wait"),
        proxy=cli_proxy(common.proxy),
        agree_tos=account.agree_tos,
        prompt=can_prompt(json_mode=common.json),
    )


# -- the account ------------------------------------------------------------------------------


def ca_client(
    ca: CaPlan,
    *,
    account: bool = False,
    account_key: AccountKey | None = None,
    account_url: str | None = None,
) -> AcmeClient:
    """The client for ``ca``'s options: the one place the CLI makes an :class:`AcmeClient`.

    The ``account``'s client (:func:`open_client`) records in the rate-limit ledger and
    cuts the transport's waits for a ``Retry-After`` short (longer ones come up to the
    command: :func:`wait_or_defer`); the others (ARI at ``status``, ``revoke --cert-key``)
    sign nothing for the account and keep the library's waits.
    """
    state = ca.state
    return account_client(
        state.storage,
        state.layout,
        rate_limits=ca.model if account else None,
        account_key=account_key,
        account_url=account_url,
        contact=ca.contact,
        eab=ca.eab,
        terms_of_service_agreed=ca.agree_tos,
        ca_bundle=ca.ca_bundle,
        proxy=ca.proxy,
        attempt_timeout=ca.timeout,
        request_retry=RequestRetry(max_wait=min(ca.max_wait, _REQUEST_MAX_WAIT))
        if account
        else None,
        send_replaces=not ca.dry_run,  # a rehearsal's order replaces nothing (RFC 9773 §5)
    )


@contextlib.asynccontextmanager
async def open_client(
    ca: CaPlan, *, create: bool, key_type: KeyType = KeyType.EC256
) -> AsyncIterator[AcmeClient]:
    """A client for the stored account (created first with ``create``), closed after.

    An account key rollover that was interrupted is finished (or undone) first, under the
    account lock, so that no command ever uses a key the CA no longer accepts.
    """
    state = ca.state
    key = await state.load_account_key()
    if key is None and not create:
        raise InvalidInput(
            f"no account for {ca.directory} in {state.root}: create one with "
            "`acmecerts account create` (issuing a certificate creates one too)"
        )
    # Read without a key too: a corrupt account.json stops the command before any request.
    url = await state.load_account_url(key)
    # no key: a throwaway one until the terms are agreed to
    client = ca_client(
        ca, account=True, account_key=key, account_url=url if key is not None else None
    )
    stored_url = client.account_url
    async with client:
        try:
            if key is not None and (
                await load_pending_key(state.storage, state.layout) is not None
            ):
                await wait_or_defer(
                    ca,
                    lambda: finish_account_rollover(state.storage, state.layout, client),
                    what="account lookup",
                )
                stored_url = client.account_url
            if create and client.account_url is None:
                # First contact: no account is created (nor a key stored) before the
                # user agreed to the CA's terms of service, if it publishes any.
                client.terms_of_service_agreed = await agree_to_terms(
                    client,
                    directory=ca.directory,
                    agreed=ca.agree_tos,
                    prompt=ca.prompt,
                    has_key=key is not None,
                )
                if key is None:
                    client.account_key = await state.create_account_key(key_type)
                    client.account_url = await state.load_account_url(client.account_key)
            yield client
        finally:
            url = client.account_url
            if url is not None and url != stored_url:
                with anyio.CancelScope(shield=True):
                    try:
                        await state.save_account_url(url, client.account_key)
                    except AcmeCertsError as exc:
                        log.warning("could not save the account URL: %s", exc)


T = TypeVar("T")


async def wait_or_defer(
    ca: CaPlan,
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    on_wait: Callable[[_dt.datetime, str], None] | None = None,
) -> T:
    """Await ``call()`` (the work's start: directory, newNonce, newAccount, account
    lookup), waiting out the CA's ``Retry-After`` within ``--max-wait``
    (:func:`~acmecerts.manager.call_within_wait`).

    ``on_wait(until, reason)`` is called before each wait (the countdown). An instant
    past the budget raises :class:`Deferred` at once; any other error is raised as it is.
    """

    def waiting(delay: float, error: AcmeCertsError) -> None:
        log.info("%s: the CA asked to wait %.1f s: %s", what, delay, error)
        if on_wait is not None:
            reason = "the CA is busy" if error.kind is ErrorKind.SERVER_BUSY else "rate limited"
            until = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=delay)
            on_wait(until, f"{reason} ({what})")

    try:
        return await call_within_wait(call, max_wait=ca.max_wait, on_wait=waiting)
    except WaitBeyondBudget as beyond:
        until, error = beyond.until, beyond.error
    raise Deferred(
        f"{what}: the CA asked to wait until {when(until)} ({error}), more than "
        f"--max-wait {ca.max_wait:g} s allows; nothing was ordered (run again after that "
        "instant)",
        until=until,
        error=error,
    ) from error


async def ensure_registered(ca: CaPlan, client: AcmeClient) -> None:
    """Register the account if its URL is not known yet (under the account lock, as
    :func:`~acmecerts.manager.open_manager` does: one ``newAccount`` per key)."""
    if client.account_url is None:
        await register_account(ca.state.storage, ca.state.layout, client)
