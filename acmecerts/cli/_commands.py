"""The commands: their parameters and docstrings (``--help``), and what each one runs.

Every option is declared in :mod:`acmecerts.cli._options` (a command's own ones as
``Annotated`` types); a command takes a group of the shared ones as one keyword-only
parameter typed with its dataclass (see :func:`~acmecerts.cli._groups.shared`).
:mod:`acmecerts.cli._app` makes these functions the ``acmecerts`` commands. Each imports
the work it runs inside its body: ``acmecerts COMMAND --help`` must not import the
library (``tests/cli/test_cli_start.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final

import typer

from ._args import AccountArgs, BatchArgs, ChallengeOptions, CommonArgs, HookArgs
from ._flag_options import Csr, DryRun, RenewCertName, RenewDryRun, ReuseKey
from ._groups import CHALLENGE, shared
from ._import_options import CertbotDir, ImportAccount, ImportOut, OutLayout
from ._monitor_options import At, Check, CheckGrace
from ._options import (
    Ari,
    CertKey,
    CertKeyType,
    CertName,
    DeleteReason,
    Force,
    FromFile,
    NewAccountKeyType,
    Out,
    PreferredChain,
    PreferredProfile,
    Profile,
    Quiet,
    RandomDelay,
    RenewDirectory,
    RenewForce,
    Revoke,
    RevokeReason,
    RolloverKeyType,
    StateCaDirectory,
    StatusDirectory,
    Yes,
)
from ._persist_options import PersistIssuer, PersistNames, PersistUntil, PersistWildcard

__all__ = [
    "account_create",
    "account_deactivate",
    "account_dns_persist_records",
    "account_rollover",
    "account_show",
    "delete_command",
    "import_certbot",
    "issue_command",
    "renew_command",
    "revoke_command",
    "status_command",
]


@shared()
def issue_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="NAME...",
            help="DNS names or IP addresses for one certificate; the first one names it "
            "(and its default output directory).",
            show_default=False,
        ),
    ] = None,
    from_file: FromFile = None,
    out: Out = None,
    key_type: CertKeyType = "ec256",
    profile: Profile = None,
    preferred_profile: PreferredProfile = None,
    preferred_chain: PreferredChain = None,
    cert_name: CertName = None,
    force: Force = False,
    out_layout: OutLayout = "plain",
    reuse_key: ReuseKey = False,
    dry_run: DryRun = False,
    csr: Csr = None,
    *,
    batch: BatchArgs,
    hooks: HookArgs,
    challenge_options: ChallengeOptions,
    account: AccountArgs,
    common: CommonArgs,
) -> None:
    """Issue a certificate for NAME..., or one per line of --from-file (in parallel).

    The same names in any order are the same certificate: one already in the state
    directory that is not due for renewal is kept (and its files written to --out)
    unless --force. When the first NAME already names a certificate for other names,
    nothing is ordered until --cert-name says which certificate to issue into.
    """
    from ._issue import IssueArgs, run_issue

    args = IssueArgs(
        names=tuple(names or ()),
        from_file=from_file,
        out=out,
        key_type=key_type,
        profile=profile,
        preferred_profile=preferred_profile,
        preferred_chain=preferred_chain,
        force=force,
        cert_name=cert_name,
        out_layout=out_layout,
        reuse_key=reuse_key,
        dry_run=dry_run,
        csr=csr,
        batch=batch,
        hooks=hooks,
    )
    raise typer.Exit(run_issue(args, common, account, challenge_options))


#: ``renew``'s challenge options, by parameter name: the ``ChallengeOptions`` field each
#: sets (not the TSIG secret: it is never stored, and always the command's).
_RENEW_CHALLENGE_OPTIONS: Final = {
    name: field
    for name, field in CHALLENGE.fields().items()
    if name not in ("dns_tsig_secret", "dns_provider_option")
}


def _given(ctx: typer.Context, names: dict[str, str]) -> frozenset[str]:
    """The options among ``names`` that were given: on the command line, in the
    environment or in the config file (click's parameter source), not left at their
    default; mapped to the values of ``names``."""
    found = set()
    for param, field in names.items():
        source = ctx.get_parameter_source(param)
        # by name: typer ships its own copy of click in some versions
        if source is not None and getattr(source, "name", "DEFAULT") != "DEFAULT":
            found.add(field)
    return frozenset(found)


@shared(directory=RenewDirectory)
def renew_command(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[NAME]...",
            help="Certificates to renew (as `acmecerts status` names them) [default: all].",
            show_default=False,
        ),
    ] = None,
    force: RenewForce = False,
    cert_name: RenewCertName = None,
    dry_run: RenewDryRun = False,
    *,
    batch: BatchArgs,
    random_delay: RandomDelay = 0.0,
    quiet: Quiet = False,
    hooks: HookArgs,
    challenge_options: ChallengeOptions,
    account: AccountArgs,
    common: CommonArgs,
) -> None:
    """Renew the certificates in the state directory that are due, at every CA.

    Each certificate is renewed at the CA it was issued from, with that CA's account.
    Due means inside the CA's ARI renewal window, or a third of the lifetime left (half of
    it for a certificate of under 10 days) when the CA has no ARI (and a revoked
    certificate); --force renews now. A certificate that was asked for but not issued
    (deferred by rate limits, failed, interrupted) is issued. The files are written
    where the certificate's files were written before, and the hooks stored with it run
    (hooks given here replace them for this run). Its challenges are answered as at
    issue (the challenge options are stored with it; the TSIG secret is not: give it to
    every run); a challenge option given here (flag, environment or config file)
    replaces the stored one for this run. A missing, empty or unreadable state
    directory is an error (exit 2), never "nothing to do".
    """
    from ._renew import RenewArgs, run_renew

    args = RenewArgs(
        names=tuple(dict.fromkeys([*(names or ()), *(cert_name or ())])),
        force=force,
        batch=batch,
        quiet=quiet,
        random_delay=random_delay,
        hooks=hooks,
        challenge_given=_given(ctx, _RENEW_CHALLENGE_OPTIONS),
        dry_run=dry_run,
    )
    raise typer.Exit(run_renew(args, common, account, challenge_options))


@shared(directory=StateCaDirectory)
def revoke_command(
    target: Annotated[
        str,
        typer.Argument(
            metavar="PATH|NAME",
            help="A certificate file (PEM, leaf first), a directory with cert.pem, or the "
            "name of a certificate in the state directory.",
            show_default=False,
        ),
    ],
    reason: RevokeReason = "unspecified",
    cert_key: CertKey = None,
    *,
    common: CommonArgs,
) -> None:
    """Revoke a certificate (by file or by name); a stored one is renewed at the next run."""
    from ._revoke import run_revoke

    raise typer.Exit(run_revoke(target, reason=reason, cert_key=cert_key, common=common))


@shared(directory=StateCaDirectory)
def delete_command(
    names: Annotated[
        list[str],
        typer.Argument(
            metavar="NAME...",
            help="Certificates to delete, as `acmecerts status` names them.",
            show_default=False,
        ),
    ],
    revoke: Revoke = False,
    reason: DeleteReason = "cessationOfOperation",
    *,
    yes: Yes = False,
    common: CommonArgs,
) -> None:
    """Delete certificates from the state directory, so that renew no longer tries them.

    Removes the certificate, its key, its order and attempt state and the CLI's record,
    and the files of the default export directory STATE_DIR/certificates/NAME. Files
    exported to an --out directory of your own are left where they are (the output says
    where). Nothing is sent to the CA unless --revoke.
    """
    from ._delete import DeleteArgs, run_delete

    args = DeleteArgs(names=tuple(names), revoke=revoke, reason=reason, yes=yes)
    raise typer.Exit(run_delete(args, common=common))


@shared(directory=StatusDirectory)
def status_command(
    ari: Ari = False,
    check: Check = False,
    check_grace: CheckGrace = "1d",
    at: At = None,
    *,
    common: CommonArgs,
) -> None:
    """Show the certificates in the state directory and the rate-limit budget, at every CA.

    For each CA the state directory holds (--directory narrows to one): its account; for
    each certificate: its names, expiry, next renewal and any deferral; what the
    rate-limit ledger says may be spent now, per limit, and when the next slot opens. A
    missing, empty or unreadable state directory is an error (exit 2). Nothing is sent to
    the CA unless --ari. With --check it exits 1 when a certificate is expired, revoked, or
    not renewed --check-grace after its renewal instant (--json: which, and why).
    """
    from ._status import run_status

    raise typer.Exit(
        run_status(ari=ari, common=common, check=check, check_grace=check_grace, at=at)
    )


@shared(directory=StateCaDirectory)
def account_show(*, common: CommonArgs) -> None:
    """Show the stored account and what the CA says about it."""
    from ._account import run_account

    raise typer.Exit(run_account("show", common=common))


@shared()
def account_dns_persist_records(
    names: PersistNames,
    wildcard: PersistWildcard = False,
    persist_until: PersistUntil = None,
    issuer: PersistIssuer = None,
    *,
    common: CommonArgs,
) -> None:
    """Print the dns-persist-01 TXT records to publish once for NAME... (stored account).

    Each line is a zone-file record ``_validation-persist.NAME. IN TXT "..."`` naming the
    CA and the account; published, it lets `issue --challenge dns-persist-01` and every
    renewal validate NAME without writing DNS again.
    """
    from ._persist import run_dns_persist_records

    raise typer.Exit(
        run_dns_persist_records(
            names,
            common=common,
            wildcard=wildcard,
            persist_until=persist_until,
            issuer=issuer,
        )
    )


@shared()
def account_create(
    key_type: NewAccountKeyType = "ec256",
    *,
    account: AccountArgs,
    common: CommonArgs,
) -> None:
    """Register the account (idempotent: an existing one is shown; --email updates it)."""
    from ._account import run_account

    raise typer.Exit(run_account("create", common=common, account=account, key_type=key_type))


@shared()
def account_rollover(
    key_type: RolloverKeyType = "ec256",
    *,
    common: CommonArgs,
) -> None:
    """Replace the account key (RFC 8555 §7.3.5) without ever losing the account.

    The new key is stored first, then the CA is asked to switch, then the stored account
    key is replaced; an interrupted rollover is finished (or undone) by the next command.
    """
    from ._account import run_account

    raise typer.Exit(run_account("rollover", common=common, key_type=key_type))


@shared()
def account_deactivate(yes: Yes = False, *, common: CommonArgs) -> None:
    """Deactivate the account for good (RFC 8555 §7.3.6).

    The CA refuses its key afterwards; the key is moved aside in the state directory and
    the next command that needs an account creates a new one.
    """
    from ._account import run_account

    raise typer.Exit(run_account("deactivate", common=common, confirmed=yes))


@shared()
def import_certbot(
    certbot_dir: CertbotDir = Path("/etc/letsencrypt"),
    account: ImportAccount = False,
    out: ImportOut = None,
    out_layout: OutLayout = "plain",
    *,
    common: CommonArgs,
) -> None:
    """Import certbot's certificates (DIR/renewal/*.conf) into the state directory.

    For each lineage: its names, CA (give --ca-bundle if it needs one), key type, how its
    http-01 challenges were answered (webroot or standalone), hooks, certificate and key;
    the next `acmecerts renew` renews it. A lineage certbot's files do not describe
    completely is reported with the file at fault, and nothing is imported for it.
    Nothing is sent to the CA; certbot's files are left as they are (stop certbot's own
    renewals, e.g. its timer, once the import looks right).
    """
    from ._import import ImportArgs, run_import

    args = ImportArgs(directory=certbot_dir, account=account, out=out, out_layout=out_layout)
    raise typer.Exit(run_import(args, common))
