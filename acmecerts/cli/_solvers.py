"""Challenge options: validated up front, then turned into the library's solvers.

* ``--challenge http-01`` (default): :class:`~acmecerts.Http01Server` on
  ``--http-01-listen`` (default ``[::]:80``: every IPv4 and IPv6 address, one dual-stack
  socket; ``0.0.0.0:80`` is IPv4 only).
* ``--webroot DIR`` (http-01): :class:`~acmecerts.Http01Webroot` writes the responses into
  ``DIR/.well-known/acme-challenge/`` of a web server already running on port 80; nothing
  listens.
* ``--challenge tls-alpn-01``: :class:`~acmecerts.TlsAlpn01Server` on
  ``--tls-alpn-01-listen`` (default ``[::]:443``, IPv4 and IPv6 likewise).
* ``--challenge dns-01``: :class:`~acmecerts.Rfc2136Solver` (``--dns-rfc2136-server``,
  ``--dns-tsig-key``, ``--dns-tsig-secret``, ``--dns-tsig-algorithm``) or
  :meth:`DnsHookSolver.from_command <acmecerts.DnsHookSolver.from_command>` (``--dns-hook``,
  run as ``COMMAND present|cleanup NAME VALUE``), each followed by a propagation check
  (``--dns-propagation-nameserver``, ``--dns-propagation-timeout``; 0 skips it).
* ``--challenge dns-account-01``: the same solvers, writing at
  ``_<account label>._acme-challenge.<name>`` (one name per account).
* ``--challenge dns-persist-01``: :class:`~acmecerts.DnsPersistSolver` checks that the
  persistent ``_validation-persist`` record is published (the zone's authoritative servers,
  or ``--dns-propagation-nameserver``) and writes nothing; with ``--dns-rfc2136-server``
  and the TSIG options it publishes a missing record once.

``issue`` stores the settings it answered with in each certificate's record
(:func:`stored_challenge`; never the TSIG secret); ``renew`` answers each certificate with
them, except for the options given to it (:func:`renewal_options`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import os
import re
import shlex
import shutil
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from acmecerts.errors import AcmeCertsError, InvalidInput, NoSolverForChallenges
from acmecerts.protocol.identifiers import Identifier
from acmecerts.solvers import Solver

if TYPE_CHECKING:
    from acmecerts.solvers import Http01Server, PropagationCheck, TlsAlpn01Server

from acmecerts.manager import CertificateRecord, StoredChallenge

from ._args import ChallengeOptions
from ._firstcontact import check_webroot

__all__ = [
    "CHALLENGES",
    "OVERRIDABLE",
    "ChallengePlan",
    "failure_text",
    "parse_hostport",
    "parse_listen",
    "plan_challenge",
    "renewal_options",
    "running_solvers",
    "stored_challenge",
]

CHALLENGES: Final = ("http-01", "dns-01", "tls-alpn-01", "dns-account-01", "dns-persist-01")
#: The challenges validated through DNS (wildcards allowed, IP addresses not).
DNS_CHALLENGES: Final = ("dns-01", "dns-account-01", "dns-persist-01")
#: The options that answer each challenge type (what :func:`failure_text` suggests).
_ANSWERED_BY: Final = {
    "http-01": "--challenge http-01 (--http-01-listen or --webroot)",
    "dns-01": "--challenge dns-01 with --dns-hook, --dns-rfc2136-server or --dns-provider",
    "tls-alpn-01": "--challenge tls-alpn-01 (--tls-alpn-01-listen)",
    "dns-account-01": "--challenge dns-account-01 with --dns-hook or --dns-rfc2136-server",
    "dns-persist-01": "--challenge dns-persist-01 (records from `account dns-persist-records`)",
}
_HOST = re.compile(r"[A-Za-z0-9.-]+")


@dataclasses.dataclass(frozen=True, slots=True)
class ChallengePlan:
    """A validated challenge configuration: the solver, and whether it listens."""

    challenge: str
    solver: Solver
    #: ``"HOST:PORT"`` the solver listens on (``None`` for dns-01 and ``--webroot``).
    listen: str | None
    #: The absolute ``--webroot`` (stored with each certificate), if one was given.
    webroot: Path | None = None
    #: The solver again when it is a server (http-01, tls-alpn-01): what runs it must stop it.
    server: Http01Server | TlsAlpn01Server | None = None


def parse_hostport(value: str, *, option: str, default_port: int | None = None) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[IPv6]:PORT``); without ``default_port`` the port is required."""
    text = value.strip()

    def bad(reason: str) -> InvalidInput:
        return InvalidInput(f"{option} {value!r}: {reason}")

    port_text: str | None
    if text.startswith("["):
        inner, closed, rest = text[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")) or (not rest and default_port is None):
            raise bad("expected [IPv6]:PORT")
        try:
            host = ipaddress.IPv6Address(inner).compressed
        except ValueError:
            raise bad(f"{inner!r} is not an IPv6 address") from None
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            if default_port is None:
                raise bad("expected HOST:PORT, e.g. [::]:80 (every IPv4 and IPv6 address)")
            host, port_text = text, None
        elif ":" in host:
            raise bad(
                "write an IPv6 address in brackets, e.g. [::1]:80 ([::]:80 is every IPv4 "
                "and IPv6 address)"
            )
        if not host and default_port is not None:
            raise bad("expected HOST[:PORT]")
        if host and not _HOST.fullmatch(host):
            raise bad(f"{host!r} is not a host name or IP address")
        host = host or "::"  # every IPv4 and IPv6 address
    if port_text is None:
        assert default_port is not None
        return host, default_port
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise bad(f"the port must be a number from 1 to 65535, not {port_text!r}")
    return host, int(port_text)


def parse_listen(value: str, option: str = "--http-01-listen") -> tuple[str, int]:
    """Parse a listen address ``HOST:PORT``: ``[::]:PORT`` (or an empty host) is every IPv4
    and IPv6 address, ``0.0.0.0:PORT`` every IPv4 address only."""
    return parse_hostport(value, option=option)


def _hostport(host: str, port: int) -> str:
    """``HOST:PORT`` as typed back: ``[::]:80`` for an IPv6 address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _hook_argv(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise InvalidInput(f"--dns-hook {command!r}: {exc}") from None
    if not argv:
        raise InvalidInput("--dns-hook needs a command")
    program = argv[0]
    if os.sep in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise InvalidInput(f"--dns-hook: {program} is not an executable file")
    elif shutil.which(program) is None:
        raise InvalidInput(f"--dns-hook: {program!r} is not found on PATH")
    return argv


def _propagation(options: ChallengeOptions, default_port: int) -> PropagationCheck | None:
    from acmecerts import duration_seconds  # the library's one duration parser

    timeout = duration_seconds(options.dns_propagation_timeout, "--dns-propagation-timeout")
    if timeout == 0:
        return None
    servers = list(options.dns_propagation_nameservers)
    for server in servers:
        parse_hostport(server, option="--dns-propagation-nameserver", default_port=53)
    from acmecerts.solvers import PropagationCheck  # dnspython: only for dns-01

    return PropagationCheck(servers or None, port=default_port, timeout=timeout)


def _dns_solver(options: ChallengeOptions, challenge: str = "dns-01") -> Solver:
    rfc2136 = options.dns_rfc2136_server
    if challenge == "dns-persist-01":
        return _persist_solver(options)
    writers = [rfc2136, options.dns_hook, options.dns_provider]
    if sum(writer is not None for writer in writers) != 1:
        raise InvalidInput(
            f"--challenge {challenge} needs one of --dns-rfc2136-server (with --dns-tsig-key "
            "and --dns-tsig-secret), --dns-hook COMMAND or --dns-provider NAME"
        )
    if options.dns_provider is not None:
        return _provider_solver(options, options.dns_provider, challenge)
    # Imported here, not with this module: dnspython is for dns-01 runs only (~0.1 s).
    from acmecerts.solvers import DnsHookSolver, Rfc2136Solver

    if options.dns_hook is not None:
        return DnsHookSolver.from_command(
            _hook_argv(options.dns_hook),
            propagation=_propagation(options, 53),
            challenge_type=challenge,
        )
    assert rfc2136 is not None
    host, port = parse_hostport(rfc2136, option="--dns-rfc2136-server", default_port=53)
    if not options.dns_tsig_key or not options.dns_tsig_secret:
        raise InvalidInput("--dns-rfc2136-server needs --dns-tsig-key and --dns-tsig-secret")
    try:
        return Rfc2136Solver(
            host,
            port=port,
            tsig_key_name=options.dns_tsig_key,
            tsig_secret=options.dns_tsig_secret,
            tsig_algorithm=options.dns_tsig_algorithm,
            propagation=_propagation(options, port),
            challenge_type=challenge,
        )
    except InvalidInput as exc:
        raise InvalidInput(f"{challenge}: {exc}") from None


def _provider_solver(options: ChallengeOptions, provider: str, challenge: str) -> Solver:
    """``--dns-provider``: a LexiconSolver; credentials from --dns-provider-option KEY=VALUE
    and lexicon's LEXICON_<PROVIDER>_<OPTION> variables."""
    credentials: dict[str, str] = {}
    for item in options.dns_provider_options:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # never the text itself: it may be a secret given without its key
            raise InvalidInput("--dns-provider-option takes KEY=VALUE (e.g. auth_token=...)")
        credentials[key.strip()] = value
    from acmecerts.solvers import LexiconSolver

    servers = list(options.dns_propagation_nameservers)
    try:
        return LexiconSolver(
            provider,
            credentials=credentials,
            # the servers named for the check also answer the CNAME and zone lookups
            resolvers=servers or None,
            propagation=_propagation(options, 53),
            challenge_type=challenge,
        )
    except InvalidInput as exc:
        raise InvalidInput(f"--dns-provider: {exc}") from None


def _persist_solver(options: ChallengeOptions) -> Solver:
    """dns-persist-01: check the record; publish it once only with RFC 2136 and its secret."""
    if options.dns_hook is not None:
        raise InvalidInput(
            "--challenge dns-persist-01 writes no per-challenge records, so --dns-hook has "
            "nothing to do: publish the record once (`acmecerts account dns-persist-records "
            "NAME...` prints it), or give --dns-rfc2136-server to publish it once"
        )
    from acmecerts.solvers import DnsPersistSolver, PropagationCheck

    publisher = None
    port = 53
    if options.dns_rfc2136_server is not None:
        # the zone's servers listen where its primary does; without the TSIG secret (a
        # renewal: it is never stored) the record is only read
        port = parse_hostport(
            options.dns_rfc2136_server, option="--dns-rfc2136-server", default_port=53
        )[1]
        if options.dns_tsig_secret:
            publisher = _dns_solver(dataclasses.replace(options, challenge="dns-01"))
    check = _propagation(options, port)
    if check is None:  # --dns-propagation-timeout 0: look once, do not wait
        servers = list(options.dns_propagation_nameservers) or None
        check = PropagationCheck(servers, port=port, timeout=0)
    if publisher is not None:
        from acmecerts.solvers import Rfc2136Solver

        assert isinstance(publisher, Rfc2136Solver)
        return DnsPersistSolver(propagation=check, publisher=publisher)
    return DnsPersistSolver(propagation=check)


def plan_challenge(options: ChallengeOptions, identifiers: Sequence[Identifier]) -> ChallengePlan:
    """Validate the challenge options for ``identifiers`` and build the solver (not started)."""
    challenge = options.challenge.lower()
    if challenge not in CHALLENGES:
        raise InvalidInput(
            f"--challenge {options.challenge!r}: choose one of {', '.join(CHALLENGES)}"
        )
    for ident in identifiers:
        if ident.is_wildcard and challenge not in DNS_CHALLENGES:
            raise InvalidInput(
                f"{ident.value}: {challenge} cannot validate a wildcard name (wildcards need "
                "dns-01, dns-account-01 or dns-persist-01)"
            )
        if ident.type == "ip" and challenge in DNS_CHALLENGES:
            raise InvalidInput(f"{ident.value}: {challenge} cannot validate an IP address")
    if options.webroot is not None:
        if challenge != "http-01":
            raise InvalidInput(f"--webroot answers http-01 challenges, not --challenge {challenge}")
        if options.http_01_listen.strip() != ChallengeOptions().http_01_listen:
            raise InvalidInput(
                "--webroot and --http-01-listen exclude each other: with --webroot your web "
                "server answers, nothing listens"
            )
        from acmecerts.solvers import Http01Webroot

        root = check_webroot(options.webroot)
        return ChallengePlan(challenge, Http01Webroot(root), None, webroot=root)
    if challenge == "http-01":
        from acmecerts.solvers import Http01Server

        host, port = parse_listen(options.http_01_listen, "--http-01-listen")
        http = Http01Server(host=host, port=port)
        return ChallengePlan(challenge, http, _hostport(host, port), server=http)
    if challenge == "tls-alpn-01":
        from acmecerts.solvers import TlsAlpn01Server

        host, port = parse_listen(options.tls_alpn_01_listen, "--tls-alpn-01-listen")
        tls = TlsAlpn01Server(host=host, port=port)
        return ChallengePlan(challenge, tls, _hostport(host, port), server=tls)
    return ChallengePlan(challenge, _dns_solver(options, challenge), None)


def failure_text(error: AcmeCertsError) -> str:
    """A failed certificate's line; for a CA that offered only types this run's solver
    does not answer, what was offered and the options that would answer it."""
    if not isinstance(error, NoSolverForChallenges):
        return str(error)
    text = f"{error.offer}; this run answered {', '.join(error.solver_types) or 'nothing'}"
    options = [_ANSWERED_BY[t] for t in error.offered if t in _ANSWERED_BY]
    if options:
        return f"{text}: {', or '.join(options)} would answer it (the next run tries again)"
    if error.offered:
        return f"{text}; no --challenge answers {', '.join(error.offered)} (a library solver may)"
    return text


def stored_challenge(options: ChallengeOptions, plan: ChallengePlan) -> StoredChallenge:
    """What ``issue`` stores with a certificate so that ``renew`` answers alike (no secret)."""
    challenge = plan.challenge
    if challenge == "http-01":
        listen = None if plan.webroot is not None else options.http_01_listen.strip()
        return StoredChallenge(challenge, http_01_listen=listen)
    if challenge == "tls-alpn-01":
        return StoredChallenge(challenge, tls_alpn_01_listen=options.tls_alpn_01_listen.strip())
    dns = StoredChallenge(
        challenge,
        dns_propagation_nameservers=tuple(options.dns_propagation_nameservers),
        dns_propagation_timeout=options.dns_propagation_timeout,
    )
    if options.dns_hook is not None:
        return dataclasses.replace(dns, dns_hook=options.dns_hook)
    if options.dns_provider is not None:
        return dataclasses.replace(dns, dns_provider=options.dns_provider)
    return dataclasses.replace(
        dns,
        dns_rfc2136_server=options.dns_rfc2136_server,
        dns_tsig_key=options.dns_tsig_key,
        dns_tsig_algorithm=options.dns_tsig_algorithm,
    )


#: ``ChallengeOptions`` fields an option given to ``renew`` replaces (``--dns-tsig-secret``
#: is not among them: it is never stored, and always the command's).
OVERRIDABLE: Final = (
    "challenge",
    "http_01_listen",
    "webroot",
    "tls_alpn_01_listen",
    "dns_rfc2136_server",
    "dns_tsig_key",
    "dns_tsig_algorithm",
    "dns_hook",
    "dns_provider",
    "dns_propagation_nameservers",
    "dns_propagation_timeout",
)
#: Giving one of these to ``renew`` drops the other's stored value: they exclude each other.
_EXCLUDES: Final = {
    "webroot": ("http_01_listen",),
    "http_01_listen": ("webroot",),
    "dns_hook": ("dns_rfc2136_server", "dns_provider"),
    "dns_rfc2136_server": ("dns_hook", "dns_provider"),
    "dns_provider": ("dns_hook", "dns_rfc2136_server"),
}


def renewal_options(
    command: ChallengeOptions, given: Iterable[str], record: CertificateRecord | None
) -> tuple[ChallengeOptions, bool]:
    """The challenge options one certificate is renewed with, and whether they come from
    its stored settings.

    A record with stored settings (:attr:`CertificateRecord.challenge`) is answered as it
    was issued, except for each option ``given`` to ``renew`` (command line, environment
    or configuration file; names of :data:`OVERRIDABLE`), whose value replaces the stored
    one for this run. A record without (written by an earlier acmecerts) gets the
    command's options, as it always did, and its stored ``--webroot`` unless one is given.
    """
    given = frozenset(given)
    stored = record.challenge if record is not None else None
    command_root = command.webroot.expanduser().absolute() if command.webroot else None
    if stored is None:
        if command_root is None and record is not None and record.webroot:
            # the stored webroot answers http-01 for it, whatever the other options say
            return ChallengeOptions(webroot=Path(record.webroot)), False
        return dataclasses.replace(command, webroot=command_root), False
    assert record is not None
    default = ChallengeOptions()
    values: dict[str, Any] = {
        "challenge": stored.challenge,
        "http_01_listen": stored.http_01_listen or default.http_01_listen,
        "webroot": Path(record.webroot) if record.webroot else None,
        "tls_alpn_01_listen": stored.tls_alpn_01_listen or default.tls_alpn_01_listen,
        "dns_rfc2136_server": stored.dns_rfc2136_server,
        "dns_tsig_key": stored.dns_tsig_key,
        "dns_tsig_algorithm": stored.dns_tsig_algorithm or default.dns_tsig_algorithm,
        "dns_hook": stored.dns_hook,
        "dns_provider": stored.dns_provider,
        "dns_propagation_nameservers": stored.dns_propagation_nameservers,
        "dns_propagation_timeout": (
            stored.dns_propagation_timeout
            if stored.dns_propagation_timeout is not None
            else default.dns_propagation_timeout
        ),
    }
    for name in given & set(_EXCLUDES):
        for excluded in _EXCLUDES[name]:
            values[excluded] = default.http_01_listen if excluded == "http_01_listen" else None
    if "challenge" in given and command.challenge.lower() != "http-01":
        values["webroot"] = None  # a webroot answers http-01 only
    for name in given & set(OVERRIDABLE):
        values[name] = command_root if name == "webroot" else getattr(command, name)
    values["dns_tsig_secret"] = command.dns_tsig_secret
    values["dns_provider_options"] = command.dns_provider_options
    return dataclasses.replace(default, **values), True


@contextlib.asynccontextmanager
async def running_solvers(plan: ChallengePlan, *, eager: bool) -> AsyncIterator[list[Solver]]:
    """The solvers, started now (``eager``: a busy port is bad input before anything is
    sent) or on first use; stopped when the block ends, also on Ctrl-C."""
    server = plan.server
    if server is None:
        yield [plan.solver]
        return
    if eager:
        async with server:
            yield [server]
        return
    try:
        yield [server]
    finally:
        await server.aclose()
