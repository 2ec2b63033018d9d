"""Let's Encrypt's certificate profiles, their lifetimes and authorization reuse over time.

Let's Encrypt announced (December 2025, "Decreasing Certificate Lifetimes to 45 Days")
that the default ``classic`` profile's certificates shrink from 90 days to 64 days on
2027-02-10 and to 45 days on 2028-02-16, with authorization reuse cut to 10 days and
then 7 hours on the same dates; ``tlsserver`` has issued 45-day certificates since 2025
and ``shortlived`` 160-hour ones (the only profile that allows IP addresses). A
:class:`Profile` is a list of :class:`Era` s; the era in force when an order is created
sets its certificate's lifetime and which earlier authorizations it may reuse.

The reuse values of ``tlsserver`` and ``shortlived`` (7 hours) are this simulation's
reading of the same announcement; change them with :func:`lets_encrypt_profiles`'
result, which is plain data.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt

__all__ = ["Era", "Profile", "lets_encrypt_profiles"]


@dataclasses.dataclass(frozen=True, slots=True)
class Era:
    """From ``since`` on: certificates of ``lifetime``, authorizations reused ``reuse``."""

    since: _dt.datetime
    lifetime: _dt.timedelta
    reuse: _dt.timedelta


@dataclasses.dataclass(frozen=True, slots=True)
class Profile:
    """One profile the directory offers (``meta.profiles``)."""

    name: str
    description: str
    eras: tuple[Era, ...]
    #: Whether IP address identifiers are allowed.
    allows_ip: bool = False
    #: The most identifiers one order may name.
    max_names: int = 100

    def era(self, instant: _dt.datetime) -> Era:
        """The era in force at ``instant`` (the first one before it began)."""
        current = self.eras[0]
        for era in self.eras:
            if era.since <= instant:
                current = era
        return current


_EPOCH = _dt.datetime(2015, 1, 1, tzinfo=_dt.UTC)
#: The 64-day step of the ``classic`` profile.
CLASSIC_64_DAYS = _dt.datetime(2027, 2, 10, tzinfo=_dt.UTC)
#: The 45-day step of the ``classic`` profile.
CLASSIC_45_DAYS = _dt.datetime(2028, 2, 16, tzinfo=_dt.UTC)


def lets_encrypt_profiles() -> dict[str, Profile]:
    """Let's Encrypt's three profiles, with their dated steps; ``classic`` first."""
    days = _dt.timedelta(days=1)
    hours = _dt.timedelta(hours=1)
    return {
        "classic": Profile(
            "classic",
            "The same profile you're accustomed to",
            (
                Era(_EPOCH, 90 * days, 30 * days),
                Era(CLASSIC_64_DAYS, 64 * days, 10 * days),
                Era(CLASSIC_45_DAYS, 45 * days, 7 * hours),
            ),
        ),
        "tlsserver": Profile(
            "tlsserver",
            "A leaner profile: 45-day certificates, TLS server authentication only",
            (Era(_EPOCH, 45 * days, 7 * hours),),
        ),
        "shortlived": Profile(
            "shortlived",
            "160-hour certificates; IP addresses allowed",
            (Era(_EPOCH, 160 * hours, 7 * hours),),
            allows_ip=True,
        ),
    }
