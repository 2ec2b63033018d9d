"""``acmecerts issue`` (one certificate, or ``--from-file`` in parallel).

Its certificates go through :func:`~acmecerts.cli._batch.run_jobs`, as ``renew``'s do.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from rich.text import Text

from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.manager import CertificateSpec, StoredChallenge, known_identifiers
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import KeyType
from acmecerts.storage.export import OUT_LAYOUTS

from ._args import AccountArgs, BatchArgs, ChallengeOptions, CommonArgs, HookArgs, Hooks
from ._batch import (
    RESULT_JSON_BASE,
    batch_result,
    report_hook_failures,
    results_json,
    run_batch,
    run_jobs,
    stored_hooks,
)
from ._ca import CaPlan, plan_ca
from ._constants import ExitCode
from ._dryrun import dry_run_hooks, run_dry
from ._engine import Job, Outcome
from ._firstcontact import check_out_dir
from ._hooks import HookRunner
from ._lineage import choose_lineage, validate_cert_name
from ._report import Report, run_guarded, when
from ._solvers import plan_challenge, stored_challenge
from ._state import certificate_name

__all__ = ["IssueArgs", "parse_cert_file", "run_issue"]


@dataclasses.dataclass(frozen=True, slots=True)
class IssueArgs:
    """Options of ``acmecerts issue``."""

    names: tuple[str, ...] = ()
    from_file: Path | None = None
    out: Path | None = None
    key_type: str = "ec256"
    profile: str | None = None
    #: ``--preferred-profile``: a profile to order if the CA offers it.
    preferred_profile: str | None = None
    preferred_chain: str | None = None
    force: bool = False
    #: The lineage to issue into (``--cert-name``; not with ``--from-file``).
    cert_name: str | None = None
    #: ``--out-layout``: ``plain`` or ``certbot``.
    out_layout: str = "plain"
    #: ``--reuse-key``: renewals keep the private key (stored in the record).
    reuse_key: bool = False
    #: ``--dry-run``: the whole issuance, nothing saved or exported (:mod:`._dryrun`).
    dry_run: bool = False
    #: ``--csr FILE``: the user's own CSR (:mod:`._csr`): no key, not stored for ``renew``.
    csr: Path | None = None
    batch: BatchArgs = dataclasses.field(default_factory=BatchArgs)
    hooks: HookArgs = dataclasses.field(default_factory=HookArgs)


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


def _single_result(report: Report, outcome: Outcome, runner: HookRunner | None = None) -> int:
    """The output of ``acmecerts issue NAME...`` (one certificate)."""
    if runner is not None:
        report_hook_failures(report, runner)
    hooks_failed = runner is not None and bool(runner.failed)
    if outcome.status in ("failed", "cancelled"):
        error = outcome.error
        # 2 only when nothing reached the CA: a failure after an order was created is 1
        invalid = isinstance(error, InvalidInput) and not error.reached_ca
        code = ExitCode.INPUT if invalid else ExitCode.FAILED
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
        report.error_line(ExitCode.DEFERRED, message)
        if report.json_mode:
            report.json(results_json([outcome], ExitCode.DEFERRED, runner))
        return ExitCode.DEFERRED
    code = ExitCode.FAILED if hooks_failed else ExitCode.OK
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
    profile_required: bool,
    preferred_chain: str | None,
    force: bool,
    cert_name: str | None,
    known: Mapping[str, tuple[str, ...]],
    hooks: Hooks,
    webroot: Path | None = None,
    challenge: StoredChallenge | None = None,
    out_layout: str = "plain",
    reuse_key: bool = False,
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
    certbot = out_layout == "certbot"
    kept = record is not None and record.out and (record.out_layout == "certbot") == certbot
    if wanted.out is not None:
        out = wanted.out / name if wanted.per_name and not certbot else wanted.out
    elif kept:
        assert record is not None
        assert record.out is not None
        out = Path(record.out)
    else:
        out = state.root / "certbot" if certbot else state.default_out(name)
    if record is not None and record.revoked_serial is not None and not force:
        stored = await state.load_certificate(name)
        force = stored is not None and stored.info.serial == record.revoked_serial
    spec = CertificateSpec.of(
        name,
        identifiers,
        key_type=key_type,
        profile=profile,
        profile_required=profile_required,
        preferred_chain=preferred_chain,
        reuse_key=reuse_key,
    )
    out = out.absolute()
    if wanted.out is None or wanted.per_name:  # --out itself was checked already
        check_out_dir(out, option="the output directory")
    return Job(
        spec=spec,
        out=out,
        force=force,
        record=record,
        webroot=webroot,
        challenge=challenge,
        hooks=stored_hooks(record).overridden_by(hooks),
        remember_hooks=True,
        directory=ca.directory,
        out_layout=out_layout,
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


def run_issue(
    args: IssueArgs, common: CommonArgs, account: AccountArgs, challenge: ChallengeOptions
) -> int:
    """Run ``acmecerts issue``; return the exit code."""
    if args.dry_run:
        dry = dataclasses.replace(args, dry_run=False, force=True, hooks=dry_run_hooks(args.hooks))

        def rehearse(scratch: CommonArgs) -> int:
            assert scratch.state_dir is not None  # the files go beside the scratch state
            out = scratch.state_dir.parent / "out"
            return run_issue(dataclasses.replace(dry, out=out), scratch, account, challenge)

        return run_dry(common, rehearse)
    if args.csr is not None:
        from ._csr import run_issue_csr

        return run_issue_csr(args, common, account, challenge)

    def work(report: Report) -> int:
        if args.from_file is not None and args.names:
            raise InvalidInput("give NAME... or --from-file FILE, not both")
        if args.from_file is None and not args.names:
            raise InvalidInput(
                "missing NAME...: give the names for the certificate, or --from-file"
            )
        args.batch.check()
        if args.profile is not None and args.preferred_profile is not None:
            raise InvalidInput("give --profile or --preferred-profile, not both")
        if args.from_file is not None and args.cert_name is not None:
            raise InvalidInput(
                "--cert-name names one certificate: give it with NAME..., not --from-file"
            )
        cert_name = validate_cert_name(args.cert_name) if args.cert_name is not None else None
        key_type = KeyType.parse(args.key_type)
        hook_timeout = args.hooks.checked_timeout()
        if args.out_layout not in OUT_LAYOUTS:
            raise InvalidInput(f"--out-layout must be plain or certbot, not {args.out_layout!r}")
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
        ca = plan_ca(common, account, max_wait=args.batch.max_wait)
        plan = plan_challenge(challenge, [i for w in wanted for i in w.identifiers])
        stored = stored_challenge(challenge, plan)  # renew answers the same way
        single = args.from_file is None
        runner = HookRunner(timeout=hook_timeout)

        async def main(finished: list[Outcome] | None = None) -> list[Outcome]:
            known = await known_identifiers(ca.state.storage, ca.state.layout)
            jobs = await _jobs(
                ca,
                wanted,
                key_type=key_type,
                profile=args.profile or args.preferred_profile,
                profile_required=args.preferred_profile is None,
                preferred_chain=args.preferred_chain,
                force=args.force,
                webroot=plan.webroot,
                challenge=stored,
                cert_name=cert_name,
                known=known,
                hooks=args.hooks.hooks,
                out_layout=args.out_layout,
                reuse_key=args.reuse_key,
            )
            # what an interrupted run lists: the certificates as named in the state
            certificates[:] = [(j.name, [i.value for i in j.spec.identifiers]) for j in jobs]
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
                    concurrency=args.batch.concurrency,
                    single=single,
                    # a pre-hook may free the challenge port (stop a web server): bind after it
                    eager=not any(j.hooks.pre for j in jobs),
                    title="Issuing: ",
                    hooks=runner,
                    finished=finished,
                )
            finally:
                await runner.after_all()

        certificates: list[tuple[str, Sequence[str]]] = [
            (
                cert_name or certificate_name(w.identifiers[0].value),
                [i.value for i in w.identifiers],
            )
            for w in wanted
        ]
        if single:  # an interrupted run lists its certificate, as a batch does
            return run_batch(
                report, certificates, main, finish=lambda o: _single_result(report, o[0], runner)
            )
        return run_batch(
            report,
            certificates,
            main,
            finish=lambda outcomes: batch_result(report, outcomes, verb="Issued", runner=runner),
        )

    return run_guarded(common, work, json_base=RESULT_JSON_BASE)
