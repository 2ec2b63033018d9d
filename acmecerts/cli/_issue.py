"""``acmecerts issue`` (one certificate, or ``--from-file`` in parallel) and ``renew``."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.text import Text

from acmecerts.errors import InvalidInput
from acmecerts.manager import CertificateSpec
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import KeyType

from ._common import (
    EXIT_DEFERRED,
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_OK,
    AccountArgs,
    CaPlan,
    CommonArgs,
    Report,
    choose_view,
    configure_logging,
    ensure_registered,
    guarded,
    iso,
    open_client,
    plan_ca,
    problem_json,
    status_word,
    when,
)
from ._engine import Board, Job, Outcome, execute, problem_of
from ._firstcontact import check_out_dir, check_webroot
from ._interrupt import run_interruptible
from ._lineage import choose_lineage, known_lineages, validate_cert_name
from ._solvers import (
    ChallengeOptions,
    ChallengePlan,
    plan_challenge,
    routed_solvers,
    running_solvers,
)
from ._state import CertificateRecord, StoredCertificate, certificate_name

__all__ = [
    "RESULT_JSON_BASE",
    "IssueArgs",
    "parse_cert_file",
    "results_json",
    "run_issue",
    "run_renew",
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
    }


def results_json(outcomes: Sequence[Outcome], code: int) -> dict[str, Any]:
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
    }


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
            report.json(results_json([outcome], EXIT_DEFERRED))
        return EXIT_DEFERRED
    if report.json_mode:
        report.json(results_json([outcome], EXIT_OK))
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
        report.json(results_json(outcomes, code))
    else:
        _summary(report, outcomes, verb=verb)
    return code


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
    webroot: Path | None = None,
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
    if wanted.out is None:  # a stored or default directory (--out was checked already)
        check_out_dir(out, option="the output directory")
    return Job(spec=spec, out=out, force=force, record=record, webroot=webroot)


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
) -> list[Outcome]:
    board = Board((j.name, [i.value for i in j.spec.identifiers]) for j in jobs)
    async with (
        running_solvers(plan, eager=eager) as solvers,
        open_client(ca, create=True) as client,
    ):
        client.track(board, ((j.name, [i.value for i in j.spec.identifiers]) for j in jobs))
        profiles = {j.spec.profile for j in jobs if j.spec.profile is not None}
        if profiles:  # refuse an unknown profile before an account or an order is made
            offered = (await client.directory()).profiles
            for profile in sorted(profiles - set(offered)):
                listed = ", ".join(sorted(offered)) or "none: it predates profiles"
                raise InvalidInput(f"--profile {profile!r}: the CA offers {listed}")
        await ensure_registered(ca, client)
        with choose_view(report, board, single=single, title=title):
            return await execute(
                state=ca.state,
                client=client,
                solvers=solvers,
                jobs=jobs,
                board=board,
                concurrency=concurrency,
                max_wait=ca.max_wait,
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
        single = args.from_file is None

        async def main() -> list[Outcome]:
            known = await known_lineages(ca.state)
            jobs = [
                await _job(
                    ca,
                    w,
                    key_type=key_type,
                    profile=args.profile,
                    preferred_chain=args.preferred_chain,
                    force=args.force,
                    webroot=plan.webroot,
                    cert_name=cert_name,
                    known=known,
                )
                for w in wanted
            ]
            duplicates = sorted({j.name for j in jobs if [k.name for k in jobs].count(j.name) > 1})
            if duplicates:
                raise InvalidInput(
                    f"--from-file {args.from_file} names certificate {', '.join(duplicates)} "
                    "on more than one line"
                )
            return await _run_jobs(
                ca,
                plan,
                jobs,
                report,
                concurrency=args.concurrency,
                single=single,
                eager=True,
                title="Issuing: ",
            )

        outcomes = run_interruptible(main, json_mode=report.json_mode)
        if single:
            return _single_result(report, outcomes[0])
        return _batch_result(report, outcomes, verb="Issued")

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
    report = Report(json_mode=common.json, json_base=RESULT_JSON_BASE)
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
                report.json(results_json([], EXIT_OK))
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
            jobs.append(
                Job(
                    spec=spec,
                    out=out,
                    force=force or revoked,
                    record=record,
                    webroot=stored_webroot(challenge, record),
                )
            )
        plan = plan_challenge(challenge, [i for job in jobs for i in job.spec.identifiers])
        position = {job.name: index for index, job in enumerate(jobs)}
        jobs, refused = refuse_unusable(jobs)
        plan = routed_solvers(
            plan, ((j.webroot, j.spec.identifiers) for j in jobs if j.webroot is not None)
        )

        outcomes: list[Outcome] = []
        if jobs:
            outcomes = run_interruptible(
                functools.partial(
                    _run_jobs,
                    ca,
                    plan,
                    jobs,
                    report,
                    concurrency=concurrency,
                    single=False,
                    eager=False,
                    title="Renewing: ",
                ),
                json_mode=report.json_mode,
            )
        every = sorted([*refused, *outcomes], key=lambda o: position[o.job.name])
        code = _batch_result(report, every, verb="Checked")
        return renew_exit_code(code, refused, outcomes)

    return guarded(report, work)


def stored_webroot(challenge: ChallengeOptions, record: CertificateRecord | None) -> Path | None:
    """The webroot a renewal answers with: ``--webroot`` now, else the stored one."""
    if challenge.webroot is not None:
        return challenge.webroot.expanduser().absolute()
    if record is not None and record.webroot:
        return Path(record.webroot)
    return None


def refuse_unusable(jobs: Sequence[Job]) -> tuple[list[Job], list[Outcome]]:
    """Split off the certificates whose output directory or webroot became unusable.

    They fail before anything is ordered for them (an order would be spent on files that
    cannot be written, or a validation that cannot succeed); the others go on.
    """
    usable: list[Job] = []
    refused: list[Outcome] = []
    for job in jobs:
        try:
            check_out_dir(job.out, option="the output directory")
            if job.webroot is not None:
                check_webroot(job.webroot, option="the stored --webroot")
        except InvalidInput as exc:
            reason = f"{exc}; nothing was ordered for it"
            refused.append(Outcome(job, "failed", reason=reason, error=exc))
        else:
            usable.append(job)
    return usable, refused


def renew_exit_code(code: int, refused: Sequence[Outcome], outcomes: Sequence[Outcome]) -> int:
    """2 when certificates were refused as unusable and nothing was ordered at all."""
    if refused and all(o.status == "current" for o in outcomes):
        return EXIT_INPUT
    return code
