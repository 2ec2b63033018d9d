"""Certificate profiles as data with dates: what profile P at CA X issues at instant T.

A CA that speaks ACME profiles (draft-aaron-acme-profiles; ``meta.profiles`` in its
directory) issues each profile under rules of its own: the certificate's lifetime, how
long a validated authorization is reused, how many names an order may carry, whether IP
identifiers are allowed, how long an order and a pending authorization live. Those rules
change on announced dates. :class:`CaProfiles` holds one CA's rules as a timeline of
:class:`ProfileRules`, each in force from its ``since`` instant to the next one's;
:func:`profile_rules` answers the question for an instant::

    >>> from datetime import datetime, timezone
    >>> rules = profile_rules(LETS_ENCRYPT_PROFILES, "classic",
    ...                       at=datetime(2027, 3, 1, tzinfo=timezone.utc))
    >>> rules.certificate_lifetime.days, rules.authorization_reuse.days
    (64, 10)

Let's Encrypt's rules are :data:`LETS_ENCRYPT_PROFILES` (production) and
:data:`LETS_ENCRYPT_STAGING_PROFILES`, from https://letsencrypt.org/docs/profiles/ (as of
September 2026) and the announcement "Decreasing Certificate Lifetimes to 45 Days"
(https://letsencrypt.org/2025/12/02/from-90-to-45):

* ``classic`` (the default): 90-day certificates, 30-day authorization reuse, 100 names,
  DNS names only, orders and pending authorizations live 7 days. From 2027-02-10:
  64-day certificates, 10-day reuse. From 2028-02-16: 45 days, 7-hour reuse.
* ``tlsserver``: 45-day certificates (90 days before 2026-05-13), 7-hour reuse, 25
  names, DNS names only, orders live 8 hours, pending authorizations 1 hour.
* ``shortlived``: as ``tlsserver`` but 160-hour certificates, and IP identifiers too.

Each change takes effect at 00:00 UTC of its announced day (the earliest instant the day
allows: a renewal planner that assumes the shorter lifetime a few hours early renews a
little early, never late). Staging gets each change "approximately one month before"
production; no exact dates were announced, so :data:`LETS_ENCRYPT_STAGING_PROFILES`
switches on the same day of the month before (2026-04-13, 2027-01-10, 2028-01-16). The
dates move only lifetimes and reuse periods; the rules the client enforces before
ordering (names per order, IP identifiers) do not change with them.

This is policy: pure data and pure functions, no I/O.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence

from acmecerts.errors import InvalidInput, ProfileRefused
from acmecerts.protocol.identifiers import Identifier

__all__ = [
    "LETS_ENCRYPT_PROFILES",
    "LETS_ENCRYPT_STAGING_PROFILES",
    "CaProfiles",
    "ProfileRules",
    "profile_rules",
]

_UTC = _dt.UTC


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProfileRules:
    """What one profile of one CA issues while these rules are in force.

    ``since`` is the instant they took effect (``None``: before any change this data
    knows of), ``until`` the instant the next known change takes effect (``None``: no
    change is known). Every duration is a ``timedelta``.
    """

    #: The CA's name for the profile (``"classic"``).
    profile: str
    #: ``notAfter - notBefore`` of the certificates issued.
    certificate_lifetime: _dt.timedelta
    #: How long a validated authorization is reused by new orders for the same name.
    authorization_reuse: _dt.timedelta
    #: The most identifiers (subjectAltNames) one order may carry.
    max_names: int
    #: Whether IP address identifiers (RFC 8738) are allowed.
    ip_identifiers: bool
    #: How long an order lives (its ``expires`` after creation).
    order_lifetime: _dt.timedelta
    #: How long a pending authorization lives (the time to answer its challenge).
    pending_authorization_lifetime: _dt.timedelta
    since: _dt.datetime | None = None
    until: _dt.datetime | None = None

    def in_force(self, at: _dt.datetime) -> bool:
        """Whether these rules are the ones in force at ``at``."""
        return (self.since is None or self.since <= at) and (self.until is None or at < self.until)

    def check(self, identifiers: Iterable[Identifier], *, ca: str = "the CA") -> None:
        """Raise :class:`~acmecerts.errors.ProfileRefused` for an order the CA would refuse.

        Too many names for :attr:`max_names`, or an IP identifier where
        :attr:`ip_identifiers` is false.
        """
        idents = tuple(identifiers)
        if len(idents) > self.max_names:
            raise ProfileRefused(
                f"profile {self.profile!r} at {ca} allows at most {self.max_names} names "
                f"per order, the order names {len(idents)}",
                profile=self.profile,
            )
        ips = [i.value for i in idents if i.type == "ip"]
        if ips and not self.ip_identifiers:
            raise ProfileRefused(
                f"profile {self.profile!r} at {ca} allows no IP address identifiers "
                f"(the order names {', '.join(ips)})",
                profile=self.profile,
            )


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class CaProfiles:
    """One CA's profiles: for each, its :class:`ProfileRules` over time.

    Args:
        name: The CA's name, for messages (``"lets-encrypt"``).
        default: The profile the CA issues when an order names none.
        timeline: For each profile, its rules in the order they took effect: each one's
            ``since`` later than the one before (the first may be ``None``). Their
            ``until`` is filled in here from the next one's ``since``.
    """

    name: str
    default: str
    timeline: Mapping[str, tuple[ProfileRules, ...]]

    def __init__(
        self, name: str, *, default: str, timeline: Mapping[str, Sequence[ProfileRules]]
    ) -> None:
        filled: dict[str, tuple[ProfileRules, ...]] = {}
        for profile, rules in timeline.items():
            filled[profile] = _chain(profile, rules)
        if default not in filled:
            raise InvalidInput(f"{name}: the default profile {default!r} has no rules")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "default", default)
        object.__setattr__(self, "timeline", filled)

    @property
    def profiles(self) -> tuple[str, ...]:
        """The profiles this data knows, sorted."""
        return tuple(sorted(self.timeline))

    def get(self, profile: str | None, at: _dt.datetime) -> ProfileRules | None:
        """The rules of ``profile`` (``None``: the default) at ``at``; ``None`` if unknown."""
        at = _aware(at)
        rules = self.timeline.get(self.default if profile is None else profile)
        if rules is None:
            return None
        starts = [r.since or _dt.datetime.min.replace(tzinfo=_UTC) for r in rules]
        index = bisect.bisect_right(starts, at) - 1
        return rules[index] if index >= 0 else None

    def changes(self) -> tuple[_dt.datetime, ...]:
        """Every instant at which some profile's rules change, sorted."""
        return tuple(
            sorted({r.since for rules in self.timeline.values() for r in rules if r.since})
        )

    def __repr__(self) -> str:
        return f"CaProfiles({self.name!r}, {', '.join(self.profiles)})"


def _chain(profile: str, rules: Sequence[ProfileRules]) -> tuple[ProfileRules, ...]:
    if not rules:
        raise InvalidInput(f"profile {profile!r}: no rules")
    result: list[ProfileRules] = []
    for i, rule in enumerate(rules):
        if rule.profile != profile:
            raise InvalidInput(f"rules of {rule.profile!r} listed under {profile!r}")
        if i > 0 and rule.since is None:
            raise InvalidInput(f"profile {profile!r}: only the first rules may have no since")
        if rule.since is not None:
            _aware(rule.since)
            if result and result[-1].since is not None and rule.since <= result[-1].since:
                raise InvalidInput(f"profile {profile!r}: rules out of order at {rule.since}")
        nxt = rules[i + 1].since if i + 1 < len(rules) else None
        result.append(dataclasses.replace(rule, until=nxt))
    return tuple(result)


def _aware(at: _dt.datetime) -> _dt.datetime:
    if not isinstance(at, _dt.datetime) or at.tzinfo is None or at.utcoffset() is None:
        raise InvalidInput(f"an instant must be a timezone-aware datetime, got {at!r}")
    return at


def profile_rules(
    ca: CaProfiles | str, profile: str | None = None, *, at: _dt.datetime
) -> ProfileRules:
    """What ``profile`` at ``ca`` issues at the instant ``at``.

    Args:
        ca: The CA's :class:`CaProfiles`, or its directory URL (Let's Encrypt's
            production and staging directories are known; see
            :func:`~acmecerts.ratelimit.model_for_directory`).
        profile: The profile's name; ``None``: the one the CA issues when an order names
            none (Let's Encrypt: ``classic``).
        at: A timezone-aware instant (e.g. ``clock.now()``, or one in the future to plan).

    Returns:
        The :class:`ProfileRules` in force at ``at``: certificate lifetime, authorization
        reuse, names per order, IP identifiers, order and pending-authorization
        lifetimes, and the instants they took effect and will change.

    Raises:
        InvalidInput: ``at`` is naive, or nothing is known of the CA or of the profile.
    """
    if isinstance(ca, str):
        from acmecerts.ratelimit._model import model_for_directory

        known = model_for_directory(ca).profiles
        if known is None:
            raise InvalidInput(f"no profile rules are known for the CA at {ca}")
        ca = known
    rules = ca.get(profile, _aware(at))
    if rules is None:
        raise InvalidInput(
            f"{ca.name} has no rules for profile {profile!r} at {at.isoformat()} "
            f"(known: {', '.join(ca.profiles)})"
        )
    return rules


# -- Let's Encrypt ---------------------------------------------------------------------------

_DAY = _dt.timedelta(days=1)
_HOUR = _dt.timedelta(hours=1)


def _on(year: int, month: int, day: int) -> _dt.datetime:
    return _dt.datetime(year, month, day, tzinfo=_UTC)


def _lets_encrypt(
    *, tlsserver_45: _dt.datetime, classic_64: _dt.datetime, classic_45: _dt.datetime
) -> dict[str, list[ProfileRules]]:
    """Let's Encrypt's three profiles, with the instants its changes take effect."""
    classic = ProfileRules(
        profile="classic",
        certificate_lifetime=90 * _DAY,
        authorization_reuse=30 * _DAY,
        max_names=100,
        ip_identifiers=False,
        order_lifetime=7 * _DAY,
        pending_authorization_lifetime=7 * _DAY,
    )
    tlsserver = ProfileRules(
        profile="tlsserver",
        certificate_lifetime=90 * _DAY,
        authorization_reuse=7 * _HOUR,
        max_names=25,
        ip_identifiers=False,
        order_lifetime=8 * _HOUR,
        pending_authorization_lifetime=1 * _HOUR,
    )
    shortlived = dataclasses.replace(
        tlsserver, profile="shortlived", certificate_lifetime=160 * _HOUR, ip_identifiers=True
    )
    change = dataclasses.replace
    return {
        "classic": [
            classic,
            change(
                classic,
                since=classic_64,
                certificate_lifetime=64 * _DAY,
                authorization_reuse=10 * _DAY,
            ),
            change(
                classic,
                since=classic_45,
                certificate_lifetime=45 * _DAY,
                authorization_reuse=7 * _HOUR,
            ),
        ],
        "tlsserver": [
            tlsserver,
            change(tlsserver, since=tlsserver_45, certificate_lifetime=45 * _DAY),
        ],
        "shortlived": [shortlived],
    }


#: Let's Encrypt production's profiles (``acme-v02.api.letsencrypt.org``).
LETS_ENCRYPT_PROFILES = CaProfiles(
    "lets-encrypt",
    default="classic",
    timeline=_lets_encrypt(
        tlsserver_45=_on(2026, 5, 13), classic_64=_on(2027, 2, 10), classic_45=_on(2028, 2, 16)
    ),
)

#: Let's Encrypt staging's profiles: production's, each change about a month earlier.
LETS_ENCRYPT_STAGING_PROFILES = CaProfiles(
    "lets-encrypt-staging",
    default="classic",
    timeline=_lets_encrypt(
        tlsserver_45=_on(2026, 4, 13), classic_64=_on(2027, 1, 10), classic_45=_on(2028, 1, 16)
    ),
)
