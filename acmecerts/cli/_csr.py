"""``acmecerts issue --csr FILE``: a certificate for the user's own CSR.

The private key stays with the user: the CSR goes to the CA as it is, and ``--out``
receives ``cert.pem``, ``chain.pem`` and ``fullchain.pem``, no ``privkey.pem``. Such a
certificate is not stored in the state directory, so ``renew`` does not manage it: run
``issue --csr`` again before it expires (the account and the CA's settings are stored as
for any issuance).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from rich.text import Text

from acmecerts.errors import InvalidInput
from acmecerts.protocol.csr import ParsedCsr, parse_csr
from acmecerts.protocol.identifiers import parse_identifiers
from acmecerts.storage.export import write_certificate_files

from ._ca import ensure_registered, open_client, plan_ca, wait_or_defer
from ._constants import ExitCode
from ._firstcontact import check_out_dir
from ._report import Report, run_guarded
from ._solvers import plan_challenge, running_solvers

if TYPE_CHECKING:
    from acmecerts import IssuedCertificate

    from ._args import AccountArgs, ChallengeOptions, CommonArgs
    from ._issue import IssueArgs

__all__ = ["read_csr", "run_issue_csr"]

#: What the output says instead of a key file.
_NO_KEY = "none: the key stays with you; `renew` does not manage this certificate"


def read_csr(path: Path) -> ParsedCsr:
    """The CSR in ``path`` (PEM or DER), checked (:func:`parse_csr`); errors name the file."""
    try:
        data = path.expanduser().read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read --csr {path}: {exc.strerror or exc}") from exc
    try:
        return parse_csr(data)
    except InvalidInput as exc:
        raise InvalidInput(f"--csr {path}: {exc}") from None


def _check_options(args: IssueArgs) -> None:
    """Refuse what cannot go with ``--csr`` (before the CSR is read)."""
    refused = [
        (args.from_file is not None, "--from-file"),
        (args.reuse_key, "--reuse-key (the key is yours)"),
        (args.cert_name is not None, "--cert-name (the certificate is not stored)"),
        (args.out_layout != "plain", "--out-layout certbot"),
        (args.key_type != "ec256", "--key-type (the CSR's key is used)"),
        (
            any(
                h is not None
                for h in (args.hooks.hooks.pre, args.hooks.hooks.post, args.hooks.hooks.deploy)
            ),
            "hooks",
        ),
    ]
    for bad, what in refused:
        if bad:
            raise InvalidInput(f"--csr does not go with {what}")
    if args.out is None:
        raise InvalidInput(
            "--csr needs --out DIR: the certificate is not stored in the state directory"
        )
    if args.profile is not None and args.preferred_profile is not None:
        raise InvalidInput("give --profile or --preferred-profile, not both")


def _report(report: Report, issued: IssuedCertificate, files: dict[str, Path]) -> None:
    if report.json_mode:
        report.json(
            {
                "status": "issued",
                "names": list(issued.names),
                "serial": issued.serial,
                "not_after": issued.not_after.isoformat(),
                "files": {kind: str(path) for kind, path in files.items()},
                "private_key": None,
                "managed": False,
                "exit_code": ExitCode.OK,
            }
        )
        return
    days = (issued.not_after - _dt.datetime.now(_dt.UTC)).days
    title = Text("Certificate issued for ", style="bold green")
    title.append(", ".join(issued.names), style="bold")
    title.append(" (your CSR)")
    rows = [
        ("expires", f"{issued.not_after:%Y-%m-%d %H:%M} UTC (in {days} days)"),
        ("serial", issued.serial),
        *[(kind, str(files[kind])) for kind in ("fullchain", "cert", "chain")],
        ("privkey", _NO_KEY),
    ]
    report.rows(title, rows)


def run_issue_csr(
    args: IssueArgs, common: CommonArgs, account: AccountArgs, challenge: ChallengeOptions
) -> int:
    """Run ``acmecerts issue --csr FILE``; return the exit code."""
    assert args.csr is not None

    def work(report: Report) -> int:
        _check_options(args)
        assert args.csr is not None
        assert args.out is not None
        args.batch.check()
        csr = read_csr(args.csr)
        if args.names:
            given = parse_identifiers(args.names)
            if set(given) != set(csr.identifiers):
                raise InvalidInput(
                    f"NAME... ({', '.join(i.value for i in given)}) differ from the names "
                    f"of --csr {args.csr} ({', '.join(i.value for i in csr.identifiers)}): "
                    "give the same names, or none"
                )
        out = args.out.expanduser().absolute()
        check_out_dir(out)
        ca = plan_ca(common, account, max_wait=args.batch.max_wait)
        plan = plan_challenge(challenge, csr.identifiers)

        async def main() -> IssuedCertificate:
            async with (
                running_solvers(plan, eager=True) as solvers,
                open_client(ca, create=True) as client,
            ):
                await wait_or_defer(
                    ca, lambda: ensure_registered(ca, client), what="account set-up"
                )
                await ca.state.save_ca_settings(ca.ca_bundle)
                return await client.issue(
                    (),
                    solvers=solvers,
                    csr=csr.der,
                    profile=args.profile or args.preferred_profile,
                    profile_required=args.preferred_profile is None,
                    preferred_chain=args.preferred_chain,
                )

        issued = anyio.run(main)
        files = write_certificate_files(out, issued)
        _report(report, issued, files)
        return ExitCode.OK

    return run_guarded(common, work)
