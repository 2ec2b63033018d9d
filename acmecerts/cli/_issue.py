"""``acmecerts issue`` (one certificate, or ``--from-file`` in parallel) and ``renew``."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from rich.text import Text

from acmecerts.errors import InvalidInput
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
    wait_or_defer,
    when,
)
from ._engine import Board, Job, Outcome, Stage, execute, problem_of, wanted_record
from ._interrupt import Interrupted, run_interruptible
from ._solvers import ChallengeOptions, ChallengePlan, plan_challenge, running_solvers
from ._state import CertificateRecord, StoredCertificate, certificate_name

__all__ = ["IssueArgs", "parse_cert_file", "run_issue", "run_renew"]


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
        seen[name] = number
        found.append((number, identifiers))
    if not found:
        raise InvalidInput(f"--from-file {path} names no certificate")
    return found


# -- output ---------------------------------------------------------------------------------


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    job = outcome.job
    document: dict[str, Any] = {
        "name": job.name,
        "status": outcome.status,
        "names": [i.value for i in job.spec.identifiers],
    }
    cert = outcome.certificate
    if cert is not None:
        document.update(
            names=list(cert.names),
            serial=cert.serial,
            not_before=cert.not_before.isoformat(),
            not_after=cert.not_after.isoformat(),
            order_url=cert.order_url,
            certificate_url=cert.certificate_url,
            renewal_at=iso(outcome.renewal_at),
        )
    if outcome.files is not None:
        document["files"] = {kind: str(path) for kind, path in outcome.files.items()}
    if outcome.until is not None:
        document["until"] = outcome.until.isoformat()
    if outcome.status in ("failed", "deferred", "cancelled"):
        document["error"] = " ".join(outcome.reason.split())
        document["problem"] = problem_json(problem_of(outcome.error))
    return document


def _exit_code(outcomes: Sequence[Outcome]) -> int:
    statuses = {o.status for o in outcomes}
    if statuses & {"failed", "cancelled"}:
        return EXIT_FAILED
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


def _single_result(report: Report, outcome: Outcome) -> int:
    """The output of ``acmecerts issue NAME...`` (one certificate)."""
    if outcome.status in ("failed", "cancelled"):
        code = EXIT_INPUT if isinstance(outcome.error, InvalidInput) else EXIT_FAILED
        return report.error(code, outcome.reason, problem_of(outcome.error), name=outcome.job.name)
    if outcome.status == "deferred":
        assert outcome.until is not None
        message = (
            f"{outcome.job.name} until {when(outcome.until)}: {outcome.reason} "
            "(kept in the state directory; run again after that instant)"
        )
        return report.error(
            EXIT_DEFERRED, message, None, name=outcome.job.name, until=outcome.until.isoformat()
        )
    if report.json_mode:
        report.json(_outcome_json(outcome))
        return EXIT_OK
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
    return EXIT_OK


def _batch_result(report: Report, outcomes: Sequence[Outcome], *, verb: str) -> int:
    code = _exit_code(outcomes)
    if report.json_mode:
        status = {EXIT_OK: "ok", EXIT_FAILED: "failed", EXIT_DEFERRED: "deferred"}[code]
        counts: dict[str, int] = {}
        for outcome in outcomes:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
        report.json(
            {
                "status": status,
                "counts": counts,
                "certificates": [_outcome_json(o) for o in outcomes],
            }
        )
    else:
        _summary(report, outcomes, verb=verb)
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
        documents[name] = {"name": name, "status": "interrupted", "names": list(names)}
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


def _run_batch(
    report: Report,
    certificates: Sequence[tuple[str, Sequence[str]]],
    work: Callable[[list[Outcome]], Awaitable[list[Outcome]]],
    *,
    verb: str,
) -> int:
    """Run a batch's ``work``; when a signal stops it, list what finished and what not.

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
    return _batch_result(report, outcomes, verb=verb)


# -- issue ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Wanted:
    """A certificate asked for on the command line or in --from-file."""

    identifiers: tuple[Identifier, ...]
    out: Path | None

    @property
    def name(self) -> str:
        return certificate_name(self.identifiers[0].value)


async def _job(
    ca: CaPlan,
    wanted: _Wanted,
    *,
    key_type: KeyType,
    profile: str | None,
    preferred_chain: str | None,
    force: bool,
) -> Job:
    state = ca.state
    name = wanted.name
    record = await state.load_record(name)
    if wanted.out is not None:
        out = wanted.out
    elif record is not None and record.out:
        out = Path(record.out)
    else:
        out = state.default_out(name)
    if record is not None and record.revoked_serial is not None and not force:
        stored = await state.load_certificate(name)
        force = stored is not None and stored.info.serial == record.revoked_serial
    spec = CertificateSpec.of(
        name,
        wanted.identifiers,
        key_type=key_type,
        profile=profile,
        preferred_chain=preferred_chain,
    )
    return Job(spec=spec, out=out.absolute(), force=force, record=record)


async def _run_jobs(
    ca: CaPlan,
    plan: ChallengePlan,
    jobs: Sequence[Job],
    report: Report,
    *,
    concurrency: int,
    single: bool,
    eager: bool,
    title: str,
    finished: list[Outcome] | None = None,
) -> list[Outcome]:
    board = Board((j.name, [i.value for i in j.spec.identifiers]) for j in jobs)
    async with (
        running_solvers(plan, eager=eager) as solvers,
        open_client(ca, create=True) as client,
    ):
        client.track(board, ((j.name, [i.value for i in j.spec.identifiers]) for j in jobs))
        profiles = {j.spec.profile for j in jobs if j.spec.profile is not None}

        async def set_up() -> None:
            if profiles:  # refuse an unknown profile before an account or an order is made
                offered = (await client.directory()).profiles
                for profile in sorted(profiles - set(offered)):
                    listed = ", ".join(sorted(offered)) or "none: it predates profiles"
                    raise InvalidInput(f"--profile {profile!r}: the CA offers {listed}")
            await ensure_registered(ca, client)

        def waiting(until: _dt.datetime, reason: str) -> None:
            for job in jobs:
                board.set(job.name, Stage.WAITING, detail=reason, until=until)

        with choose_view(report, board, single=single, title=title):
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
    report = Report(json_mode=common.json)
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
        key_type = KeyType.parse(args.key_type)
        out = args.out.expanduser() if args.out is not None else None
        if args.from_file is not None:
            wanted = [
                _Wanted(ids, out / certificate_name(ids[0].value) if out is not None else None)
                for _, ids in parse_cert_file(args.from_file)
            ]
        else:
            wanted = [_Wanted(parse_identifiers(args.names), out)]
        ca = plan_ca(common, account, max_wait=args.max_wait)
        plan = plan_challenge(challenge, [i for w in wanted for i in w.identifiers])
        single = args.from_file is None

        async def main(finished: list[Outcome] | None = None) -> list[Outcome]:
            jobs = [
                await _job(
                    ca,
                    w,
                    key_type=key_type,
                    profile=args.profile,
                    preferred_chain=args.preferred_chain,
                    force=args.force,
                )
                for w in wanted
            ]
            return await _run_jobs(
                ca,
                plan,
                jobs,
                report,
                concurrency=args.concurrency,
                single=single,
                eager=True,
                title="Issuing: ",
                finished=finished,
            )

        if single:
            outcomes = run_interruptible(main, json_mode=report.json_mode)
            return _single_result(report, outcomes[0])
        certificates = [(w.name, [i.value for i in w.identifiers]) for w in wanted]
        return _run_batch(report, certificates, main, verb="Issued")

    return guarded(report, work)


# -- renew ----------------------------------------------------------------------------------


def run_renew(
    names: Sequence[str],
    *,
    force: bool,
    concurrency: int,
    max_wait: float,
    common: CommonArgs,
    account: AccountArgs,
    challenge: ChallengeOptions,
) -> int:
    """Run ``acmecerts renew``; return the exit code."""
    report = Report(json_mode=common.json)
    configure_logging(common.verbose, report.err)

    def work() -> int:
        if concurrency < 1:
            raise InvalidInput(f"--concurrency must be at least 1, not {concurrency}")
        ca = plan_ca(common, account, max_wait=max_wait)
        state = ca.state

        async def load() -> list[tuple[str, StoredCertificate | None, CertificateRecord | None]]:
            known = await state.known_certificates()
            if names:
                by_name = {entry[0]: entry for entry in known}
                missing = [n for n in names if n.lower() not in by_name]
                if missing:
                    raise InvalidInput(
                        f"no certificate named {', '.join(missing)} in {state.root} for "
                        f"{ca.directory} (see `acmecerts status`)"
                    )
                known = [by_name[n.lower()] for n in dict.fromkeys(names)]
            return known

        known = run_interruptible(load, json_mode=report.json_mode)
        if not known:
            if report.json_mode:
                report.json({"status": "ok", "counts": {}, "certificates": []})
            else:
                report.out.print(f"No certificates in {state.root} for {ca.directory}.")
            return EXIT_OK
        jobs: list[Job] = []
        for name, stored, record in known:
            if stored is not None:
                ids = parse_identifiers(stored.identifiers)
            else:  # asked for, never issued (deferred, failed): issue it now
                assert record is not None
                ids = parse_identifiers(record.identifiers)
            kind = record.key_type if record and record.key_type else None
            if kind is None and stored is not None and stored.key_type is not None:
                kind = stored.key_type.value
            revoked = (
                stored is not None
                and record is not None
                and record.revoked_serial == stored.info.serial
            )
            spec = CertificateSpec.of(
                name,
                ids,
                key_type=KeyType.parse(kind or KeyType.EC256),
                profile=record.profile if record else None,
                preferred_chain=record.preferred_chain if record else None,
            )
            out = Path(record.out) if record and record.out else state.default_out(name)
            jobs.append(Job(spec=spec, out=out, force=force or revoked, record=record))
        plan = plan_challenge(challenge, [i for job in jobs for i in job.spec.identifiers])

        async def renew(finished: list[Outcome]) -> list[Outcome]:
            return await _run_jobs(
                ca,
                plan,
                jobs,
                report,
                concurrency=concurrency,
                single=False,
                eager=False,
                title="Renewing: ",
                finished=finished,
            )

        certificates = [(j.name, [i.value for i in j.spec.identifiers]) for j in jobs]
        return _run_batch(report, certificates, renew, verb="Checked")

    return guarded(report, work)
