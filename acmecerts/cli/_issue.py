"""``acmecerts issue`` (one certificate, or ``--from-file`` in parallel).

``renew`` (in ``_renew``) runs its certificates through :func:`run_jobs` too.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
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
    when,
)
from ._display import NullView
from ._engine import Board, Job, Outcome, execute, problem_of
from ._hooks import DEFAULT_HOOK_TIMEOUT, HookRunner, Hooks
from ._interrupt import run_interruptible
from ._solvers import ChallengeOptions, ChallengePlan, plan_challenge, running_solvers
from ._state import certificate_name

__all__ = [
    "IssueArgs",
    "batch_result",
    "check_hook_timeout",
    "parse_cert_file",
    "report_hook_failures",
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
    if outcome.job.directory is not None:
        document["directory"] = outcome.job.directory
    if outcome.hook is not None:
        document["deploy_hook"] = outcome.hook.to_json()
    if outcome.status in ("failed", "deferred", "cancelled"):
        document["error"] = " ".join(outcome.reason.split())
        document["problem"] = problem_json(problem_of(outcome.error))
    return document


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
    code = EXIT_FAILED if hooks_failed else EXIT_OK
    if report.json_mode:
        report.json({**_outcome_json(outcome), **_hooks_json(runner)})
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
        status = {EXIT_OK: "ok", EXIT_FAILED: "failed", EXIT_DEFERRED: "deferred"}[code]
        counts: dict[str, int] = {}
        for outcome in outcomes:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
        report.json(
            {
                "status": status,
                "counts": counts,
                "certificates": [_outcome_json(o) for o in outcomes],
                **_hooks_json(runner),
                **(extra or {}),
            }
        )
    elif not quiet or code != EXIT_OK or any(o.status != "current" for o in outcomes):
        _summary(report, outcomes, verb=verb)
        if runner is not None and runner.failed:
            count = len(runner.failed)
            report.out.print(
                Text(f"  {count} hook{'s' if count > 1 else ''} failed (see stderr)", style="red")
            )
    return code


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
    hooks: Hooks,
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
    stored_hooks = (
        Hooks(pre=record.pre_hook, post=record.post_hook, deploy=record.deploy_hook)
        if record is not None
        else Hooks()
    )
    return Job(
        spec=spec,
        out=out.absolute(),
        force=force,
        record=record,
        hooks=stored_hooks.overridden_by(hooks),
        remember_hooks=True,
        directory=ca.directory,
    )


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
        if profiles:  # refuse an unknown profile before an account or an order is made
            offered = (await client.directory()).profiles
            for profile in sorted(profiles - set(offered)):
                listed = ", ".join(sorted(offered)) or "none: it predates profiles"
                raise InvalidInput(f"--profile {profile!r}: the CA offers {listed}")
        await ensure_registered(ca, client)
        await ca.state.save_ca_settings(ca.ca_bundle)  # `renew` finds this CA again
        view = NullView(board) if quiet else choose_view(report, board, single=single, title=title)
        with view:
            return await execute(
                state=ca.state,
                client=client,
                solvers=solvers,
                jobs=jobs,
                board=board,
                concurrency=concurrency,
                max_wait=ca.max_wait,
                hooks=hooks,
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
        hook_timeout = check_hook_timeout(args.hook_timeout)
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
        runner = HookRunner(timeout=hook_timeout)

        async def main() -> list[Outcome]:
            jobs = [
                await _job(
                    ca,
                    w,
                    key_type=key_type,
                    profile=args.profile,
                    preferred_chain=args.preferred_chain,
                    force=args.force,
                    hooks=args.hooks,
                )
                for w in wanted
            ]
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
                )
            finally:
                await runner.after_all()

        outcomes = run_interruptible(main, json_mode=report.json_mode)
        if single:
            return _single_result(report, outcomes[0], runner)
        return batch_result(report, outcomes, verb="Issued", runner=runner)

    return guarded(report, work)
