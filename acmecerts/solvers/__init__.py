"""Challenge solvers: the :class:`Solver` protocol and the built-in solvers.

Each solver's module is imported when one of its names is first used (PEP 562), so a
program that answers http-01 does not pay for dnspython (``dns01``, ~0.1 s) or the
tls-alpn-01 server: ``from acmecerts.solvers import Rfc2136Solver`` works as always, and
type checkers read the imports under ``TYPE_CHECKING`` below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acmecerts._lazy import import_lazily
from acmecerts.solvers._base import ChallengeTask as ChallengeTask
from acmecerts.solvers._base import Solver as Solver

# Type checkers read the public names from these imports ("import X as X" re-exports X);
# ``__all__`` is for run time only, made from ``_LAZY`` below (the solver packages'
# ``__all__`` lists would otherwise be written here a second time).
if TYPE_CHECKING:
    from acmecerts.solvers.dns01 import DnsError as DnsError
    from acmecerts.solvers.dns01 import DnsHookError as DnsHookError
    from acmecerts.solvers.dns01 import DnsHookSolver as DnsHookSolver
    from acmecerts.solvers.dns01 import DnsPersistRecordMissing as DnsPersistRecordMissing
    from acmecerts.solvers.dns01 import DnsPersistSolver as DnsPersistSolver
    from acmecerts.solvers.dns01 import DnsPropagationTimeout as DnsPropagationTimeout
    from acmecerts.solvers.dns01 import DnsProviderError as DnsProviderError
    from acmecerts.solvers.dns01 import DnsRecordLocation as DnsRecordLocation
    from acmecerts.solvers.dns01 import DnsUpdateRefused as DnsUpdateRefused
    from acmecerts.solvers.dns01 import DnsZoneNotFound as DnsZoneNotFound
    from acmecerts.solvers.dns01 import LexiconSolver as LexiconSolver
    from acmecerts.solvers.dns01 import PropagationCheck as PropagationCheck
    from acmecerts.solvers.dns01 import Rfc2136Solver as Rfc2136Solver
    from acmecerts.solvers.http01 import Http01Server as Http01Server
    from acmecerts.solvers.http01 import Http01Webroot as Http01Webroot
    from acmecerts.solvers.http01 import ListenError as ListenError
    from acmecerts.solvers.http01 import WebrootError as WebrootError
    from acmecerts.solvers.tlsalpn01 import TlsAlpn01Server as TlsAlpn01Server

#: Where each solver name is defined; the same names as the imports above (a test checks).
_LAZY: dict[str, str] = {
    "DnsError": "acmecerts.solvers.dns01",
    "DnsHookError": "acmecerts.solvers.dns01",
    "DnsHookSolver": "acmecerts.solvers.dns01",
    "DnsPersistRecordMissing": "acmecerts.solvers.dns01",
    "DnsPersistSolver": "acmecerts.solvers.dns01",
    "DnsPropagationTimeout": "acmecerts.solvers.dns01",
    "DnsProviderError": "acmecerts.solvers.dns01",
    "DnsRecordLocation": "acmecerts.solvers.dns01",
    "DnsUpdateRefused": "acmecerts.solvers.dns01",
    "DnsZoneNotFound": "acmecerts.solvers.dns01",
    "Http01Server": "acmecerts.solvers.http01",
    "Http01Webroot": "acmecerts.solvers.http01",
    "LexiconSolver": "acmecerts.solvers.dns01",
    "ListenError": "acmecerts.solvers.http01",
    "PropagationCheck": "acmecerts.solvers.dns01",
    "Rfc2136Solver": "acmecerts.solvers.dns01",
    "TlsAlpn01Server": "acmecerts.solvers.tlsalpn01",
    "WebrootError": "acmecerts.solvers.http01",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all attribute
    __all__ = sorted(["ChallengeTask", "Solver", *_LAZY])

    def __getattr__(name: str) -> Any:
        """Import a solver's module on first use of one of its names, and keep the name."""
        return import_lazily(globals(), _LAZY, name)


def __dir__() -> list[str]:
    """The public names and whatever this package holds so far."""
    return sorted(set(globals()) | set(_LAZY))
