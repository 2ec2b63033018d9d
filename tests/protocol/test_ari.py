"""ARI (RFC 9773) without I/O: certIDs, Retry-After bounds, renewal times."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acmecerts.errors import (
    AcmeProblem,
    AlreadyReplaced,
    BadServerResponse,
    InvalidInput,
    ProblemType,
    problem_class,
)
from acmecerts.protocol.ari import (
    ARI_DEFAULT_RETRY,
    ARI_MAX_RETRY,
    ARI_MIN_RETRY,
    SHORT_LIFETIME,
    RenewalInfoResult,
    _serial_content_octets,
    ari_retry_after,
    cert_id,
    certificate_lifetime,
    choose_renewal_time,
    decide_renewal,
    fallback_renewal_time,
    load_certificate,
    renewal_fraction_for,
    renewal_info_url,
    replacement_requested,
    replaces_refused,
)
from acmecerts.protocol.problems import problem_from_document
from acmecerts.protocol.resources import RenewalInfo

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
SECOND = dt.timedelta(seconds=1)
_KEY = ec.generate_private_key(ec.SECP256R1())

# RFC 9773 §4.1, the worked example.
RFC_AKI = bytes.fromhex("69885B6B874640 41E1B37B847BA0AE2CDE01C8D4".replace(" ", ""))
RFC_SERIAL = 0x0087654321
RFC_CERT_ID = "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE"


def make_cert(
    *,
    serial: int = 1,
    aki: x509.AuthorityKeyIdentifier | None = None,
    not_before: dt.datetime = T0,
    lifetime: dt.timedelta = 90 * DAY,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ari.example.test")])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(_KEY.public_key())
        .serial_number(serial)
        .not_valid_before(not_before)
        .not_valid_after(not_before + lifetime)
    )
    if aki is not None:
        builder = builder.add_extension(aki, critical=False)
    return builder.sign(_KEY, hashes.SHA256())


def aki_of(key_id: bytes) -> x509.AuthorityKeyIdentifier:
    return x509.AuthorityKeyIdentifier(key_id, None, None)


def window(start: dt.datetime, end: dt.datetime, url: str | None = None) -> RenewalInfo:
    return RenewalInfo(window_start=start, window_end=end, explanation_url=url)


# -- certID (§4.1) -------------------------------------------------------------------------


def test_cert_id_matches_the_rfc_worked_example() -> None:
    cert = make_cert(serial=RFC_SERIAL, aki=aki_of(RFC_AKI))
    assert cert_id(cert) == RFC_CERT_ID


@pytest.mark.parametrize(
    ("serial", "octets"),
    [
        (0x87654321, "0087654321"),  # high bit set: a leading 0x00 keeps it positive
        (0x7F, "7f"),
        (0x80, "0080"),
        (0xFF, "00ff"),
        (0x0100, "0100"),
        (1, "01"),
        (0, "00"),
        (-1, "ff"),  # not valid in a certificate, but DER two's complement all the same
        (-128, "80"),
        (-129, "ff7f"),
    ],
)
def test_serial_is_minimal_twos_complement(serial: int, octets: str) -> None:
    assert _serial_content_octets(serial).hex() == octets


def test_cert_id_of_a_high_bit_serial_keeps_the_leading_zero() -> None:
    cert = make_cert(serial=0x80FF, aki=aki_of(b"\x01\x02\x03"))
    key_part, serial_part = cert_id(cert).split(".")
    assert key_part == "AQID"
    assert serial_part == "AID_"  # base64url of 00 80 ff, no padding
    assert "=" not in cert_id(cert)


def test_cert_id_needs_an_authority_key_identifier() -> None:
    with pytest.raises(InvalidInput, match="Authority Key Identifier"):
        cert_id(make_cert())


def test_cert_id_needs_the_aki_key_identifier_field() -> None:
    issuer_only = x509.AuthorityKeyIdentifier(None, [x509.DNSName("ca.example.test")], 12345)
    with pytest.raises(InvalidInput, match="keyIdentifier"):
        cert_id(make_cert(aki=issuer_only))


def test_load_certificate_takes_objects_pem_and_der() -> None:
    cert = make_cert(serial=RFC_SERIAL, aki=aki_of(RFC_AKI))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    der = cert.public_bytes(serialization.Encoding.DER)
    other = make_cert(serial=2, aki=aki_of(b"x")).public_bytes(serialization.Encoding.PEM)
    for form in (cert, pem, pem.decode(), der, pem + other):  # a chain: its leaf
        assert cert_id(load_certificate(form)) == RFC_CERT_ID
    with pytest.raises(InvalidInput):
        load_certificate(b"not a certificate")
    with pytest.raises(InvalidInput):
        load_certificate("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")


def test_renewal_info_url_has_exactly_one_slash() -> None:
    assert renewal_info_url("https://ca/ari", "a.b") == "https://ca/ari/a.b"
    assert renewal_info_url("https://ca/ari/", "a.b") == "https://ca/ari/a.b"


def test_already_replaced_problem_is_typed() -> None:
    problem = problem_from_document(
        {"type": ProblemType.ALREADY_REPLACED, "detail": "already replaced"}, status_code=409
    )
    assert isinstance(problem, AlreadyReplaced)
    assert problem.type == "urn:ietf:params:acme:error:alreadyReplaced"


# -- Retry-After (§4.3.2, §4.3.3) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("header_delay", "expected"),
    [
        (None, ARI_DEFAULT_RETRY),  # no Retry-After: six hours
        (dt.timedelta(0), ARI_MIN_RETRY),  # too soon: one minute
        (dt.timedelta(seconds=10), ARI_MIN_RETRY),
        (dt.timedelta(hours=1), dt.timedelta(hours=1)),
        (dt.timedelta(hours=7), ARI_MAX_RETRY),  # too late: six hours
        (dt.timedelta(days=3), dt.timedelta(hours=6)),
    ],
)
def test_retry_after_is_bounded(header_delay: dt.timedelta | None, expected: dt.timedelta) -> None:
    instant = None if header_delay is None else T0 + header_delay
    assert ari_retry_after(instant, now=T0) == T0 + expected


# -- choosing the renewal time (§4.2) ------------------------------------------------------


def test_renewal_time_is_uniform_in_the_window_with_a_seeded_rng() -> None:
    info = window(T0 + 10 * DAY, T0 + 20 * DAY)
    chosen = choose_renewal_time(info, now=T0, rng=random.Random(7))
    fraction = random.Random(7).random()
    assert chosen == T0 + 10 * DAY + 10 * DAY * fraction
    assert chosen == choose_renewal_time(info, now=T0, rng=random.Random(7))  # reproducible
    picks = [choose_renewal_time(info, now=T0, rng=random.Random(s)) for s in range(200)]
    assert all(info.window_start <= p < info.window_end for p in picks)
    # spread over the window, not bunched at one end
    assert min(picks) < T0 + 11 * DAY
    assert max(picks) > T0 + 19 * DAY


def test_renewal_time_in_the_past_means_now() -> None:
    over = window(T0 - 20 * DAY, T0 - 10 * DAY)
    assert choose_renewal_time(over, now=T0, rng=random.Random(1)) == T0
    # an open window: the past part of it means "at once", the future part is kept
    half_open = window(T0 - 10 * DAY, T0 + 10 * DAY)
    picks = [choose_renewal_time(half_open, now=T0, rng=random.Random(s)) for s in range(100)]
    assert all(T0 <= p < T0 + 10 * DAY for p in picks)
    assert T0 in picks
    assert any(p > T0 for p in picks)


def test_renewal_time_default_rng_stays_in_the_window() -> None:
    info = window(T0 + DAY, T0 + 2 * DAY)
    assert info.window_start <= choose_renewal_time(info, now=T0) < info.window_end


def test_fallback_is_when_a_third_of_the_lifetime_remains() -> None:
    assert fallback_renewal_time(T0, T0 + 90 * DAY) == T0 + 60 * DAY
    assert fallback_renewal_time(T0, T0 + 45 * DAY) == T0 + 30 * DAY
    assert fallback_renewal_time(T0, T0 + 64 * DAY) == T0 + 64 * DAY * 2 / 3
    with pytest.raises(InvalidInput):
        fallback_renewal_time(T0, T0)


def test_fallback_is_at_half_the_lifetime_under_ten_days() -> None:
    """Let's Encrypt's guide, certbot 4, lego --dynamic: half of it under 10 days."""
    assert fallback_renewal_time(T0, T0 + 6 * DAY) == T0 + 3 * DAY
    # Let's Encrypt's 160-hour certificate: notAfter is notBefore + 160 h - 1 s
    not_after = T0 + 160 * HOUR - SECOND
    assert fallback_renewal_time(T0, not_after) == T0 + (160 * HOUR - SECOND) / 2
    # 80 hours before expiry (to the second), not 53 h 20 min as a third would say
    assert abs((not_after - fallback_renewal_time(T0, not_after)) - 80 * HOUR) <= SECOND


def test_ten_days_of_lifetime_exactly_is_the_boundary() -> None:
    # exactly 10 days is not "under 10 days": a third
    assert fallback_renewal_time(T0, T0 + 10 * DAY) == T0 + 10 * DAY * 2 / 3
    # RFC 5280 counts the notAfter second: 10 d - 1 s between them is a 10-day certificate
    assert certificate_lifetime(T0, T0 + 10 * DAY - SECOND) == 10 * DAY
    assert fallback_renewal_time(T0, T0 + 10 * DAY - SECOND) == T0 + (10 * DAY - SECOND) * 2 / 3
    # one second less is under 10 days: half
    assert fallback_renewal_time(T0, T0 + 10 * DAY - 2 * SECOND) == T0 + (10 * DAY - 2 * SECOND) / 2
    assert renewal_fraction_for(10 * DAY) == pytest.approx(1 / 3)
    assert renewal_fraction_for(10 * DAY - SECOND) == 0.5
    assert renewal_fraction_for(SHORT_LIFETIME) == renewal_fraction_for(90 * DAY)
    with pytest.raises(InvalidInput):
        renewal_fraction_for(dt.timedelta(0))


def test_a_given_fraction_overrides_the_lifetime_rule() -> None:
    assert fallback_renewal_time(T0, T0 + 6 * DAY, fraction=1 / 3) == T0 + 4 * DAY
    assert fallback_renewal_time(T0, T0 + 90 * DAY, fraction=0.5) == T0 + 45 * DAY
    for bad in (0.0, 1.0, -0.5, 2.0):
        with pytest.raises(InvalidInput, match="fraction"):
            fallback_renewal_time(T0, T0 + 90 * DAY, fraction=bad)
    decision = decide_renewal(not_before=T0, not_after=T0 + 6 * DAY, now=T0, fraction=0.25)
    assert (decision.source, decision.renew_at) == ("fallback", T0 + 4.5 * DAY)


def test_decide_renewal_prefers_the_cas_window() -> None:
    result = RenewalInfoResult(
        info=window(T0 + 70 * DAY, T0 + 72 * DAY, "https://ca/why"),
        retry_after=T0 + dt.timedelta(hours=6),
        cert_id=RFC_CERT_ID,
        url="https://ca/ari/" + RFC_CERT_ID,
    )
    decision = decide_renewal(
        not_before=T0, not_after=T0 + 90 * DAY, now=T0, renewal_info=result, rng=random.Random(3)
    )
    assert decision.source == "ari"
    assert decision.renew_at == result.renewal_time(now=T0, rng=random.Random(3))
    assert T0 + 70 * DAY <= decision.renew_at < T0 + 72 * DAY
    assert decision.recheck_at == T0 + dt.timedelta(hours=6)
    assert decision.explanation_url == "https://ca/why"
    assert not decision.due(T0)
    assert decision.due(T0 + 72 * DAY)


def test_decide_renewal_ari_window_wins_over_the_lifetime_rule_and_a_fraction() -> None:
    result = RenewalInfoResult(
        info=window(T0 + 5 * DAY, T0 + 5 * DAY + HOUR),
        retry_after=T0 + dt.timedelta(hours=6),
        cert_id=RFC_CERT_ID,
        url="https://ca/ari/" + RFC_CERT_ID,
    )
    for fraction in (None, 0.5, 0.9):
        decision = decide_renewal(
            not_before=T0,
            not_after=T0 + 6 * DAY,
            now=T0,
            renewal_info=result,
            rng=random.Random(3),
            fraction=fraction,
        )
        assert decision.source == "ari"
        assert T0 + 5 * DAY <= decision.renew_at < T0 + 5 * DAY + HOUR


def test_decide_renewal_without_ari_a_short_lifetime_at_half() -> None:
    decision = decide_renewal(not_before=T0, not_after=T0 + 6 * DAY, now=T0)
    assert (decision.source, decision.renew_at) == ("fallback", T0 + 3 * DAY)
    assert not decision.due(T0 + 3 * DAY - SECOND)
    assert decision.due(T0 + 3 * DAY)


def test_decide_renewal_without_ari_falls_back() -> None:
    decision = decide_renewal(not_before=T0, not_after=T0 + 90 * DAY, now=T0)
    assert decision.source == "fallback"
    assert decision.renew_at == T0 + 60 * DAY
    assert decision.recheck_at is None
    late = decide_renewal(not_before=T0, not_after=T0 + 90 * DAY, now=T0 + 80 * DAY)
    assert late.renew_at == T0 + 80 * DAY
    assert late.due(T0 + 80 * DAY)


# -- the CA asks for a replacement now (mass revocation) ---------------------------------


def _window(start: dt.timedelta, end: dt.timedelta) -> RenewalInfo:
    return RenewalInfo(window_start=T0 + start, window_end=T0 + end)


def test_a_window_that_ended_asks_for_replacement_now() -> None:
    ended = _window(-2 * DAY, -DAY)
    assert replacement_requested(ended, now=T0) == "window-passed"
    assert replacement_requested(_window(-DAY, dt.timedelta(0)), now=T0) == "window-passed"
    # the answer before does not matter: over is over
    assert replacement_requested(ended, now=T0, previous=_window(DAY, 2 * DAY)) == "window-passed"


def test_a_window_moved_into_the_past_asks_for_replacement_now() -> None:
    moved = _window(-DAY, DAY)
    assert replacement_requested(moved, now=T0, previous=_window(10 * DAY, 11 * DAY)) == (
        "window-moved"
    )


def test_a_window_that_opened_with_time_is_the_routine_schedule() -> None:
    open_now = _window(-DAY, DAY)
    assert replacement_requested(open_now, now=T0) is None  # no earlier answer
    assert replacement_requested(open_now, now=T0, previous=open_now) is None  # same start
    # moved earlier, but still in the future: a new window, not an emergency
    assert (
        replacement_requested(_window(DAY, 2 * DAY), now=T0, previous=_window(5 * DAY, 6 * DAY))
        is None
    )
    assert replacement_requested(_window(DAY, 2 * DAY), now=T0) is None


NEW_ORDER = "https://ca.example/acme/new-order"


def _problem(short: str, status: int, url: str = NEW_ORDER) -> AcmeProblem:
    type_ = "urn:ietf:params:acme:error:" + short
    return problem_class(type_)(type_, "refused", status_code=status, url=url)


@pytest.mark.parametrize(
    ("short", "status"),
    [
        ("alreadyReplaced", 409),  # RFC 9773 §5
        ("unauthorized", 403),  # Pebble 2.10: another account ordered that certificate
        ("malformed", 400),  # Pebble 2.10: a certID of an issuer it does not know
        ("serverInternal", 500),  # Pebble 2.10: a certID whose serial has no order
        ("conflict", 409),  # a type of the CA's own
    ],
)
def test_a_new_order_refusal_is_a_refusal_of_replaces(short: str, status: int) -> None:
    assert replaces_refused(_problem(short, status), new_order_url=NEW_ORDER)


@pytest.mark.parametrize(
    ("short", "status"),
    [
        ("rateLimited", 429),  # a limit, not the request: ordering again makes it worse
        ("serverInternal", 503),  # the CA is busy
        ("badNonce", 400),  # the transport replays those
    ],
)
def test_limits_and_busy_answers_are_not_refusals_of_replaces(short: str, status: int) -> None:
    assert not replaces_refused(_problem(short, status), new_order_url=NEW_ORDER)


def test_only_the_new_order_request_refuses_replaces() -> None:
    later = _problem("unauthorized", 403, url="https://ca.example/acme/finalize/1")
    assert not replaces_refused(later, new_order_url=NEW_ORDER)
    assert not replaces_refused(
        BadServerResponse("garbage", url=NEW_ORDER), new_order_url=NEW_ORDER
    )
    assert not replaces_refused(ValueError("x"), new_order_url=NEW_ORDER)
