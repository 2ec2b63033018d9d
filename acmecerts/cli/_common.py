"""What every command shares: options, validation, output, exit codes, the account.

Order of work in every command, so that bad input never costs a request: every option is
validated first (names, files, listen addresses, keys); then the state directory is read;
then challenge servers bind their ports; only then is anything written or the CA contacted.

Exit codes: 0 ok; 1 failed (the CA's problem detail is printed); 2 bad input or unusable
state (one line on stderr, nothing sent); 3 deferred (rate limits, or a CA that asked to
wait longer than ``--max-wait``); 130 interrupted (SIGINT); 143 terminated (SIGTERM).
With ``--json`` exactly one JSON object goes to stdout, whatever happens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import logging
import math
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
from rich.console import Console
from rich.text import Text

from acmecerts._time import Clock, SystemClock
from acmecerts.client import AcmeClient, ExternalAccountBinding
from acmecerts.errors import (
    AccountDoesNotExist,
    AcmeCertsError,
    AcmeProblem,
    ErrorKind,
    ExternalAccountRequired,
    InvalidInput,
    RateLimitDeferred,
    StorageError,
)
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.ratelimit import LETS_ENCRYPT as LETS_ENCRYPT_LIMITS
from acmecerts.ratelimit import NO_LIMITS, RateLimitModel, model_for_directory
from acmecerts.retry import RequestRetry, retry_request
from acmecerts.transport import ProxyConfig

from ._args import AccountArgs, CommonArgs
from ._constants import (
    EXIT_DEFERRED,
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    LETS_ENCRYPT,
)
from ._display import LiveView, NullView, PlainView, QuietView, View
from ._engine import Board, Deferred, TrackingClient, problem_of
from ._firstcontact import agree_to_terms, can_prompt, resolve_directory
from ._proxy import cli_proxy
from ._state import State, default_state_dir, directory_slug

__all__ = [
    "EXIT_DEFERRED",
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "LETS_ENCRYPT",
    "AccountArgs",
    "CaPlan",
    "CommonArgs",
    "Deferred",
    "Report",
    "choose_view",
    "configure_logging",
    "ensure_registered",
    "first_error",
    "guarded",
    "interrupted_code",
    "iso",
    "open_client",
    "plan_ca",
    "problem_json",
    "status_word",
    "wait_or_defer",
    "when",
]

log = logging.getLogger("acmecerts.cli")

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


def _seconds(value: float, option: str, *, allow_zero: bool = False) -> float:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        what = "0 or more" if allow_zero else "a positive number of"
        raise InvalidInput(f"{option} must be {what} seconds, not {value}")
    return value


def plan_ca(
    common: CommonArgs, account: AccountArgs | None = None, *, max_wait: float = 120.0
) -> CaPlan:
    """Validate the CA options (raises :class:`InvalidInput`; touches nothing)."""
    directory = resolve_directory(common.directory, staging=common.staging)
    directory_slug(directory)  # InvalidInput for a URL a CA cannot have
    timeout = _seconds(common.timeout, "--timeout")
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
        max_wait=_seconds(max_wait, "--max-wait", allow_zero=True),
        proxy=cli_proxy(common.proxy),
        agree_tos=account.agree_tos,
        prompt=can_prompt(json_mode=common.json),
    )


# -- output ---------------------------------------------------------------------------------


class Report:
    """Writes results: one line on stderr for errors, rich text or JSON on stdout."""

    def __init__(self, *, json_mode: bool, json_base: dict[str, Any] | None = None) -> None:
        self.json_mode = json_mode
        #: Fields every error object of this command carries too (``issue`` and ``renew``
        #: add an empty ``certificates`` list, so they always print one shape).
        self.json_base = dict(json_base or {})
        self.out = Console(soft_wrap=True, highlight=False)
        self.err = Console(stderr=True, soft_wrap=True, highlight=False)

    def json(self, document: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()

    def error_line(self, code: int, message: str) -> str:
        """Write the one ``acmecerts: error: ...`` line to stderr; return the message."""
        line = " ".join(message.split())
        label = "deferred" if code == EXIT_DEFERRED else "error"
        sys.stderr.write(f"acmecerts: {label}: {line}\n")
        sys.stderr.flush()
        return line

    def error(
        self,
        code: int,
        message: str,
        problem: AcmeProblem | None = None,
        **extra: Any,
    ) -> int:
        line = self.error_line(code, message)
        if self.json_mode:
            self.json(
                {
                    "status": status_word(code),
                    "exit_code": code,
                    "error": line,
                    "problem": problem_json(problem),
                    **self.json_base,
                    **extra,
                }
            )
        return code

    def rows(self, title: Text, rows: Sequence[tuple[str, str]]) -> None:
        self.out.print(title)
        for label, value in rows:
            line = Text(f"  {label:<10} ", style="dim")
            line.append(value)
            self.out.print(line)


def status_word(code: int) -> str:
    """The ``status`` of a ``--json`` object for an exit code."""
    return {
        EXIT_OK: "ok",
        EXIT_INPUT: "invalid-input",
        EXIT_INTERRUPTED: "interrupted",
        EXIT_TERMINATED: "interrupted",
        EXIT_DEFERRED: "deferred",
    }.get(code, "failed")


def problem_json(problem: AcmeProblem | None) -> dict[str, Any] | None:
    if problem is None:
        return None
    return {"type": problem.type, "detail": problem.detail, "status": problem.status_code}


def iso(instant: _dt.datetime | None) -> str | None:
    return None if instant is None else instant.isoformat()


def when(instant: _dt.datetime) -> str:
    return f"{instant.astimezone(_dt.UTC):%Y-%m-%d %H:%M:%S} UTC"


# -- logging --------------------------------------------------------------------------------


class _OneLineWarnings(logging.Handler):
    """Without ``-v``: warnings and errors as one line each, never a traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = " ".join(record.getMessage().split())
            sys.stderr.write(f"acmecerts: {record.levelname.lower()}: {message}\n")
        except Exception:  # logging must never break the command
            self.handleError(record)


_handler: logging.Handler | None = None


def configure_logging(verbose: int, console: Console) -> None:
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    if verbose:
        if console.is_terminal:
            from rich.logging import RichHandler

            _handler = RichHandler(console=console, show_path=False, log_time_format="%H:%M:%S")
        else:  # a log file: one plain line per record, never wrapped
            _handler = logging.StreamHandler(sys.stderr)
            _handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
        level = logging.DEBUG if verbose > 1 else logging.INFO
        logging.getLogger("acmecerts").setLevel(level)
        logging.getLogger("httpx").setLevel(logging.INFO)
    else:
        _handler = _OneLineWarnings()
        # The manager logs every failed attempt as a warning; the CLI reports it itself.
        logging.getLogger("acmecerts").setLevel(logging.WARNING)
        logging.getLogger("acmecerts.manager").setLevel(logging.ERROR)
    root.addHandler(_handler)
    root.setLevel(logging.WARNING)


# -- running a command ------------------------------------------------------------------------


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def first_error(exc: BaseException) -> BaseException:
    """The most telling error inside an exception group (task groups wrap errors)."""
    leaves = _leaves(exc)
    for wanted in (KeyboardInterrupt, AcmeCertsError):
        for leaf in leaves:
            if isinstance(leaf, wanted):
                return leaf
    return leaves[0] if leaves else exc


def interrupted_code(exc: KeyboardInterrupt) -> tuple[int, str]:
    """``(exit code, message)`` for a stop by a signal: 130 "interrupted" (SIGINT, also a
    plain :class:`KeyboardInterrupt`), 143 "terminated" (SIGTERM)."""
    return (
        getattr(exc, "exit_code", EXIT_INTERRUPTED),
        getattr(exc, "message", "interrupted"),
    )


def guarded(report: Report, work: Callable[[], int]) -> int:
    """Run ``work``; map errors to one line and an exit code."""
    try:
        return work()
    except BaseException as raised:
        exc = first_error(raised)
        if isinstance(exc, KeyboardInterrupt):
            return report.error(*interrupted_code(exc))
        if isinstance(exc, InvalidInput | StorageError | ExternalAccountRequired):
            return report.error(EXIT_INPUT, str(exc))
        if isinstance(exc, Deferred):
            return report.error(
                EXIT_DEFERRED, str(exc), problem_of(exc.error), until=iso(exc.until)
            )
        if isinstance(exc, RateLimitDeferred):
            until = exc.retry_after.isoformat() if exc.retry_after else None
            return report.error(EXIT_DEFERRED, str(exc), until=until)
        if isinstance(exc, AcmeCertsError):
            return report.error(EXIT_FAILED, str(exc), problem_of(exc))
        raise


def choose_view(report: Report, board: Board, *, single: bool, title: str = "") -> View:
    if report.json_mode:
        return NullView(board)
    if report.out.is_terminal:
        return LiveView(board, report.out, title=title)
    if single:
        return QuietView(board)
    return PlainView(board)


# -- the account ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def open_client(
    ca: CaPlan, *, create: bool, key_type: KeyType = KeyType.EC256
) -> AsyncIterator[TrackingClient]:
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
    client = TrackingClient(
        ca.directory,
        account_key=key,  # None: a throwaway key until the terms are agreed to
        account_url=url if key is not None else None,
        contact=ca.contact,
        eab=ca.eab,
        ca_bundle=ca.ca_bundle,
        attempt_timeout=ca.timeout,
        request_retry=RequestRetry(max_wait=min(ca.max_wait, _REQUEST_MAX_WAIT)),
        ledger=state.ledger(ca.model),
        proxy=ca.proxy,
    )
    client.terms_agreed = ca.agree_tos
    stored_url = client.account_url
    async with client:
        try:
            if key is not None and await state.load_pending_key() is not None:
                await wait_or_defer(
                    ca, lambda: _recover_rollover(ca, client), what="account lookup"
                )
                stored_url = client.account_url
            if create and client.account_url is None:
                # First contact: no account is created (nor a key stored) before the
                # user agreed to the CA's terms of service, if it publishes any.
                client.terms_agreed = await agree_to_terms(
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
#: Calls of one start-up request at most (the first included) while waiting within
#: ``--max-wait``; every wait is the CA's ``Retry-After`` or longer.
_MAX_START_CALLS = 20
#: Sleep this much past the instant the CA named, so "not before" holds.
_MARGIN = 0.05


class _Beyond(Exception):
    """Wraps a CA's answer that names an instant past the budget (not retried)."""

    def __init__(self, error: AcmeCertsError, until: _dt.datetime) -> None:
        super().__init__(str(error))
        self.error = error
        self.until = until


class _AsItIs(Exception):
    """Wraps an error that waiting does not cure (raised unchanged, not retried)."""

    def __init__(self, error: AcmeCertsError) -> None:
        super().__init__(str(error))
        self.error = error


def _told_to_wait(error: AcmeCertsError) -> _dt.datetime | None:
    """The instant a ``rateLimited``/503 answer named (``Retry-After``), else ``None``."""
    if error.kind not in (ErrorKind.RATE_LIMITED, ErrorKind.SERVER_BUSY):
        return None
    if error.retry_after is None or isinstance(error, RateLimitDeferred):
        return None  # the ledger's own deferral is the engine's business (and exit 3)
    until = error.retry_after
    return until if until.tzinfo is not None else until.replace(tzinfo=_dt.UTC)


async def wait_or_defer(
    ca: CaPlan,
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    on_wait: Callable[[_dt.datetime, str], None] | None = None,
    clock: Clock | None = None,
) -> T:
    """Await ``call()`` (the work's start: directory, newNonce, newAccount, account
    lookup); when the CA answers ``rateLimited`` or 503 with a ``Retry-After``, wait for
    that instant and call again, as long as the waits stay within ``--max-wait`` from now.

    The waits are :func:`acmecerts.retry.retry_request`'s (the transport's policy, with
    ``--max-wait`` as its bound): never sooner than the CA said, never a tight loop.
    ``on_wait(until, reason)`` is called before each wait (the countdown). An instant
    past the budget raises :class:`Deferred` at once; any other error is raised as it is.
    """
    clock = clock or SystemClock()
    budget_end = clock.now() + _dt.timedelta(seconds=ca.max_wait + _MARGIN)

    async def attempt() -> T:
        try:
            return await call()
        except AcmeCertsError as exc:
            until = _told_to_wait(exc)
            if until is None:
                raise _AsItIs(exc) from exc
            if until > budget_end:
                raise _Beyond(exc, until) from exc
            raise  # retry_request waits until then and calls again

    def waiting(calls: int, error: AcmeCertsError, delay: float) -> None:
        log.info("%s: the CA asked to wait %.1f s: %s", what, delay, error)
        if on_wait is not None:
            reason = "the CA is busy" if error.kind is ErrorKind.SERVER_BUSY else "rate limited"
            on_wait(clock.now() + _dt.timedelta(seconds=delay), f"{reason} ({what})")

    policy = RequestRetry(max_wait=ca.max_wait + _MARGIN, max_attempts=_MAX_START_CALLS)
    try:
        return await retry_request(
            attempt, policy=policy, clock=clock, idempotent=True, on_retry=waiting
        )
    except _AsItIs as wrapped:
        raise wrapped.error from wrapped.error.__cause__
    except _Beyond as beyond:
        until, error = beyond.until, beyond.error
    except AcmeCertsError as exc:  # still refused after _MAX_START_CALLS calls
        told = _told_to_wait(exc)
        if told is None:
            raise
        until, error = told, exc
    raise Deferred(
        f"{what}: the CA asked to wait until {when(until)} ({error}), more than "
        f"--max-wait {ca.max_wait:g} s allows; nothing was ordered (run again after that "
        "instant)",
        until=until,
        error=error,
    ) from error


async def ensure_registered(ca: CaPlan, client: AcmeClient) -> bool:
    """Register the account if its URL is not known yet; return whether it was."""
    if client.account_url is not None:
        return False
    await client.register()
    assert client.account_url is not None
    await ca.state.save_account_url(client.account_url, client.account_key)
    return True


async def _find(client: AcmeClient, key: AccountKey) -> str | None:
    """The URL of ``key``'s account at the CA (``onlyReturnExisting``), if it has one."""
    probe = AcmeClient(client.transport.directory_url, account_key=key, transport=client.transport)
    try:
        return (await probe.find_account()).url
    except AccountDoesNotExist:
        return None


async def _recover_rollover(ca: CaPlan, client: AcmeClient) -> None:
    """Finish or undo a rollover that stopped after storing the new key."""
    state = ca.state
    async with state.storage.lock(state.layout.account_lock(), lease=60.0, timeout=120.0):
        pending = await state.load_pending_key()
        loaded = await state.load_account_key_version()
        if pending is None or loaded is None:
            return
        old, version = loaded
        client.account_key = old
        old_url = client.account_url or await _find(client, old)
        new_url = await _find(client, pending)
        if new_url is not None and old_url in (None, new_url):
            # The CA switched before the last run could record it: the new key is it.
            await state.storage.store(
                state.layout.account_key(), pending.to_pem(), secret=True, expect_version=version
            )
            await state.save_account_url(new_url, pending)
            client.account_key, client.account_url = pending, new_url
            log.warning("finished an interrupted account key rollover (%s)", new_url)
        else:
            client.account_url = old_url
            log.warning("undid an interrupted account key rollover: the CA kept the old key")
        await state.storage.delete(state.pending_key_name)
