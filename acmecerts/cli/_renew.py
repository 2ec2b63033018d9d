"""``acmecerts renew``: every stored certificate, each with the CA it was issued from.

The state directory holds one directory per CA (see :mod:`acmecerts.cli._state`). Each
keeps its directory URL and ``--ca-bundle`` in ``cli-settings.json``, written by every
command that ordered or registered there; state written before that file existed has
the URL in its account's ``account.json``. ``renew`` walks every CA it finds, with that
CA's account; ``--directory`` narrows it to one CA.

Unusable state is an error, never "nothing to do": a state directory that is missing, a
file, unreadable, or holds no CA at all exits 2 with one line naming the path, before
anything is sent, and so does ``--directory`` naming a CA the state directory has no
state for (a typo in a cron line must not let every certificate expire quietly). A state
directory with CAs (accounts) but no certificate has nothing to do: exit 0.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import stat
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from acmecerts import duration_seconds
from acmecerts.errors import AcmeCertsError, InvalidInput, StorageError
from acmecerts.manager import (
    CaSettings,
    CertificateRecord,
    CertificateSpec,
    StoredCertificate,
    find_ca_dirs,
    load_ca_settings,
)
from acmecerts.protocol.identifiers import parse_identifiers
from acmecerts.protocol.keys import KeyType
from acmecerts.storage import FileStorage
from acmecerts.storage.keys import ca_slug

from ._args import AccountArgs, BatchArgs, ChallengeOptions, CommonArgs, HookArgs
from ._batch import (
    RESULT_JSON_BASE,
    batch_result,
    results_json,
    run_batch,
    run_jobs,
    stored_hooks,
)
from ._ca import CaPlan, plan_ca
from ._constants import ExitCode
from ._engine import Deferred, Job, Outcome
from ._firstcontact import check_out_dir, check_webroot, resolve_directory
from ._hooks import HookRunner
from ._interrupt import run_interruptible
from ._report import Report, first_error, run_guarded
from ._solvers import ChallengePlan, plan_challenge, renewal_options
from ._state import default_state_dir

__all__ = [
    "RenewArgs",
    "ca_dirs",
    "ca_plans",
    "ca_settings",
    "random_fraction",
    "run_renew",
    "sleep",
    "stored_plan",
]

log = logging.getLogger("acmecerts.cli")

#: Draws the fraction of ``--random-delay`` to wait, in [0, 1) (a seam for tests).
random_fraction: Callable[[], float] = random.random
#: Sleeps the random delay (a seam for tests).
sleep: Callable[[float], None] = time.sleep

_Known = list[tuple[str, StoredCertificate | None, CertificateRecord | None]]


@dataclasses.dataclass(frozen=True, slots=True)
class RenewArgs:
    """Options of ``acmecerts renew``."""

    names: tuple[str, ...] = ()
    force: bool = False
    batch: BatchArgs = dataclasses.field(default_factory=BatchArgs)
    #: ``-q``: print nothing unless a certificate was renewed or something failed.
    quiet: bool = False
    #: Wait a random time in [0, this) seconds before contacting any CA.
    random_delay: float = 0.0
    #: Hooks given on the command line: they replace the stored ones for this run.
    hooks: HookArgs = dataclasses.field(default_factory=HookArgs)
    #: The challenge options given (flag, environment or config file; names of
    #: :data:`~acmecerts.cli._solvers.OVERRIDABLE`): they replace the stored ones for
    #: this run.
    challenge_given: frozenset[str] = frozenset()
    #: ``--dry-run`` (:mod:`._dryrenew`); ``rehearsal``: this is the dry run's own run,
    #: in its scratch state (entries marked, no ``replaces`` sent).
    dry_run: bool = False
    rehearsal: bool = False


def ca_dirs(root: Path, *, first_cut_ok: bool = False) -> list[str]:
    """The CA directories of the state directory ``root``; :class:`InvalidInput` when it
    is missing, not a directory, unreadable or holds no CA (``first_cut_ok``: unless it
    holds the first cut's ``accounts`` directory)."""
    try:
        info = os.stat(root)
    except FileNotFoundError:
        raise InvalidInput(
            f"state directory {root} does not exist: nothing was issued there "
            "(check --state-dir or ACMECERTS_STATE_DIR)"
        ) from None
    except OSError as exc:
        raise InvalidInput(f"cannot read state directory {root}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise InvalidInput(f"state directory {root} is not a directory")
    try:
        found = find_ca_dirs(root)
    except OSError as exc:
        raise InvalidInput(f"cannot read state directory {root}: {exc.strerror or exc}") from exc
    if not found:
        first_cut = (root / "accounts").is_dir()
        if first_cut and first_cut_ok:
            return found
        if first_cut:
            raise InvalidInput(
                f"state directory {root} holds only accounts of the first acmecerts "
                "(accounts/): give --directory URL to use one"
            )
        raise InvalidInput(
            f"state directory {root} holds no acmecerts state (no CA's account or "
            "certificates): issue a certificate first, or check --state-dir"
        )
    return found


async def ca_settings(root: Path, slugs: Sequence[str]) -> tuple[list[CaSettings], list[str]]:
    """The settings of each CA directory of ``root``, and a message for each one that
    has none."""
    found: list[CaSettings] = []
    problems: list[str] = []
    async with FileStorage(root) as storage:
        for slug in slugs:
            settings = await load_ca_settings(storage, slug)
            where = root / slug
            if settings is None:
                problems.append(
                    f"cannot tell which CA {where} is for (written by an older acmecerts, "
                    "with no account URL stored): run `acmecerts renew --directory URL` "
                    "once for it"
                )
                continue
            try:
                belongs = ca_slug(settings.directory)
            except InvalidInput as exc:
                problems.append(f"{where}: {exc}")
                continue
            if belongs != slug:
                problems.append(
                    f"{where} holds state for {settings.directory}, which is kept in "
                    f"{root / belongs}: was the directory renamed?"
                )
                continue
            found.append(settings)
    return found, problems


def stored_plan(
    common: CommonArgs, account: AccountArgs, settings: CaSettings | None, max_wait: float
) -> CaPlan:
    """The plan for the CA of ``settings`` (``None``: ``common.directory``), with its
    stored ``--ca-bundle`` unless one was given."""
    bundle = common.ca_bundle
    stored = settings is not None and settings.ca_bundle is not None and bundle is None
    if stored:
        assert settings is not None
        assert settings.ca_bundle is not None
        bundle = Path(settings.ca_bundle)
    directory = settings.directory if settings is not None else common.directory
    try:
        return plan_ca(
            dataclasses.replace(common, directory=directory, ca_bundle=bundle),
            account,
            max_wait=max_wait,
        )
    except InvalidInput as exc:
        if stored:
            raise InvalidInput(f"{exc} (stored for {directory}; give --ca-bundle)") from exc
        raise


@dataclasses.dataclass(frozen=True, slots=True)
class _Group:
    """Certificates of one CA renewed with the same challenge options (one solver)."""

    ca: CaPlan
    options: ChallengeOptions
    #: The options come from the certificates' stored settings.
    stored: bool
    jobs: list[Job]


def _grouped(ca: CaPlan, jobs: Sequence[tuple[Job, ChallengeOptions, bool]]) -> list[_Group]:
    """``jobs`` of ``ca`` in groups of the same challenge options, in order of appearance."""
    groups: dict[tuple[ChallengeOptions, bool], _Group] = {}
    for job, options, stored in jobs:
        group = groups.setdefault((options, stored), _Group(ca, options, stored, []))
        group.jobs.append(job)
    return list(groups.values())


def _solver_plan(group: _Group) -> ChallengePlan:
    """The group's solver; :class:`InvalidInput` naming what its stored settings lack."""
    options = group.options
    identifiers = [i for job in group.jobs for i in job.spec.identifiers]
    if not group.stored:
        return plan_challenge(options, identifiers)
    if (
        options.challenge.lower() in ("dns-01", "dns-account-01")
        and options.dns_hook is None
        and options.dns_rfc2136_server is not None
        and not options.dns_tsig_secret
    ):
        raise InvalidInput(
            f"{options.challenge.lower()} through {options.dns_rfc2136_server} "
            f"(TSIG key {options.dns_tsig_key}) needs the TSIG secret, which is not stored: "
            "give --dns-tsig-secret, ACMECERTS_DNS_TSIG_SECRET or dns-tsig-secret in the "
            "config file"
        )
    try:
        return plan_challenge(options, identifiers)
    except InvalidInput as exc:
        raise InvalidInput(f"its stored challenge settings: {exc}") from exc


def _place(job: Job) -> tuple[str | None, str]:
    """A certificate of the run: its CA and its name."""
    return job.directory, job.name


def ca_plans(
    common: CommonArgs,
    account: AccountArgs,
    *,
    only_directory: bool,
    max_wait: float,
    json_mode: bool,
    verb: str = "renew",
) -> tuple[Path, list[CaPlan], list[str]]:
    """The state directory, a plan for each of its CAs, and a message for each CA
    directory that cannot be used (``renew`` and ``status``).

    ``common.directory`` is resolved (``--staging`` applied); ``only_directory``: it was
    given, and narrows to that CA, which must have state there. Raises
    :class:`InvalidInput` for an unusable state directory (see :func:`ca_dirs`).
    """
    directory = common.directory
    assert directory is not None
    plan_ca(common, account, max_wait=max_wait)  # the options, before the state
    root = (common.state_dir or default_state_dir()).expanduser().absolute()
    slugs = ca_dirs(root, first_cut_ok=only_directory)
    found, problems = run_interruptible(lambda: ca_settings(root, slugs), json_mode=json_mode)
    if only_directory:
        first = stored_plan(common, account, None, max_wait)
        if ca_slug(directory) not in slugs and first.state.legacy_account_dir() is None:
            listed = ", ".join(sorted(s.directory for s in found)) or "none it can name"
            raise InvalidInput(
                f"no state for {directory} in {root} (its CAs: {listed}); "
                f"leave out --directory to {verb} at every CA"
            )
        mine = [s for s in found if s.directory == directory]
        return root, [stored_plan(common, account, mine[0] if mine else None, max_wait)], []
    if not found:
        raise InvalidInput(problems[0])
    return root, [stored_plan(common, account, s, max_wait) for s in found], problems


def _jobs(
    ca: CaPlan, known: _Known, args: RenewArgs, challenge: ChallengeOptions
) -> list[tuple[Job, ChallengeOptions, bool]]:
    jobs: list[tuple[Job, ChallengeOptions, bool]] = []
    state = ca.state
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
            profile_required=record.profile_required if record else True,
            preferred_chain=record.preferred_chain if record else None,
            reuse_key=record.reuse_key if record else False,
        )
        out = Path(record.out) if record and record.out else state.default_out(name)
        options, stored_settings = renewal_options(challenge, args.challenge_given, record)
        job = Job(
            spec=spec,
            out=out,
            force=args.force or revoked,
            record=record,
            hooks=stored_hooks(record).overridden_by(args.hooks.hooks),
            directory=ca.directory,
            webroot=options.webroot,
            out_layout=record.out_layout if record and record.out_layout else "plain",
            dry_run=args.rehearsal,
        )
        jobs.append((job, options, stored_settings))
    return jobs


def _random_delay(seconds: float) -> float:
    """Sleep a uniformly random time in [0, ``seconds``); return it."""
    if seconds <= 0:
        return 0.0
    delay = seconds * random_fraction()
    log.info("waiting %.1f s (--random-delay %g) before contacting the CA", delay, seconds)
    sleep(delay)
    return delay


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
        return ExitCode.INPUT
    return code


def run_renew(
    args: RenewArgs, given: CommonArgs, account: AccountArgs, challenge: ChallengeOptions
) -> int:
    """Run ``acmecerts renew``; return the exit code."""
    if args.dry_run:
        from ._dryrenew import run_renew_dry

        return run_renew_dry(args, given, account, challenge, run_renew)

    def work(report: Report) -> int:
        directory = resolve_directory(given.directory, staging=given.staging)
        common = dataclasses.replace(given, directory=directory, staging=False)
        args.batch.check()
        duration_seconds(args.random_delay, "--random-delay")
        hook_timeout = args.hooks.checked_timeout()
        root, cas, problems = ca_plans(
            common,
            account,
            only_directory=given.only_directory,
            max_wait=args.batch.max_wait,
            json_mode=report.json_mode,
        )
        if args.rehearsal:  # never `replaces` (see _dryrenew)
            cas = [dataclasses.replace(ca, dry_run=True) for ca in cas]

        async def load() -> list[tuple[CaPlan, _Known]]:
            loaded = [(ca, await ca.state.known_certificates()) for ca in cas]
            if args.names:
                everywhere = {name for _, known in loaded for name, _, _ in known}
                missing = [n for n in args.names if n.lower() not in everywhere]
                if missing:
                    raise InvalidInput(
                        f"no certificate named {', '.join(missing)} in {root} "
                        "(see `acmecerts status`)"
                    )
                wanted = {n.lower() for n in args.names}
                loaded = [(ca, [k for k in known if k[0] in wanted]) for ca, known in loaded]
            return [(ca, known) for ca, known in loaded if known]

        everything = [
            (ca, _jobs(ca, known, args, challenge))
            for ca, known in run_interruptible(load, json_mode=report.json_mode)
        ]
        # The order to report in: by CA and name (the engine hands back copies of the jobs).
        position = {
            _place(job): i
            for i, (job, _, _) in enumerate(j for _, jobs in everything for j in jobs)
        }
        # Nothing is ordered for a certificate whose output directory or webroot became
        # unusable, or whose stored challenge settings cannot be used (a TSIG secret not
        # given, a hook gone): it fails now, the others go on.
        refused: list[Outcome] = []
        groups: list[tuple[_Group, ChallengePlan]] = []
        for ca, jobs in everything:
            usable, refusals = refuse_unusable([job for job, _, _ in jobs])
            refused += refusals
            kept = {id(job) for job in usable}
            for group in _grouped(ca, [j for j in jobs if id(j[0]) in kept]):
                try:
                    groups.append((group, _solver_plan(group)))
                except InvalidInput as exc:
                    if not group.stored:
                        raise  # the command's own options: bad input, as always
                    reason = f"{exc}; nothing was ordered for it"
                    refused += [
                        Outcome(job, "failed", reason=reason, error=exc) for job in group.jobs
                    ]
        for problem in problems:  # one line each; the JSON object lists them too
            sys.stderr.write(f"acmecerts: error: {' '.join(problem.split())}\n")
        if not groups:
            if refused:
                refused.sort(key=lambda o: position[_place(o.job)])
                code = batch_result(report, refused, verb="Checked", failed=bool(problems))
                return renew_exit_code(code, refused, [])
            code = ExitCode.FAILED if problems else ExitCode.OK
            if report.json_mode:
                report.json({**results_json([], code), "errors": problems})
            elif not args.quiet and not problems:
                report.out.print(f"No certificates in {root}.")
            return code
        delay = _random_delay(args.random_delay)
        runner = HookRunner(timeout=hook_timeout)

        async def main(finished: list[Outcome] | None = None) -> list[Outcome]:
            outcomes: list[Outcome] = []
            try:
                for group, plan in groups:
                    ca, jobs = group.ca, group.jobs
                    try:
                        outcomes += await run_jobs(
                            ca,
                            plan,
                            jobs,
                            report,
                            concurrency=args.batch.concurrency,
                            single=False,
                            eager=False,
                            title="Renewing: ",
                            hooks=runner,
                            quiet=args.quiet,
                            finished=finished,
                        )
                    except Deferred as deferred:
                        # This CA asked to wait past --max-wait at set-up: its certificates
                        # are deferred (kept in the state directory); the other CAs go on.
                        outcomes += [
                            Outcome(
                                job,
                                "deferred",
                                until=deferred.until,
                                reason=f"{ca.directory}: {deferred}",
                                error=deferred.error,
                            )
                            for job in jobs
                        ]
                    except Exception as raised:
                        # A CA that cannot be reached must not stop the renewals at others.
                        exc = first_error(raised)
                        if not isinstance(exc, AcmeCertsError) or isinstance(
                            exc, InvalidInput | StorageError
                        ):
                            raise
                        outcomes += [
                            Outcome(job, "failed", error=exc, reason=f"{ca.directory}: {exc}")
                            for job in jobs
                        ]
            finally:
                await runner.after_all()
            return outcomes

        def finish(outcomes: list[Outcome]) -> int:
            extra: dict[str, object] = {"random_delay": round(delay, 3)}
            if args.rehearsal:
                extra["dry_run"] = True
            if problems:
                extra["errors"] = problems
            every = sorted([*refused, *outcomes], key=lambda o: position[_place(o.job)])
            code = batch_result(
                report,
                every,
                verb="Dry run: checked" if args.rehearsal else "Checked",
                runner=runner,
                failed=bool(problems),
                quiet=args.quiet,
                extra=extra,
            )
            return renew_exit_code(code, refused, outcomes)

        certificates = [
            (job.name, [i.value for i in job.spec.identifiers])
            for group, _ in groups
            for job in group.jobs
        ]
        return run_batch(report, certificates, main, finish=finish)

    return run_guarded(given, work, json_base=RESULT_JSON_BASE)
