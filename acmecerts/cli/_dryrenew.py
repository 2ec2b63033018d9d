"""``renew --dry-run``: the whole renewal of the stored certificates, nothing kept.

The CAs and certificates are found as ``renew`` finds them (every CA of the state
directory, ``--directory`` narrows, ``NAME``/``--cert-name`` choose). Each CA's
certificates are renewed at its dry-run directory (:func:`~._dryrun.dry_run_directory`:
Let's Encrypt production at its staging directory, any other CA at itself) from a
scratch copy of the state in a temporary directory, removed afterwards:

- at the same CA: its settings, account, ledger, certificates, records and attempt
  states; not its order journal (an order in flight is the real run's to resume), never
  with an account rollover unfinished (its recovery would change the account at the CA);
- at another CA: that CA's settings, account and ledger where the state directory has
  them, and the certificates and records of the CA they were issued from.

The records export to the scratch directory and name no deploy-hook; every renewal is
ordered without ``replaces`` (RFC 9773): at another CA the certID is not the CA's, and at
the same CA the certificate would count as replaced, so the real renewal would lose its
``replaces``. Certificates named (or ``--force``) are renewed whether due or not; the
others when due (at another CA, by their lifetime: it cannot answer ARI for them).
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.manager import load_pending_key
from acmecerts.storage.keys import ca_slug

from ._args import AccountArgs, ChallengeOptions, CommonArgs
from ._batch import RESULT_JSON_BASE, results_json
from ._constants import ExitCode
from ._dryrun import dry_run_directory, dry_run_hooks
from ._firstcontact import resolve_directory
from ._interrupt import run_interruptible
from ._report import Report, run_guarded
from ._state import State

if TYPE_CHECKING:
    from ._ca import CaPlan
    from ._renew import RenewArgs

__all__ = ["run_renew_dry"]

_ACCOUNT = "accounts/default"
#: What a CA's state directory holds of its account (relative to ``<state>/<ca>``).
_ACCOUNT_PARTS = (
    "cli-settings.json",
    "ledger.json",
    f"{_ACCOUNT}/key.pem",
    f"{_ACCOUNT}/account.json",
)
#: What holds its certificates (``attempts``: only when renewed at the same CA).
_CERTIFICATE_PARTS = ("certificates", "cli")


@dataclasses.dataclass(frozen=True, slots=True)
class _Prepared:
    """The scratch state of a dry run, and what to say about it."""

    state_dir: Path
    #: ``--directory`` for the run in the scratch state (``None``: every CA there).
    directory: str | None
    notes: list[str]
    #: The CA directories ``renew`` could not use (reported, the exit code is 1).
    problems: list[str]
    #: Certificates to renew; none: ``renew`` would have nothing to do.
    count: int
    root: Path


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    elif source.is_file():
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _merge(source: Path, target: Path, *, what: str) -> None:
    """Copy the entries of the directory ``source`` into ``target``, none already there."""
    if not source.is_dir():
        return
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        if (target / entry.name).exists():
            raise InvalidInput(
                f"{what}: {entry.name} is also stored for the CA a dry run goes to; "
                "give --directory URL to rehearse one CA at a time"
            )
        _copy(entry, target / entry.name)


async def _load(
    cas: list[CaPlan], names: tuple[str, ...], root: Path
) -> list[tuple[CaPlan, list[str]]]:
    """The certificates of each CA (those named, if any); refused as ``renew`` does."""
    loaded: list[tuple[CaPlan, list[str]]] = []
    for ca in cas:
        if await load_pending_key(ca.state.storage, ca.state.layout) is not None:
            raise InvalidInput(
                f"an account key rollover is unfinished in {ca.state.root} for {ca.directory}: "
                "run a command without --dry-run first (it finishes or undoes the rollover)"
            )
        loaded.append((ca, [name for name, _, _ in await ca.state.known_certificates()]))
    if names:
        everywhere = {name for _, known in loaded for name in known}
        missing = [n for n in names if n.lower() not in everywhere]
        if missing:
            raise InvalidInput(
                f"no certificate named {', '.join(missing)} in {root} (see `acmecerts status`)"
            )
        wanted = {n.lower() for n in names}
        loaded = [(ca, [n for n in known if n in wanted]) for ca, known in loaded]
    return loaded


async def _scratch_records(scratch: Path, directories: set[str]) -> None:
    """Every record in the scratch state exports there and names no deploy-hook."""
    for directory in sorted(directories):
        state = State(scratch, directory)
        try:
            for record in await state.list_records():
                kept = dataclasses.replace(record, out=None, out_layout=None, deploy_hook=None)
                if kept != record:
                    await state.save_record(kept)
        finally:
            await state.aclose()


def _prepare(args: RenewArgs, given: CommonArgs, account: AccountArgs, tmp: Path) -> _Prepared:
    from ._renew import ca_plans

    directory = resolve_directory(given.directory, staging=given.staging)
    common = dataclasses.replace(given, directory=directory, staging=False)
    args.batch.check()
    args.hooks.checked_timeout()
    root, cas, problems = ca_plans(
        common,
        account,
        only_directory=given.only_directory,
        max_wait=args.batch.max_wait,
        json_mode=given.json,
    )
    loaded = run_interruptible(lambda: _load(cas, args.names, root), json_mode=given.json)
    scratch = tmp / "state"
    scratch.mkdir(mode=0o700)
    notes: list[str] = []
    targets: dict[str, str] = {}  # dry-run directory -> its slug
    settings: list[tuple[str, Path | None]] = []
    # The CAs renewed at themselves first: all of their state comes along.
    plans = [(ca, *dry_run_directory(ca.directory)) for ca, known in loaded if known]
    plans.sort(key=lambda plan: plan[1] != plan[0].directory)
    for ca, target, note in plans:
        slug, source = ca_slug(target), root / ca_slug(ca.directory)
        notes.append(f"{note}: nothing is saved, exported or journaled")
        if target == ca.directory:
            for part in (*_ACCOUNT_PARTS, *_CERTIFICATE_PARTS, f"{_ACCOUNT}/attempts"):
                prefix = f"{_ACCOUNT}/" if part in _CERTIFICATE_PARTS else ""
                _copy(source / (prefix + part), scratch / slug / (prefix + part))
        else:
            notes[-1] = f"{ca.directory}: {notes[-1]}"
            if target not in targets and (root / slug).is_dir():
                for part in _ACCOUNT_PARTS:  # its account (none: a new one, kept nowhere)
                    _copy(root / slug / part, scratch / slug / part)
            if not (scratch / slug / "cli-settings.json").is_file():
                settings.append((target, ca.ca_bundle))
            for part in _CERTIFICATE_PARTS:
                _merge(
                    source / _ACCOUNT / part, scratch / slug / _ACCOUNT / part, what=ca.directory
                )
        targets[target] = slug

    async def settle() -> None:
        for target, bundle in settings:
            state = State(scratch, target)
            try:
                await state.save_ca_settings(bundle)
            finally:
                await state.aclose()
        await _scratch_records(scratch, set(targets))

    run_interruptible(settle, json_mode=given.json)
    narrowed = next(iter(targets)) if given.only_directory and targets else None
    count = sum(len(known) for _, known in loaded)
    return _Prepared(scratch, narrowed, notes, problems, count, root)


def run_renew_dry(
    args: RenewArgs,
    given: CommonArgs,
    account: AccountArgs,
    challenge: ChallengeOptions,
    renew: Callable[[RenewArgs, CommonArgs, AccountArgs, ChallengeOptions], int],
) -> int:
    """Run ``acmecerts renew --dry-run`` (see the module); ``renew`` is ``run_renew``."""
    with tempfile.TemporaryDirectory(prefix="acmecerts-dry-run-") as tmp:
        try:
            prepared = _prepare(args, given, account, Path(tmp))
        except AcmeCertsError as exc:
            error = exc

            def refuse(report: Report) -> NoReturn:
                raise error

            return run_guarded(given, refuse, json_base=RESULT_JSON_BASE)
        for problem in prepared.problems:
            sys.stderr.write(f"acmecerts: error: {' '.join(problem.split())}\n")
        if prepared.count == 0:
            return run_guarded(given, lambda report: _nothing(report, prepared, args.quiet))
        for note in prepared.notes:
            sys.stderr.write(f"acmecerts: {note}\n")
        common = dataclasses.replace(
            given, state_dir=prepared.state_dir, directory=prepared.directory, staging=False
        )
        rehearsal = dataclasses.replace(
            args,
            dry_run=False,
            rehearsal=True,
            force=args.force or bool(args.names),
            random_delay=0.0,
            hooks=dry_run_hooks(args.hooks),
        )
        code = renew(rehearsal, common, account, challenge)
    return ExitCode.FAILED if prepared.problems and code == ExitCode.OK else code


def _nothing(report: Report, prepared: _Prepared, quiet: bool) -> int:
    """``renew``'s answer for a state directory with CAs but no certificate."""
    code = ExitCode.FAILED if prepared.problems else ExitCode.OK
    if report.json_mode:
        report.json({**results_json([], code), "dry_run": True, "errors": prepared.problems})
    elif not quiet and not prepared.problems:
        report.out.print(f"No certificates in {prepared.root}.")
    return code
