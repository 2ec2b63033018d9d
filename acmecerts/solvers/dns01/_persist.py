"""The dns-persist-01 solver: check the persistent record, write nothing.

For dns-persist-01 (draft-ietf-acme-dns-persist) the CA reads the TXT records at
``_validation-persist.<name>`` and looks for one naming it (one of the challenge's
``issuer-domain-names``) and the account (``accounturi``); ``policy=wildcard`` extends it
to ``*.<name>`` and subdomains, and ``persistUntil`` ends it. The record is published
once, by whoever runs the zone, and stays: every later validation, renewals included,
only reads it.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Collection
from typing import TYPE_CHECKING, Final

import anyio

from acmecerts._time import Clock, SystemClock, duration_seconds, show_instant
from acmecerts.errors import InvalidInput
from acmecerts.protocol.challenges import (
    DNS_PERSIST_01,
    DnsPersistRecord,
    dns_persist01_txt_value,
    parse_dns_persist01_value,
)
from acmecerts.solvers._checks import _refuse_unsupported
from acmecerts.solvers.dns01._errors import DnsPersistRecordMissing
from acmecerts.solvers.dns01._propagation import PropagationCheck
from acmecerts.solvers.dns01._records import _DEFAULT, _DefaultPropagation, _dns_name, _supports

if TYPE_CHECKING:
    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask
    from acmecerts.solvers.dns01._lookup import _Lookup
    from acmecerts.solvers.dns01._rfc2136 import Rfc2136Solver

logger = logging.getLogger("acmecerts.solvers.dns01")

#: Warn this long before a record's ``persistUntil``.
DEFAULT_WARN_BEFORE: Final = _dt.timedelta(days=30)


class DnsPersistSolver:
    """A dns-persist-01 solver: checks that the persistent TXT record is published.

    :meth:`present` reads ``_validation-persist.<name>`` at the zone's authoritative
    servers (or the ``propagation`` check's name servers) through the same lookups the
    dns-01 solvers use, and returns once every one serves a record that authorizes this
    CA (one of the challenge's ``issuer-domain-names``) and this account
    (``accounturi``), with ``policy=wildcard`` for a wildcard name, and not past its
    ``persistUntil``. It never writes DNS, and :meth:`cleanup` removes nothing: the record
    is persistent. A record whose ``persistUntil`` is less than ``warn_before`` away is
    logged as a warning (logger ``acmecerts.solvers.dns01``), so it can be renewed
    before validations start failing.

    With no such record anywhere, :meth:`present` raises
    :class:`DnsPersistRecordMissing` naming the record to publish, unless ``publisher``
    is given: then that :class:`Rfc2136Solver` adds it once by dynamic UPDATE (and it is
    left there), and the propagation check waits until it is visible. Later validations
    find it and write nothing.

    :param propagation: where to look and how long to wait for a record being
        propagated; by default the ``publisher``'s check, else ``PropagationCheck()``
        (the zone's authoritative servers, found through the system resolver).
    :param publisher: an :class:`Rfc2136Solver` that publishes a missing record once.
    :param issuer: the issuer domain name a published record names (it must be among
        the challenge's); default: the CA's first.
    :param wildcard: whether a published record carries ``policy=wildcard``; default:
        when a wildcard name is validated.
    :param persist_until: the ``persistUntil`` of a published record (aware datetime).
    :param warn_before: warn when a record's ``persistUntil`` is this close (default 30
        days).
    :param clock: where "now" comes from (for ``persistUntil``).
    """

    #: The challenge type this solver answers.
    challenge_type: str = DNS_PERSIST_01

    def __init__(
        self,
        *,
        propagation: PropagationCheck | _DefaultPropagation = _DEFAULT,
        publisher: Rfc2136Solver | None = None,
        issuer: str | None = None,
        wildcard: bool | None = None,
        persist_until: _dt.datetime | None = None,
        warn_before: float | _dt.timedelta = DEFAULT_WARN_BEFORE,
        clock: Clock | None = None,
    ) -> None:
        if propagation is None:
            raise InvalidInput("dns-persist-01 needs a propagation check: it is how it looks")
        self._lookup: _Lookup | None = None
        if isinstance(propagation, _DefaultPropagation):
            if publisher is not None and publisher.propagation is not None:
                propagation = publisher.propagation
                self._lookup = publisher._lookup
            else:
                propagation = PropagationCheck()
        self._propagation: PropagationCheck = propagation
        self._publisher = publisher
        self._issuer = issuer.strip().rstrip(".").lower() if issuer is not None else None
        self._wildcard = wildcard
        if persist_until is not None and persist_until.tzinfo is None:
            raise InvalidInput("persist_until must be a timezone-aware datetime")
        self._persist_until = persist_until
        self._warn_before = duration_seconds(warn_before, "warn_before")
        self.clock: Clock = clock or SystemClock()
        self._locks: dict[str, anyio.Lock] = {}
        #: The records this solver published (name, value), oldest first.
        self.published: list[tuple[str, str]] = []

    @property
    def propagation(self) -> PropagationCheck:
        """Where the record is looked for, and how long a published one is waited for."""
        return self._propagation

    def __repr__(self) -> str:
        publisher = f", publisher={self._publisher!r}" if self._publisher else ""
        return f"DnsPersistSolver({self._propagation!r}{publisher})"

    # -- Solver ---------------------------------------------------------------

    def supports(self, identifier: Identifier) -> bool:
        """DNS names, wildcards included; not IP addresses."""
        return _supports(identifier)

    def record_for(self, task: ChallengeTask) -> tuple[str, str]:
        """The record (name, TXT value) this solver would publish for ``task``."""
        _refuse_unsupported(self, task, DNS_PERSIST_01, _supports)
        issuers = task.issuer_domain_names
        if not issuers or task.account_url is None:
            raise InvalidInput("a dns-persist-01 task needs issuer_domain_names and account_url")
        issuer = self._issuer or issuers[0]
        if issuer not in issuers:
            raise InvalidInput(
                f"issuer {issuer!r} is not among the CA's issuer domain names "
                f"({', '.join(issuers)})"
            )
        wildcard = task.identifier.is_wildcard if self._wildcard is None else self._wildcard
        value = dns_persist01_txt_value(
            issuer, task.account_url, wildcard=wildcard, persist_until=self._persist_until
        )
        return task.dns_record_name, value

    async def present(self, task: ChallengeTask) -> None:
        """Return once the persistent record that authorizes ``task`` is visible everywhere.

        Raises :class:`DnsPersistRecordMissing` when no server has one (and there is no
        ``publisher``), :class:`DnsPropagationTimeout` when some servers have it and
        others do not by the check's deadline, :class:`DnsError` for lookup failures,
        :class:`~acmecerts.errors.UnsupportedChallenge` for a task of another type.
        """
        name, value = self.record_for(task)
        account = task.account_url
        assert account is not None
        issuers = task.issuer_domain_names
        wildcard = task.identifier.is_wildcard

        def accept(values: Collection[str]) -> bool:
            now = self.clock.now()
            return any(
                r is not None and r.authorizes(issuers, account, wildcard=wildcard, now=now)
                for r in map(parse_dns_persist01_value, values)
            )

        check = self._propagation
        qname = _dns_name(name)
        lock = self._locks.setdefault(name, anyio.Lock())
        async with lock:  # a wildcard and its base name share the record
            target_name, targets = await check._targets(
                qname, lookup=self._lookup, zone=None, followed=False
            )
            seen = await check._values(targets, target_name)
            found = sorted({v for values in seen.values() if values for v in values})
            if not any(values is not None and accept(values) for values in seen.values()):
                if self._publisher is None:
                    raise DnsPersistRecordMissing(
                        _missing_message(name, value, found, issuers, account, wildcard),
                        name=name,
                        value=value,
                        found=found,
                    )
                await self._publish(name, value)
            await check._wait(
                qname, value, lookup=self._lookup, zone=None, followed=False, accept=accept
            )
        self._warn_if_ending(name, issuers, account, wildcard, found or [value])

    async def cleanup(self, task: ChallengeTask) -> None:
        """Nothing to undo: the record is persistent (it is kept for later validations)."""

    # -- helpers ----------------------------------------------------------------

    async def _publish(self, name: str, value: str) -> None:
        publisher = self._publisher
        assert publisher is not None
        location = await publisher._locate(name)
        await publisher._update(location, value, add=True)
        self.published.append((location.name, value))
        logger.info(
            "dns-persist-01: published TXT %r at %s (zone %s) via %s; it stays for later "
            "validations",
            value,
            location.name,
            location.zone,
            publisher.server,
        )

    def _warn_if_ending(
        self,
        name: str,
        issuers: tuple[str, ...],
        account: str,
        wildcard: bool,
        values: Collection[str],
    ) -> None:
        now = self.clock.now()
        records = [r for r in map(parse_dns_persist01_value, values) if r is not None]
        good = [r for r in records if r.authorizes(issuers, account, wildcard=wildcard, now=now)]
        if any(r.persist_until is None for r in good):
            return
        ends = max((r.persist_until for r in good if r.persist_until is not None), default=None)
        if ends is not None and (ends - now).total_seconds() <= self._warn_before:
            logger.warning(
                "dns-persist-01: the TXT record at %s that authorizes %s ends at its "
                "persistUntil %s (in %s); publish one with a later persistUntil (or none) "
                "before then, or validations will fail",
                name,
                account,
                ends.isoformat(),
                _human(ends - now),
            )


def _missing_message(
    name: str,
    value: str,
    found: list[str],
    issuers: tuple[str, ...],
    account: str,
    wildcard: bool,
) -> str:
    reasons = [_why_not(r, v, issuers, account, wildcard) for v in found if (r := _parse(v))]
    seen = "; ".join(reasons) if reasons else "no record is there"
    return (
        f"dns-persist-01: no TXT record at {name} authorizes {', '.join(issuers)} for "
        f"account {account} ({seen}). Publish once: {name}. IN TXT {_quoted(value)}"
    )


def _parse(value: str) -> DnsPersistRecord | None:
    return parse_dns_persist01_value(value)


def _why_not(
    record: DnsPersistRecord, value: str, issuers: tuple[str, ...], account: str, wildcard: bool
) -> str:
    if record.issuer not in issuers:
        return f"{value!r} names another CA"
    if record.account_uri != account:
        return f"{value!r} names another account"
    if wildcard and not record.wildcard:
        return f"{value!r} lacks policy=wildcard"
    until = show_instant(record.persist_until) if record.persist_until else "?"
    return f"{value!r} ended at its persistUntil {until}"


def _quoted(value: str) -> str:
    """A TXT value in zone-file syntax (split into 255-octet strings)."""
    parts = [value[i : i + 255] for i in range(0, len(value), 255)] or [""]
    return " ".join('"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"' for p in parts)


def _human(delta: _dt.timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 0:
        return "the past"
    if seconds >= 86400:
        return f"{seconds / 86400:.0f} days"
    return f"{seconds / 3600:.1f} hours"
