"""A run of many certificates (``issue --from-file``, ``renew``; one ``issue`` too).

:func:`run_jobs` obtains the certificates of one CA with one solver, hooks around the
orders; :func:`run_batch` runs the work, and lists what finished and what did not when a
signal stops it; :func:`batch_result` prints the outcomes (one JSON object with
``--json``) and makes the exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

from rich.text import Text

from acmecerts.errors import ProfileRefused
from acmecerts.manager import CertificateRecord, load_attempt_state, save_attempt_state
from acmecerts.retry import AttemptState
from acmecerts.transport import RequestWatch

from ._args import Hooks
from ._ca import CaPlan, ensure_registered, open_client, wait_or_defer
from ._constants import ExitCode
from ._display import LiveView, NullView
from ._engine import (
    Board,
    Deferred,
    Job,
    OrderSteps,
    Outcome,
    Stage,
    execute,
    problem_of,
    wanted_record,
)
from ._hooks import HookRunner
from ._interrupt import Interrupted, run_interruptible
from ._report import Report, choose_view, interrupted_code, iso, problem_json, status_word, when
from ._solvers import ChallengePlan, running_solvers

__all__ = [
    "CERTIFICATE_FIELDS",
    "CLEANED_UP",
    "RESULT_JSON_BASE",
    "batch_result",
    "report_hook_failures",
    "results_json",
    "run_batch",
    "run_jobs",
    "stored_hooks",
]


def stored_hooks(record: CertificateRecord | None) -> Hooks:
    """The hooks stored with a certificate (none without a record)."""
    if record is None:
        return Hooks()
    return Hooks(pre=record.pre_hook, post=record.post_hook, deploy=record.deploy_hook)


#: ``--json`` of ``issue`` and ``renew``: one shape for one certificate and for a batch
#: (the fields are listed in docs/cli.md, "JSON output"). Whole-command errors print
#: the same object with an empty ``certificates`` list (see :class:`Report`).
RESULT_JSON_BASE: dict[str, Any] = {"counts": {}, "certificates": []}


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    """One entry of ``certificates``: every field is always present (``null`` if unknown)."""
    job = outcome.job
    cert = outcome.certificate
    trouble = outcome.status in ("failed", "deferred", "cancelled")
    if job.dry_run:  # its files were written to a scratch directory, removed since
        real = dataclasses.replace(job, dry_run=False)
        return {
            **_outcome_json(dataclasses.replace(outcome, job=real, files=None)),
            "dry_run": True,
        }
    return {
        "name": job.name,
        "status": outcome.status,
        "names": list(cert.names) if cert is not None else [i.value for i in job.spec.identifiers],
        "serial": cert.serial if cert is not None else None,
        "not_before": iso(cert.not_before) if cert is not None else None,
        "not_after": iso(cert.not_after) if cert is not None else None,
        "order_url": cert.order_url if cert is not None else None,
        "certificate_url": cert.certificate_url if cert is not None else None,
        "renewal_at": iso(outcome.renewal_at) if cert is not None else None,
        # what `status` knows besides (the CA's renewal window, the stored settings)
        "renewal_source": None,
        "renewal_window": None,
        "renewal_explanation": None,
        "key_type": job.spec.key_type.value,
        "challenge": None,
        "files": (
            {kind: str(path) for kind, path in outcome.files.items()}
            if outcome.files is not None
            else None
        ),
        "until": iso(outcome.until),
        "error": " ".join(outcome.reason.split()) if trouble else None,
        "problem": problem_json(problem_of(outcome.error)) if trouble else None,
        "directory": job.directory,
        "deploy_hook": outcome.hook.to_json() if outcome.hook is not None else None,
    }


#: The fields of every entry of ``certificates`` (``null`` where they do not apply): one
#: shape for one certificate in ``issue``, ``renew`` and ``status``.
CERTIFICATE_FIELDS: tuple[str, ...] = (
    "name",
    "status",
    "names",
    "serial",
    "not_before",
    "not_after",
    "order_url",
    "certificate_url",
    "renewal_at",
    "renewal_source",
    "renewal_window",
    "renewal_explanation",
    "key_type",
    "challenge",
    "files",
    "until",
    "error",
    "problem",
    "directory",
    "deploy_hook",
)


def results_json(
    outcomes: Sequence[Outcome], code: int, runner: HookRunner | None = None
) -> dict[str, Any]:
    """The one ``--json`` object of ``issue`` (one or many) and ``renew``."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    return {
        "status": status_word(code),
        "exit_code": code,
        "error": None,
        "problem": None,
        "counts": counts,
        "certificates": [_outcome_json(o) for o in outcomes],
        **_hooks_json(runner),
    }


def _exit_code(outcomes: Sequence[Outcome]) -> int:
    statuses = {o.status for o in outcomes}
    if statuses & {"failed", "cancelled"}:
        return ExitCode.FAILED
    if any(o.hook is not None and not o.hook.ok for o in outcomes):
        return ExitCode.FAILED  # the certificate is stored and exported; its hook failed
    if "deferred" in statuses:
        return ExitCode.DEFERRED
    return ExitCode.OK


def _summary(report: Report, outcomes: Sequence[Outcome], *, verb: str) -> None:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    order = ("issued", "renewed", "current", "failed", "deferred", "cancelled")
    parts = [f"{counts[s]} {'not due' if s == 'current' else s}" for s in order if counts.get(s)]
    noun = "certificate" if len(outcomes) == 1 else "certificates"
    style = "bold green" if _exit_code(outcomes) == ExitCode.OK else "bold yellow"
    if "failed" in counts:
        style = "bold red"
    report.out.print(Text(f"{verb} {len(outcomes)} {noun}: {', '.join(parts)}", style=style))
    for outcome in outcomes:
        if outcome.status == "failed":
            report.out.print(Text(f"  failed    {outcome.job.name}: {outcome.reason}"))
        elif outcome.status == "deferred" and outcome.until is not None:
            report.out.print(
                Text(
                    f"  deferred  {outcome.job.name} until {when(outcome.until)}: {outcome.reason}"
                )
            )
    if "deferred" in counts:
        report.out.print(
            Text(
                "  (deferrals are kept in the state directory: run the same command again "
                "after that instant)",
                style="dim",
            )
        )


def report_hook_failures(report: Report, runner: HookRunner) -> None:
    """One line on stderr for each hook that failed (also with ``--json`` and ``-q``)."""
    for result in runner.failed:
        report.err.print(Text(f"acmecerts: error: {result.describe()}"), soft_wrap=True)


def _hooks_json(runner: HookRunner | None) -> dict[str, Any]:
    if runner is None:
        return {}
    ran = [r.to_json() for r in runner.results if r.kind != "deploy"]
    return {"hooks": ran} if ran else {}


def batch_result(
    report: Report,
    outcomes: Sequence[Outcome],
    *,
    verb: str,
    runner: HookRunner | None = None,
    failed: bool = False,
    quiet: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> int:
    """Print the result of many certificates (``failed``: something besides them failed;
    ``quiet``: no summary unless a certificate is new or did not end well)."""
    code = _exit_code(outcomes)
    if runner is not None:
        report_hook_failures(report, runner)
        failed = failed or bool(runner.failed)
    if failed:
        code = ExitCode.FAILED
    if report.json_mode:
        report.json({**results_json(outcomes, code, runner), **(extra or {})})
    elif not quiet or code != ExitCode.OK or any(o.status != "current" for o in outcomes):
        _summary(report, outcomes, verb=verb)
        if runner is not None and runner.failed:
            count = len(runner.failed)
            report.out.print(
                Text(f"  {count} hook{'s' if count > 1 else ''} failed (see stderr)", style="red")
            )
    return code


def _interrupted_parts(
    certificates: Sequence[tuple[str, Sequence[str]]], finished: Sequence[Outcome]
) -> tuple[list[Outcome], list[tuple[str, Sequence[str]]]]:
    """The outcomes that ended (the last one per name) and the certificates that did not."""
    ended = {o.job.name: o for o in finished if o.status != "cancelled"}
    done = [ended[name] for name, _ in certificates if name in ended]
    rest = [(name, names) for name, names in certificates if name not in ended]
    return done, rest


def _interrupted_json(
    certificates: Sequence[tuple[str, Sequence[str]]], finished: Sequence[Outcome]
) -> dict[str, Any]:
    """``counts`` and ``certificates`` of an interrupted batch (finished ones as usual,
    the others ``interrupted``)."""
    done, rest = _interrupted_parts(certificates, finished)
    documents = {o.job.name: _outcome_json(o) for o in done}
    for name, names in rest:
        entry = dict.fromkeys(CERTIFICATE_FIELDS)  # the same fields as every other entry
        documents[name] = {**entry, "name": name, "status": "interrupted", "names": list(names)}
    counts: dict[str, int] = {}
    for document in documents.values():
        counts[document["status"]] = counts.get(document["status"], 0) + 1
    return {"counts": counts, "certificates": [documents[n] for n, _ in certificates]}


def _interrupted_lines(
    certificates: Sequence[tuple[str, Sequence[str]]], finished: Sequence[Outcome]
) -> list[str]:
    """One line per certificate of an interrupted batch: how it ended, or that it did not."""
    done, rest = _interrupted_parts(certificates, finished)
    lines = [f"Interrupted: {len(done)} of {len(certificates)} certificates finished"]
    for outcome in done:
        label = "not due" if outcome.status == "current" else outcome.status
        line = f"  {label:<13} {outcome.job.name}"
        if outcome.files is not None and "fullchain" in outcome.files:
            line += f" ({outcome.files['fullchain']})"
        elif outcome.reason:
            line += f": {' '.join(outcome.reason.split())}"
        lines.append(line)
    lines += [f"  {'not finished':<13} {name}" for name, _ in rest]
    return lines


#: Said after an interrupted run (the clean-up ran within its budget: a run it did not
#: finish for exits on the spot, saying so, see acmecerts.cli._signals).
CLEANED_UP = (
    "Clean-up done: challenge responses removed, pending authorizations deactivated "
    "(where the CA answered), state saved, locks released"
)


def run_batch(
    report: Report,
    certificates: Sequence[tuple[str, Sequence[str]]],
    work: Callable[[list[Outcome]], Awaitable[list[Outcome]]],
    *,
    finish: Callable[[list[Outcome]], int],
) -> int:
    """Run a batch's ``work`` and ``finish`` its outcomes (print them, return the exit
    code); when a signal stops it, list what finished and what not instead.

    The list goes to stdout (one JSON object with ``--json``) and is also what a forced
    exit (a second signal, the clean-up budget spent) prints on stderr.
    """
    finished: list[Outcome] = []

    def final_words() -> tuple[list[str], dict[str, Any]]:
        done = list(finished)  # another thread may append meanwhile
        return _interrupted_lines(certificates, done), _interrupted_json(certificates, done)

    try:
        outcomes = run_interruptible(
            functools.partial(work, finished), json_mode=report.json_mode, final_words=final_words
        )
    except Interrupted as exc:
        code, message = interrupted_code(exc)
        if report.json_mode:
            return report.error(code, message, **_interrupted_json(certificates, finished))
        for line in _interrupted_lines(certificates, finished):
            report.out.print(Text(line))
        report.out.print(Text(CLEANED_UP))
        return report.error(code, message)
    return finish(outcomes)


# -- work -----------------------------------------------------------------------------------


async def run_jobs(
    ca: CaPlan,
    plan: ChallengePlan,
    jobs: Sequence[Job],
    report: Report,
    *,
    concurrency: int,
    single: bool,
    eager: bool,
    title: str,
    hooks: HookRunner | None = None,
    quiet: bool = False,
    finished: list[Outcome] | None = None,
) -> list[Outcome]:
    """Obtain ``jobs`` from one CA (with ``hooks`` around the orders); ``quiet``: no
    progress display."""
    board = Board((j.name, [i.value for i in j.spec.identifiers]) for j in jobs)
    async with (
        running_solvers(plan, eager=eager) as solvers,
        open_client(ca, create=True) as client,
    ):
        certificates = ((j.name, [i.value for i in j.spec.identifiers]) for j in jobs)
        steps = OrderSteps(client, board, certificates, hooks, {j.name: j.hooks for j in jobs})
        client.subscribe(steps.on_event, requests=False)
        profiles = {
            j.spec.profile for j in jobs if j.spec.profile is not None and j.spec.profile_required
        }

        async def set_up() -> None:
            if profiles:  # refuse an unknown profile before an account or an order is made
                offered = (await client.directory()).profiles
                for profile in sorted(profiles - set(offered)):
                    listed = ", ".join(sorted(offered)) or "none: it predates profiles"
                    raise ProfileRefused(
                        f"--profile {profile!r}: the CA offers {listed}", profile=profile
                    )
            await ensure_registered(ca, client)
            await ca.state.save_ca_settings(ca.ca_bundle)  # `renew` finds this CA again

        def waiting(until: _dt.datetime, reason: str) -> None:
            for job in jobs:
                board.set(job.name, Stage.WAITING, detail=reason, until=until)

        view = NullView(board) if quiet else choose_view(report, board, single=single, title=title)
        # says which request the CA is slow to answer (-v: under the CLI's name, as before)
        watch = RequestWatch(logger=logging.getLogger("acmecerts.cli.waits"))
        stop_watching = watch.attach(client.transport)
        if isinstance(view, LiveView):
            view.waiting = watch.waiting_line
        with view, watch, _finally(stop_watching):
            # The CA may ask to wait already here (503 or rateLimited with Retry-After on
            # the directory, newNonce or newAccount): within --max-wait, wait with the
            # countdown; past it, the certificates are deferred.
            try:
                await wait_or_defer(ca, set_up, what="account set-up", on_wait=waiting)
            except Deferred as deferred:
                await _keep_deferral(ca, jobs, deferred)
                raise
            return await execute(
                state=ca.state,
                client=client,
                solvers=solvers,
                jobs=jobs,
                board=board,
                concurrency=concurrency,
                max_wait=ca.max_wait,
                hooks=hooks,
                finished=finished,
                register=lambda: wait_or_defer(
                    ca, client.register, what="account set-up", on_wait=waiting
                ),
            )


@contextlib.contextmanager
def _finally(call: Callable[[], object]) -> Iterator[None]:
    """``call()`` when the block is left."""
    try:
        yield
    finally:
        call()


async def _keep_deferral(ca: CaPlan, jobs: Sequence[Job], deferred: Deferred) -> None:
    """Remember the certificates and the CA's instant in the state directory, as the
    manager does for a deferred order: `status` shows it, the next run waits for it."""
    state = ca.state
    for job in jobs:
        record = wanted_record(job)
        if record != job.record:
            await state.save_record(record)
        previous = await load_attempt_state(state.storage, state.layout, job.name) or AttemptState()
        until = deferred.until
        if previous.next_attempt_at is not None and previous.next_attempt_at > until:
            until = previous.next_attempt_at
        await save_attempt_state(
            state.storage,
            state.layout,
            job.name,
            dataclasses.replace(
                previous,
                next_attempt_at=until,
                last_error=f"{type(deferred.error).__name__}: {deferred.error}",
                last_error_kind=deferred.error.kind.value,
            ),
        )
