"""What every command shares: options, validation, output, exit codes, the account.

Order of work in every command, so that bad input never costs a request: every option is
validated first (names, files, listen addresses, keys); then the state directory is read;
then challenge servers bind their ports; only then is anything written or the CA contacted.

Exit codes: 0 ok; 1 failed (the CA's problem detail is printed); 2 bad input or unusable
state (one line on stderr, nothing sent); 3 deferred by rate limits; 130 interrupted.
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
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.text import Text

from acmecerts.client import AcmeClient, ExternalAccountBinding
from acmecerts.errors import (
    AccountDoesNotExist,
    AcmeCertsError,
    AcmeProblem,
    ExternalAccountRequired,
    InvalidInput,
    RateLimitDeferred,
    StorageError,
)
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.ratelimit import LETS_ENCRYPT as LETS_ENCRYPT_LIMITS
from acmecerts.ratelimit import NO_LIMITS, RateLimitModel, model_for_directory
from acmecerts.retry import RequestRetry

from ._constants import (
    EXIT_DEFERRED,
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    LETS_ENCRYPT,
)
from ._display import LiveView, NullView, PlainView, QuietView, View
from ._engine import Board, TrackingClient, problem_of
from ._state import State, default_state_dir, directory_slug

__all__ = [
    "EXIT_DEFERRED",
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "LETS_ENCRYPT",
    "AccountArgs",
    "CaPlan",
    "CommonArgs",
    "Report",
    "choose_view",
    "configure_logging",
    "ensure_registered",
    "first_error",
    "guarded",
    "iso",
    "open_client",
    "plan_ca",
    "problem_json",
    "when",
]

log = logging.getLogger("acmecerts.cli")

_EMAIL = re.compile(r"[^@\s,;:<>()\[\]\\\"]+@[^@\s,;:<>()\[\]\\\"]+")
#: The longest a request waits inside the transport for a rateLimited/503 Retry-After;
#: longer waits come up to the command, which shows a countdown (or defers).
_REQUEST_MAX_WAIT = 2.0


# -- what the commands were given ----------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class CommonArgs:
    """Options every command has."""

    directory: str = LETS_ENCRYPT
    ca_bundle: Path | None = None
    state_dir: Path | None = None
    rate_limits: str = "auto"
    timeout: float = 1800.0
    json: bool = False
    verbose: int = 0


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class AccountArgs:
    """Options for creating an account."""

    emails: tuple[str, ...] = ()
    eab_kid: str | None = None
    eab_hmac_key: str | None = None


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
    directory_slug(common.directory)  # InvalidInput for a URL a CA cannot have
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
        directory=common.directory,
        ca_bundle=ca_bundle,
        state=State(root, common.directory),
        model=_rate_limit_model(common.rate_limits, common.directory),
        timeout=timeout,
        contact=_contacts(account.emails),
        eab=eab,
        max_wait=_seconds(max_wait, "--max-wait", allow_zero=True),
    )


# -- output ---------------------------------------------------------------------------------


class Report:
    """Writes results: one line on stderr for errors, rich text or JSON on stdout."""

    def __init__(self, *, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.out = Console(soft_wrap=True, highlight=False)
        self.err = Console(stderr=True, soft_wrap=True, highlight=False)

    def json(self, document: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()

    def error(
        self,
        code: int,
        message: str,
        problem: AcmeProblem | None = None,
        **extra: Any,
    ) -> int:
        line = " ".join(message.split())
        label = "deferred" if code == EXIT_DEFERRED else "error"
        sys.stderr.write(f"acmecerts: {label}: {line}\n")
        sys.stderr.flush()
        if self.json_mode:
            status = {
                EXIT_INPUT: "invalid-input",
                EXIT_INTERRUPTED: "interrupted",
                EXIT_DEFERRED: "deferred",
            }.get(code, "failed")
            self.json({"status": status, "error": line, "problem": problem_json(problem), **extra})
        return code

    def rows(self, title: Text, rows: Sequence[tuple[str, str]]) -> None:
        self.out.print(title)
        for label, value in rows:
            line = Text(f"  {label:<10} ", style="dim")
            line.append(value)
            self.out.print(line)


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


def guarded(report: Report, work: Callable[[], int]) -> int:
    """Run ``work``; map errors to one line and an exit code."""
    try:
        return work()
    except BaseException as raised:
        exc = first_error(raised)
        if isinstance(exc, KeyboardInterrupt):
            return report.error(EXIT_INTERRUPTED, "interrupted")
        if isinstance(exc, InvalidInput | StorageError | ExternalAccountRequired):
            return report.error(EXIT_INPUT, str(exc))
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
    key = await (state.create_account_key(key_type) if create else state.load_account_key())
    if key is None:
        raise InvalidInput(
            f"no account for {ca.directory} in {state.root}: create one with "
            "`acmecerts account create` (issuing a certificate creates one too)"
        )
    client = TrackingClient(
        ca.directory,
        account_key=key,
        account_url=await state.load_account_url(key),
        contact=ca.contact,
        eab=ca.eab,
        ca_bundle=ca.ca_bundle,
        attempt_timeout=ca.timeout,
        request_retry=RequestRetry(max_wait=min(ca.max_wait, _REQUEST_MAX_WAIT)),
        ledger=state.ledger(ca.model),
    )
    stored_url = client.account_url
    async with client:
        try:
            if await state.load_pending_key() is not None:
                await _recover_rollover(ca, client)
                stored_url = client.account_url
            yield client
        finally:
            url = client.account_url
            if url is not None and url != stored_url:
                with anyio.CancelScope(shield=True):
                    try:
                        await state.save_account_url(url, client.account_key)
                    except AcmeCertsError as exc:
                        log.warning("could not save the account URL: %s", exc)


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
