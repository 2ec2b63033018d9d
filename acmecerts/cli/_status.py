"""``acmecerts status``: the certificates in the state directory and the rate-limit budget,
at every CA the state directory holds (``--directory`` narrows to one)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from acmecerts.client import AcmeClient
from acmecerts.errors import AcmeCertsError
from acmecerts.manager import CertificateRecord, StoredCertificate, load_attempt_state, natural_key
from acmecerts.protocol.ari import decide_renewal
from acmecerts.ratelimit import RateLimitLedger
from acmecerts.retry import AttemptState
from acmecerts.storage.export import exported_paths

from ._args import AccountArgs, CommonArgs
from ._batch import CERTIFICATE_FIELDS
from ._ca import CaPlan, ca_client
from ._check import DEFAULT_GRACE, check_certificates, parse_at, parse_grace, print_check
from ._constants import ExitCode
from ._firstcontact import resolve_directory
from ._interrupt import run_interruptible
from ._renew import ca_plans
from ._report import Report, iso, log, run_guarded, when
from ._state import State

__all__ = ["run_status"]


def run_status(
    *,
    ari: bool,
    common: CommonArgs,
    check: bool = False,
    check_grace: str = DEFAULT_GRACE,
    at: str | None = None,
) -> int:
    """Run ``acmecerts status``; return the exit code.

    Like ``renew``: every CA of the state directory (``--directory`` or ``--staging``
    narrows to that CA, which must have state there: :attr:`CommonArgs.only_directory`);
    a state directory that is missing, a file, unreadable or holds no CA is exit 2.
    ``at`` (``--at``) shows the state as it will be then; ``check`` (``--check``) exits 1
    when a certificate fails the check (:mod:`acmecerts.cli._check`).
    """

    def work(report: Report) -> int:
        grace = parse_grace(check_grace)
        instant = parse_at(at, _dt.datetime.now(_dt.UTC))
        directory = resolve_directory(common.directory, staging=common.staging)
        resolved = dataclasses.replace(common, directory=directory, staging=False)
        root, cas, problems = ca_plans(
            resolved,
            AccountArgs(),
            only_directory=common.only_directory,
            max_wait=120.0,
            json_mode=report.json_mode,
            verb="show the certificates",
        )

        async def main() -> dict[str, Any]:
            sections = [await _ca_status(ca, instant, ari=ari) for ca in cas]
            one = sections[0] if len(sections) == 1 else None
            return {
                "state_dir": str(root),
                # one CA (or --directory): its directory, account and budget, as before
                # every CA was shown; several: null, each is in `cas`
                "directory": one["directory"] if one is not None else None,
                "account": one["account"] if one is not None else None,
                "rate_limits": one["rate_limits"] if one is not None else None,
                "cas": sections,
                "certificates": [c for section in sections for c in section.pop("certificates")],
                "errors": problems,
                "check": None,
            }

        document = run_interruptible(main, json_mode=report.json_mode)
        if check:
            document["check"] = check_certificates(
                document["certificates"], at=instant, grace=grace
            )
        for problem in problems:  # one line each; the JSON object lists them too
            report.err.print(Text(f"acmecerts: error: {' '.join(problem.split())}"), soft_wrap=True)
        if report.json_mode:
            report.json(document)
        else:
            if check:
                print_check(report, document["check"])
            _print_status(report, document)
        failed = check and not document["check"]["ok"]
        return ExitCode.FAILED if problems or failed else ExitCode.OK

    return run_guarded(common, work)


async def _ca_status(ca: CaPlan, now: _dt.datetime, *, ari: bool) -> dict[str, Any]:
    """One CA: its account, its certificates (each naming the CA) and its budget."""
    state = ca.state
    key = await state.load_account_key()
    account = None
    if key is not None:
        account = {
            "url": await state.load_account_url(key),
            "thumbprint": key.thumbprint,
            "key": state.path_for(state.layout.account_key()),
        }
    certificates = []
    client: AcmeClient | None = None
    async with contextlib.AsyncExitStack() as stack:
        if ari:
            client = await stack.enter_async_context(ca_client(ca))
            if (await client.directory()).renewal_info is None:
                log.warning(
                    "%s has no renewalInfo (ARI): renewal when a third of the lifetime is left "
                    "(half under 10 days)",
                    ca.directory,
                )
                client = None
        for _name, stored, record in await state.known_certificates():
            if stored is None:
                assert record is not None
                certificates.append(await _pending_status(state, record, now))
            else:
                certificates.append(await _certificate_status(state, stored, now, client))
        certificates += [
            _half_deleted_status(record)
            for record in await state.list_records()
            if record.deleting is not None
        ]
        certificates.sort(key=lambda c: natural_key(c["name"]))
    for certificate in certificates:
        certificate["directory"] = ca.directory
    ledger = RateLimitLedger(ca.model, storage=state.storage, key=state.layout.ledger())
    budget = await ledger.budget()
    return {
        "directory": ca.directory,
        "account": account,
        "certificates": certificates,
        "rate_limits": {
            "model": ca.model.name,
            "budget": [
                {
                    "limit": line.limit,
                    "scope": line.scope_key,
                    "capacity": line.capacity,
                    "remaining": line.remaining,
                    "next_slot": iso(line.next_slot),
                    "full_at": iso(line.full_at),
                    "paused": line.paused,
                }
                for line in budget
            ],
        },
    }


async def _certificate_status(
    state: State, stored: StoredCertificate, now: _dt.datetime, client: AcmeClient | None
) -> dict[str, Any]:
    info = stored.info
    record = await state.load_record(stored.name)
    attempt = await load_attempt_state(state.storage, state.layout, stored.name)
    window = None
    renewal_info = None
    if client is not None:
        try:
            renewal_info = await client.renewal_info(stored.chain.leaf)
            window = [iso(renewal_info.window_start), iso(renewal_info.window_end)]
        except AcmeCertsError as exc:
            log.warning("%s: no renewal window from the CA (%s)", stored.name, exc)
    decision = decide_renewal(
        not_before=info.not_before, not_after=info.not_after, now=now, renewal_info=renewal_info
    )
    revoked = record is not None and record.revoked_serial == info.serial
    deferred = _deferred_until(attempt, now)
    if revoked:
        state_text = "revoked"
    elif info.not_after <= now:
        state_text = "expired"
    elif decision.due(now):
        state_text = "due"
    else:
        state_text = "valid"
    return {
        **dict.fromkeys(CERTIFICATE_FIELDS),
        "name": stored.name,
        "names": list(info.names),
        "status": state_text,
        "serial": info.serial,
        "not_before": iso(info.not_before),
        "not_after": iso(info.not_after),
        "renewal_at": iso(decision.renew_at),
        "renewal_source": decision.source,
        "renewal_window": window,
        # the CA's word on why (RFC 9773 explanationURL): a mass revocation names its notice
        "renewal_explanation": (
            renewal_info.info.explanation_url if renewal_info is not None else None
        ),
        "until": iso(deferred),
        "error": attempt.last_error if attempt is not None else None,
        "key_type": stored.key_type.value if stored.key_type is not None else None,
        "files": _files_json(record),
        "challenge": _challenge_json(record),
    }


def _files_json(record: CertificateRecord | None) -> dict[str, str] | None:
    """Where the certificate's files are written (by kind), as ``issue`` and ``renew`` say."""
    if record is None or record.out is None:
        return None
    layout = record.out_layout or "plain"
    paths = exported_paths(Path(record.out), layout=layout, name=record.name)
    return {kind: str(path) for kind, path in paths.items()}


def _deferred_until(attempt: AttemptState | None, now: _dt.datetime) -> _dt.datetime | None:
    """The instant a deferral or a failure holds the next attempt until, if still ahead."""
    if attempt is None or attempt.next_attempt_at is None or attempt.next_attempt_at <= now:
        return None
    return attempt.next_attempt_at


def _challenge_json(record: CertificateRecord | None) -> dict[str, Any] | None:
    """How ``renew`` answers the certificate's challenges without options: the settings
    stored at issue (never a secret), its webroot among them; ``None`` when none were
    stored (an earlier acmecerts: ``renew``'s own options apply)."""
    if record is None or record.challenge is None:
        return None
    return {**record.challenge.to_json(), "webroot": record.webroot}


async def _pending_status(
    state: State, record: CertificateRecord, now: _dt.datetime
) -> dict[str, Any]:
    """A certificate that was asked for and not issued (deferred, failed, interrupted)."""
    attempt = await load_attempt_state(state.storage, state.layout, record.name)
    deferred = _deferred_until(attempt, now)
    status = "deferred" if deferred is not None else "pending"
    last_error = attempt.last_error if attempt is not None else None
    return _not_issued(record, status, until=deferred, last_error=last_error)


def _half_deleted_status(record: CertificateRecord) -> dict[str, Any]:
    """A certificate whose ``acmecerts delete`` was interrupted (``renew`` skips it)."""
    last_error = f"deletion interrupted: run `acmecerts delete {record.name} --yes`"
    return _not_issued(record, "deleting", until=None, last_error=last_error)


def _not_issued(
    record: CertificateRecord, status: str, *, until: _dt.datetime | None, last_error: str | None
) -> dict[str, Any]:
    """The entry of a certificate with none stored: the fields of one are ``null``."""
    return {
        **dict.fromkeys(CERTIFICATE_FIELDS),
        "name": record.name,
        "names": list(record.identifiers),
        "status": status,
        "until": iso(until),
        "error": last_error,
        "key_type": record.key_type,
        "files": _files_json(record),
        "challenge": _challenge_json(record),
    }


def _print_status(report: Report, document: dict[str, Any]) -> None:
    out = report.out
    out.print(Text(f"State directory {document['state_dir']}", style="bold"))
    by_ca: dict[str, list[dict[str, Any]]] = {}
    for cert in document["certificates"]:
        by_ca.setdefault(cert["directory"], []).append(cert)
    for section in document["cas"]:
        out.print()
        _print_ca(report, section, by_ca.get(section["directory"], []))


def _print_ca(report: Report, section: dict[str, Any], certificates: list[dict[str, Any]]) -> None:
    out = report.out
    out.print(Text(f"CA              {section['directory']}", style="bold"))
    account = section["account"]
    if account is None:
        out.print(Text("Account         none yet (created by the first issue)", style="dim"))
    else:
        out.print(Text(f"Account         {account['url'] or 'not registered yet'}"))
    out.print()
    if not certificates:
        out.print(Text("No certificates.", style="dim"))
    else:
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for column in ("name", "status", "expires", "renewal", "notes"):
            table.add_column(column, no_wrap=column != "notes")
        for cert in certificates:
            notes = []
            if len(cert["names"]) > 1:
                notes.append(f"+{len(cert['names']) - 1} names")
            if cert["until"]:
                until = _dt.datetime.fromisoformat(cert["until"])
                notes.append(f"deferred until {when(until)}")
            if cert.get("renewal_explanation"):
                notes.append(f"the CA explains: {cert['renewal_explanation']}")
            if cert["error"]:
                notes.append(f"last error: {cert['error']}")
            style = {"valid": "green", "due": "yellow", "pending": "yellow"}.get(
                cert["status"], "red"
            )
            expires = renewal = "-"
            if cert["not_after"] is not None:
                expires = f"{_dt.datetime.fromisoformat(cert['not_after']):%Y-%m-%d}"
                renewal = f"{_dt.datetime.fromisoformat(cert['renewal_at']):%Y-%m-%d}"
                renewal += " (ARI)" if cert["renewal_source"] == "ari" else ""
            table.add_row(
                cert["name"], Text(cert["status"], style=style), expires, renewal, "; ".join(notes)
            )
        out.print(table)
    limits = section["rate_limits"]
    out.print()
    budget = limits["budget"]
    if not budget:
        out.print(
            Text(
                f"Rate limits ({limits['model']}): every budget is full; nothing is held back.",
                style="dim",
            )
        )
        return
    table = Table(title=None, show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in ("limit", "scope", "remaining", "next slot", "full at"):
        table.add_column(column)
    for line in budget:
        capacity = line["capacity"]
        remaining = (
            "paused"
            if line["paused"]
            else (
                f"{line['remaining']}/{capacity}"
                if capacity is not None
                else str(line["remaining"])
            )
        )
        table.add_row(
            line["limit"],
            line["scope"],
            remaining,
            when(_dt.datetime.fromisoformat(line["next_slot"])) if line["next_slot"] else "-",
            when(_dt.datetime.fromisoformat(line["full_at"])) if line["full_at"] else "-",
        )
    out.print(Text(f"Rate limits ({limits['model']}):", style="bold"))
    out.print(table)
