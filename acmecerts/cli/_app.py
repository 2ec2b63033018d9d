"""``acmecerts issue``: one certificate for some names, over http-01, from the command line.

Exit codes: 0 issued; 1 the issuance failed (the CA's problem detail is printed);
2 bad input or unusable state (one line on stderr, nothing sent to the CA); 130 interrupted.
With ``--json`` exactly one JSON object goes to stdout, whatever happens.

Order of work, so that bad input never costs a request: every option is validated first,
then the stored account is read, then the http-01 port is bound and the output directory
created; only then is the CA contacted.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import ipaddress
import json
import logging
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import anyio
import typer
from rich.console import Console
from rich.text import Text

from acmecerts._version import __version__
from acmecerts.cli._state import (
    StateDir,
    StoredAccount,
    default_state_dir,
    directory_slug,
    ensure_private_dir,
    write_certificate_files,
)
from acmecerts.client import AcmeClient
from acmecerts.errors import (
    AccountDoesNotExist,
    AcmeCertsError,
    AcmeProblem,
    InvalidInput,
    IssuanceError,
    StorageError,
)
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.solvers import Http01Server

if TYPE_CHECKING:
    from acmecerts._issued import IssuedCertificate

__all__ = ["EXIT_FAILED", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "app", "main"]

log = logging.getLogger("acmecerts.cli")

#: Let's Encrypt's production directory, the default CA.
LETS_ENCRYPT: Final = "https://acme-v02.api.letsencrypt.org/directory"

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_INPUT: Final = 2
EXIT_INTERRUPTED: Final = 130

_KEY_TYPES: Final = "|".join(k.value for k in KeyType)
_EMAIL = re.compile(r"[^@\s,;:<>()\[\]\\\"]+@[^@\s,;:<>()\[\]\\\"]+")
_HOST = re.compile(r"[A-Za-z0-9.-]+")


# -- validated input ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class IssueOptions:
    """What ``acmecerts issue`` was given, as typed."""

    names: tuple[str, ...]
    directory: str = LETS_ENCRYPT
    ca_bundle: Path | None = None
    emails: tuple[str, ...] = ()
    state_dir: Path | None = None
    out: Path | None = None
    http_01_listen: str = "0.0.0.0:80"
    key_type: str = KeyType.EC256.value
    json: bool = False
    timeout: float = 1800.0
    verbose: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """Validated options: everything needed to run without asking again."""

    identifiers: tuple[Identifier, ...]
    directory: str
    ca_bundle: Path | None
    contact: tuple[str, ...]
    state: StateDir
    out: Path
    host: str
    port: int
    key_type: KeyType
    timeout: float


def parse_listen(value: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[IPv6]:PORT``; an empty host means every IPv4 interface)."""
    text = value.strip()

    def bad(reason: str) -> InvalidInput:
        return InvalidInput(f"--http-01-listen {value!r}: {reason}")

    if text.startswith("["):
        inner, closed, rest = text[1:].partition("]")
        if not closed or not rest.startswith(":"):
            raise bad("expected [IPv6]:PORT")
        try:
            host = ipaddress.IPv6Address(inner).compressed
        except ValueError:
            raise bad(f"{inner!r} is not an IPv6 address") from None
        port_text = rest[1:]
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise bad("expected HOST:PORT, e.g. 0.0.0.0:80")
        if ":" in host:
            raise bad("write an IPv6 address in brackets, e.g. [::]:80")
        host = host or "0.0.0.0"
        if not _HOST.fullmatch(host):
            raise bad(f"{host!r} is not a host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise bad(f"the port must be a number from 1 to 65535, not {port_text!r}")
    return host, int(port_text)


def _contacts(emails: Sequence[str]) -> tuple[str, ...]:
    contacts: list[str] = []
    for email in emails:
        address = email.strip().removeprefix("mailto:")
        if not _EMAIL.fullmatch(address):
            raise InvalidInput(f"--email {email!r} is not an e-mail address")
        contacts.append(f"mailto:{address}")
    return tuple(dict.fromkeys(contacts))


def _plan(options: IssueOptions) -> _Plan:
    """Validate every option; raise :class:`InvalidInput` before anything is touched."""
    identifiers = parse_identifiers(options.names)
    for ident in identifiers:
        if ident.is_wildcard:
            raise InvalidInput(
                f"{ident.value}: http-01 cannot validate a wildcard name (wildcards need dns-01)"
            )
    directory_slug(options.directory)  # raises InvalidInput for a URL the CA cannot have
    key_type = KeyType.parse(options.key_type)
    host, port = parse_listen(options.http_01_listen)
    if not (math.isfinite(options.timeout) and options.timeout > 0):
        raise InvalidInput(f"--timeout must be a positive number of seconds, not {options.timeout}")
    ca_bundle = options.ca_bundle.expanduser() if options.ca_bundle is not None else None
    if ca_bundle is not None:
        try:
            with ca_bundle.open("rb") as file:
                file.read(1)
        except OSError as exc:
            raise InvalidInput(
                f"cannot read --ca-bundle {ca_bundle}: {exc.strerror or exc}"
            ) from exc
    state = StateDir(options.state_dir if options.state_dir is not None else default_state_dir())
    out = options.out.expanduser() if options.out is not None else None
    return _Plan(
        identifiers=identifiers,
        directory=options.directory,
        ca_bundle=ca_bundle,
        contact=_contacts(options.emails),
        state=state,
        out=(out or state.default_out(identifiers[0].value)).absolute(),
        host=host,
        port=port,
        key_type=key_type,
        timeout=options.timeout,
    )


# -- issuing ------------------------------------------------------------------------------


async def _issue(plan: _Plan, stored: StoredAccount | None) -> IssuedCertificate:
    stored_url = stored.url if stored is not None else None
    # issue() takes text, not Identifier objects; the values are already normalised.
    names = [ident.value for ident in plan.identifiers]
    async with (
        AcmeClient(
            plan.directory,
            account_key=stored.key if stored is not None else AccountKey.generate(),
            account_url=stored_url,
            contact=plan.contact,
            ca_bundle=plan.ca_bundle,
            attempt_timeout=plan.timeout,
        ) as client,
        Http01Server(host=plan.host, port=plan.port) as solver,
    ):
        # Nothing has been sent yet; from here on the CA is contacted.
        ensure_private_dir(plan.out)
        if stored is None:
            client.account_key = plan.state.create_account_key(plan.directory, client.account_key)
        try:
            try:
                return await client.issue(names, solver=solver, key_type=plan.key_type)
            except AccountDoesNotExist:
                if stored_url is None:
                    raise
                # The CA forgot the account (e.g. a test CA restarted): register the key again.
                log.warning("account %s no longer exists at the CA; registering again", stored_url)
                client.account_url = None
                return await client.issue(names, solver=solver, key_type=plan.key_type)
        finally:
            if client.account_url is not None and client.account_url != stored_url:
                try:
                    plan.state.save_account_url(plan.directory, client.account_url)
                except StorageError as exc:
                    log.warning("%s", exc)


def _first_error(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (task groups wrap what their children raise)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _problem_of(exc: BaseException) -> AcmeProblem | None:
    if isinstance(exc, AcmeProblem):
        return exc
    if isinstance(exc, IssuanceError):
        return exc.problem
    return None


# -- output -------------------------------------------------------------------------------


class _Report:
    """Writes the result: one line on stderr for errors, rich or JSON on stdout."""

    def __init__(self, *, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.out = Console(soft_wrap=True, highlight=False)
        self.err = Console(stderr=True, soft_wrap=True, highlight=False)

    def _json(self, document: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()

    def error(self, code: int, message: str, problem: AcmeProblem | None = None) -> int:
        line = " ".join(message.split())
        sys.stderr.write(f"acmecerts: error: {line}\n")
        sys.stderr.flush()
        if self.json_mode:
            self._json(
                {
                    "status": "invalid-input" if code == EXIT_INPUT else "failed",
                    "error": line,
                    "problem": (
                        {"type": problem.type, "detail": problem.detail}
                        if problem is not None
                        else None
                    ),
                }
            )
        return code

    def issued(self, issued: IssuedCertificate, files: dict[str, Path]) -> int:
        if self.json_mode:
            self._json(
                {
                    "status": "issued",
                    "names": list(issued.names),
                    "not_before": issued.not_before.isoformat(),
                    "not_after": issued.not_after.isoformat(),
                    "serial": issued.serial,
                    "files": {kind: str(path) for kind, path in files.items()},
                    "order_url": issued.order_url,
                    "certificate_url": issued.certificate_url,
                }
            )
            return EXIT_OK
        days = (issued.not_after - _dt.datetime.now(_dt.UTC)).days
        title = Text("Certificate issued for ", style="bold green")
        title.append(", ".join(issued.names), style="bold")
        self.out.print(title)
        rows = [
            ("expires", f"{issued.not_after:%Y-%m-%d %H:%M} UTC (in {days} days)"),
            ("serial", issued.serial),
        ]
        rows += [(kind, str(files[kind])) for kind in ("fullchain", "cert", "chain", "privkey")]
        for label, value in rows:
            line = Text(f"  {label:<10} ", style="dim")
            line.append(value)
            self.out.print(line)
        return EXIT_OK


# -- logging ------------------------------------------------------------------------------


class _OneLineWarnings(logging.Handler):
    """Without ``-v``: warnings and errors as one line each, never a traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = " ".join(record.getMessage().split())
            sys.stderr.write(f"acmecerts: {record.levelname.lower()}: {message}\n")
        except Exception:  # logging must never break the command
            self.handleError(record)


_handler: logging.Handler | None = None


def _configure_logging(verbose: int, console: Console) -> None:
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    if verbose:
        if console.is_terminal:
            from rich.logging import RichHandler

            _handler = RichHandler(console=console, show_path=False, log_time_format="%H:%M:%S")
        else:  # a log file: one plain line per record, never wrapped
            _handler = logging.StreamHandler(sys.stderr)
            _handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
        level = logging.DEBUG if verbose > 1 else logging.INFO
        logging.getLogger("acmecerts").setLevel(level)
        logging.getLogger("httpx").setLevel(logging.INFO)
    else:
        _handler = _OneLineWarnings()
        logging.getLogger("acmecerts").setLevel(logging.WARNING)
    root.addHandler(_handler)
    root.setLevel(logging.WARNING)


# -- the command --------------------------------------------------------------------------


def run_issue(options: IssueOptions) -> int:
    """Run ``acmecerts issue``; return the exit code."""
    report = _Report(json_mode=options.json)
    _configure_logging(options.verbose, report.err)
    try:
        plan = _plan(options)
        stored = plan.state.load_account(plan.directory)
        names = ", ".join(i.value for i in plan.identifiers)
        if report.err.is_terminal and not options.verbose:
            with report.err.status(f"Issuing a certificate for {names}..."):
                issued = anyio.run(_issue, plan, stored)
        else:
            issued = anyio.run(_issue, plan, stored)
    except KeyboardInterrupt:
        return report.error(EXIT_INTERRUPTED, "interrupted")
    except BaseException as raised:
        exc = _first_error(raised)
        if isinstance(exc, KeyboardInterrupt):
            return report.error(EXIT_INTERRUPTED, "interrupted")
        if isinstance(exc, InvalidInput | StorageError):
            return report.error(EXIT_INPUT, str(exc))
        if isinstance(exc, AcmeCertsError):
            return report.error(EXIT_FAILED, str(exc), _problem_of(exc))
        raise
    try:
        files = write_certificate_files(plan.out, issued)
    except StorageError as exc:
        return report.error(
            EXIT_FAILED,
            f"the certificate was issued but could not be saved: {exc} (certificate URL: "
            f"{issued.certificate_url})",
        )
    return report.issued(issued, files)


app = typer.Typer(
    name="acmecerts",
    help="Get TLS certificates from an ACME CA (RFC 8555).",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"acmecerts {__version__}\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """Get TLS certificates from an ACME CA (RFC 8555)."""


@app.command("issue")
def issue_command(
    names: Annotated[
        list[str],
        typer.Argument(
            metavar="NAME...",
            help="DNS names or IP addresses for the certificate; the first one names the "
            "default output directory.",
            show_default=False,
        ),
    ],
    directory: Annotated[
        str,
        typer.Option(
            "--directory",
            metavar="URL",
            envvar="ACMECERTS_DIRECTORY",
            help="The CA's ACME directory URL.",
        ),
    ] = LETS_ENCRYPT,
    ca_bundle: Annotated[
        Path | None,
        typer.Option(
            "--ca-bundle",
            metavar="PATH",
            envvar="ACMECERTS_CA_BUNDLE",
            help="Extra CA certificate (PEM) to trust for the CA's TLS, e.g. Pebble's.",
            show_default=False,
        ),
    ] = None,
    email: Annotated[
        list[str] | None,
        typer.Option(
            "--email",
            metavar="ADDRESS",
            help="Contact e-mail for a new account (repeatable).",
            show_default=False,
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            metavar="PATH",
            envvar="ACMECERTS_STATE_DIR",
            help="Where the account key is kept and reused "
            "[default: $XDG_DATA_HOME/acmecerts or ~/.local/share/acmecerts].",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Directory for cert.pem, chain.pem, fullchain.pem and privkey.pem (0600) "
            "[default: STATE_DIR/certificates/FIRST-NAME].",
            show_default=False,
        ),
    ] = None,
    http_01_listen: Annotated[
        str,
        typer.Option(
            "--http-01-listen",
            metavar="HOST:PORT",
            help="Where to answer http-01 challenges (the CA connects to port 80).",
        ),
    ] = "0.0.0.0:80",
    key_type: Annotated[
        str,
        typer.Option("--key-type", metavar=f"[{_KEY_TYPES}]", help="The certificate key type."),
    ] = KeyType.EC256.value,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print one JSON object describing the result on stdout."),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option("--timeout", metavar="SECONDS", help="Deadline for the issuance attempt."),
    ] = 1800.0,
    verbose: Annotated[
        int,
        typer.Option(
            "-v", "--verbose", count=True, help="Log progress (-vv: debug details) on stderr."
        ),
    ] = 0,
) -> None:
    """Issue one certificate for NAME... using http-01 validation."""
    code = run_issue(
        IssueOptions(
            names=tuple(names),
            directory=directory,
            ca_bundle=ca_bundle,
            emails=tuple(email or ()),
            state_dir=state_dir,
            out=out,
            http_01_listen=http_01_listen,
            key_type=key_type,
            json=json_output,
            timeout=timeout,
            verbose=verbose,
        )
    )
    raise typer.Exit(code)


def _usage_error(exc: Exception) -> tuple[int, str] | None:
    """``(exit code, message)`` of a click/typer usage error, else ``None``.

    Duck-typed: typer ships its own copy of click in some versions and uses click in
    others, so there is no one class to catch.
    """
    format_message = getattr(exc, "format_message", None)
    exit_code = getattr(exc, "exit_code", None)
    if not callable(format_message) or not isinstance(exit_code, int):
        return None
    message = str(format_message())
    if exit_code == EXIT_INPUT:  # click's UsageError and its subclasses
        message += " (see --help)"
    return exit_code, message


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``acmecerts`` command line; return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="acmecerts", standalone_mode=False)
    except (KeyboardInterrupt, typer.Abort):
        return _Report(json_mode="--json" in args).error(EXIT_INTERRUPTED, "interrupted")
    except Exception as exc:
        usage = _usage_error(exc)
        if usage is None:
            raise
        code, message = usage
        # Usage errors in one line, like every other input error.
        return _Report(json_mode="--json" in args).error(code, message)
    return result if isinstance(result, int) else EXIT_OK
