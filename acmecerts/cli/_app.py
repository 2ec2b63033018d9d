"""The ``acmecerts`` command line: typer commands, their options, and the exit codes.

Commands: ``issue`` (one certificate, or one per line of ``--from-file``, in parallel),
``renew``, ``revoke``, ``delete``, ``status`` and ``account show|create|rollover|deactivate``. Each
validates all of its input before anything is sent to the CA or written, so bad input
costs nothing (exit 2, one line); every command has ``--json`` (exactly one JSON object on
stdout, whatever happens). The work itself is in ``_issue``, ``_revoke``, ``_status``
and ``_account`` (shared parts in ``_common``).

Options come from the command line, ``ACMECERTS_*`` environment variables and a TOML file,
in that order of precedence (see :mod:`acmecerts.cli._config`).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from acmecerts._version import __version__
from acmecerts.errors import InvalidInput

from ._config import ENV_PREFIX, config_default_map, find_config_path, load_config
from ._constants import (
    EXIT_DEFERRED,
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
)

if TYPE_CHECKING:
    from ._common import CommonArgs

# Only typer, the standard library and light modules at the top: ``acmecerts --version``
# and ``--help`` must not import the library (tests/test_cli_start.py). Each command
# imports what it runs inside its function.

__all__ = [
    "EXIT_DEFERRED",
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "app",
    "main",
]

EXIT_CODES: Final = (
    "Exit codes: 0 ok (issued, or nothing was due); 1 failed (the CA's problem detail is "
    "printed); 2 bad input or unusable state (one line on stderr, nothing sent to the CA); "
    "3 deferred by rate limits, or the CA asked to wait longer than --max-wait (the instant "
    "is printed and kept in the state directory); 130 interrupted (Ctrl-C, SIGINT) and "
    "143 terminated (SIGTERM: systemctl stop, docker stop): challenge responses are removed "
    "and pending authorizations deactivated first, for 15 s at most "
    "(ACMECERTS_INTERRUPT_GRACE), finished certificates are listed; a second signal quits "
    "at once."
)
CONFIG_HELP: Final = (
    "Every option can also be set as an ACMECERTS_* environment variable (ACMECERTS_STATE_DIR "
    "for --state-dir) or in the TOML file (key state-dir); precedence: flag, environment, "
    "file, default."
)
_EPILOG: Final = f"{EXIT_CODES}\n\n{CONFIG_HELP}"

_CA: Final = "CA and state"
_CHALLENGE: Final = "Challenge"
_ACCOUNT: Final = "Account"
_OUTPUT: Final = "Output"
_ISSUING: Final = "Issuing"
_HOOKS: Final = "Hooks"


def _env(option: str) -> str:
    return ENV_PREFIX + option.upper().replace("-", "_")


def _opt(name: str, *, panel: str = _CA, **kwargs: Any) -> Any:
    """A typer option ``--name`` whose environment variable is ``ACMECERTS_NAME``."""
    return typer.Option(f"--{name}", envvar=_env(name), rich_help_panel=panel, **kwargs)


# -- shared options ---------------------------------------------------------------------------

Directory = Annotated[
    str | None,
    _opt(
        "directory",
        metavar="URL",
        help="The CA's ACME directory URL [default: Let's Encrypt's production directory, "
        "https://acme-v02.api.letsencrypt.org/directory].",
        show_default=False,
    ),
]
Staging = Annotated[
    bool,
    _opt(
        "staging",
        help="Use Let's Encrypt's staging directory "
        "(https://acme-staging-v02.api.letsencrypt.org/directory: real validation, "
        "untrusted certificates, high rate limits); try a set-up there first.",
    ),
]
CaBundle = Annotated[
    Path | None,
    _opt(
        "ca-bundle",
        metavar="PATH",
        help="Extra CA certificate (PEM) to trust for the CA's TLS, e.g. Pebble's.",
        show_default=False,
    ),
]
Proxy = Annotated[
    str | None,
    _opt(
        "proxy",
        metavar="URL",
        help="HTTP proxy to the CA, http://[USER:PASSWORD@]HOST:PORT (HTTPS goes through a "
        "CONNECT tunnel; NO_PROXY still applies); `none`: connect directly "
        "[default: $HTTPS_PROXY or $ALL_PROXY (or lower case), except $NO_PROXY hosts].",
        show_default=False,
    ),
]
StateDir = Annotated[
    Path | None,
    _opt(
        "state-dir",
        metavar="PATH",
        help="Where the account, the certificates and the rate-limit ledger are kept "
        "[default: /var/lib/acmecerts as root, else $XDG_DATA_HOME/acmecerts or "
        "~/.local/share/acmecerts].",
        show_default=False,
    ),
]
RateLimits = Annotated[
    str,
    _opt(
        "rate-limits",
        metavar="auto|letsencrypt|none",
        help="The CA's rate limits the ledger keeps you under (auto: Let's Encrypt's for its "
        "production directory, else only what the CA says in rateLimited answers).",
    ),
]
Timeout = Annotated[
    float,
    _opt("timeout", metavar="SECONDS", help="Deadline for one issuance attempt."),
]
Json = Annotated[
    bool,
    _opt("json", panel=_OUTPUT, help="Print one JSON object describing the result on stdout."),
]
Verbose = Annotated[
    int,
    typer.Option(
        "-v",
        "--verbose",
        count=True,
        rich_help_panel=_OUTPUT,
        help="Log progress (-vv: debug details) on stderr.",
    ),
]
Config = Annotated[
    Path | None,
    _opt(
        "config",
        panel=_OUTPUT,
        metavar="PATH",
        help="TOML file with default option values "
        "[default: the first that exists of /etc/acmecerts/config.toml (root only) and "
        "$XDG_CONFIG_HOME/acmecerts/config.toml].",
        show_default=False,
    ),
]
Email = Annotated[
    list[str] | None,
    _opt(
        "email",
        panel=_ACCOUNT,
        metavar="ADDRESS",
        help="Contact e-mail for a new account (repeatable).",
        show_default=False,
    ),
]
EabKid = Annotated[
    str | None,
    _opt(
        "eab-kid",
        panel=_ACCOUNT,
        metavar="KID",
        help="External account binding key ID from the CA (with --eab-hmac-key).",
        show_default=False,
    ),
]
EabHmacKey = Annotated[
    str | None,
    _opt(
        "eab-hmac-key",
        panel=_ACCOUNT,
        metavar="B64URL",
        help="External account binding MAC key from the CA (base64url).",
        show_default=False,
    ),
]
AgreeTos = Annotated[
    bool,
    _opt(
        "agree-tos",
        panel=_ACCOUNT,
        help="Agree to the CA's terms of service when an account is created (without it, "
        "a terminal asks; otherwise the command stops before creating the account).",
    ),
]
Challenge = Annotated[
    str,
    _opt(
        "challenge",
        panel=_CHALLENGE,
        metavar="http-01|dns-01|tls-alpn-01",
        help="How the CA validates control of the names.",
    ),
]
Http01Listen = Annotated[
    str,
    _opt(
        "http-01-listen",
        panel=_CHALLENGE,
        metavar="HOST:PORT",
        help="Where to answer http-01 challenges (the CA connects to port 80).",
    ),
]
Webroot = Annotated[
    Path | None,
    _opt(
        "webroot",
        panel=_CHALLENGE,
        metavar="DIR",
        help="http-01 through the web server you run: write the challenge files into "
        "DIR/.well-known/acme-challenge/ (DIR is its document root for the names, served on "
        "port 80) instead of listening; stored with the certificate for `renew`.",
        show_default=False,
    ),
]
TlsAlpn01Listen = Annotated[
    str,
    _opt(
        "tls-alpn-01-listen",
        panel=_CHALLENGE,
        metavar="HOST:PORT",
        help="Where to answer tls-alpn-01 challenges (the CA connects to port 443).",
    ),
]
DnsServer = Annotated[
    str | None,
    _opt(
        "dns-rfc2136-server",
        panel=_CHALLENGE,
        metavar="HOST[:PORT]",
        help="dns-01: the primary DNS server that takes TSIG-signed dynamic updates.",
        show_default=False,
    ),
]
DnsTsigKey = Annotated[
    str | None,
    _opt(
        "dns-tsig-key",
        panel=_CHALLENGE,
        metavar="NAME",
        help="dns-01: the TSIG key's name.",
        show_default=False,
    ),
]
DnsTsigSecret = Annotated[
    str | None,
    _opt(
        "dns-tsig-secret",
        panel=_CHALLENGE,
        metavar="B64",
        help="dns-01: the TSIG key's secret (base64, as in a BIND key file).",
        show_default=False,
    ),
]
DnsTsigAlgorithm = Annotated[
    str,
    _opt(
        "dns-tsig-algorithm",
        panel=_CHALLENGE,
        metavar="ALG",
        help="dns-01: the TSIG algorithm.",
    ),
]
DnsHook = Annotated[
    str | None,
    _opt(
        "dns-hook",
        panel=_CHALLENGE,
        metavar="COMMAND",
        help="dns-01: run COMMAND present|cleanup NAME VALUE to add or remove the TXT value "
        "(also in ACMECERTS_DNS_ACTION, ACMECERTS_DNS_NAME, ACMECERTS_DNS_VALUE).",
        show_default=False,
    ),
]
DnsNameserver = Annotated[
    list[str] | None,
    _opt(
        "dns-propagation-nameserver",
        panel=_CHALLENGE,
        metavar="HOST[:PORT]",
        help="dns-01: ask this server whether the TXT value is visible (repeatable) "
        "[default: the zone's authoritative servers].",
        show_default=False,
    ),
]
DnsPropagationTimeout = Annotated[
    float,
    _opt(
        "dns-propagation-timeout",
        panel=_CHALLENGE,
        metavar="SECONDS",
        help="dns-01: how long to wait for the TXT value to be visible (0: do not check).",
    ),
]
MaxWait = Annotated[
    float,
    _opt(
        "max-wait",
        panel=_ISSUING,
        metavar="SECONDS",
        help="Wait (with a countdown) when the CA or the ledger says to retry at most this "
        "long from now; a later instant defers the certificate (exit code 3).",
    ),
]
Concurrency = Annotated[
    int,
    _opt("concurrency", panel=_ISSUING, metavar="N", help="Certificates ordered at once."),
]
PreHook = Annotated[
    str | None,
    _opt(
        "pre-hook",
        panel=_HOOKS,
        metavar="COMMAND",
        help="Run COMMAND (/bin/sh -c) once before the first order of a run; stored with "
        'the certificate for `renew` ("": remove the stored one).',
        show_default=False,
    ),
]
PostHook = Annotated[
    str | None,
    _opt(
        "post-hook",
        panel=_HOOKS,
        metavar="COMMAND",
        help="Run COMMAND once after all the work of a run that ordered anything, also "
        "after failures; stored like --pre-hook.",
        show_default=False,
    ),
]
DeployHook = Annotated[
    str | None,
    _opt(
        "deploy-hook",
        panel=_HOOKS,
        metavar="COMMAND",
        help="Run COMMAND for each certificate issued or renewed, after its files are "
        "written (RENEWED_LINEAGE, RENEWED_DOMAINS and ACMECERTS_HOOK_* in its "
        "environment); stored like --pre-hook.",
        show_default=False,
    ),
]
HookTimeout = Annotated[
    float,
    _opt(
        "hook-timeout",
        panel=_HOOKS,
        metavar="SECONDS",
        help="Kill a hook (and what it started) that runs longer; it counts as failed.",
    ),
]
Force = Annotated[
    bool,
    _opt(
        "force",
        panel=_ISSUING,
        help="Order a new certificate even if the stored one is not due for renewal.",
    ),
]


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"acmecerts {__version__}\n")
        raise typer.Exit(EXIT_OK)


app = typer.Typer(
    name="acmecerts",
    help="Get TLS certificates from an ACME CA (RFC 8555).",
    epilog=_EPILOG,
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)
account_app = typer.Typer(
    name="account",
    help="Show, create, roll over or deactivate the ACME account.",
    epilog=_EPILOG,
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(account_app, name="account")


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
    config: Config = None,
) -> None:
    """Get TLS certificates from an ACME CA (RFC 8555)."""


def _hooks(pre: str | None, post: str | None, deploy: str | None) -> Any:
    from ._hooks import Hooks

    return Hooks(pre=pre, post=post, deploy=deploy)


def _common(
    directory: str | None,
    staging: bool,
    ca_bundle: Path | None,
    state_dir: Path | None,
    rate_limits: str,
    timeout: float,
    json_output: bool,
    verbose: int,
    proxy: str | None = None,
) -> CommonArgs:
    from ._common import CommonArgs

    return CommonArgs(
        directory=directory,
        staging=staging,
        ca_bundle=ca_bundle,
        state_dir=state_dir,
        rate_limits=rate_limits,
        timeout=timeout,
        json=json_output,
        verbose=verbose,
        proxy=proxy,
    )


@app.command("issue", epilog=_EPILOG)
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
    from_file: Annotated[
        Path | None,
        _opt(
            "from-file",
            panel=_ISSUING,
            metavar="FILE",
            help="Issue one certificate per line of FILE (names separated by spaces, the "
            "first names the certificate; # comments), in parallel.",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        _opt(
            "out",
            panel=_ISSUING,
            metavar="DIR",
            help="Directory for cert.pem, chain.pem, fullchain.pem and privkey.pem (0600); "
            "with --from-file, DIR/NAME for each certificate "
            "[default: STATE_DIR/certificates/NAME].",
            show_default=False,
        ),
    ] = None,
    key_type: Annotated[
        str,
        _opt(
            "key-type",
            panel=_ISSUING,
            metavar="ec256|ec384|rsa2048|rsa3072|rsa4096",
            help="The certificate key type.",
        ),
    ] = "ec256",
    profile: Annotated[
        str | None,
        _opt(
            "profile",
            panel=_ISSUING,
            metavar="NAME",
            help="A certificate profile the CA offers.",
            show_default=False,
        ),
    ] = None,
    preferred_chain: Annotated[
        str | None,
        _opt(
            "preferred-chain",
            panel=_ISSUING,
            metavar="ISSUER",
            help="Prefer the chain whose root (or an intermediate) has this common name.",
            show_default=False,
        ),
    ] = None,
    cert_name: Annotated[
        str | None,
        _opt(
            "cert-name",
            panel=_ISSUING,
            metavar="NAME",
            help="The certificate (lineage) to issue into: an existing one takes NAME... as "
            "its names (replace, expand, shrink), a new one is created "
            "[default: the one holding exactly NAME..., in any order, else the first NAME].",
            show_default=False,
        ),
    ] = None,
    force: Force = False,
    concurrency: Concurrency = 8,
    max_wait: MaxWait = 120.0,
    pre_hook: PreHook = None,
    post_hook: PostHook = None,
    deploy_hook: DeployHook = None,
    hook_timeout: HookTimeout = 300.0,
    challenge: Challenge = "http-01",
    http_01_listen: Http01Listen = "0.0.0.0:80",
    webroot: Webroot = None,
    tls_alpn_01_listen: TlsAlpn01Listen = "0.0.0.0:443",
    dns_rfc2136_server: DnsServer = None,
    dns_tsig_key: DnsTsigKey = None,
    dns_tsig_secret: DnsTsigSecret = None,
    dns_tsig_algorithm: DnsTsigAlgorithm = "hmac-sha256",
    dns_hook: DnsHook = None,
    dns_propagation_nameserver: DnsNameserver = None,
    dns_propagation_timeout: DnsPropagationTimeout = 120.0,
    email: Email = None,
    eab_kid: EabKid = None,
    eab_hmac_key: EabHmacKey = None,
    agree_tos: AgreeTos = False,
    directory: Directory = None,
    staging: Staging = False,
    ca_bundle: CaBundle = None,
    proxy: Proxy = None,
    state_dir: StateDir = None,
    rate_limits: RateLimits = "auto",
    timeout: Timeout = 1800.0,
    json_output: Json = False,
    verbose: Verbose = 0,
    config: Config = None,
) -> None:
    """Issue a certificate for NAME..., or one per line of --from-file (in parallel).

    The same names in any order are the same certificate: one already in the state
    directory that is not due for renewal is kept (and its files written to --out)
    unless --force. When the first NAME already names a certificate for other names,
    nothing is ordered until --cert-name says which certificate to issue into.
    """
    from ._common import AccountArgs
    from ._issue import IssueArgs, run_issue
    from ._solvers import ChallengeOptions

    code = run_issue(
        IssueArgs(
            names=tuple(names or ()),
            from_file=from_file,
            out=out,
            key_type=key_type,
            profile=profile,
            preferred_chain=preferred_chain,
            force=force,
            concurrency=concurrency,
            max_wait=max_wait,
            cert_name=cert_name,
            hooks=_hooks(pre_hook, post_hook, deploy_hook),
            hook_timeout=hook_timeout,
        ),
        _common(
            directory,
            staging,
            ca_bundle,
            state_dir,
            rate_limits,
            timeout,
            json_output,
            verbose,
            proxy,
        ),
        AccountArgs(
            emails=tuple(email or ()),
            eab_kid=eab_kid,
            eab_hmac_key=eab_hmac_key,
            agree_tos=agree_tos,
        ),
        ChallengeOptions(
            challenge=challenge,
            http_01_listen=http_01_listen,
            webroot=webroot,
            tls_alpn_01_listen=tls_alpn_01_listen,
            dns_rfc2136_server=dns_rfc2136_server,
            dns_tsig_key=dns_tsig_key,
            dns_tsig_secret=dns_tsig_secret,
            dns_tsig_algorithm=dns_tsig_algorithm,
            dns_hook=dns_hook,
            dns_propagation_nameservers=tuple(dns_propagation_nameserver or ()),
            dns_propagation_timeout=dns_propagation_timeout,
        ),
    )
    raise typer.Exit(code)


#: ``renew``'s challenge options, by parameter name: the ``ChallengeOptions`` field each sets.
_RENEW_CHALLENGE_OPTIONS: Final = {
    "challenge": "challenge",
    "http_01_listen": "http_01_listen",
    "webroot": "webroot",
    "tls_alpn_01_listen": "tls_alpn_01_listen",
    "dns_rfc2136_server": "dns_rfc2136_server",
    "dns_tsig_key": "dns_tsig_key",
    "dns_tsig_algorithm": "dns_tsig_algorithm",
    "dns_hook": "dns_hook",
    "dns_propagation_nameserver": "dns_propagation_nameservers",
    "dns_propagation_timeout": "dns_propagation_timeout",
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


@app.command("renew", epilog=_EPILOG)
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
    force: Annotated[
        bool, _opt("force", panel=_ISSUING, help="Renew now, even certificates that are not due.")
    ] = False,
    concurrency: Concurrency = 8,
    max_wait: MaxWait = 120.0,
    random_delay: Annotated[
        float,
        _opt(
            "random-delay",
            panel=_ISSUING,
            metavar="SECONDS",
            help="Wait a random time from 0 to SECONDS before contacting any CA (spreads "
            "the cron jobs of many machines).",
        ),
    ] = 0.0,
    quiet: Annotated[
        bool,
        typer.Option(
            "-q",
            "--quiet",
            envvar=_env("quiet"),
            rich_help_panel=_OUTPUT,
            help="Print nothing unless a certificate was renewed or something failed "
            "(errors always go to stderr).",
        ),
    ] = False,
    pre_hook: PreHook = None,
    post_hook: PostHook = None,
    deploy_hook: DeployHook = None,
    hook_timeout: HookTimeout = 300.0,
    challenge: Challenge = "http-01",
    http_01_listen: Http01Listen = "0.0.0.0:80",
    webroot: Webroot = None,
    tls_alpn_01_listen: TlsAlpn01Listen = "0.0.0.0:443",
    dns_rfc2136_server: DnsServer = None,
    dns_tsig_key: DnsTsigKey = None,
    dns_tsig_secret: DnsTsigSecret = None,
    dns_tsig_algorithm: DnsTsigAlgorithm = "hmac-sha256",
    dns_hook: DnsHook = None,
    dns_propagation_nameserver: DnsNameserver = None,
    dns_propagation_timeout: DnsPropagationTimeout = 120.0,
    email: Email = None,
    eab_kid: EabKid = None,
    eab_hmac_key: EabHmacKey = None,
    agree_tos: AgreeTos = False,
    directory: Annotated[
        str | None,
        _opt(
            "directory",
            metavar="URL",
            help="Renew only the certificates of this CA (its ACME directory URL) "
            "[default: every CA in the state directory, each with the URL and --ca-bundle "
            "it was issued with].",
            show_default=False,
        ),
    ] = None,
    staging: Staging = False,
    ca_bundle: CaBundle = None,
    proxy: Proxy = None,
    state_dir: StateDir = None,
    rate_limits: RateLimits = "auto",
    timeout: Timeout = 1800.0,
    json_output: Json = False,
    verbose: Verbose = 0,
    config: Config = None,
) -> None:
    """Renew the certificates in the state directory that are due, at every CA.

    Each certificate is renewed at the CA it was issued from, with that CA's account.
    Due means inside the CA's ARI renewal window, or a third of the lifetime left when the
    CA has no ARI (and a revoked certificate); --force renews now. A certificate that was
    asked for but not issued (deferred by rate limits, failed, interrupted) is issued. The
    files are written where the certificate's files were written before, and the hooks
    stored with it run (hooks given here replace them for this run). Its challenges are
    answered as at issue (the challenge options are stored with it; the TSIG secret is
    not: give it to every run); a challenge option given here (flag, environment or
    config file) replaces the stored one for this run. A missing, empty or unreadable
    state directory is an error (exit 2), never "nothing to do".
    """
    from ._common import AccountArgs
    from ._renew import RenewArgs, run_renew
    from ._solvers import ChallengeOptions

    code = run_renew(
        RenewArgs(
            names=tuple(names or ()),
            force=force,
            concurrency=concurrency,
            max_wait=max_wait,
            only_directory=directory is not None or staging,
            quiet=quiet,
            random_delay=random_delay,
            hooks=_hooks(pre_hook, post_hook, deploy_hook),
            hook_timeout=hook_timeout,
            challenge_given=_given(ctx, _RENEW_CHALLENGE_OPTIONS),
        ),
        _common(
            directory,
            staging,
            ca_bundle,
            state_dir,
            rate_limits,
            timeout,
            json_output,
            verbose,
            proxy,
        ),
        AccountArgs(
            emails=tuple(email or ()),
            eab_kid=eab_kid,
            eab_hmac_key=eab_hmac_key,
            agree_tos=agree_tos,
        ),
        ChallengeOptions(
            challenge=challenge,
            http_01_listen=http_01_listen,
            webroot=webroot,
            tls_alpn_01_listen=tls_alpn_01_listen,
            dns_rfc2136_server=dns_rfc2136_server,
            dns_tsig_key=dns_tsig_key,
            dns_tsig_secret=dns_tsig_secret,
            dns_tsig_algorithm=dns_tsig_algorithm,
            dns_hook=dns_hook,
            dns_propagation_nameservers=tuple(dns_propagation_nameserver or ()),
            dns_propagation_timeout=dns_propagation_timeout,
        ),
    )
    raise typer.Exit(code)


@app.command("revoke", epilog=_EPILOG)
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
    reason: Annotated[
        str,
        _opt(
            "reason",
            metavar="unspecified|keyCompromise|affiliationChanged|superseded|cessationOfOperation",
            help="The revocation reason (RFC 5280).",
        ),
    ] = "unspecified",
    cert_key: Annotated[
        Path | None,
        _opt(
            "cert-key",
            metavar="PATH",
            help="Sign with the certificate's private key instead of the account key "
            "(e.g. when the account is lost).",
            show_default=False,
        ),
    ] = None,
    directory: Directory = None,
    staging: Staging = False,
    ca_bundle: CaBundle = None,
    proxy: Proxy = None,
    state_dir: StateDir = None,
    rate_limits: RateLimits = "auto",
    timeout: Timeout = 1800.0,
    json_output: Json = False,
    verbose: Verbose = 0,
    config: Config = None,
) -> None:
    """Revoke a certificate (by file or by name); a stored one is renewed at the next run."""
    from ._revoke import run_revoke

    code = run_revoke(
        target,
        reason=reason,
        cert_key=cert_key,
        common=_common(
            directory,
            staging,
            ca_bundle,
            state_dir,
            rate_limits,
            timeout,
            json_output,
            verbose,
            proxy,
        ),
    )
    raise typer.Exit(code)


@app.command("delete", epilog=_EPILOG)
def delete_command(
    names: Annotated[
        list[str],
        typer.Argument(
            metavar="NAME...",
            help="Certificates to delete, as `acmecerts status` names them.",
            show_default=False,
        ),
    ],
    revoke: Annotated[
        bool,
        _opt(
            "revoke",
            help="Revoke each certificate at its CA first; one that cannot be revoked is "
            "not deleted.",
        ),
    ] = False,
    reason: Annotated[
        str,
        _opt(
            "reason",
            metavar="unspecified|keyCompromise|affiliationChanged|superseded|cessationOfOperation",
            help="The revocation reason with --revoke (RFC 5280).",
        ),
    ] = "cessationOfOperation",
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Do not ask for confirmation (needed without a terminal)."
        ),
    ] = False,
    directory: Directory = None,
    staging: Staging = False,
    ca_bundle: CaBundle = None,
    proxy: Proxy = None,
    state_dir: StateDir = None,
    rate_limits: RateLimits = "auto",
    timeout: Timeout = 1800.0,
    json_output: Json = False,
    verbose: Verbose = 0,
    config: Config = None,
) -> None:
    """Delete certificates from the state directory, so that renew no longer tries them.

    Removes the certificate, its key, its order and attempt state and the CLI's record,
    and the files of the default export directory STATE_DIR/certificates/NAME. Files
    exported to an --out directory of your own are left where they are (the output says
    where). Nothing is sent to the CA unless --revoke.
    """
    from ._delete import DeleteArgs, run_delete

    code = run_delete(
        DeleteArgs(names=tuple(names), revoke=revoke, reason=reason, yes=yes),
        common=_common(
            directory,
            staging,
            ca_bundle,
            state_dir,
            rate_limits,
            timeout,
            json_output,
            verbose,
            proxy,
        ),
    )
    raise typer.Exit(code)


@app.command("status", epilog=_EPILOG)
def status_command(
    ari: Annotated[
        bool,
        _opt(
            "ari",
            help="Ask the CA for each certificate's renewal window (ARI) instead of assuming "
            "a third of the lifetime.",
        ),
    ] = False,
    directory: Annotated[
        str | None,
        _opt(
            "directory",
            metavar="URL",
            help="Show only the certificates of this CA (its ACME directory URL) "
            "[default: every CA in the state directory].",
            show_default=False,
        ),
    ] = None,
    staging: Staging = False,
    ca_bundle: CaBundle = None,
    proxy: Proxy = None,
    state_dir: StateDir = None,
    rate_limits: RateLimits = "auto",
    timeout: Timeout = 1800.0,
    json_output: Json = False,
    verbose: Verbose = 0,
    config: Config = None,
) -> None:
    """Show the certificates in the state directory and the rate-limit budget, at every CA.

    For each CA the state directory holds (--directory narrows to one): its account; for
    each certificate: its names, expiry, next renewal and any deferral; what the
    rate-limit ledger says may be spent now, per limit, and when the next slot opens. A
    missing, empty or unreadable state directory is an error (exit 2). Nothing is sent to
    the CA unless --ari.
    """
    from ._status import run_status

    code = run_status(
        ari=ari,
        only_directory=directory is not None or staging,
        common=_common(
            directory,
            staging,
            ca_bundle,
            state_dir,
            rate_limits,
            timeout,
            json_output,
            verbose,
            proxy,
        ),
    )
    raise typer.Exit(code)


@account_app.command("show", epilog=_EPILOG)
def account_show(
    directory: Directory = None,
    staging: Staging = False,
    ca_bundle: CaBundle = None,
    proxy: Proxy = None,
    state_dir: StateDir = None,
    rate_limits: RateLimits = "auto",
    timeout: Timeout = 1800.0,
    json_output: Json = False,
    verbose: Verbose = 0,
    config: Config = None,
) -> None:
    """Show the stored account and what the CA says about it."""
    from ._account import run_account

    code = run_account(
        "show",
        common=_common(
            directory,
            staging,
            ca_bundle,
            state_dir,
            rate_limits,
            timeout,
            json_output,
            verbose,
            proxy,
        ),
    )
    raise typer.Exit(code)


@account_app.command("create", epilog=_EPILOG)
def account_create(
    key_type: Annotated[
        str,
        _opt(
            "key-type",
            panel=_ACCOUNT,
            metavar="ec256|ec384|rsa2048|rsa3072|rsa4096",
            help="The key type of a new account key.",
        ),
    ] = "ec256",
    email: Email = None,
    eab_kid: EabKid = None,
    eab_hmac_key: EabHmacKey = None,
    agree_tos: AgreeTos = False,
    directory: Directory = None,
    staging: Staging = False,
    ca_bundle: CaBundle = None,
    proxy: Proxy = None,
    state_dir: StateDir = None,
    rate_limits: RateLimits = "auto",
    timeout: Timeout = 1800.0,
    json_output: Json = False,
    verbose: Verbose = 0,
    config: Config = None,
) -> None:
    """Register the account (idempotent: an existing one is shown; --email updates it)."""
    from ._account import run_account
    from ._common import AccountArgs

    code = run_account(
        "create",
        common=_common(
            directory,
            staging,
            ca_bundle,
            state_dir,
            rate_limits,
            timeout,
            json_output,
            verbose,
            proxy,
        ),
        account=AccountArgs(
            emails=tuple(email or ()),
            eab_kid=eab_kid,
            eab_hmac_key=eab_hmac_key,
            agree_tos=agree_tos,
        ),
        key_type=key_type,
    )
    raise typer.Exit(code)


@account_app.command("rollover", epilog=_EPILOG)
def account_rollover(
    key_type: Annotated[
        str,
        _opt(
            "key-type",
            panel=_ACCOUNT,
            metavar="ec256|ec384|rsa2048|rsa3072|rsa4096",
            help="The key type of the new account key.",
        ),
    ] = "ec256",
    directory: Directory = None,
    staging: Staging = False,
    ca_bundle: CaBundle = None,
    proxy: Proxy = None,
    state_dir: StateDir = None,
    rate_limits: RateLimits = "auto",
    timeout: Timeout = 1800.0,
    json_output: Json = False,
    verbose: Verbose = 0,
    config: Config = None,
) -> None:
    """Replace the account key (RFC 8555 §7.3.5) without ever losing the account.

    The new key is stored first, then the CA is asked to switch, then the stored account
    key is replaced; an interrupted rollover is finished (or undone) by the next command.
    """
    from ._account import run_account

    code = run_account(
        "rollover",
        common=_common(
            directory,
            staging,
            ca_bundle,
            state_dir,
            rate_limits,
            timeout,
            json_output,
            verbose,
            proxy,
        ),
        key_type=key_type,
    )
    raise typer.Exit(code)


@account_app.command("deactivate", epilog=_EPILOG)
def account_deactivate(
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Do not ask for confirmation (needed without a terminal)."
        ),
    ] = False,
    directory: Directory = None,
    staging: Staging = False,
    ca_bundle: CaBundle = None,
    proxy: Proxy = None,
    state_dir: StateDir = None,
    rate_limits: RateLimits = "auto",
    timeout: Timeout = 1800.0,
    json_output: Json = False,
    verbose: Verbose = 0,
    config: Config = None,
) -> None:
    """Deactivate the account for good (RFC 8555 §7.3.6).

    The CA refuses its key afterwards; the key is moved aside in the state directory and
    the next command that needs an account creates a new one.
    """
    from ._account import run_account

    code = run_account(
        "deactivate",
        common=_common(
            directory,
            staging,
            ca_bundle,
            state_dir,
            rate_limits,
            timeout,
            json_output,
            verbose,
            proxy,
        ),
        confirmed=yes,
    )
    raise typer.Exit(code)


# -- entry point ------------------------------------------------------------------------------


def _usage_error(exc: Exception) -> tuple[int, str] | None:
    """``(exit code, message)`` of a click/typer usage error, else ``None``.

    Duck-typed: typer ships its own copy of click in some versions and uses click in
    others, so there is no one class to catch.
    """
    format_message = getattr(exc, "format_message", None)
    exit_code = getattr(exc, "exit_code", None)
    if not callable(format_message) or not isinstance(exit_code, int):
        return None
    message = str(format_message()) or "missing command"  # no arguments: help was shown
    if exit_code == EXIT_INPUT:  # click's UsageError and its subclasses
        message += " (see --help)"
    return exit_code, message


#: What the ``--json`` error object of a command carries besides ``status``, ``exit_code``,
#: ``error`` and ``problem``, so that a usage error prints the command's one shape too.
_JSON_SHAPES: Final[dict[str, dict[str, Any]]] = {
    "issue": {"counts": {}, "certificates": []},
    "renew": {"counts": {}, "certificates": []},
    "delete": {"certificates": []},
}


def _json_base(args: Sequence[str]) -> dict[str, Any] | None:
    """The extra fields of the command named in ``args`` (the first word not an option)."""
    words = iter(args)
    for word in words:
        if word == "--config":
            next(words, None)
        elif not word.startswith("-"):
            return _JSON_SHAPES.get(word)
    return None


def _unconverted(command: Any, parent: Any = None, name: str = "acmecerts") -> None:
    """Let the options of ``command`` and of its subgroups that were not given stay ``None``.

    Recent typer converts every value through pydantic, imported the first time (about
    0.07 s here), even the ``None`` of an option that was not given, such as the ``--help``
    and ``--config`` of a group on the way to ``acmecerts COMMAND --help``. That conversion
    returns ``None``; so do we, without it (and still call the option's callback). Given
    values, the commands' own options and required or repeatable ones are converted as
    before.
    """
    ctx = command.context_class(command, info_name=name, parent=parent, **command.context_settings)
    for param in command.get_params(ctx):
        if not (param.required or param.multiple or param.nargs != 1):
            param.process_value = functools.partial(_none_as_is, param, param.process_value)
    for sub_name, sub in getattr(command, "commands", {}).items():
        if hasattr(sub, "commands"):  # a group: its options are processed on the way too
            _unconverted(sub, ctx, sub_name)


def _none_as_is(param: Any, process: Any, ctx: Any, value: Any) -> Any:
    if value is not None:
        return process(ctx, value)
    return value if param.callback is None else param.callback(ctx, param, value)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``acmecerts`` command line; return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    json_env = os.environ.get(_env("json"), "").strip().lower()
    json_mode = "--json" in args or json_env in ("1", "true", "yes", "on")
    command = typer.main.get_command(app)
    _unconverted(command)
    try:
        path, _ = find_config_path(args)
        default_map: dict[str, Any] | None = None
        if path is not None:
            default_map = config_default_map(command, load_config(path), path)
    except InvalidInput as exc:
        from ._common import Report

        return Report(json_mode=json_mode, json_base=_json_base(args)).error(EXIT_INPUT, str(exc))
    try:
        result = command.main(
            args=args, prog_name="acmecerts", standalone_mode=False, default_map=default_map
        )
    except KeyboardInterrupt as exc:  # a signal before or after the work (_signals.Interrupted)
        from ._common import Report

        code, message = getattr(exc, "exit_code", EXIT_INTERRUPTED), str(exc) or "interrupted"
        return Report(json_mode=json_mode, json_base=_json_base(args)).error(code, message)
    except typer.Abort:
        from ._common import Report

        return Report(json_mode=json_mode, json_base=_json_base(args)).error(
            EXIT_INTERRUPTED, "interrupted"
        )
    except Exception as exc:
        usage = _usage_error(exc)
        if usage is None:
            raise
        code, message = usage
        from ._common import Report

        # Usage errors in one line, like every other input error.
        return Report(json_mode=json_mode, json_base=_json_base(args)).error(code, message)
    return result if isinstance(result, int) else EXIT_OK
