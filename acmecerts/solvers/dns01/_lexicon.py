"""The DNS-provider solver: TXT records written through dns-lexicon's providers' APIs."""

from __future__ import annotations

import datetime as _dt
import difflib
import functools
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio
import dns.name

from acmecerts._time import duration_seconds
from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.solvers.dns01._errors import DnsProviderError, DnsZoneNotFound
from acmecerts.solvers.dns01._lookup import _find_zone, _follow_cnames, _Lookup, _system_lookup
from acmecerts.solvers.dns01._propagation import PropagationCheck
from acmecerts.solvers.dns01._records import (
    _CHALLENGE_TYPE,
    _DEFAULT,
    DnsRecordLocation,
    _challenge_type,
    _DefaultPropagation,
    _dns_name,
    _parse_server,
    _record_name,
    _Registry,
    _supports,
    _text,
)

if TYPE_CHECKING:
    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask

logger = logging.getLogger("acmecerts.solvers.dns01")

_INSTALL: Final = "pip install 'acmecerts[dns]'"
#: Credential option names as lexicon spells them (``auth_token``, ``pdns_server``...).
_OPTION: Final = re.compile(r"^[a-z][a-z0-9_-]*$")
#: Secrets shorter than this are not searched for in error messages (too many false hits).
_MIN_REDACTED: Final = 4


class LexiconSolver:
    """A dns-01 solver for 100+ DNS providers' APIs, through dns-lexicon.

    Needs the ``dns`` extra (``pip install 'acmecerts[dns]'``). ``provider`` is a
    lexicon provider name (``"cloudflare"``, ``"route53"``, ``"googleclouddns"``,
    ``"azure"``, ``"powerdns"``, ``"ovh"``, ``"gandi"``...), ``credentials`` its options
    under lexicon's names::

        solver = LexiconSolver("cloudflare", credentials={"auth_token": token})
        await client.issue(["example.com", "*.example.com"], solver=solver)

    With ``environment=True`` (default) lexicon's environment variables fill in what
    ``credentials`` does not give: ``LEXICON_<PROVIDER>_<OPTION>``, e.g.
    ``LEXICON_CLOUDFLARE_AUTH_TOKEN`` or ``LEXICON_POWERDNS_PDNS_SERVER``.

    For each task :meth:`present` computes ``_acme-challenge.<name>``, follows a CNAME
    there (CNAME delegation), finds the zone by SOA queries (unless ``zone`` is given:
    lexicon's own guess from the public suffix list is not used), adds the value through
    the provider's API, then runs the propagation check. :meth:`cleanup` deletes exactly
    that value once no other task holds it. Lexicon is synchronous: every call runs in a
    worker thread (the event loop is never blocked), at most ``timeout`` seconds, one at a
    time per zone (providers rewrite whole record sets, so two concurrent writes to one
    name could lose a value).

    Credentials are never shown in reprs, logs or error messages.

    :param provider: the lexicon provider name.
    :param credentials: the provider's options (``auth_token``, ``auth_username``,
        ``pdns_server``...; ``lexicon <provider> --help`` lists them).
    :param environment: also read ``LEXICON_<PROVIDER>_<OPTION>`` variables.
    :param zone: the zone holding the records; ``None`` finds it for each name by SOA
        queries (after following CNAMEs).
    :param ttl: TTL of the TXT records written.
    :param propagation: the check run at the end of :meth:`present`; by default
        ``PropagationCheck()`` (the zone's authoritative servers); ``None`` skips it.
    :param resolvers: servers (``"HOST[:PORT]"``) that answer the CNAME and SOA lookups
        (and the propagation check's zone and NS lookups); default: the system resolvers.
    :param follow_cnames: follow a CNAME at ``_acme-challenge.<name>`` (default).
    :param timeout: how long one provider call or DNS query may take (default 30 s).
    :param challenge_type: ``"dns-01"`` (default) or ``"dns-account-01"``.
    """

    #: The challenge type this solver answers (``dns-01`` unless given).
    challenge_type: str = _CHALLENGE_TYPE

    def __init__(
        self,
        provider: str,
        *,
        credentials: Mapping[str, str] | None = None,
        environment: bool = True,
        zone: str | None = None,
        ttl: int = 60,
        propagation: PropagationCheck | _DefaultPropagation | None = _DEFAULT,
        resolvers: Sequence[str] | None = None,
        follow_cnames: bool = True,
        timeout: float | _dt.timedelta = 30.0,
        challenge_type: str = _CHALLENGE_TYPE,
    ) -> None:
        self.challenge_type = _challenge_type(challenge_type)
        if not isinstance(provider, str) or not _OPTION.match(provider):
            raise InvalidInput(f"provider must be a lexicon provider name, not {provider!r}")
        self._provider = provider
        self._provider_class = _provider_class(provider)
        self._credentials = _check_credentials(credentials)
        self._environment = bool(environment)
        self._zone = None if zone is None else _dns_name(zone)
        if not isinstance(ttl, int) or isinstance(ttl, bool) or not 1 <= ttl <= 2**31 - 1:
            raise InvalidInput(f"ttl must be an integer in 1..2147483647, not {ttl!r}")
        self._ttl = ttl
        self._propagation: PropagationCheck | None = (
            PropagationCheck() if isinstance(propagation, _DefaultPropagation) else propagation
        )
        self._timeout = duration_seconds(timeout, "timeout", positive=True)
        if isinstance(resolvers, str):
            raise InvalidInput("resolvers must be a sequence of addresses, not one string")
        self._lookup: _Lookup | None = None
        if resolvers is not None:
            servers = [_parse_server(r, 53) for r in resolvers]
            if not servers:
                raise InvalidInput("resolvers must not be empty (use None for the system's)")
            self._lookup = _Lookup(servers, timeout=self._timeout)
        self._follow_cnames = follow_cnames
        self._registry = _Registry()
        self._zone_locks: dict[str, anyio.Lock] = {}

    @property
    def provider(self) -> str:
        """The lexicon provider name."""
        return self._provider

    @property
    def propagation(self) -> PropagationCheck | None:
        """The check run at the end of :meth:`present` (``None``: none)."""
        return self._propagation

    def __repr__(self) -> str:
        options = ", ".join(sorted(self._credentials))
        return (
            f"LexiconSolver(provider={self._provider!r}, credentials=[{options}], "
            f"records={len(self._registry)})"
        )

    # -- Solver ---------------------------------------------------------------

    def supports(self, identifier: Identifier) -> bool:
        """DNS names, wildcards included; not IP addresses."""
        return _supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        """Add ``task.dns_txt_value`` through the provider, then wait until it is visible.

        Raises :class:`~acmecerts.errors.UnsupportedChallenge` for a task that is not a
        dns-01 task for a DNS name, :class:`DnsProviderError` when the provider's API
        fails, :class:`DnsZoneNotFound`, :class:`DnsPropagationTimeout` or
        :class:`DnsError` from the lookups and the propagation check.
        """
        record = _record_name(task, self)
        value = task.dns_txt_value
        # Registered before the first await, so a cleanup() in a finally block always
        # finds what this call did.
        entry = self._registry.acquire((record, value))
        if entry.location is None:
            entry.location = await self._locate(record)
        location = entry.location
        entry.attempted = True
        await self._call("create", location, value)
        logger.info(
            "%s: added TXT %s at %s (zone %s) via lexicon provider %s",
            self.challenge_type,
            value,
            location.name,
            location.zone,
            self._provider,
        )
        if self._propagation is not None:
            await self._propagation._wait(
                _dns_name(location.name),
                value,
                lookup=self._lookup,
                zone=_dns_name(location.zone),
                followed=True,
            )

    async def cleanup(self, task: ChallengeTask) -> None:
        """Delete exactly ``task.dns_txt_value`` (when no other task holds it).

        Deleting a value that is not there succeeds. Does nothing if :meth:`present`
        never got as far as calling the provider. Raises :class:`DnsProviderError` when
        the provider's API fails (the client logs it).
        """
        record = _record_name(task, self)
        value = task.dns_txt_value
        entry, remove = self._registry.release((record, value))
        if not remove or (entry is not None and not entry.attempted):
            return
        location = entry.location if entry is not None and entry.location else None
        if location is None:
            location = await self._locate(record)
        await self._call("delete", location, value)
        logger.info(
            "%s: deleted TXT %s at %s via lexicon provider %s",
            self.challenge_type,
            value,
            location.name,
            self._provider,
        )

    # -- lookups and provider calls -------------------------------------------

    def _lookups(self) -> _Lookup:
        if self._lookup is None:
            self._lookup = _system_lookup(self._timeout)
        return self._lookup

    async def _locate(self, record: str) -> DnsRecordLocation:
        name = _dns_name(record)
        cnames: tuple[dns.name.Name, ...] = ()
        if self._follow_cnames:
            name, cnames = await _follow_cnames(self._lookups(), name)
        if self._zone is not None:
            if not name.is_subdomain(self._zone):
                raise DnsZoneNotFound(
                    f"{_text(name)} is not in the configured zone {_text(self._zone)}",
                    name=_text(name),
                )
            zone = self._zone
        else:
            zone = await _find_zone(self._lookups(), name)
        return DnsRecordLocation(_text(name), _text(zone), tuple(_text(n) for n in cnames))

    async def _call(self, action: str, location: DnsRecordLocation, value: str) -> None:
        """Run one lexicon create or delete in a worker thread, one at a time per zone."""
        lock = self._zone_locks.setdefault(location.zone, anyio.Lock())
        what = f"lexicon {self._provider}: {action} TXT at {location.name} in zone {location.zone}"
        work = functools.partial(self._sync_call, action, location, value)
        async with lock:
            try:
                with anyio.fail_after(self._timeout):
                    await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
            except TimeoutError:
                raise DnsProviderError(
                    f"{what}: no answer within {self._timeout:g} s",
                    provider=self._provider,
                    name=location.name,
                    transient=True,
                ) from None
            except _ProviderFailure as failure:
                raise DnsProviderError(
                    f"{what}: {self._redact(failure.text)}",
                    provider=self._provider,
                    name=location.name,
                    status=failure.status,
                    transient=failure.transient,
                ) from None

    def _sync_call(self, action: str, location: DnsRecordLocation, value: str) -> None:
        """In a worker thread: authenticate, create or delete one TXT value, clean up."""
        try:
            provider = self._provider_class(self._config(location.zone))
            provider.authenticate()
            try:
                if action == "create":
                    provider.create_record("TXT", location.name, value)
                else:
                    provider.delete_record(None, "TXT", location.name, value)
            finally:
                provider.cleanup()
        except Exception as exc:
            raise _ProviderFailure.of(exc) from None

    def _config(self, zone: str) -> Any:
        """The lexicon configuration: zone and TTL first, then credentials, then env."""
        from lexicon.config import ConfigResolver

        resolver = ConfigResolver().with_dict(  # type: ignore[no-untyped-call]
            {
                "provider_name": self._provider,
                "domain": zone,
                "ttl": self._ttl,
                self._provider: dict(self._credentials),
            }
        )
        if self._environment:
            resolver = resolver.with_env()
        return resolver

    def _redact(self, text: str) -> str:
        secrets = list(self._credentials.values())
        if self._environment:
            prefix = f"LEXICON_{self._provider.upper()}_"
            secrets += [v for k, v in os.environ.items() if k.startswith(prefix)]
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= _MIN_REDACTED:
                text = text.replace(secret, "***")
        return text


class _ProviderFailure(Exception):
    """What a provider call raised, reduced to text, HTTP status and transience."""

    def __init__(self, text: str, status: int | None, transient: bool) -> None:
        super().__init__(text)
        self.text = text
        self.status = status
        self.transient = transient

    @classmethod
    def of(cls, exc: Exception) -> _ProviderFailure:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
        if not isinstance(status, int):
            status = None
        if status is not None:
            transient = status == 429 or status >= 500
        else:
            # requests' ConnectionError and Timeout are OSErrors; so are socket errors.
            transient = isinstance(exc, (OSError, TimeoutError)) and not isinstance(
                exc, AcmeCertsError
            )
        return cls(f"{type(exc).__name__}: {exc}", status, transient)


def _provider_class(provider: str) -> Any:
    """The lexicon provider class for ``provider``; a clear error if it cannot be used.

    Lexicon's ``Client`` guesses the zone from the public suffix list (fetched over the
    network) before it loads the provider; this solver finds the zone itself (SOA
    queries, as the other dns-01 solvers), so it loads the provider the way ``Client``
    does, from lexicon's provider registry.
    """
    try:
        from lexicon._private.discovery import find_providers, load_provider_module
    except ImportError:
        raise InvalidInput(f"LexiconSolver needs dns-lexicon: {_INSTALL}") from None
    available = find_providers()
    if provider not in available:
        close = difflib.get_close_matches(provider, list(available), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise InvalidInput(f"{provider!r} is not a dns-lexicon provider{hint}")
    if not available[provider]:
        raise InvalidInput(
            f"lexicon provider {provider!r} needs more packages: "
            f"pip install 'dns-lexicon[{provider}]'"
        )
    return load_provider_module(provider).Provider


def _check_credentials(credentials: Mapping[str, str] | None) -> dict[str, str]:
    if credentials is None:
        return {}
    if not isinstance(credentials, Mapping):
        raise InvalidInput("credentials must be a mapping of option name to value")
    checked: dict[str, str] = {}
    for key, value in credentials.items():
        if not isinstance(key, str) or not _OPTION.match(key):
            raise InvalidInput(
                f"credential option names are lexicon's (auth_token...), not {key!r}"
            )
        if not isinstance(value, str):
            # Never the value itself in the message.
            raise InvalidInput(f"credential {key!r} must be a string")
        checked[key.replace("-", "_")] = value
    return checked
