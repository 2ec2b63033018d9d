"""Challenge solvers: the :class:`Solver` protocol and the built-in solvers.

Each solver's module is imported when one of its names is first used (PEP 562), so a
program that answers http-01 does not pay for dnspython (``dns01``, ~0.1 s) or the
tls-alpn-01 server: ``from acmecerts.solvers import Rfc2136Solver`` works as always, and
type checkers read the imports under ``TYPE_CHECKING`` below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acmecerts._lazy import import_lazily
from acmecerts.solvers._base import ChallengeTask, Solver

if TYPE_CHECKING:
    from acmecerts.solvers.dns01 import (
        DnsError,
        DnsHookError,
        DnsHookSolver,
        DnsPropagationTimeout,
        DnsRecordLocation,
        DnsUpdateRefused,
        DnsZoneNotFound,
        PropagationCheck,
        Rfc2136Solver,
    )
    from acmecerts.solvers.http01 import Http01Server, Http01Webroot, ListenError, WebrootError
    from acmecerts.solvers.tlsalpn01 import TlsAlpn01Server

__all__ = [
    "ChallengeTask",
    "DnsError",
    "DnsHookError",
    "DnsHookSolver",
    "DnsPropagationTimeout",
    "DnsRecordLocation",
    "DnsUpdateRefused",
    "DnsZoneNotFound",
    "Http01Server",
    "Http01Webroot",
    "ListenError",
    "PropagationCheck",
    "Rfc2136Solver",
    "Solver",
    "TlsAlpn01Server",
    "WebrootError",
]

#: Where each solver name is defined; the same names as the imports above (a test checks).
_LAZY: dict[str, str] = {
    "DnsError": "acmecerts.solvers.dns01",
    "DnsHookError": "acmecerts.solvers.dns01",
    "DnsHookSolver": "acmecerts.solvers.dns01",
    "DnsPropagationTimeout": "acmecerts.solvers.dns01",
    "DnsRecordLocation": "acmecerts.solvers.dns01",
    "DnsUpdateRefused": "acmecerts.solvers.dns01",
    "DnsZoneNotFound": "acmecerts.solvers.dns01",
    "Http01Server": "acmecerts.solvers.http01",
    "Http01Webroot": "acmecerts.solvers.http01",
    "ListenError": "acmecerts.solvers.http01",
    "PropagationCheck": "acmecerts.solvers.dns01",
    "Rfc2136Solver": "acmecerts.solvers.dns01",
    "TlsAlpn01Server": "acmecerts.solvers.tlsalpn01",
    "WebrootError": "acmecerts.solvers.http01",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        """Import a solver's module on first use of one of its names, and keep the name."""
        return import_lazily(globals(), _LAZY, name)


def __dir__() -> list[str]:
    """The public names and whatever this package holds so far."""
    return sorted(set(globals()) | set(__all__))
