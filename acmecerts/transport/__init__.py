"""The HTTP transport to an ACME server."""

from acmecerts.transport._events import (
    RequestSent,
    ResponseHook,
    ResponseReceived,
    Subscriber,
    TransportEvent,
)
from acmecerts.transport._exchange import Answer, HttpExchange, ResponseTooLarge
from acmecerts.transport._http import USER_AGENT, AcmeTransport, RequestHook
from acmecerts.transport._nonces import NoncePool
from acmecerts.transport._policy import UrlPolicy, trust_hint
from acmecerts.transport._pool import Http11Pool
from acmecerts.transport._proxy import ProxyConfig, ProxyFailed, ProxySetting
from acmecerts.transport._response import AcmeResponse
from acmecerts.transport._throttle import RequestThrottle, ThrottleStats
from acmecerts.transport._watch import RequestWatch

__all__ = [
    "USER_AGENT",
    "AcmeResponse",
    "AcmeTransport",
    "Answer",
    "Http11Pool",
    "HttpExchange",
    "NoncePool",
    "ProxyConfig",
    "ProxyFailed",
    "ProxySetting",
    "RequestHook",
    "RequestSent",
    "RequestThrottle",
    "RequestWatch",
    "ResponseHook",
    "ResponseReceived",
    "ResponseTooLarge",
    "Subscriber",
    "ThrottleStats",
    "TransportEvent",
    "UrlPolicy",
    "trust_hint",
]
