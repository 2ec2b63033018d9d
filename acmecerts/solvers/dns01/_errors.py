"""The dns-01 errors: :class:`DnsError` and its subclasses (tree in the package docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acmecerts.errors import AcmeCertsError, ErrorKind

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "DnsError",
    "DnsHookError",
    "DnsPersistRecordMissing",
    "DnsPropagationTimeout",
    "DnsProviderError",
    "DnsUpdateRefused",
    "DnsZoneNotFound",
]


class DnsError(AcmeCertsError):
    """A DNS operation for dns-01 failed: no answer, an error answer, or bad data.

    Network failures (no answer in time, connection refused) are ``TRANSIENT``; the
    subclasses say otherwise where retrying cannot help. Nothing was sent to the CA for
    the challenge concerned, so ``reached_ca`` is ``False``.
    """

    kind = ErrorKind.TRANSIENT
    reached_ca = False

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        rcode: str | None = None,
        name: str | None = None,
        kind: ErrorKind | None = None,
    ) -> None:
        super().__init__(message, kind=kind)
        #: ``"HOST:PORT"`` of the DNS server concerned, when there was one.
        self.server = server
        #: The DNS response code (``"REFUSED"``, ``"NOTAUTH"``, ``"BADSIG"``...), if any.
        self.rcode = rcode
        #: The DNS name concerned (no trailing dot), when there was one.
        self.name = name


class DnsUpdateRefused(DnsError):
    """The server answered a dynamic UPDATE with an error.

    ``rcode`` names it: ``REFUSED`` (the key may not update this zone, or no key),
    ``NOTAUTH`` (the server is not authoritative for the zone), ``NOTZONE``, ``SERVFAIL``
    (transient), or a TSIG error: ``BADKEY`` (unknown key name or algorithm), ``BADSIG``
    (wrong secret), ``BADTIME`` (clocks differ by more than the fudge).
    """

    kind = ErrorKind.PERMANENT

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        rcode: str | None = None,
        name: str | None = None,
        zone: str | None = None,
    ) -> None:
        super().__init__(message, server=server, rcode=rcode, name=name)
        #: The zone the update was for.
        self.zone = zone
        if rcode == "SERVFAIL":
            self.kind = ErrorKind.TRANSIENT


class DnsZoneNotFound(DnsError):
    """No zone could be found for a record name (no SOA on the way up to the root)."""

    kind = ErrorKind.PERMANENT


class DnsPropagationTimeout(DnsError):
    """The TXT value was not visible at every checked server before the deadline."""

    def __init__(
        self, message: str, *, name: str, value: str, missing: Sequence[str], timeout: float
    ) -> None:
        super().__init__(message, name=name)
        #: The TXT value that was waited for.
        self.value = value
        #: The servers (``"HOST:PORT"``, or NS names) that did not serve it in time.
        self.missing = tuple(missing)
        #: The configured timeout, in seconds.
        self.timeout = timeout


class DnsHookError(DnsError):
    """A :class:`DnsHookSolver` callable raised, or its command failed or timed out."""

    kind = ErrorKind.PERMANENT

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        returncode: int | None = None,
        stderr: str | None = None,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message, name=name)
        #: The command's exit status (``None`` for callables, or when it did not exit).
        self.returncode = returncode
        #: The tail of the command's standard error.
        self.stderr = stderr
        #: Whether the command was killed because it ran longer than its timeout.
        self.timed_out = timed_out
        if timed_out:
            self.kind = ErrorKind.TRANSIENT


class DnsPersistRecordMissing(DnsError):
    """dns-persist-01: no ``_validation-persist`` TXT record authorizes this CA and account.

    Absent, for another account or issuer, without ``policy=wildcard`` for a wildcard, or
    past its ``persistUntil``. Someone has to publish :attr:`value` at :attr:`name` (the
    message says so); retrying before that cannot help.
    """

    kind = ErrorKind.PERMANENT

    def __init__(self, message: str, *, name: str, value: str, found: Sequence[str]) -> None:
        super().__init__(message, name=name)
        #: The TXT value to publish at :attr:`name` (with the first issuer domain name).
        self.value = value
        #: The TXT values found at :attr:`name`.
        self.found = tuple(found)


class DnsProviderError(DnsError):
    """A :class:`LexiconSolver` call to the DNS provider's API failed.

    ``TRANSIENT`` when the API did not answer (connection refused, timeout), answered 429 or
    a 5xx status; ``PERMANENT`` otherwise (bad credentials, unknown zone, a 4xx answer). The
    message names the provider, the action and the record, never a credential.
    """

    kind = ErrorKind.PERMANENT

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        name: str | None = None,
        status: int | None = None,
        transient: bool = False,
    ) -> None:
        super().__init__(message, name=name)
        #: The lexicon provider name (``"cloudflare"``, ``"route53"``, ``"powerdns"``...).
        self.provider = provider
        #: The HTTP status the provider's API answered, when there was one.
        self.status = status
        if transient:
            self.kind = ErrorKind.TRANSIENT
