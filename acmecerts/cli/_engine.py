"""Issuing and renewing through :class:`~acmecerts.manager.CertificateManager`.

Every :class:`Job` runs in parallel through one manager (``--concurrency`` at once). Each:

1. asks the manager for its certificate (``issue_many``): a stored certificate that is
   current is returned as it is (unless ``--force``), otherwise one is ordered;
2. when the answer is "not before T" (the CA's ``rateLimited``/``Retry-After``, or the
   rate-limit ledger's next slot), waits for T if the job's waiting so far plus the wait
   stays within ``--max-wait``, showing a countdown, and asks again; otherwise the job
   ends *deferred* (the manager stored T in the attempt state: the next run sees it);
3. writes the PEM files to its export directory (:mod:`acmecerts.storage.export`),
   updates its record.

Progress is on a :class:`Board` (one :class:`Row` per certificate; :class:`OrderSteps`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path

import anyio
import anyio.to_thread

from acmecerts import IssuedCertificate
from acmecerts.client import (
    AcmeClient,
    ChallengeAnswered,
    ClientEvent,
    OrderAuthorized,
    OrderCreated,
    OrderRequested,
    OrderResumed,
    RequestSent,
    ResponseReceived,
)
from acmecerts.errors import (
    AccountDoesNotExist,
    AcmeCertsError,
    AcmeProblem,
    ErrorKind,
    IssuanceError,
    RateLimitDeferred,
)
from acmecerts.manager import (
    CancelledResult,
    CertificateDeferred,
    CertificateEvent,
    CertificateManager,
    CertificateObtained,
    CertificateObtaining,
    CertificateRateLimited,
    CertificateRecord,
    CertificateSpec,
    DeferredResult,
    FailedResult,
    IssuedResult,
    IssueResult,
    StoredChallenge,
    load_attempt_state,
)
from acmecerts.retry import AttemptSchedule
from acmecerts.solvers import Solver
from acmecerts.storage.export import write_certificate_files

from ._args import Hooks
from ._hooks import HookResult, HookRunner, deploy_environment
from ._solvers import failure_text
from ._state import State
from ._steps import log_step

__all__ = [
    "CLI_SCHEDULE",
    "Board",
    "Deferred",
    "Job",
    "OrderSteps",
    "Outcome",
    "Row",
    "Stage",
    "execute",
    "problem_of",
    "wanted_record",
]

log = logging.getLogger("acmecerts.cli")

#: A person runs the CLI and reads the result: a failed attempt is not spaced out by the
#: library's schedule (1 min, 10 min, ...); a second run tries again at once. The CA's
#: ``Retry-After`` and the ledger's next slot still win (the schedule keeps them).
CLI_SCHEDULE = AttemptSchedule.from_delays([0.0], jitter=0.0)
#: Sleep this much past the instant the CA or the ledger named, so "not before" holds.
_MARGIN = 0.05


class Stage(enum.StrEnum):
    """Where one certificate stands."""

    QUEUED = "queued"
    WAITING = "waiting"
    ORDERING = "ordering"
    VALIDATING = "validating"
    FINALIZING = "finalizing"
    DONE = "done"
    CURRENT = "current"
    FAILED = "failed"
    DEFERRED = "deferred"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({Stage.DONE, Stage.CURRENT, Stage.FAILED, Stage.DEFERRED, Stage.CANCELLED})


@dataclasses.dataclass
class Row:
    """One certificate's line of progress."""

    name: str
    names: tuple[str, ...]
    stage: Stage = Stage.QUEUED
    #: Free text shown after the stage (an error, "renewal", the reason for a wait).
    detail: str = ""
    #: The instant a wait or deferral lasts until.
    until: _dt.datetime | None = None
    renewal: bool = False
    changed_at: float = dataclasses.field(default_factory=time.monotonic)


class Board:
    """The progress of every certificate; ``on_change`` is called for each change."""

    def __init__(
        self,
        certificates: Iterable[tuple[str, Sequence[str]]],
        on_change: Callable[[Row], None] | None = None,
    ) -> None:
        self.rows: dict[str, Row] = {name: Row(name, tuple(names)) for name, names in certificates}
        self.on_change = on_change
        #: Names a certificate was newly obtained for (vs. found current in the store).
        self.obtained: set[str] = set()
        #: The kind of the last "wait" event per name ("ledger" or "ca").
        self.wait_kind: dict[str, str] = {}

    def set(
        self,
        name: str,
        stage: Stage,
        *,
        detail: str = "",
        until: _dt.datetime | None = None,
    ) -> None:
        row = self.rows.get(name)
        if row is None or (row.stage.final and not stage.final):
            return
        if (row.stage, row.detail, row.until) == (stage, detail, until):
            return
        row.stage, row.detail, row.until = stage, detail, until
        row.changed_at = time.monotonic()
        if self.on_change is not None:
            self.on_change(row)

    def reopen(self, name: str) -> None:
        """Let a finished row move again (a job retried after re-registering)."""
        row = self.rows.get(name)
        if row is not None:
            row.stage = Stage.QUEUED

    def on_event(self, event: CertificateEvent) -> None:
        """The manager's event subscriber."""
        if isinstance(event, CertificateObtaining):
            row = self.rows.get(event.name)
            if row is not None:
                row.renewal = event.renewal
            self.set(event.name, Stage.ORDERING, detail="renewal" if event.renewal else "")
        elif isinstance(event, CertificateObtained):
            self.obtained.add(event.name)
        elif isinstance(event, CertificateRateLimited):
            self.wait_kind[event.name] = "ca"
        elif isinstance(event, CertificateDeferred):
            self.wait_kind[event.name] = "ledger"


class OrderSteps:
    """Shows the steps of the orders for ``certificates`` (name, identifiers) on ``board``.

    Subscribe :meth:`on_event` to the client's issuance events
    (``client.subscribe(steps.on_event, requests=False)``): an issuance is told apart by
    its identifier set (the manager runs one flight per set). With ``runner``, each
    certificate's pre-hook (``hooks``) runs before its first order.
    """

    def __init__(
        self,
        client: AcmeClient,
        board: Board,
        certificates: Iterable[tuple[str, Iterable[str]]],
        runner: HookRunner | None = None,
        hooks: dict[str, Hooks] | None = None,
    ) -> None:
        self._client, self._board, self._runner = client, board, runner
        self._names = {frozenset(ids): name for name, ids in certificates}
        self._hooks, self._ordering = hooks or {}, set[str]()

    async def on_event(self, event: ClientEvent) -> None:
        """The progress of an issuance: the pre-hook before its order, then its stages."""
        if isinstance(event, RequestSent | ResponseReceived):
            return
        name = self._names.get(frozenset(i.value for i in event.identifiers))
        if name is None:
            return
        log_step(name, event, self._client.account_url)  # -v: one line per step
        if isinstance(event, OrderRequested | OrderResumed) or (
            isinstance(event, OrderCreated) and event.found
        ):
            if self._runner is not None and name not in self._ordering:
                self._ordering.add(name)
                await self._runner.before_order(self._hooks.get(name, Hooks()))
        elif isinstance(event, ChallengeAnswered):
            self._board.set(name, Stage.VALIDATING)
        elif isinstance(event, OrderAuthorized):
            self._board.set(name, Stage.FINALIZING)


class Deferred(Exception):
    """The CA asked to wait past ``--max-wait`` before the work could start (exit 3).

    ``until`` is the instant it named; ``error`` its answer. Nothing was ordered.
    """

    def __init__(self, message: str, *, until: _dt.datetime, error: AcmeCertsError) -> None:
        super().__init__(message)
        self.until = until
        self.error = error


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """One certificate to obtain."""

    spec: CertificateSpec
    out: Path  # where the PEM files go
    force: bool = False
    record: CertificateRecord | None = None
    #: ``--webroot`` answering its http-01 challenges (stored in the record by ``issue``).
    webroot: Path | None = None
    #: The challenge settings to store in the record (``issue``); ``None`` keeps the
    #: record's (``renew``: options given to it are for that run only).
    challenge: StoredChallenge | None = None
    #: The hooks this run uses for the certificate.
    hooks: Hooks = dataclasses.field(default_factory=Hooks)
    #: Store :attr:`hooks` in the certificate's record (``issue``; ``renew`` keeps it).
    remember_hooks: bool = False
    #: The CA's directory URL (shown in ``--json``); ``--out-layout`` (plain, certbot).
    directory: str | None = None
    out_layout: str = "plain"
    #: A dry run's (``renew --dry-run``): marked so in ``--json``, its files not listed.
    dry_run: bool = False

    @property
    def name(self) -> str:
        return self.spec.name


@dataclasses.dataclass
class Outcome:
    """How one job ended."""

    job: Job
    #: ``issued``, ``renewed``, ``current``, ``failed``, ``deferred`` or ``cancelled``.
    status: str
    certificate: IssuedCertificate | None = None
    files: dict[str, Path] | None = None
    until: _dt.datetime | None = None
    reason: str = ""
    error: AcmeCertsError | None = None
    renewal_at: _dt.datetime | None = None
    #: The deploy-hook's run, after a new certificate was exported.
    hook: HookResult | None = None


def problem_of(exc: BaseException | None) -> AcmeProblem | None:
    """The CA's problem document behind ``exc``, if any."""
    if isinstance(exc, AcmeProblem):
        return exc
    if isinstance(exc, IssuanceError):
        return exc.problem
    return None


def _wait_until(result: IssueResult) -> _dt.datetime | None:
    """The instant to try again at, when the CA or the ledger named one."""
    if isinstance(result, DeferredResult):
        return result.until
    if (
        isinstance(result, FailedResult)
        and result.next_attempt_at is not None
        and result.error.kind in (ErrorKind.RATE_LIMITED, ErrorKind.SERVER_BUSY)
        and result.error.retry_after is not None
    ):
        return result.next_attempt_at
    return None


def _describe_wait(board: Board, name: str, result: IssueResult) -> str:
    kind = board.wait_kind.get(name)
    if isinstance(result, FailedResult):
        if isinstance(result.error, RateLimitDeferred):
            kind = "ledger"
        elif result.error.kind is ErrorKind.SERVER_BUSY:
            return "the CA is busy"
    if kind == "ledger":
        return "waiting for budget"
    if kind == "ca":
        return "rate limited by the CA"
    return "waiting"


def wanted_record(job: Job) -> CertificateRecord:
    """The CLI's record for ``job``: what was asked for, and where the files go."""
    record = job.record or CertificateRecord(name=job.name)
    webroot = str(job.webroot) if job.webroot is not None else None
    if job.challenge is None and record.challenge is not None:
        webroot = record.webroot  # renew keeps the stored settings
    record = dataclasses.replace(
        record,
        identifiers=tuple(i.value for i in job.spec.identifiers),
        out=str(job.out),
        out_layout=None if job.out_layout == "plain" else job.out_layout,
        key_type=job.spec.key_type.value,
        profile=job.spec.profile,
        profile_required=job.spec.profile_required,
        preferred_chain=job.spec.preferred_chain,
        webroot=webroot,
        reuse_key=job.spec.reuse_key,
    )
    if job.challenge is not None:
        record = dataclasses.replace(record, challenge=job.challenge)
    if job.remember_hooks:
        record = dataclasses.replace(
            record, pre_hook=job.hooks.pre, post_hook=job.hooks.post, deploy_hook=job.hooks.deploy
        )
    return record


async def _export(state: State, job: Job, certificate: IssuedCertificate) -> dict[str, Path]:
    write = functools.partial(write_certificate_files, layout=job.out_layout, name=job.name)
    files = await anyio.to_thread.run_sync(write, job.out, certificate)
    record = wanted_record(job)
    if record.revoked_serial is not None and record.revoked_serial != certificate.serial:
        record = dataclasses.replace(record, revoked_serial=None)
    if record != job.record:
        await state.save_record(record)
    return files


async def _deferred_reason(state: State, name: str, fallback: str) -> str:
    """Why a stored deferral holds (the attempt state's last error beats "backoff")."""
    try:
        attempt = await load_attempt_state(state.storage, state.layout, name)
    except AcmeCertsError:
        attempt = None
    if attempt is not None and attempt.last_error:
        # "RateLimited: rateLimited: detail" -> "rateLimited: detail"
        return re.sub(r"^[A-Z]\w*: ", "", attempt.last_error)
    return fallback


async def execute(
    *,
    state: State,
    client: AcmeClient,
    solvers: Sequence[Solver],
    jobs: Sequence[Job],
    board: Board,
    concurrency: int,
    max_wait: float,
    hooks: HookRunner | None = None,
    finished: list[Outcome] | None = None,
    register: Callable[[], Awaitable[object]] | None = None,
) -> list[Outcome]:
    """Run every job in parallel; one :class:`Outcome` per job, in order.

    With ``hooks``, each job's deploy-hook runs after its new certificate was exported.
    ``finished`` gets each outcome as its job ends (what an interrupted run reports);
    ``register`` registers the account again when the CA forgot it (default:
    ``client.register``; the CLI passes one that waits within ``--max-wait``).
    """
    manager = CertificateManager(
        client,
        solvers=solvers,
        storage=state.storage,
        layout=state.layout,
        concurrency=concurrency,
        schedule=CLI_SCHEDULE,
        # a one-off run ends after issuing: the renewal instant it prints and stores is
        # the CA's window, asked for at once (a long-running manager asks hours later)
        first_ari_check=0,
    )
    manager.subscribe(board.on_event)
    # Remember every certificate before ordering it: one that ends deferred or failed is
    # known to `status` and issued by the next `renew`. Written side by side (each one
    # fsynced, all of them before the first order), not one fsync after the other.
    failures: list[AcmeCertsError] = []

    async def remember(record: CertificateRecord) -> None:
        try:
            await state.save_record(record)
        except AcmeCertsError as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for job in jobs:
            record = wanted_record(job)
            if record != job.record:
                tg.start_soon(remember, record)
    if failures:
        raise failures[0]
    # what is stored now: the export writes a record again only if it changes
    jobs = [dataclasses.replace(job, record=wanted_record(job)) for job in jobs]
    outcomes: list[Outcome | None] = [None] * len(jobs)

    async def run(index: int, job: Job) -> None:
        result = await _obtain(manager, job, board, max_wait)
        outcome = await _finish(manager, state, job, board, result, hooks)
        outcomes[index] = outcome
        if finished is not None and not isinstance(outcome.error, AccountDoesNotExist):
            finished.append(outcome)  # (a stale account is retried below)

    async with anyio.create_task_group() as tg:
        for index, job in enumerate(jobs):
            tg.start_soon(run, index, job)
    done = [o for o in outcomes if o is not None]

    # A stored account URL the CA no longer knows (a test CA restarted, the account was
    # removed): register the key again, once, and retry those certificates.
    stale = [i for i, o in enumerate(done) if isinstance(o.error, AccountDoesNotExist)]
    if stale and client.account_url is not None:
        log.warning("account %s no longer exists at the CA; registering again", client.account_url)
        client.account_url = None
        try:
            await (register or client.register)()
        except (RateLimitDeferred, Deferred) as exc:
            # no room for a new account (the ledger), or the CA asked to wait past
            # --max-wait: the jobs below end deferred
            log.warning("registering again is deferred: %s", exc)
        else:
            assert client.account_url is not None
            await state.save_account_url(client.account_url, client.account_key)
        async with anyio.create_task_group() as tg:
            for index in stale:
                board.reopen(jobs[index].name)
                tg.start_soon(run, index, jobs[index])
        done = [o for o in outcomes if o is not None]
    return done


async def _obtain(
    manager: CertificateManager, job: Job, board: Board, max_wait: float
) -> IssueResult:
    """The job's result, after waiting (at most ``max_wait`` in all) where the CA or the
    ledger said to retry soon enough."""
    name = job.name
    waited = 0.0
    while True:
        board.set(name, Stage.QUEUED)
        (result,) = await manager.issue_many([job.spec], force=job.force)
        until = _wait_until(result)
        if until is not None:
            delay = max(0.0, (until - _dt.datetime.now(_dt.UTC)).total_seconds()) + _MARGIN
            if waited + delay <= max_wait + _MARGIN:
                board.set(
                    name, Stage.WAITING, detail=_describe_wait(board, name, result), until=until
                )
                await anyio.sleep(delay)
                waited += delay
                continue
        return result


async def _finish(
    manager: CertificateManager,
    state: State,
    job: Job,
    board: Board,
    result: IssueResult,
    hooks: HookRunner | None = None,
) -> Outcome:
    """The job's outcome for ``result``: a new certificate exported (then its deploy-hook),
    or why there is none; its line of the board set."""
    name = job.name
    renewal_at = manager.renewal_at(name)
    if isinstance(result, IssuedResult):
        certificate = result.certificate
        new = name in board.obtained
        status = ("renewed" if result.renewed else "issued") if new else "current"
        outcome = Outcome(job, status, certificate=certificate, renewal_at=renewal_at)
        try:
            outcome.files = await _export(state, job, certificate)
        except AcmeCertsError as exc:
            outcome.status = "failed"
            outcome.error = exc
            outcome.reason = (
                f"the certificate was issued and stored but could not be exported: {exc}"
            )
            board.set(name, Stage.FAILED, detail=outcome.reason)
            return outcome
        if new and hooks is not None and job.hooks.deploy is not None:
            env = deploy_environment(
                name=name,
                identifiers=[i.value for i in job.spec.identifiers],
                out=job.out,
                files=outcome.files,
                event=outcome.status,
                serial=certificate.serial,
                not_after=certificate.not_after.isoformat(),
                directory=state.directory_url,
            )
            outcome.hook = await hooks.deploy(job.hooks.deploy, env, name)
        if new:
            board.set(name, Stage.DONE, detail=_expiry(certificate))
        else:
            due = f"renewal at {_short(renewal_at)}" if renewal_at is not None else ""
            board.set(name, Stage.CURRENT, detail=due)
        return outcome
    if isinstance(result, DeferredResult):
        reason = result.reason
        if reason == "backoff after a failure":
            reason = await _deferred_reason(state, name, reason)
        board.set(name, Stage.DEFERRED, detail=reason, until=result.until)
        return Outcome(job, "deferred", until=result.until, reason=reason)
    if isinstance(result, FailedResult):
        error = result.error
        if isinstance(error, RateLimitDeferred) and error.retry_after is not None:
            board.set(name, Stage.DEFERRED, detail=str(error), until=error.retry_after)
            return Outcome(job, "deferred", until=error.retry_after, reason=str(error), error=error)
        until = _wait_until(result)
        reason = failure_text(error)
        board.set(name, Stage.FAILED, detail=reason, until=until)
        return Outcome(job, "failed", error=error, reason=reason, until=until)
    assert isinstance(result, CancelledResult)
    board.set(name, Stage.CANCELLED, detail=result.reason)
    return Outcome(job, "cancelled", reason=result.reason)


def _short(instant: _dt.datetime) -> str:
    return f"{instant:%Y-%m-%d %H:%M} UTC"


def _expiry(certificate: IssuedCertificate) -> str:
    return f"expires {_short(certificate.not_after)}, serial {certificate.serial}"
