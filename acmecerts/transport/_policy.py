"""Where the transport may send requests: :class:`UrlPolicy`, and TLS checks.

Every URL acmecerts requests, except the directory URL the caller gave, comes from the
CA: the directory's resource URLs, ``Location`` headers, the order's authorization,
finalize and certificate URLs, challenge URLs, ``Link: rel="alternate"`` chains and the
ARI ``renewalInfo`` base. A malicious or compromised CA (or a tampered answer) could point
them anywhere: at an intranet service (server-side request forgery with the account's
signed requests), at plain ``http://``, or at a host that logs what it is sent.
The transport therefore checks every URL against a :class:`UrlPolicy` *before* it sends
anything to it, and raises :class:`~acmecerts.errors.UnsafeUrl` instead.

The default policy allows exactly the directory URL's origin (scheme, host and port,
RFC 6454): ``https`` only. CAs that serve some resources from another host (a CDN for
certificates, a separate ARI host) are allowed with ``allowed_origins``::

    AcmeClient(
        "https://acme.example/directory",
        url_policy=UrlPolicy(allowed_origins=["https://certs.cdn.example"]),
    )
"""

from __future__ import annotations

import collections
import contextlib
import logging
import ssl
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from pathlib import Path

import httpx

from acmecerts.errors import (
    AcmeCertsError,
    BadNonce,
    ConnectError,
    ErrorKind,
    InvalidInput,
    RequestTimeout,
    UnsafeUrl,
)
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.transport._reasons import is_unknown_host

__all__ = [
    "BoundUrlPolicy",
    "Origin",
    "UrlPolicy",
    "connect_error",
    "origin_of",
    "ssl_context",
    "trust_hint",
    "warn_if_tls_unverified",
]

log = logging.getLogger("acmecerts.transport")

#: ``(scheme, host, port)``: scheme and host lower-case (IDNA A-labels), port explicit.
Origin = tuple[str, str, int]

_DEFAULT_PORTS = {"https": 443, "http": 80}
#: How many accepted URLs a bound policy remembers (the least recently used goes first):
#: enough for the renewalInfo URLs of a 10,000-certificate fleet besides the hot ones
#: (about half a kilobyte each).
_MAX_ACCEPTED = 16384


def origin_of(url: str) -> Origin:
    """The origin (RFC 6454 §4) of an absolute ``http(s)`` URL.

    Raises:
        InvalidInput: ``url`` is not an absolute http(s) URL with a host.
    """
    return _parse(url)[0]


def _parse(url: str) -> tuple[Origin, httpx.URL]:
    if not isinstance(url, str):
        raise InvalidInput(f"a URL must be a string, got {type(url).__name__}")
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise InvalidInput(f"{url!r} is not a valid URL: {exc}") from None
    scheme = parsed.scheme.lower()
    # raw_host is the IDNA (A-label) form: "bücher.example" and "xn--bcher-kva.example"
    # are one origin.
    host = parsed.raw_host.decode("ascii", "replace").lower().rstrip(".")
    if scheme not in _DEFAULT_PORTS or not host:
        raise InvalidInput(f"{url!r} is not an absolute http(s) URL")
    return (scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]), parsed


def _show(origin: Origin) -> str:
    scheme, host, port = origin
    netloc = f"[{host}]" if ":" in host else host
    return f"{scheme}://{netloc}" + ("" if _DEFAULT_PORTS[scheme] == port else f":{port}")


class UrlPolicy:
    """Which URLs the transport may send requests to.

    A URL is allowed when it is an absolute ``https`` URL without credentials
    (``user:pass@``) whose origin (scheme, host, port) is the directory URL's or one of
    ``allowed_origins``. Host names compare case-insensitively and without a trailing
    dot; ``https://ca.example`` and ``https://ca.example:443`` are the same origin.
    Anything else raises :class:`~acmecerts.errors.UnsafeUrl` before a request is sent.

    Args:
        allowed_origins: further origins to allow besides the directory's, such as
            ``"https://certs.cdn.example"`` or ``"https://ari.ca.example:8443"``; each is
            an ``https`` URL whose path is ignored.
    """

    __slots__ = ("_extra",)

    def __init__(self, *, allowed_origins: Iterable[str] = ()) -> None:
        if isinstance(allowed_origins, str):
            raise InvalidInput("allowed_origins must be a list of origins, not one string")
        extra: list[Origin] = []
        for value in allowed_origins:
            origin = origin_of(value)
            if origin[0] != "https":
                raise InvalidInput(f"allowed origin {value!r} must be https")
            extra.append(origin)
        self._extra: tuple[Origin, ...] = tuple(dict.fromkeys(extra))

    @property
    def allowed_origins(self) -> tuple[str, ...]:
        """The origins allowed besides the directory's, normalised (``https://host[:port]``)."""
        return tuple(_show(o) for o in self._extra)

    def origins(self, directory_url: str | DirectoryUrl) -> tuple[Origin, ...]:
        """Every origin allowed for a CA with this directory URL, the directory's first.

        Raises:
            InvalidInput: ``directory_url`` is no directory URL (see :class:`DirectoryUrl`).
        """
        home = DirectoryUrl(directory_url).origin
        return (home, *(o for o in self._extra if o != home))

    def bind(self, directory_url: str | DirectoryUrl) -> BoundUrlPolicy:
        """This policy for one CA: its origins worked out once (what a transport uses).

        Raises:
            InvalidInput: ``directory_url`` is not an absolute https URL with a host.
        """
        return BoundUrlPolicy(self, directory_url)

    def check(self, url: str, *, directory_url: str) -> str:
        """Return ``url`` if requests may go to it, else raise :class:`UnsafeUrl`.

        Raises:
            UnsafeUrl: not an absolute https URL, carries credentials, or its origin is
                neither the directory's nor an allowed one. Nothing was sent to it.
        """
        self.checked(url, directory_url=directory_url)
        return url

    def checked(self, url: str, *, directory_url: str) -> httpx.URL:
        """Like :meth:`check`, but return the parsed URL (to send the request with).

        This is the method the transport calls (through :meth:`bind`) before every
        request to a new URL; a subclass that narrows the policy overrides this one.
        """
        return self._verdict(url, self.origins(directory_url))

    def _verdict(self, url: str, allowed: tuple[Origin, ...]) -> httpx.URL:
        """``url`` parsed if its origin is one of ``allowed`` (and it is safe), else refuse."""
        try:
            origin, parsed = _parse(url)
        except InvalidInput as exc:
            raise self._refuse(url, f"it is not a usable URL ({exc})", allowed) from None
        if origin[0] != "https":
            raise self._refuse(url, "it is not https", allowed)
        if origin not in allowed:
            raise self._refuse(url, f"its origin {_show(origin)} is not allowed", allowed)
        if parsed.userinfo:
            raise self._refuse(url, "it carries credentials (user:password@)", allowed)
        return parsed

    def allows(self, url: str, *, directory_url: str) -> bool:
        """Whether :meth:`check` would accept ``url``."""
        try:
            self.check(url, directory_url=directory_url)
        except UnsafeUrl:
            return False
        return True

    @staticmethod
    def _refuse(url: object, reason: str, allowed: tuple[Origin, ...]) -> UnsafeUrl:
        shown = ", ".join(_show(o) for o in allowed)
        return UnsafeUrl(
            f"refusing to send a request to {str(url)[:200]!r}: {reason} (allowed: {shown}; "
            "pass url_policy=UrlPolicy(allowed_origins=[...]) if the CA really serves it)",
            url=str(url)[:2000],
            allowed_origins=tuple(_show(o) for o in allowed),
        )

    def __repr__(self) -> str:
        return f"UrlPolicy(allowed_origins={list(self.allowed_origins)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UrlPolicy):
            return NotImplemented
        return self._extra == other._extra

    def __hash__(self) -> int:
        return hash(self._extra)


class BoundUrlPolicy:
    """A :class:`UrlPolicy` bound to one CA's directory URL (:meth:`UrlPolicy.bind`).

    The allowed origins are worked out once, and each accepted URL is parsed once (an
    order URL is polled many times; parsing is a good part of a request's CPU). The memo
    keeps the :data:`_MAX_ACCEPTED` most recently used URLs: a full memo forgets the
    least recently used one, never the hot ones (the directory's). A subclass's
    :meth:`UrlPolicy.checked` is still asked for every new URL.
    """

    __slots__ = ("_accepted", "_narrowed", "directory_url", "origins", "policy")

    def __init__(self, policy: UrlPolicy, directory_url: str | DirectoryUrl) -> None:
        #: The policy bound.
        self.policy = policy
        #: The CA's directory URL it is bound to.
        self.directory_url = directory_url = DirectoryUrl(directory_url)
        #: Every origin allowed, the directory's first.
        self.origins = policy.origins(directory_url)
        self._narrowed = type(policy).checked is not UrlPolicy.checked
        self._accepted: collections.OrderedDict[str, httpx.URL] = collections.OrderedDict()

    def checked(self, url: str) -> httpx.URL:
        """``url`` parsed if requests may go to it, else raise :class:`UnsafeUrl`."""
        accepted = self._accepted
        parsed = accepted.get(url)
        if parsed is not None:
            accepted.move_to_end(url)  # the most recently used: last in the order
            return parsed
        if self._narrowed:
            parsed = self.policy.checked(url, directory_url=self.directory_url)
        else:
            parsed = self.policy._verdict(url, self.origins)
        if len(accepted) >= _MAX_ACCEPTED:
            accepted.popitem(last=False)  # the least recently used
        accepted[url] = parsed
        return parsed

    def __repr__(self) -> str:
        return f"BoundUrlPolicy({self.policy!r}, {self.directory_url!r})"


def warn_if_tls_unverified(client: httpx.AsyncClient) -> bool:
    """Log a warning when a caller-supplied client does not verify the CA's certificate.

    acmecerts itself never turns TLS verification off (it has no option to); a ready
    ``httpx.AsyncClient`` passed as ``client=`` is used as it is, so this best-effort check
    makes ``verify=False`` there loud rather than silent. Returns whether it warned.
    """
    transport = getattr(client, "_transport", None)
    pool = getattr(transport, "_pool", None)
    context = getattr(pool, "_ssl_context", None)
    if not isinstance(context, ssl.SSLContext):
        return False
    if context.verify_mode == ssl.CERT_NONE or not context.check_hostname:
        log.warning(
            "TLS VERIFICATION OF THE ACME SERVER IS OFF: the httpx client passed to "
            "acmecerts does not verify certificates or host names, so anyone on the path "
            "can impersonate the CA. Use such a client for local tests only."
        )
        return True
    return False


#: How the error for a server certificate that does not verify says to trust a private
#: CA: by this library's ``ca_bundle`` argument, unless :func:`trust_hint` says otherwise.
_TRUST_HINT: ContextVar[str] = ContextVar(
    "acmecerts_trust_hint", default="pass ca_bundle= to trust a private CA"
)


@contextlib.contextmanager
def trust_hint(hint: str) -> Iterator[None]:
    """Within the block, the error for a server certificate that does not verify ends
    with ``hint`` instead of naming ``ca_bundle=`` (a command line names its option).

    A context variable: it holds for the tasks and worker threads started inside the block.
    """
    token = _TRUST_HINT.set(hint)
    try:
        yield
    finally:
        _TRUST_HINT.reset(token)


def retry_reporter(max_attempts: int) -> Callable[[int, AcmeCertsError, float], None]:
    """An ``on_retry`` for :func:`~acmecerts.retry.retry_request` that logs, at once, a
    connection that failed (a warning naming the address) and what happens next."""
    failures = 0

    def on_retry(calls: int, error: AcmeCertsError, delay: float) -> None:
        nonlocal failures
        if isinstance(error, BadNonce):
            return
        failures += 1
        if isinstance(error, ConnectError | RequestTimeout) and not error.reached_ca:
            log.warning(
                "%s; trying again in %.1f s (attempt %d of %d; then it gives up)",
                error,
                delay,
                failures + 1,
                max_attempts,
            )
        else:  # the CA answered, or may have: a wait it asked for, or a backoff (-v)
            why = "the CA's Retry-After" if error.retry_after is not None else "backoff"
            log.info(
                "%s; waiting %.1f s before trying again (%s; attempt %d of %d)",
                error,
                delay,
                why,
                failures + 1,
                max_attempts,
            )

    return on_retry


def connect_error(url: str, exc: BaseException) -> ConnectError:
    """The :class:`~acmecerts.errors.ConnectError` for a failed connection to ``url``.

    A TLS failure says so. A certificate that does not verify is *permanent* (retrying
    does not make an untrusted server trustworthy) and the message says how to trust a
    private CA (``ca_bundle``, or :func:`trust_hint`'s words): verification itself cannot be
    switched off.
    """
    cause: BaseException | None = exc
    for _ in range(10):
        if cause is None:
            break
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = cause.verify_message or cause.reason or str(cause)
            return ConnectError(
                f"TLS certificate verification of {url} failed ({reason}): the server is not "
                f"the CA it claims to be, or its CA is not trusted; {_TRUST_HINT.get()}",
                url=url,
                reached_ca=False,
                kind=ErrorKind.PERMANENT,
            )
        if isinstance(cause, ssl.SSLError):
            message = f"TLS handshake with {url} failed: {cause.reason or cause}"
            return ConnectError(message, url=url, reached_ca=False)
        cause = cause.__cause__ or cause.__context__
    if is_unknown_host(exc):
        host = httpx.URL(url).host
        return ConnectError(
            f"cannot connect to {url}: unknown host {host}",
            url=url,
            reached_ca=False,
            unknown_host=host,
        )
    return ConnectError(f"cannot connect to {url}: {exc}", url=url, reached_ca=False)


def ssl_context(ca_bundle: str | Path | None) -> ssl.SSLContext:
    """A TLS context verifying the CA (chain and host name), trusting ``ca_bundle`` too."""
    # Verification is always on: certificate chain and host name (there is no option to
    # turn it off; a caller-supplied ``client`` that does is warned about loudly).
    ctx = ssl.create_default_context()
    if ca_bundle is not None:
        try:
            ctx.load_verify_locations(cafile=str(ca_bundle))
        except (OSError, ssl.SSLError) as exc:
            raise InvalidInput(f"cannot load CA bundle {ca_bundle}: {exc}") from exc
    return ctx
