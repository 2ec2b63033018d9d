"""Every option of the commands, each declared once.

An option is a typer ``Annotated`` type (``Directory``, ``Email``, ...): its flag, its
``ACMECERTS_*`` environment variable (the flag's name in capitals), its help text and its
panel in ``--help``. A command's own option is its parameter's type, with the default
beside it. A shared option's default and its place among the command's options belong to
its group (:mod:`acmecerts.cli._groups`), which a command takes by one keyword-only
parameter typed with the group's dataclass (:mod:`acmecerts.cli._args`). The config-file
key of an option is its flag without the dashes (:mod:`acmecerts.cli._config`).

Only typer, the standard library and light modules here: ``acmecerts COMMAND --help``
must not import the library (``tests/cli/test_cli_start.py``).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from ._config import ENV_PREFIX

__all__ = [
    "AgreeTos",
    "Ari",
    "CaBundle",
    "CertKey",
    "CertKeyType",
    "CertName",
    "Challenge",
    "Concurrency",
    "Config",
    "DeleteReason",
    "Directory",
    "DnsHook",
    "DnsNameserver",
    "DnsPropagationTimeout",
    "DnsServer",
    "DnsTsigAlgorithm",
    "DnsTsigKey",
    "DnsTsigSecret",
    "EabHmacKey",
    "EabKid",
    "Email",
    "Force",
    "FromFile",
    "Http01Listen",
    "Json",
    "MaxWait",
    "NewAccountKeyType",
    "Out",
    "Panel",
    "PreferredChain",
    "PreferredProfile",
    "Profile",
    "Proxy",
    "Quiet",
    "RandomDelay",
    "RateLimits",
    "RenewDirectory",
    "RenewForce",
    "Revoke",
    "RevokeReason",
    "RolloverKeyType",
    "Staging",
    "StateCaDirectory",
    "StateDir",
    "StatusDirectory",
    "Timeout",
    "TlsAlpn01Listen",
    "Verbose",
    "Webroot",
    "Yes",
    "env",
    "opt",
]


class Panel(enum.StrEnum):
    """The panels of ``--help`` that group the options (the value is the title)."""

    CONFIG = "Configuration"
    CA = "CA and state"
    CHALLENGE = "Challenge"
    ACCOUNT = "Account"
    OUTPUT = "Output"
    ISSUING = "Issuing"
    HOOKS = "Hooks"


def env(option: str) -> str:
    """The environment variable of ``--option``: ``ACMECERTS_OPTION``."""
    return ENV_PREFIX + option.upper().replace("-", "_")


def opt(name: str, *, panel: Panel = Panel.CA, **kwargs: Any) -> Any:
    """A typer option ``--name`` whose environment variable is ``ACMECERTS_NAME``."""
    return typer.Option(f"--{name}", envvar=env(name), rich_help_panel=panel, **kwargs)


Directory = Annotated[
    str | None,
    opt(
        "directory",
        metavar="URL",
        help="The CA's ACME directory URL [default: Let's Encrypt's production directory, "
        "https://acme-v02.api.letsencrypt.org/directory].",
        show_default=False,
    ),
]
Staging = Annotated[
    bool,
    opt(
        "staging",
        help="Use Let's Encrypt's staging directory "
        "(https://acme-staging-v02.api.letsencrypt.org/directory: real validation, "
        "untrusted certificates, high rate limits); try a set-up there first.",
    ),
]
CaBundle = Annotated[
    Path | None,
    opt(
        "ca-bundle",
        metavar="PATH",
        help="Extra CA certificate (PEM) to trust for the CA's TLS, e.g. Pebble's.",
        show_default=False,
    ),
]
Proxy = Annotated[
    str | None,
    opt(
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
    opt(
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
    opt(
        "rate-limits",
        metavar="auto|letsencrypt|none",
        help="The CA's rate limits the ledger keeps you under (auto: Let's Encrypt's for its "
        "production directory, else only what the CA says in rateLimited answers).",
    ),
]
Timeout = Annotated[
    float,
    opt("timeout", metavar="SECONDS", help="Deadline for one issuance attempt."),
]
Json = Annotated[
    bool,
    opt("json", panel=Panel.OUTPUT, help="Print one JSON object describing the result on stdout."),
]
Verbose = Annotated[
    int,
    typer.Option(
        "-v",
        "--verbose",
        count=True,
        rich_help_panel=Panel.OUTPUT,
        help="Log progress (-vv: debug details) on stderr.",
    ),
]
Config = Annotated[
    Path | None,
    opt(
        "config",
        panel=Panel.CONFIG,
        metavar="PATH",
        help="TOML file with default option values "
        "[default: the first that exists of /etc/acmecerts/config.toml (root only) and "
        "$XDG_CONFIG_HOME/acmecerts/config.toml].",
        show_default=False,
    ),
]
Email = Annotated[
    list[str] | None,
    opt(
        "email",
        panel=Panel.ACCOUNT,
        metavar="ADDRESS",
        help="Contact e-mail for a new account (repeatable).",
        show_default=False,
    ),
]
EabKid = Annotated[
    str | None,
    opt(
        "eab-kid",
        panel=Panel.ACCOUNT,
        metavar="KID",
        help="External account binding key ID from the CA (with --eab-hmac-key).",
        show_default=False,
    ),
]
EabHmacKey = Annotated[
    str | None,
    opt(
        "eab-hmac-key",
        panel=Panel.ACCOUNT,
        metavar="B64URL",
        help="External account binding MAC key from the CA (base64url).",
        show_default=False,
    ),
]
AgreeTos = Annotated[
    bool,
    opt(
        "agree-tos",
        panel=Panel.ACCOUNT,
        help="Agree to the CA's terms of service when an account is created (without it, "
        "a terminal asks; otherwise the command stops before creating the account).",
    ),
]
Challenge = Annotated[
    str,
    opt(
        "challenge",
        panel=Panel.CHALLENGE,
        metavar="TYPE",
        help="How the CA validates control of the names: http-01, dns-01, tls-alpn-01, "
        "dns-account-01 or dns-persist-01 (dns-persist-01: a persistent "
        "record, published once; see `account dns-persist-records`).",
    ),
]
Http01Listen = Annotated[
    str,
    opt(
        "http-01-listen",
        panel=Panel.CHALLENGE,
        metavar="HOST:PORT",
        help="Where to answer http-01 challenges (the CA connects to port 80): [::]:80 is "
        "every IPv4 and IPv6 address, 0.0.0.0:80 IPv4 only.",
    ),
]
Webroot = Annotated[
    Path | None,
    opt(
        "webroot",
        panel=Panel.CHALLENGE,
        metavar="DIR",
        help="http-01 through the web server you run: write the challenge files into "
        "DIR/.well-known/acme-challenge/ (DIR is its document root for the names, served on "
        "port 80) instead of listening; stored with the certificate for `renew`.",
        show_default=False,
    ),
]
TlsAlpn01Listen = Annotated[
    str,
    opt(
        "tls-alpn-01-listen",
        panel=Panel.CHALLENGE,
        metavar="HOST:PORT",
        help="Where to answer tls-alpn-01 challenges (the CA connects to port 443): [::]:443 "
        "is every IPv4 and IPv6 address, 0.0.0.0:443 IPv4 only.",
    ),
]
DnsServer = Annotated[
    str | None,
    opt(
        "dns-rfc2136-server",
        panel=Panel.CHALLENGE,
        metavar="HOST[:PORT]",
        help="dns-01: the primary DNS server that takes TSIG-signed dynamic updates.",
        show_default=False,
    ),
]
DnsTsigKey = Annotated[
    str | None,
    opt(
        "dns-tsig-key",
        panel=Panel.CHALLENGE,
        metavar="NAME",
        help="dns-01: the TSIG key's name.",
        show_default=False,
    ),
]
DnsTsigSecret = Annotated[
    str | None,
    opt(
        "dns-tsig-secret",
        panel=Panel.CHALLENGE,
        metavar="B64",
        help="dns-01: the TSIG key's secret (base64, as in a BIND key file).",
        show_default=False,
    ),
]
DnsTsigAlgorithm = Annotated[
    str,
    opt(
        "dns-tsig-algorithm",
        panel=Panel.CHALLENGE,
        metavar="ALG",
        help="dns-01: the TSIG algorithm.",
    ),
]
DnsHook = Annotated[
    str | None,
    opt(
        "dns-hook",
        panel=Panel.CHALLENGE,
        metavar="COMMAND",
        help="dns-01: run COMMAND present|cleanup NAME VALUE to add or remove the TXT value "
        "(also in ACMECERTS_DNS_ACTION, ACMECERTS_DNS_NAME, ACMECERTS_DNS_VALUE).",
        show_default=False,
    ),
]
DnsNameserver = Annotated[
    list[str] | None,
    opt(
        "dns-propagation-nameserver",
        panel=Panel.CHALLENGE,
        metavar="HOST[:PORT]",
        help="dns-01: ask this server whether the TXT value is visible (repeatable) "
        "[default: the zone's authoritative servers].",
        show_default=False,
    ),
]
DnsPropagationTimeout = Annotated[
    float,
    opt(
        "dns-propagation-timeout",
        panel=Panel.CHALLENGE,
        metavar="SECONDS",
        help="dns-01: how long to wait for the TXT value to be visible (0: do not check).",
    ),
]
MaxWait = Annotated[
    float,
    opt(
        "max-wait",
        panel=Panel.ISSUING,
        metavar="SECONDS",
        help="Wait (with a countdown) when the CA or the ledger says to retry at most this "
        "long from now; a later instant defers the certificate (exit code 3).",
    ),
]
Concurrency = Annotated[
    int,
    opt("concurrency", panel=Panel.ISSUING, metavar="N", help="Certificates ordered at once."),
]
Force = Annotated[
    bool,
    opt(
        "force",
        panel=Panel.ISSUING,
        help="Order a new certificate even if the stored one is not due for renewal.",
    ),
]


# -- the options of one command ---------------------------------------------------------------

#: ``--key-type`` of ``issue`` and of a new account key (``account create|rollover``).
_KEY_TYPES: Final = "ec256|ec384|rsa2048|rsa3072|rsa4096"
_REASONS: Final = "unspecified|keyCompromise|affiliationChanged|superseded|cessationOfOperation"


def _one_of(choices: str) -> str:
    """``"a|b|c"`` as ``"a, b or c"``, for a help text (the metavar stays one short word)."""
    *rest, last = choices.split("|")
    return f"{', '.join(rest)} or {last}"


FromFile = Annotated[
    Path | None,
    opt(
        "from-file",
        panel=Panel.ISSUING,
        metavar="FILE",
        help="Issue one certificate per line of FILE (names separated by spaces, the "
        "first names the certificate; # comments), in parallel.",
        show_default=False,
    ),
]
Out = Annotated[
    Path | None,
    opt(
        "out",
        panel=Panel.ISSUING,
        metavar="DIR",
        help="Directory for cert.pem, chain.pem, fullchain.pem and privkey.pem (0600); "
        "with --from-file, DIR/NAME for each certificate "
        "[default: STATE_DIR/certificates/NAME].",
        show_default=False,
    ),
]
CertKeyType = Annotated[
    str,
    opt(
        "key-type",
        panel=Panel.ISSUING,
        metavar="TYPE",
        help=f"The certificate key type: {_one_of(_KEY_TYPES)}.",
    ),
]
Profile = Annotated[
    str | None,
    opt(
        "profile",
        panel=Panel.ISSUING,
        metavar="NAME",
        help="The certificate profile to order (e.g. tlsserver, shortlived at Let's "
        "Encrypt); one the CA does not offer is refused before anything is ordered. "
        "Renewals keep it.",
        show_default=False,
    ),
]
PreferredProfile = Annotated[
    str | None,
    opt(
        "preferred-profile",
        panel=Panel.ISSUING,
        metavar="NAME",
        help="Like --profile, but when the CA does not offer NAME, order its default "
        "profile (with a warning) instead of refusing.",
        show_default=False,
    ),
]
PreferredChain = Annotated[
    str | None,
    opt(
        "preferred-chain",
        panel=Panel.ISSUING,
        metavar="ISSUER",
        help="Prefer the chain whose root (or an intermediate) has this common name.",
        show_default=False,
    ),
]
CertName = Annotated[
    str | None,
    opt(
        "cert-name",
        panel=Panel.ISSUING,
        metavar="NAME",
        help="The certificate (lineage) to issue into: an existing one takes NAME... as "
        "its names (replace, expand, shrink), a new one is created "
        "[default: the one holding exactly NAME..., in any order, else the first NAME].",
        show_default=False,
    ),
]
RenewDirectory = Annotated[
    str | None,
    opt(
        "directory",
        metavar="URL",
        help="Renew only the certificates of this CA (its ACME directory URL) "
        "[default: every CA in the state directory, each with the URL and --ca-bundle "
        "it was issued with].",
        show_default=False,
    ),
]
RenewForce = Annotated[
    bool,
    opt("force", panel=Panel.ISSUING, help="Renew now, even certificates that are not due."),
]
RandomDelay = Annotated[
    float,
    opt(
        "random-delay",
        panel=Panel.ISSUING,
        metavar="SECONDS",
        help="Wait a random time from 0 to SECONDS before contacting any CA (spreads "
        "the cron jobs of many machines).",
    ),
]
Quiet = Annotated[
    bool,
    typer.Option(
        "-q",
        "--quiet",
        envvar=env("quiet"),
        rich_help_panel=Panel.OUTPUT,
        help="Print nothing unless a certificate was renewed or something failed "
        "(errors always go to stderr).",
    ),
]
RevokeReason = Annotated[
    str,
    opt(
        "reason",
        metavar="REASON",
        help=f"The revocation reason (RFC 5280): {_one_of(_REASONS)}.",
    ),
]
CertKey = Annotated[
    Path | None,
    opt(
        "cert-key",
        metavar="PATH",
        help="Sign with the certificate's private key instead of the account key "
        "(e.g. when the account is lost).",
        show_default=False,
    ),
]
Revoke = Annotated[
    bool,
    opt(
        "revoke",
        help="Revoke each certificate at its CA first; one that cannot be revoked is not deleted.",
    ),
]
DeleteReason = Annotated[
    str,
    opt(
        "reason",
        metavar="REASON",
        help=f"The revocation reason with --revoke (RFC 5280): {_one_of(_REASONS)}.",
    ),
]
Yes = Annotated[
    bool,
    typer.Option("--yes", "-y", help="Do not ask for confirmation (needed without a terminal)."),
]
StatusDirectory = Annotated[
    str | None,
    opt(
        "directory",
        metavar="URL",
        help="Show only the certificates of this CA (its ACME directory URL) "
        "[default: every CA in the state directory].",
        show_default=False,
    ),
]
StateCaDirectory = Annotated[
    str | None,
    opt(
        "directory",
        metavar="URL",
        help="Act at this CA (its ACME directory URL) [default: the CA in the state "
        "directory that holds the certificate (the account, for account show), with the "
        "--ca-bundle stored for it; Let's Encrypt's production directory for a certificate "
        "file it does not hold].",
        show_default=False,
    ),
]
Ari = Annotated[
    bool,
    opt(
        "ari",
        help="Ask the CA for each certificate's renewal window (ARI) instead of assuming "
        "a third of the lifetime (half under 10 days).",
    ),
]


def _account_key_type(which: str) -> Any:
    """``--key-type`` of ``account create`` (``which``: "a new") and ``rollover``."""
    return opt(
        "key-type",
        panel=Panel.ACCOUNT,
        metavar="TYPE",
        help=f"The key type of {which} account key: {_one_of(_KEY_TYPES)}.",
    )


NewAccountKeyType = Annotated[str, _account_key_type("a new")]
RolloverKeyType = Annotated[str, _account_key_type("the new")]
