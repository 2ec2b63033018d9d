"""``acmecerts issue`` (one certificate, or ``--from-file`` in parallel).

``renew`` (in ``_renew``) runs its certificates through :func:`run_jobs` too.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from rich.text import Text

from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.manager import CertificateSpec
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import KeyType
from acmecerts.retry import AttemptState

from ._common import (
    EXIT_DEFERRED,
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_OK,
    AccountArgs,
    CaPlan,
    CommonArgs,
    Deferred,
    Report,
    choose_view,
    configure_logging,
    ensure_registered,
    guarded,
    interrupted_code,
    iso,
    open_client,
    plan_ca,
    problem_json,
    status_word,
    wait_or_defer,
    when,
)
from ._display import NullView
from ._engine import Board, Job, Outcome, Stage, execute, problem_of, wanted_record
from ._firstcontact import check_out_dir
from ._hooks import DEFAULT_HOOK_TIMEOUT, HookRunner, Hooks
from ._interrupt import Interrupted, run_interruptible
from ._lineage import choose_lineage, known_lineages, validate_cert_name
from ._solvers import (
    ChallengeOptions,
    ChallengePlan,
    plan_challenge,
    running_solvers,
    stored_challenge,
)
from ._state import StoredChallenge, certificate_name

__all__ = [
    "RESULT_JSON_BASE",
    "IssueArgs",
    "batch_result",
    "check_hook_timeout",
    "parse_cert_file",
    "report_hook_failures",
    "results_json",
    "run_batch",
    "run_issue",
    "run_jobs",
]


@dataclasses.dataclass(frozen=True, slots=True)
class IssueArgs:
    """Options of ``acmecerts issue``."""

    names: tuple[str, ...] = ()
    from_file: Path | None = None
    out: Path | None = None
    key_type: str = "ec256"
    profile: str | None = None
    preferred_chain: str | None = None
    force: bool = False
    concurrency: int = 8
    max_wait: float = 120.0
    #: The lineage to issue into (``--cert-name``; not with ``--from-file``).
    cert_name: str | None = None
    #: ``--pre-hook``, ``--post-hook``, ``--deploy-hook`` (``None``: keep the stored one;
    #: ``""``: remove it).
    hooks: Hooks = dataclasses.field(default_factory=Hooks)
    hook_timeout: float = DEFAULT_HOOK_TIMEOUT


# -- input ----------------------------------------------------------------------------------


def parse_cert_file(path: Path) -> list[tuple[int, tuple[Identifier, ...]]]:
    """The certificates of a ``--from-file`` FILE: ``(line number, identifiers)``.

    One certificate per line, names separated by spaces (or commas); ``#`` starts a
    comment; blank lines are skipped. Raises :class:`InvalidInput` naming ``FILE:LINE``.
    """
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read --from-file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"--from-file {path} is not UTF-8 text: {exc}") from exc
    found: list[tuple[int, tuple[Identifier, ...]]] = []
    seen: dict[str, int] = {}
    sets: dict[frozenset[Identifier], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        names = line.split("#", 1)[0].replace(",", " ").split()
        if not names:
            continue
        try:
            identifiers = parse_identifiers(names)
        except InvalidInput as exc:
            raise InvalidInput(f"{path}:{number}: {exc}") from None
        name = certificate_name(identifiers[0].value)
        if name in seen:
            raise InvalidInput(
                f"{path}:{number}: certificate {name} is already on line {seen[name]}"
            )
        same = sets.get(frozenset(identifiers))
        if same is not None:  # the same names in another order: the same certificate
            raise InvalidInput(f"{path}:{number}: the same names as line {same}")
        seen[name] = number
        sets[frozenset(identifiers)] = number
        found.append((number, identifiers))
    if not found:
        raise InvalidInput(f"--from-file {path} names no certificate")
    return found


# -- output ---------------------------------------------------------------------------------


#: ``--json`` of ``issue`` and ``renew``: one shape for one certificate and for a batch
#: (the fields are listed in docs/cli.md, "JSON output"). Whole-command errors print
#: the same object with an empty ``certificates`` list (see :class:`Report`).
RESULT_JSON_BASE: dict[str, Any] = {"counts": {}, "certificates": []}


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    """One entry of ``certificates``: every field is always present (``null`` if unknown)."""
    job = outcome.job
    cert = outcome.certificate
    trouble = outcome.status in ("failed", "deferred", "cancelled")
    return {
        "name": job.name,
        "status": outcome.status,
        "names": list(cert.names) if cert is not None else [i.value for i in job.spec.identifiers],
        "serial": cert.serial if cert is not None else None,
        "not_before": cert.not_before.isoformat() if cert is not None else None,
        "not_after": cert.not_after.isoformat() if cert is not None else None,
        "order_url": cert.order_url if cert is not None else None,
        "certificate_url": cert.certificate_url if cert is not None else None,
        "renewal_at": iso(outcome.renewal_at) if cert is not None else None,
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


#: The fields of every entry of ``certificates`` (``null`` where they do not apply).
_ENTRY_FIELDS: tuple[str, ...] = (
    "name",
    "status",
    "names",
    "serial",
    "not_before",
    "not_after",
    "order_url",
    "certificate_url",
    "renewal_at",
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
        return EXIT_FAILED
    if any(o.hook is not None and not o.hook.ok for o in outcomes):
        return EXIT_FAILED  # the certificate is stored and exported; its hook failed
    if "deferred" in statuses:
        return EXIT_DEFERRED
    return EXIT_OK


def _summary(report: Report, outcomes: Sequence[Outcome], *, verb: str) -> None:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    order = ("issued", "renewed", "current", "failed", "deferred", "cancelled")
    parts = [f"{counts[s]} {'not due' if s == 'current' else s}" for s in order if counts.get(s)]
    noun = "certificate" if len(outcomes) == 1 else "certificates"
    style = "bold green" if _exit_code(outcomes) == EXIT_OK else "bold yellow"
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


def check_hook_timeout(value: float) -> float:
    """``--hook-timeout``, validated (raises :class:`InvalidInput`)."""
    if not (math.isfinite(value) and value > 0):
        raise InvalidInput(f"--hook-timeout must be a positive number of seconds, not {value}")
    return value


def report_hook_failures(report: Report, runner: HookRunner) -> None:
    """One line on stderr for each hook that failed (also with ``--json`` and ``-q``)."""
    for result in runner.failed:
        report.err.print(Text(f"acmecerts: error: {result.describe()}"), soft_wrap=True)


def _hooks_json(runner: HookRunner | None) -> dict[str, Any]:
    if runner is None:
        return {}
    ran = [r.to_json() for r in runner.results if r.kind != "deploy"]
    return {"hooks": ran} if ran else {}


def _single_result(report: Report, outcome: Outcome, runner: HookRunner | None = None) -> int:
    """The output of ``acmecerts issue NAME...`` (one certificate)."""
    if runner is not None:
        report_hook_failures(report, runner)
    hooks_failed = runner is not None and bool(runner.failed)
    if outcome.status in ("failed", "cancelled"):
        code = EXIT_INPUT if isinstance(outcome.error, InvalidInput) else EXIT_FAILED
        report.error_line(code, outcome.reason)
        if report.json_mode:
            report.json(results_json([outcome], code))
        return code
    if outcome.status == "deferred":
        assert outcome.until is not None
        message = (
            f"{outcome.job.name} until {when(outcome.until)}: {outcome.reason} "
            "(kept in the state directory; run again after that instant)"
        )
        report.error_line(EXIT_DEFERRED, message)
        if report.json_mode:
            report.json(results_json([outcome], EXIT_DEFERRED, runner))
        return EXIT_DEFERRED
    code = EXIT_FAILED if hooks_failed else EXIT_OK
    if report.json_mode:
        report.json(results_json([outcome], code, runner))
        return code
    cert = outcome.certificate
    files = outcome.files or {}
    assert cert is not None
    days = (cert.not_after - _dt.datetime.now(_dt.UTC)).days
    if outcome.status == "current":
        title = Text("Certificate for ", style="bold green")
        title.append(", ".join(cert.names), style="bold")
        title.append(" is current (not due for renewal; --force orders a new one)")
    else:
        title = Text(
            "Certificate renewed for "
            if outcome.status == "renewed"
            else "Certificate issued for ",
            style="bold green",
        )
        title.append(", ".join(cert.names), style="bold")
    rows = [
        ("expires", f"{cert.not_after:%Y-%m-%d %H:%M} UTC (in {days} days)"),
        ("serial", cert.serial),
    ]
    if outcome.renewal_at is not None:
        rows.append(("renewal", when(outcome.renewal_at)))
    rows += [(kind, str(files[kind])) for kind in ("fullchain", "cert", "chain", "privkey")]
    report.rows(title, rows)
    return code


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
        code = EXIT_FAILED
    if report.json_mode:
        report.json({**results_json(outcomes, code, runner), **(extra or {})})
    elif not quiet or code != EXIT_OK or any(o.status != "current" for o in outcomes):
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
        entry = dict.fromkeys(_ENTRY_FIELDS)  # the same fields as every other entry
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
        return report.error(code, message)
    return finish(outcomes)


# -- issue ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Wanted:
    """A certificate asked for on the command line or in --from-file."""

    identifiers: tuple[Identifier, ...]
    #: ``--out``: the directory itself, or (``per_name``) the parent of ``DIR/NAME``.
    out: Path | None
    per_name: bool = False
    #: Where it was asked for, for errors (``"names.txt:3: "``).
    where: str = ""


async def _job(
    ca: CaPlan,
    wanted: _Wanted,
    *,
    key_type: KeyType,
    profile: str | None,
    preferred_chain: str | None,
    force: bool,
    cert_name: str | None,
    known: Mapping[str, tuple[str, ...]],
    hooks: Hooks,
    webroot: Path | None = None,
    challenge: StoredChallenge | None = None,
) -> Job:
    state = ca.state
    name, identifiers = await choose_lineage(
        state,
        wanted.identifiers,
        known=known,
        cert_name=cert_name,
        where=wanted.where,
        from_file=bool(wanted.where),
    )
    record = await state.load_record(name)
    if wanted.out is not None:
        out = wanted.out / name if wanted.per_name else wanted.out
    elif record is not None and record.out:
        out = Path(record.out)
    else:
        out = state.default_out(name)
    if record is not None and record.revoked_serial is not None and not force:
        stored = await state.load_certificate(name)
        force = stored is not None and stored.info.serial == record.revoked_serial
    spec = CertificateSpec.of(
        name,
        identifiers,
        key_type=key_type,
        profile=profile,
        preferred_chain=preferred_chain,
    )
    out = out.absolute()
    if wanted.out is None or wanted.per_name:  # --out itself was checked already
        check_out_dir(out, option="the output directory")
    stored_hooks = (
        Hooks(pre=record.pre_hook, post=record.post_hook, deploy=record.deploy_hook)
        if record is not None
        else Hooks()
    )
    return Job(
        spec=spec,
        out=out,
        force=force,
        record=record,
        webroot=webroot,
        challenge=challenge,
        hooks=stored_hooks.overridden_by(hooks),
        remember_hooks=True,
        directory=ca.directory,
    )


async def _jobs(ca: CaPlan, wanted: Sequence[_Wanted], **options: Any) -> list[Job]:
    """:func:`_job` of every line, read side by side (each reads the state directory).

    The same jobs, in the same order, as one line after the other; when lines are refused,
    the error of the first of them (in the file's order) is raised, as it was.
    """
    jobs: list[Job | None] = [None] * len(wanted)
    refused: dict[int, AcmeCertsError] = {}

    async def one(index: int, line: _Wanted) -> None:
        try:
            jobs[index] = await _job(ca, line, **options)
        except AcmeCertsError as exc:
            refused[index] = exc

    async with anyio.create_task_group() as tg:
        for index, line in enumerate(wanted):
            tg.start_soon(one, index, line)
    if refused:
        raise refused[min(refused)]
    return [job for job in jobs if job is not None]


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
        client.track(board, ((j.name, [i.value for i in j.spec.identifiers]) for j in jobs))
        if hooks is not None:
            client.track_hooks(hooks, {j.name: j.hooks for j in jobs})
        profiles = {j.spec.profile for j in jobs if j.spec.profile is not None}

        async def set_up() -> None:
            if profiles:  # refuse an unknown profile before an account or an order is made
                offered = (await client.directory()).profiles
                for profile in sorted(profiles - set(offered)):
                    listed = ", ".join(sorted(offered)) or "none: it predates profiles"
                    raise InvalidInput(f"--profile {profile!r}: the CA offers {listed}")
            await ensure_registered(ca, client)
            await ca.state.save_ca_settings(ca.ca_bundle)  # `renew` finds this CA again

        def waiting(until: _dt.datetime, reason: str) -> None:
            for job in jobs:
                board.set(job.name, Stage.WAITING, detail=reason, until=until)

        view = NullView(board) if quiet else choose_view(report, board, single=single, title=title)
        with view:
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


async def _keep_deferral(ca: CaPlan, jobs: Sequence[Job], deferred: Deferred) -> None:
    """Remember the certificates and the CA's instant in the state directory, as the
    manager does for a deferred order: `status` shows it, the next run waits for it."""
    state = ca.state
    for job in jobs:
        record = wanted_record(job)
        if record != job.record:
            await state.save_record(record)
        previous = await state.attempt_state(job.name) or AttemptState()
        until = deferred.until
        if previous.next_attempt_at is not None and previous.next_attempt_at > until:
            until = previous.next_attempt_at
        await state.save_attempt_state(
            job.name,
            dataclasses.replace(
                previous,
                next_attempt_at=until,
                last_error=f"{type(deferred.error).__name__}: {deferred.error}",
                last_error_kind=deferred.error.kind.value,
            ),
        )


def run_issue(
    args: IssueArgs, common: CommonArgs, account: AccountArgs, challenge: ChallengeOptions
) -> int:
    """Run ``acmecerts issue``; return the exit code."""
    report = Report(json_mode=common.json, json_base=RESULT_JSON_BASE)
    configure_logging(common.verbose, report.err)

    def work() -> int:
        if args.from_file is not None and args.names:
            raise InvalidInput("give NAME... or --from-file FILE, not both")
        if args.from_file is None and not args.names:
            raise InvalidInput(
                "missing NAME...: give the names for the certificate, or --from-file"
            )
        if args.concurrency < 1:
            raise InvalidInput(f"--concurrency must be at least 1, not {args.concurrency}")
        if args.from_file is not None and args.cert_name is not None:
            raise InvalidInput(
                "--cert-name names one certificate: give it with NAME..., not --from-file"
            )
        cert_name = validate_cert_name(args.cert_name) if args.cert_name is not None else None
        key_type = KeyType.parse(args.key_type)
        hook_timeout = check_hook_timeout(args.hook_timeout)
        out = args.out.expanduser() if args.out is not None else None
        if args.from_file is not None:
            wanted = [
                _Wanted(ids, out, per_name=True, where=f"{args.from_file}:{number}: ")
                for number, ids in parse_cert_file(args.from_file)
            ]
        else:
            wanted = [_Wanted(parse_identifiers(args.names), out)]
        # Nothing is spent on files that could not be written: checked before any order.
        for w in wanted:
            if w.out is not None:
                check_out_dir(w.out)
        ca = plan_ca(common, account, max_wait=args.max_wait)
        plan = plan_challenge(challenge, [i for w in wanted for i in w.identifiers])
        stored = stored_challenge(challenge, plan)  # renew answers the same way
        single = args.from_file is None
        runner = HookRunner(timeout=hook_timeout)

        async def main(finished: list[Outcome] | None = None) -> list[Outcome]:
            known = await known_lineages(ca.state)
            jobs = await _jobs(
                ca,
                wanted,
                key_type=key_type,
                profile=args.profile,
                preferred_chain=args.preferred_chain,
                force=args.force,
                webroot=plan.webroot,
                challenge=stored,
                cert_name=cert_name,
                known=known,
                hooks=args.hooks,
            )
            duplicates = sorted({j.name for j in jobs if [k.name for k in jobs].count(j.name) > 1})
            if duplicates:
                raise InvalidInput(
                    f"--from-file {args.from_file} names certificate {', '.join(duplicates)} "
                    "on more than one line"
                )
            try:
                return await run_jobs(
                    ca,
                    plan,
                    jobs,
                    report,
                    concurrency=args.concurrency,
                    single=single,
                    # a pre-hook may free the challenge port (stop a web server): bind after it
                    eager=not any(j.hooks.pre for j in jobs),
                    title="Issuing: ",
                    hooks=runner,
                    finished=finished,
                )
            finally:
                await runner.after_all()

        if single:
            outcomes = run_interruptible(main, json_mode=report.json_mode)
            return _single_result(report, outcomes[0], runner)
        certificates = [
            (certificate_name(w.identifiers[0].value), [i.value for i in w.identifiers])
            for w in wanted
        ]
        return run_batch(
            report,
            certificates,
            main,
            finish=lambda outcomes: batch_result(report, outcomes, verb="Issued", runner=runner),
        )

    return guarded(report, work)
