"""Challenge solvers: the :class:`Solver` protocol and the built-in solvers."""

from acmecerts.solvers._base import ChallengeTask, Solver
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
