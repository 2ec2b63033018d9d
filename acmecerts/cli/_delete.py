"""``acmecerts delete NAME... [--revoke]``: remove certificates from the state directory.

Every name is checked first (an unknown one is exit 2 with the known names, nothing
touched), then confirmed (a prompt on a terminal; ``--yes`` without one), then each
certificate in turn: revoked at the CA with ``--revoke`` (the ``revoke`` command's path:
the account key signs), then removed under its store lock (see :mod:`._lineage` for the
order that leaves nothing half-deleted). A certificate that could not be revoked is not
deleted; the others are, and the exit code says that something failed.

Each certificate is looked for at every CA of the state directory (``--directory``
narrows to one), and revoked at its own CA with the ``--ca-bundle`` stored for it; a name
found at several CAs is exit 2 (see :mod:`._findca`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import difflib
import sys
from collections.abc import Callable
from typing import Any

from rich.text import Text

from acmecerts.errors import AcmeCertsError, AcmeProblem, InvalidInput, ProblemType
from acmecerts.manager import (
    CertificateRecord,
    StoredCertificate,
    certificate_identifiers,
    delete_recorded_certificate,
    natural_key,
)

from ._args import CommonArgs
from ._ca import CaPlan, open_client
from ._constants import ExitCode
from ._engine import problem_of
from ._findca import StateCas, ambiguous, state_cas
from ._interrupt import run_interruptible
from ._report import Report, problem_json, run_guarded, status_word
from ._revoke import _reason
from ._state import State

__all__ = ["DeleteArgs", "run_delete"]

#: How long to wait for a certificate's store lock (held while it is being issued).
_LOCK_TIMEOUT = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class DeleteArgs:
    """Options of ``acmecerts delete``."""

    names: tuple[str, ...]
    revoke: bool = False
    reason: str = "cessationOfOperation"
    yes: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Target:
    name: str
    names: tuple[str, ...]
    stored: StoredCertificate | None
    record: CertificateRecord | None


def _ask_on_terminal(question: str) -> bool | None:
    """``True``/``False`` as answered on the terminal; ``None`` without a terminal."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    sys.stderr.write(question)
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


async def _known(state: State) -> dict[str, _Target]:
    """The certificates of one CA by name (half-deleted ones too)."""
    known: dict[str, _Target] = {
        name: _Target(name, certificate_identifiers(stored, record), stored, record)
        for name, stored, record in await state.known_certificates()
    }
    for record in await state.list_records():
        if record.deleting is not None and record.name not in known:
            stored = await state.load_certificate(record.name)
            names = certificate_identifiers(stored, record)
            known[record.name] = _Target(record.name, names, stored, record)
    return known


async def _targets(cas: StateCas, wanted: tuple[str, ...]) -> list[tuple[CaPlan, _Target]]:
    """The certificates named, each with its CA; an unknown name, or one found at several
    CAs (without ``--directory``), is exit 2."""
    at = [(ca, await _known(ca.state)) for ca in cas.plans]
    names = list(dict.fromkeys(n.strip().lower() for n in wanted))
    missing = [n for n in dict.fromkeys(wanted) if all(n.strip().lower() not in k for _, k in at)]
    if missing:
        choices = sorted({name for _, known in at for name in known}, key=natural_key)
        close = {m for n in missing for m in difflib.get_close_matches(n.lower(), choices)}
        hint = f"did you mean {', '.join(sorted(close, key=natural_key))}? " if close else ""
        listed = ", ".join(choices) if choices else "none"
        where = f" for {cas.plans[0].directory}" if cas.chosen else ""
        raise InvalidInput(
            f"no certificate named {', '.join(missing)} in {cas.root}{where} "
            f"({hint}known: {listed})"
        )
    targets = []
    for name in names:
        found = [(ca, known[name]) for ca, known in at if name in known]
        if len(found) > 1:
            raise ambiguous(f"the certificate {name}", cas.root, [ca for ca, _ in found])
        targets.append(found[0])
    return targets


def run_delete(
    args: DeleteArgs,
    *,
    common: CommonArgs,
    ask: Callable[[str], bool | None] = _ask_on_terminal,
) -> int:
    """Run ``acmecerts delete``; return the exit code.

    ``ask`` puts the confirmation question (``None``: there is no terminal to ask).
    """

    def work(report: Report) -> int:
        reason_name, reason_code = _reason(args.reason) if args.revoke else ("", 0)
        cas = state_cas(common, json_mode=report.json_mode)
        targets = run_interruptible(lambda: _targets(cas, args.names), json_mode=report.json_mode)
        if not args.yes:
            listed = ", ".join(t.name for _, t in targets)
            what = " and revoke them at the CA" if args.revoke else ""
            noun = "certificate" if len(targets) == 1 else "certificates"
            answer = ask(f"Delete {noun} {listed} from {cas.root}{what}? [y/N] ")
            if answer is None:
                raise InvalidInput(
                    "deleting certificates cannot be undone: confirm with --yes "
                    "(there is no terminal to ask)"
                )
            if not answer:
                raise InvalidInput("not confirmed; nothing was deleted")

        async def main() -> list[dict[str, Any]]:
            results = []
            for ca, target in targets:
                results.append(await _delete_one(ca, target, args.revoke, reason_code))
            return results

        results = run_interruptible(main, json_mode=report.json_mode)
        code = ExitCode.OK if all(r["status"] == "deleted" for r in results) else ExitCode.FAILED
        if report.json_mode:
            report.json(
                {
                    "status": status_word(code),
                    "exit_code": code,
                    "error": None,
                    "problem": None,
                    "certificates": results,
                }
            )
        else:
            _print(report, results, reason_name)
        return code

    return run_guarded(common, work, json_base={"certificates": []})


async def _delete_one(ca: CaPlan, target: _Target, revoke: bool, reason: int) -> dict[str, Any]:
    state = ca.state
    result: dict[str, Any] = {
        "name": target.name,
        "status": "deleted",
        "names": list(target.names),
        "serial": target.stored.info.serial if target.stored is not None else None,
        "revocation": None,
        "removed_files": [],
        "kept_out": None,
        "error": None,
        "problem": None,
    }
    try:
        if revoke:
            result["revocation"] = await _revoke(ca, target, reason)
        lock = state.storage.lock(
            state.layout.certificate_lock(target.name), lease=60.0, timeout=_LOCK_TIMEOUT
        )
        async with lock:
            removal = await delete_recorded_certificate(
                state.storage, state.layout, target.name, default_out=state.default_out(target.name)
            )
    except AcmeCertsError as exc:
        result["status"] = "failed"
        result["error"] = " ".join(str(exc).split())
        result["problem"] = problem_json(problem_of(exc))
        return result
    result["removed_files"] = [str(p) for p in removal.removed_files]
    result["kept_out"] = str(removal.kept_out) if removal.kept_out is not None else None
    return result


async def _revoke(ca: CaPlan, target: _Target, reason: int) -> str:
    """Revoke the stored certificate; say what was done (raises when the CA refuses)."""
    stored, record = target.stored, target.record
    if stored is None:
        return "never issued"
    serial = stored.info.serial
    if record is not None and record.revoked_serial == serial:
        return "already revoked"
    if stored.info.not_after <= _dt.datetime.now(_dt.UTC):
        return "expired"
    async with open_client(ca, create=False) as client:
        try:
            await client.revoke(stored.chain.pem, reason=reason)
        except AcmeProblem as exc:
            if exc.type != ProblemType.ALREADY_REVOKED:
                raise
            return "already revoked"
    base = record or CertificateRecord(name=target.name)
    await ca.state.save_record(dataclasses.replace(base, revoked_serial=serial))
    return "revoked"


def _print(report: Report, results: list[dict[str, Any]], reason: str) -> None:
    for result in results:
        names = ", ".join(result["names"]) or "no names"
        if result["status"] == "failed":
            message = f"{result['name']} was not deleted: {result['error']}"
            report.error_line(ExitCode.FAILED, message)
            continue
        title = Text("Deleted ", style="bold green")
        title.append(result["name"], style="bold")
        title.append(f" ({names})")
        rows = []
        if result["revocation"] is not None:
            revocation = result["revocation"]
            if revocation == "revoked":
                revocation = f"revoked (serial {result['serial']}, {reason})"
            rows.append(("revocation", revocation))
        if result["removed_files"]:
            rows.append(("removed", ", ".join(result["removed_files"])))
        if result["kept_out"]:
            rows.append(("kept", f"{result['kept_out']} (your --out directory; not touched)"))
        report.rows(title, rows)
