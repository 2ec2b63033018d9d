"""Egress proxies: which proxy each request goes through, from the environment or the caller.

Many networks reach the outside only through an HTTP proxy. acmecerts honours the same
environment variables as curl and httpx, by default:

* ``HTTPS_PROXY`` / ``https_proxy``: the proxy for ``https://`` URLs (every ACME request);
* ``HTTP_PROXY`` / ``http_proxy``: the proxy for ``http://`` URLs (the upper-case form is
  ignored when ``REQUEST_METHOD`` is set, i.e. under CGI, where a client could set it);
* ``ALL_PROXY`` / ``all_proxy``: the proxy for either when the one above is not set;
* ``NO_PROXY`` / ``no_proxy``: the hosts reached directly (see :class:`ProxyConfig`).

The lower-case form wins when both are set, and an empty value counts as unset. A proxy
URL is ``http://[USER:PASSWORD@]HOST[:PORT]`` (``HOST:PORT`` alone means ``http://``);
the user name and password are percent-decoded and sent as ``Proxy-Authorization:
Basic``. An ``https://`` URL is tunnelled through the proxy with ``CONNECT host:port``,
so TLS runs end to end between acmecerts and the CA and the proxy sees only the host
name and port; a plain ``http://`` URL is sent to the proxy in absolute form.

Only ``http://`` proxies are supported (not TLS to the proxy itself, not SOCKS): any
other scheme is :class:`~acmecerts.errors.InvalidInput`, naming where it came from.
Credentials never appear in an error message, a log line or a ``repr``.
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

import httpx

from acmecerts.errors import InvalidInput, ProxyError
from acmecerts.transport._policy import origin_of

__all__ = [
    "ProxyConfig",
    "ProxyFailed",
    "ProxyRouter",
    "ProxySetting",
    "proxy_error",
    "resolve_proxy",
]

log = logging.getLogger("acmecerts.transport")

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_NETWORK = ipaddress.IPv4Network | ipaddress.IPv6Network
#: How many origins' routes are remembered before the memo starts over.
_MAX_ROUTES = 1024


class ProxyFailed(httpx.ProxyError):
    """The proxy could not be reached, or it refused the tunnel (httpx's contract).

    The transport turns it into :class:`acmecerts.errors.ProxyError`.
    """

    def __init__(self, message: str, *, proxy: str, status_code: int | None = None) -> None:
        super().__init__(message)
        #: The proxy, as ``http://host:port`` (never with credentials).
        self.proxy = proxy
        #: The proxy's answer to ``CONNECT``, when it answered one.
        self.status_code = status_code


@dataclasses.dataclass(frozen=True, slots=True)
class _Proxy:
    """One proxy: where to connect, how to show it, and its credentials (never shown)."""

    host: str
    port: int
    #: ``http://host:port`` without credentials: for messages and logs.
    shown: str
    #: The ``Proxy-Authorization`` header value, if the URL had credentials.
    authorization: bytes | None = dataclasses.field(default=None, repr=False)
    #: The URL with its credentials (for httpx's own proxy support).
    url: str = dataclasses.field(default="", repr=False, compare=False)


def _redacted(value: str) -> str:
    """``value`` with everything before its last ``@`` hidden (credentials), safe to show."""
    if "@" not in value:
        return value
    scheme, sep, _ = value.partition("://")
    tail = value.rsplit("@", 1)[1]
    return f"{scheme}://***@{tail}" if sep else f"***@{tail}"


def _parse_proxy(value: str, *, source: str) -> _Proxy:
    text = value.strip()
    if "://" not in text:
        text = "http://" + text  # as curl and httpx read "proxy.example:3128"
    shown_input = _redacted(text)
    try:
        url = httpx.URL(text)
        port = url.port
    except (httpx.InvalidURL, TypeError, ValueError):
        # (httpx's words may quote the URL, credentials included: not shown)
        raise InvalidInput(f"{source}: {shown_input!r} is not a proxy URL") from None
    scheme = url.scheme.lower()
    if scheme != "http":
        raise InvalidInput(
            f"{source}: only http:// proxies are supported, not {scheme}:// "
            f"({shown_input!r}); the tunnel to the CA is TLS from end to end all the same"
        )
    host = url.raw_host.decode("ascii", "replace").lower().rstrip(".")
    if not host:
        raise InvalidInput(f"{source}: {shown_input!r} names no proxy host")
    port = port if port is not None else 80
    netloc = f"[{host}]" if ":" in host else host
    authorization = None
    if url.username or url.password:
        token = base64.b64encode(f"{url.username}:{url.password}".encode()).decode("ascii")
        authorization = f"Basic {token}".encode("ascii")
    return _Proxy(
        host=host,
        port=port,
        shown=f"http://{netloc}:{port}",
        authorization=authorization,
        url=str(url.copy_with(scheme="http", port=port)),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _Rule:
    """One ``NO_PROXY`` entry: a domain (and its subdomains), an address or a network."""

    domain: str | None = None
    network: _NETWORK | None = None
    port: int | None = None

    def matches(self, host: str, address: _IP | None, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return address is not None and address in self.network
        domain = self.domain
        assert domain is not None
        return host == domain or host.endswith("." + domain)

    def __str__(self) -> str:
        what = str(self.network) if self.network is not None else str(self.domain)
        if self.network is not None and self.network.num_addresses == 1:
            what = str(self.network.network_address)
        if self.port is None:
            return what
        return f"[{what}]:{self.port}" if ":" in what else f"{what}:{self.port}"


def _parse_rule(entry: str) -> _Rule | None:
    """One ``NO_PROXY`` entry (lower-case, stripped), or ``None`` when it is not one."""
    port: int | None = None
    text = entry
    if text.startswith("["):  # [v6] or [v6]:port
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not re.fullmatch(r":\d{1,5}", rest)):
            return None
        text = host
        port = int(rest[1:]) if rest else None
    elif text.count(":") == 1:  # host:port (a bare IPv6 address has several colons)
        host, _, digits = text.partition(":")
        if not re.fullmatch(r"\d{1,5}", digits):
            return None
        text, port = host, int(digits)
    if port is not None and not 0 < port < 65536:
        return None
    if "/" in text:
        try:
            return _Rule(network=ipaddress.ip_network(text, strict=False), port=port)
        except ValueError:
            return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        return _Rule(network=ipaddress.ip_network(address), port=port)
    if text.startswith("*."):
        text = text[1:]
    domain = text.strip(".")
    if not domain.isascii():  # an internationalised name: compared in its A-label form
        try:
            domain = domain.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    if not re.fullmatch(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*", domain):
        return None
    return _Rule(domain=domain, port=port)


def _parse_no_proxy(value: str | Iterable[str], *, strict: bool) -> tuple[bool, tuple[_Rule, ...]]:
    """``(everything, rules)`` of a ``NO_PROXY`` value; ``strict``: refuse junk entries."""
    if isinstance(value, str):
        entries = value.replace(",", " ").split()
    else:
        entries = [part for item in value for part in str(item).replace(",", " ").split()]
    everything = False
    rules: list[_Rule] = []
    for raw in entries:
        entry = raw.strip().lower()
        if entry == "*":
            everything = True
            continue
        rule = _parse_rule(entry)
        if rule is None:
            if strict:
                raise InvalidInput(
                    f"no_proxy: {raw!r} is neither a host name, a domain (.example.com), an "
                    "IP address, a network (10.0.0.0/8) nor one of those with :PORT"
                )
            continue  # as curl does with the environment: skip what it cannot read
        rules.append(rule)
    return everything, tuple(dict.fromkeys(rules))


def _env(environ: Mapping[str, str], name: str, *, upper: bool = True) -> tuple[str, str] | None:
    """``(variable, value)`` of the first non-empty of ``name`` and ``NAME``."""
    names = (name, name.upper()) if upper else (name,)
    for variable in names:
        value = environ.get(variable, "").strip()
        if value:
            return variable, value
    return None


class ProxyConfig:
    """Which HTTP proxy each request goes through, and which hosts are reached directly.

    ``url`` is the proxy for every request; ``https`` and ``http`` set one per scheme of
    the URL requested (they win over ``url``). Requests to hosts that match ``no_proxy``
    go directly. ACME is ``https`` only, so ``url`` or ``https`` is the one that matters.

    ``no_proxy`` is a comma- (or space-) separated string or a list, as ``NO_PROXY`` is,
    of entries that each match as curl and httpx match them (host names are compared
    without resolving them, case-insensitively and without a trailing dot):

    * ``*``: every host (no proxy at all);
    * ``example.com``, ``.example.com`` or ``*.example.com``: that host and every name
      below it (``ca.example.com``), not ``badexample.com``;
    * ``127.0.0.1``, ``::1``, ``[::1]``: that IP address (a host given by name is not
      resolved: ``127.0.0.1`` does not match ``localhost``, list both);
    * ``10.0.0.0/8``, ``fd00::/8``: any IP address in that network;
    * any of those with ``:PORT`` (``[::1]:8443`` for IPv6): only on that port.

    Args:
        url: The proxy for requests of every scheme, ``http://[USER:PASSWORD@]HOST:PORT``.
        https: The proxy for ``https://`` URLs (instead of ``url``).
        http: The proxy for ``http://`` URLs (instead of ``url``).
        no_proxy: The hosts to reach directly.

    Raises:
        InvalidInput: a proxy URL that is not ``http://`` with a host, or a ``no_proxy``
            entry that is none of the above.

    :meth:`from_env` reads the same from the environment (``HTTPS_PROXY``, ...).
    """

    __slots__ = ("_everything", "_http", "_https", "_rules")

    def __init__(
        self,
        url: str | None = None,
        *,
        https: str | None = None,
        http: str | None = None,
        no_proxy: str | Iterable[str] = (),
    ) -> None:
        every = _parse_proxy(url, source="proxy") if url else None
        self._https = _parse_proxy(https, source="https proxy") if https else every
        self._http = _parse_proxy(http, source="http proxy") if http else every
        self._everything, self._rules = _parse_no_proxy(no_proxy, strict=True)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProxyConfig:
        """The proxies the environment names (``os.environ`` unless ``environ`` is given).

        Reads ``https_proxy``, ``http_proxy``, ``all_proxy`` and ``no_proxy``, each in
        lower case first, then upper case (see the module's description). Entries of
        ``NO_PROXY`` that cannot be read are skipped, as curl skips them.

        Raises:
            InvalidInput: a proxy variable holds something that is not an ``http://``
                proxy URL (the message names the variable, never its credentials).
        """
        env = os.environ if environ is None else environ
        config = cls.__new__(cls)
        every = _env(env, "all_proxy")
        https = _env(env, "https_proxy") or every
        # httpoxy: under CGI, HTTP_PROXY is the client's "Proxy:" request header
        http = _env(env, "http_proxy", upper="REQUEST_METHOD" not in env) or every
        config._https = _parse_proxy(https[1], source=https[0]) if https else None
        config._http = _parse_proxy(http[1], source=http[0]) if http else None
        no_proxy = _env(env, "no_proxy")
        config._everything, config._rules = _parse_no_proxy(
            no_proxy[1] if no_proxy else "", strict=False
        )
        return config

    @property
    def https(self) -> str | None:
        """The proxy for ``https://`` URLs as ``http://host:port`` (no credentials), if any."""
        return self._https.shown if self._https is not None else None

    @property
    def http(self) -> str | None:
        """The proxy for ``http://`` URLs as ``http://host:port`` (no credentials), if any."""
        return self._http.shown if self._http is not None else None

    @property
    def no_proxy(self) -> tuple[str, ...]:
        """The ``no_proxy`` entries understood, normalised (``*`` first when present)."""
        rules = tuple(str(rule) for rule in self._rules)
        return ("*", *rules) if self._everything else rules

    def proxy_for(self, url: str | httpx.URL) -> str | None:
        """The proxy a request to ``url`` goes through (``http://host:port``), or ``None``.

        Raises:
            InvalidInput: ``url`` is not an absolute http(s) URL.
        """
        proxy = self.route(*origin_of(str(url)))
        return proxy.shown if proxy is not None else None

    def route(self, scheme: str, host: str, port: int) -> _Proxy | None:
        """The proxy for ``scheme://host:port`` (``host``: ASCII), ``None`` for direct."""
        proxy = self._https if scheme == "https" else self._http if scheme == "http" else None
        if proxy is None or self._everything:
            return None
        host = host.lower().rstrip(".")
        if host.startswith("["):
            host = host[1:-1]
        try:
            address: _IP | None = ipaddress.ip_address(host)
        except ValueError:
            address = None
        for rule in self._rules:
            if rule.matches(host, address, port):
                return None
        return proxy

    def _decide(self, scheme: str, host: str, port: int) -> _Proxy | None:
        """:meth:`route`, logged (the pools call it once per origin)."""
        proxy = self.route(scheme, host, port)
        shown = f"[{host}]" if ":" in host else host
        if proxy is None:
            log.debug("%s://%s:%d: directly (no proxy for it)", scheme, shown, port)
        else:
            log.debug("%s://%s:%d: through proxy %s", scheme, shown, port, proxy.shown)
        return proxy

    def __bool__(self) -> bool:
        """Whether any request can go through a proxy."""
        return not self._everything and (self._https is not None or self._http is not None)

    def __repr__(self) -> str:
        parts = []
        if self._https is not None:
            parts.append(f"https={self._https.shown!r}")
        if self._http is not None:
            parts.append(f"http={self._http.shown!r}")
        parts.append(f"no_proxy={list(self.no_proxy)!r}")
        return f"ProxyConfig({', '.join(parts)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProxyConfig):
            return NotImplemented
        return (self._https, self._http, self._everything, self._rules) == (
            other._https,
            other._http,
            other._everything,
            other._rules,
        )

    def __hash__(self) -> int:
        return hash((self._https, self._http, self._everything, self._rules))


#: What ``proxy=`` takes: ``"env"`` (the default: the environment's proxies, read once
#: when the transport is made), a proxy URL for every request, a :class:`ProxyConfig`,
#: or ``None`` (no proxy, whatever the environment says).
ProxySetting = str | ProxyConfig | Literal["env"] | None


def resolve_proxy(
    setting: ProxySetting, environ: Mapping[str, str] | None = None
) -> ProxyConfig | None:
    """The :class:`ProxyConfig` a ``proxy=`` argument asks for; ``None``: direct always.

    Raises:
        InvalidInput: a bad proxy URL, or a value of another type.
    """
    if setting is None:
        return None
    if isinstance(setting, ProxyConfig):
        config = setting
    elif isinstance(setting, str):
        config = ProxyConfig.from_env(environ) if setting == "env" else ProxyConfig(setting)
    else:
        raise InvalidInput(
            'proxy must be "env", a proxy URL (http://host:port), a ProxyConfig or None, '
            f"not {type(setting).__name__}"
        )
    return config if config else None


class ProxyRouter(httpx.AsyncBaseTransport):
    """httpx transports behind a :class:`ProxyConfig`: each request via its proxy or direct.

    ``make(proxy)`` makes the transport for one route (``proxy=None``: direct), once per
    route. A proxy that refuses the tunnel raises :class:`ProxyFailed`; a connection that
    fails through a proxy names it.
    """

    def __init__(
        self,
        config: ProxyConfig,
        make: Callable[[httpx.Proxy | None], httpx.AsyncBaseTransport],
    ) -> None:
        self.config = config
        self._make = make
        self._routes: dict[tuple[str, str, int], _Proxy | None] = {}
        self._transports: dict[_Proxy | None, httpx.AsyncBaseTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the transport of its route."""
        url = request.url
        scheme = url.scheme
        port = url.port or (443 if scheme == "https" else 80)
        origin = (scheme, url.raw_host.decode("ascii", "replace"), port)
        if origin in self._routes:
            proxy = self._routes[origin]
        else:
            if len(self._routes) >= _MAX_ROUTES:
                self._routes.clear()
            proxy = self._routes[origin] = self.config._decide(*origin)
        transport = self._transports.get(proxy)
        if transport is None:
            shape = None if proxy is None else httpx.Proxy(proxy.url)
            transport = self._transports[proxy] = self._make(shape)
        if proxy is None:
            return await transport.handle_async_request(request)
        try:
            return await transport.handle_async_request(request)
        except ProxyFailed:
            raise
        except httpx.ProxyError as exc:
            # httpcore says "407 Proxy Authentication Required" and the like
            found = re.match(r"\s*(\d{3})\b", str(exc))
            status = int(found.group(1)) if found else None
            raise ProxyFailed(
                f"proxy {proxy.shown} refused CONNECT {origin[1]}:{port}: {exc}"
                + _hint(status, proxy),
                proxy=proxy.shown,
                status_code=status,
            ) from exc
        except httpx.ConnectTimeout as exc:
            raise httpx.ConnectTimeout(
                f"{exc} (through proxy {proxy.shown})", request=request
            ) from exc
        except httpx.ConnectError as exc:
            raise httpx.ConnectError(
                f"{exc} (through proxy {proxy.shown})", request=request
            ) from exc

    async def aclose(self) -> None:
        """Close every route's transport."""
        transports, self._transports = list(self._transports.values()), {}
        for transport in transports:
            await transport.aclose()


def _hint(status: int | None, proxy: _Proxy) -> str:
    """What to do about a proxy's refusal, in words (never with the credentials)."""
    if status in (401, 407):  # 407, or 401 from some proxies (tinyproxy) for wrong ones
        if proxy.authorization is None:
            return (
                " (the proxy wants credentials: put them in the proxy URL, "
                "http://USER:PASSWORD@host:port)"
            )
        return " (the proxy refused the credentials in the proxy URL)"
    if status == 403:
        return " (the proxy does not allow this destination or port)"
    return ""


def proxy_error(url: str, exc: httpx.ProxyError) -> ProxyError:
    """The :class:`~acmecerts.errors.ProxyError` for a proxy that failed a request to ``url``."""
    if isinstance(exc, ProxyFailed):
        return ProxyError(
            f"{exc} (requesting {url})", url=url, proxy=exc.proxy, status_code=exc.status_code
        )
    return ProxyError(f"the proxy failed a request to {url}: {exc}", url=url)
