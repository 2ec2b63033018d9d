"""The HTTP transport to an ACME server."""

from acmecerts.transport._h1 import Http11Pool, ResponseTooLarge
from acmecerts.transport._http import USER_AGENT, AcmeResponse, AcmeTransport, RequestHook
from acmecerts.transport._nonces import NoncePool
from acmecerts.transport._policy import UrlPolicy
from acmecerts.transport._proxy import ProxyConfig, ProxyFailed, ProxySetting
from acmecerts.transport._throttle import RequestThrottle, ThrottleStats

__all__ = [
    "USER_AGENT",
    "AcmeResponse",
    "AcmeTransport",
    "Http11Pool",
    "NoncePool",
    "ProxyConfig",
    "ProxyFailed",
    "ProxySetting",
    "RequestHook",
    "RequestThrottle",
    "ResponseTooLarge",
    "ThrottleStats",
    "UrlPolicy",
]
