"""ACME Renewal Information (ARI, RFC 9773): certIDs, renewal times, no I/O.

The client fetches ``GET {renewalInfo}/{certID}`` (RFC 9773 §4.1) and hands the answer to
this module, which says *what* it means:

* :func:`cert_id` computes the certificate identifier of §4.1 (also the value of
  ``replaces`` in ``newOrder``, §5);
* :func:`ari_retry_after` turns the answer's ``Retry-After`` into the instant of the next
  fetch, bounded as §4.3.2 recommends and defaulting as §4.3.3 does;
* :func:`choose_renewal_time` picks the renewal instant in the suggested window (§4.2);
* :func:`fallback_renewal_time` is the schedule when the CA has no ARI: when a third of
  the lifetime is left, or half of it for a certificate of under 10 days
  (:func:`renewal_fraction_for`, as Let's Encrypt's integration guide, certbot 4 and lego's
  ``--dynamic`` do);
* :func:`decide_renewal` combines them into a :class:`RenewalDecision`;
* :func:`replacement_requested` says when the CA asks for a replacement now (a window
  moved into the past: a mass revocation or an incident);
* :func:`replaces_refused` says when a ``newOrder`` that carried ``replaces`` was refused
  because of it, so that the renewal is ordered once more without it.

Instants are timezone-aware UTC ``datetime`` objects; randomness comes from an injected
``random.Random`` so that schedules are reproducible in tests.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import random
from typing import Literal

from cryptography import x509
from cryptography.utils import CryptographyDeprecationWarning

from acmecerts.errors import AcmeProblem, ErrorKind, InvalidInput, ProblemType
from acmecerts.protocol.resources import RenewalInfo

__all__ = [
    "ARI_DEFAULT_RETRY",
    "ARI_MAX_RETRY",
    "ARI_MIN_RETRY",
    "SHORT_LIFETIME",
    "RenewalDecision",
    "RenewalInfoResult",
    "ReplacementReason",
    "ari_retry_after",
    "cert_id",
    "certificate_lifetime",
    "choose_renewal_time",
    "decide_renewal",
    "fallback_renewal_time",
    "load_certificate",
    "renewal_fraction_for",
    "renewal_info_url",
    "replacement_requested",
    "replaces_refused",
]

#: RFC 9773 §4.3.2: a ``Retry-After`` under one minute is treated as one minute...
ARI_MIN_RETRY = _dt.timedelta(minutes=1)
#: ...and one over six hours as six hours. The RFC's example cap is a day; ours is
#: tighter because a CA announces a mass revocation through ARI (it moves the windows
#: into the past) and Let's Encrypt may have to revoke within a day, so every
#: certificate is checked at least four times a day whatever the answer said.
ARI_MAX_RETRY = _dt.timedelta(hours=6)
#: RFC 9773 §4.3.3: with no (valid) ``Retry-After``, fetch again after six hours.
ARI_DEFAULT_RETRY = _dt.timedelta(hours=6)

#: A certificate valid for less than this is short-lived: renewed with half its lifetime
#: left instead of a third (:func:`renewal_fraction_for`).
SHORT_LIFETIME = _dt.timedelta(days=10)
#: RFC 5280 §4.1.2.5: the validity period includes both notBefore and notAfter, so a
#: CA's "10-day" certificate has notAfter = notBefore + 10 days - 1 second.
_LAST_SECOND = _dt.timedelta(seconds=1)

_SYSTEM_RANDOM = random.SystemRandom()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _serial_content_octets(serial: int) -> bytes:
    """The content octets of the DER INTEGER ``serial``: minimal two's complement.

    A positive serial whose high bit is set gets a leading ``0x00`` (``0x87654321`` is
    ``00 87 65 43 21``); zero is one ``0x00`` octet.
    """
    magnitude = serial if serial >= 0 else ~serial
    return serial.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


def cert_id(certificate: x509.Certificate) -> str:
    """The ARI certificate identifier of ``certificate`` (RFC 9773 §4.1).

    ``base64url(AKI keyIdentifier) "." base64url(serial)``, both without padding, where
    the serial is the DER encoding's content octets (so it may start with ``0x00``).

    >>> cert_id(cert)  # doctest: +SKIP
    'aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE'

    Raises:
        InvalidInput: the certificate has no Authority Key Identifier with a
            keyIdentifier, so it has no certID.
    """
    try:
        aki = certificate.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier)
    except x509.ExtensionNotFound as exc:
        raise InvalidInput(
            "the certificate has no Authority Key Identifier extension, so it has no ARI "
            "certID (RFC 9773 §4.1)"
        ) from exc
    except (ValueError, x509.DuplicateExtension, CryptographyDeprecationWarning) as exc:
        # cryptography parses extensions lazily: a malformed or repeated one surfaces here.
        raise InvalidInput(f"the certificate's extensions do not parse: {exc}") from exc
    key_id = aki.value.key_identifier
    if not key_id:
        raise InvalidInput(
            "the certificate's Authority Key Identifier has no keyIdentifier, so it has no "
            "ARI certID (RFC 9773 §4.1)"
        )
    # RFC 9773 §4.1: the keyIdentifier field of the AKI extension, and the DER-encoded
    # serialNumber "not including the type and length bytes", each base64url without "=".
    return f"{_b64url(key_id)}.{_b64url(_serial_content_octets(certificate.serial_number))}"


def load_certificate(certificate: x509.Certificate | str | bytes) -> x509.Certificate:
    """A certificate object, PEM text (a chain: its first certificate) or DER bytes.

    Raises:
        InvalidInput: the data is not a certificate.
    """
    if isinstance(certificate, x509.Certificate):
        return certificate
    data = certificate.encode("ascii", "replace") if isinstance(certificate, str) else certificate
    try:
        if b"-----BEGIN" in data:
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except (ValueError, x509.InvalidVersion, CryptographyDeprecationWarning) as exc:
        raise InvalidInput(f"not a PEM or DER certificate: {exc}") from exc


def renewal_info_url(renewal_info: str, certid: str) -> str:
    """``{renewalInfo}/{certID}`` (RFC 9773 §4.1), one slash between them."""
    return f"{renewal_info.rstrip('/')}/{certid}"


def ari_retry_after(retry_after: _dt.datetime | None, *, now: _dt.datetime) -> _dt.datetime:
    """When to fetch renewalInfo again, from the answer's ``Retry-After`` instant.

    RFC 9773 §4.3.2: clients set limits on the checking interval: under one minute
    counts as one minute, over six hours as six hours (:data:`ARI_MIN_RETRY`,
    :data:`ARI_MAX_RETRY`; the RFC's example cap is a day, see there why ours is
    shorter). §4.3.3: a missing or invalid ``Retry-After`` is a long-term
    error; fetch again after six hours (:data:`ARI_DEFAULT_RETRY`).
    """
    if retry_after is None:
        return now + ARI_DEFAULT_RETRY
    delay = retry_after - now
    return now + min(max(delay, ARI_MIN_RETRY), ARI_MAX_RETRY)


def choose_renewal_time(
    info: RenewalInfo, *, now: _dt.datetime, rng: random.Random | None = None
) -> _dt.datetime:
    """The instant to renew at, per RFC 9773 §4.2's recommended algorithm.

    A uniformly random instant within the suggested window, or ``now`` when that instant
    is already past (a window that is over, or the past part of an open window: renew
    immediately). ``rng`` defaults to the system's entropy source.
    """
    rng = rng or _SYSTEM_RANDOM
    span = info.window_end - info.window_start
    chosen = info.window_start + span * rng.random()
    return chosen if chosen > now else now


def certificate_lifetime(not_before: _dt.datetime, not_after: _dt.datetime) -> _dt.timedelta:
    """The validity period from ``not_before`` to ``not_after``, both included.

    RFC 5280 §4.1.2.5 counts the notAfter second itself, so Let's Encrypt's (and
    Pebble's) 160-hour certificate, whose notAfter is notBefore + 160 h - 1 s, lasts
    exactly 160 hours here.

    Raises:
        InvalidInput: ``not_after`` is not after ``not_before``.
    """
    if not_after <= not_before:
        raise InvalidInput(f"not_after {not_after} is not after not_before {not_before}")
    return not_after - not_before + _LAST_SECOND


def renewal_fraction_for(lifetime: _dt.timedelta) -> float:
    """The part of its lifetime a certificate has left when it is renewed without ARI.

    One third (a 90-day certificate: 30 days before expiry; 45 days: 15 days before),
    or one half when the lifetime is under :data:`SHORT_LIFETIME` (10 days; a 160-hour
    certificate: 80 hours before expiry). This is Let's Encrypt's integration guide,
    certbot 4's default and lego's ``--dynamic``. A lifetime of exactly 10 days gets a
    third. Use :func:`certificate_lifetime` for a certificate's ``lifetime``.

    Raises:
        InvalidInput: ``lifetime`` is not positive.
    """
    if lifetime <= _dt.timedelta(0):
        raise InvalidInput(f"a certificate's lifetime must be positive, got {lifetime}")
    return 1 / 2 if lifetime < SHORT_LIFETIME else 1 / 3


def fallback_renewal_time(
    not_before: _dt.datetime, not_after: _dt.datetime, *, fraction: float | None = None
) -> _dt.datetime:
    """When the certificate is renewed without ARI: ``fraction`` of its lifetime left.

    ``fraction`` ``None`` (the default) is :func:`renewal_fraction_for` of the lifetime: a
    90-day certificate is renewed 30 days before expiry, a 160-hour one 80 hours before.
    A ``fraction`` given (``CertificateManager(renewal_fraction=...)``) applies to every
    lifetime. The instant is ``not_after - (not_after - not_before) * fraction``.

    Raises:
        InvalidInput: ``not_after`` is not after ``not_before``, or ``fraction`` is not
            strictly between 0 and 1.
    """
    lifetime = certificate_lifetime(not_before, not_after)
    if fraction is None:
        fraction = renewal_fraction_for(lifetime)
    elif not 0 < fraction < 1:
        raise InvalidInput(f"fraction must be between 0 and 1 (exclusive), got {fraction!r}")
    return not_after - (not_after - not_before) * fraction


@dataclasses.dataclass(frozen=True, slots=True)
class RenewalInfoResult:
    """One answer of the CA's ``renewalInfo`` resource for one certificate (RFC 9773 §4.2).

    ``retry_after`` is already bounded and defaulted (see :func:`ari_retry_after`).
    """

    #: The suggested window and explanation.
    info: RenewalInfo
    #: When to fetch renewalInfo for this certificate again (aware UTC).
    retry_after: _dt.datetime
    #: The certificate's ARI identifier; pass it as ``replaces`` when renewing.
    cert_id: str
    #: The URL fetched.
    url: str

    @property
    def window_start(self) -> _dt.datetime:
        """Start of the suggested renewal window."""
        return self.info.window_start

    @property
    def window_end(self) -> _dt.datetime:
        """End of the suggested renewal window."""
        return self.info.window_end

    @property
    def explanation_url(self) -> str | None:
        """A page explaining the window (e.g. a mass-revocation notice), if the CA gave one."""
        return self.info.explanation_url

    def renewal_time(self, *, now: _dt.datetime, rng: random.Random | None = None) -> _dt.datetime:
        """A renewal instant chosen in the window (see :func:`choose_renewal_time`)."""
        return choose_renewal_time(self.info, now=now, rng=rng)


@dataclasses.dataclass(frozen=True, slots=True)
class RenewalDecision:
    """When to renew a certificate, and when to ask the CA again."""

    #: When to attempt renewal (aware UTC); ``now`` or earlier means at once.
    renew_at: _dt.datetime
    #: When to fetch renewalInfo again (``None``: the CA has no ARI).
    recheck_at: _dt.datetime | None
    #: ``"ari"`` (chosen in the CA's window) or ``"fallback"`` (:func:`fallback_renewal_time`).
    source: Literal["ari", "fallback"]
    #: The CA's explanation of the window, if any.
    explanation_url: str | None = None

    def due(self, now: _dt.datetime) -> bool:
        """Whether renewal should be attempted at ``now``."""
        return now >= self.renew_at


def decide_renewal(
    *,
    not_before: _dt.datetime,
    not_after: _dt.datetime,
    now: _dt.datetime,
    renewal_info: RenewalInfoResult | None = None,
    rng: random.Random | None = None,
    fraction: float | None = None,
) -> RenewalDecision:
    """Decide when to renew a certificate valid from ``not_before`` to ``not_after``.

    With the CA's ``renewal_info`` the renewal instant is chosen in its window (RFC 9773
    §4.2) and the next check is its ``retry_after``; a scheduler that wakes at
    ``recheck_at`` fetches again and decides anew (the window may move). Without it
    (the CA has no ``renewalInfo``, or fetching failed) the fallback is
    :func:`fallback_renewal_time`: a third of the lifetime left, half of it under 10
    days, or ``fraction`` of it when one is given. The CA's window always wins over
    both: ``fraction`` only applies without ARI.
    """
    if renewal_info is not None:
        return RenewalDecision(
            renew_at=choose_renewal_time(renewal_info.info, now=now, rng=rng),
            recheck_at=renewal_info.retry_after,
            source="ari",
            explanation_url=renewal_info.explanation_url,
        )
    fallback = fallback_renewal_time(not_before, not_after, fraction=fraction)
    return RenewalDecision(
        renew_at=fallback if fallback > now else now, recheck_at=None, source="fallback"
    )


#: Why the CA asks for a replacement now (:func:`replacement_requested`):
#: ``"window-passed"``: the suggested window ends at or before now (RFC 9773 §4.2: renew
#: immediately); ``"window-moved"``: the window was moved earlier since the last answer
#: and has started already.
ReplacementReason = Literal["window-passed", "window-moved"]


def replacement_requested(
    info: RenewalInfo, *, now: _dt.datetime, previous: RenewalInfo | None = None
) -> ReplacementReason | None:
    """Whether the CA asks for this certificate to be replaced at once, and why.

    A CA that must revoke certificates early (a mass revocation, a compliance incident)
    says so through ARI: it moves their windows into the past (RFC 9773 §4.2). That is
    ``"window-passed"`` when the window's end is at or before ``now``, and
    ``"window-moved"`` when the window starts at or before ``now`` and starts earlier
    than the ``previous`` answer for the same certificate did. A window that merely
    opened as time went by (same start as before, or no earlier answer) is the routine
    schedule: ``None``, and the renewal instant is drawn in it as usual.
    """
    if info.window_end <= now:
        return "window-passed"
    if (
        previous is not None
        and info.window_start < previous.window_start
        and info.window_start <= now
    ):
        return "window-moved"
    return None


def replaces_refused(error: BaseException, *, new_order_url: str) -> bool:
    """Whether ``error`` is the CA refusing a ``newOrder`` that carried ``replaces``.

    RFC 9773 §5 lets the CA reject a ``replaces`` it does not accept; CAs say so in
    several ways, and Pebble 2.10 uses all of these: ``409 alreadyReplaced`` (the
    certificate has a replacement already), ``403 unauthorized`` (another account
    ordered it, e.g. after the account key was replaced by a new account), ``400
    malformed`` (a certID of an issuer it does not know) and ``500 serverInternal`` (a
    certID whose serial it has no order for). Any problem document the CA sends in
    answer to ``newOrder`` counts, except the ones that are not about the request's
    content: ``rateLimited`` and a 503 (the CA is busy; ordering again at once would
    only add load) and ``badNonce`` (replayed by the transport). The caller orders once
    more without ``replaces``; if that fails too the failure is an ordinary one, retried
    on the attempt schedule (with ``replaces`` again: the CA may accept it by then).
    """
    if not isinstance(error, AcmeProblem) or error.url != new_order_url:
        return False
    if error.kind in (ErrorKind.RATE_LIMITED, ErrorKind.SERVER_BUSY):
        return False
    return error.status_code != 503 and error.type != ProblemType.BAD_NONCE
