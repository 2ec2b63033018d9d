"""Limit models: Let's Encrypt's preset, overrides, and what a Limit refuses."""

from __future__ import annotations

import datetime as dt

import pytest

from acmecerts.errors import InvalidInput
from acmecerts.ratelimit import (
    LETS_ENCRYPT,
    LETS_ENCRYPT_STAGING,
    NO_LIMITS,
    Event,
    Limit,
    RateLimitModel,
    Scope,
    model_for_directory,
)


def test_lets_encrypt_preset_matches_the_published_limits() -> None:
    week, hour = dt.timedelta(days=7), dt.timedelta(hours=1)
    expected = {
        "certificates_per_registered_domain": (50, week, Scope.REGISTERED_DOMAIN, True),
        "certificates_per_exact_identifier_set": (5, week, Scope.IDENTIFIER_SET, False),
        "new_orders_per_account": (300, 3 * hour, Scope.ACCOUNT, True),
        "authorization_failures_per_identifier_per_account": (
            5,
            hour,
            Scope.ACCOUNT_IDENTIFIER,
            False,
        ),
        "consecutive_authorization_failures_per_identifier_per_account": (
            1152,
            dt.timedelta(days=1152),
            Scope.ACCOUNT_IDENTIFIER,
            False,
        ),
        "new_accounts_per_ip": (10, 3 * hour, Scope.SOURCE_ADDRESS, False),
        "new_accounts_per_ipv6_range": (500, 3 * hour, Scope.SOURCE_IPV6_RANGE, False),
    }
    assert {
        limit.name: (limit.capacity, limit.period, limit.scope, limit.renewal_exempt)
        for limit in LETS_ENCRYPT
    } == expected
    # The refill rates Let's Encrypt documents.
    assert LETS_ENCRYPT["certificates_per_registered_domain"].interval == dt.timedelta(
        minutes=201, seconds=36
    )
    assert LETS_ENCRYPT["new_orders_per_account"].interval == dt.timedelta(seconds=36)
    assert LETS_ENCRYPT["new_accounts_per_ip"].interval == dt.timedelta(minutes=18)
    pausing = [limit.name for limit in LETS_ENCRYPT if limit.pauses]
    assert pausing == ["consecutive_authorization_failures_per_identifier_per_account"]


def test_events_default_from_the_scope() -> None:
    assert Limit("a", 1, 60, Scope.REGISTERED_DOMAIN).event is Event.NEW_CERTIFICATE
    assert Limit("b", 1, 60, "account").event is Event.NEW_ORDER
    assert Limit("c", 1, 60, Scope.ACCOUNT, event=Event.NEW_CERTIFICATE).event is (
        Event.NEW_CERTIFICATE
    )
    assert LETS_ENCRYPT.for_event(Event.NEW_ACCOUNT) == (
        LETS_ENCRYPT["new_accounts_per_ip"],
        LETS_ENCRYPT["new_accounts_per_ipv6_range"],
    )


def test_overrides_change_numbers_and_keep_the_rest() -> None:
    model = LETS_ENCRYPT.with_overrides(
        {
            "certificates_per_registered_domain": 300,
            "new_orders_per_account": (1500, dt.timedelta(hours=3)),
        }
    )
    assert model["certificates_per_registered_domain"].capacity == 300
    assert model["certificates_per_registered_domain"].renewal_exempt
    assert model["new_orders_per_account"].interval == dt.timedelta(seconds=7.2)
    assert (
        model["certificates_per_exact_identifier_set"]
        == (LETS_ENCRYPT["certificates_per_exact_identifier_set"])
    )
    assert LETS_ENCRYPT["certificates_per_registered_domain"].capacity == 50  # unchanged
    extra = Limit("orders_per_ip", 20, 60, Scope.SOURCE_ADDRESS, event=Event.NEW_ORDER)
    assert "orders_per_ip" in LETS_ENCRYPT.with_overrides({"orders_per_ip": extra})
    assert "new_accounts_per_ip" not in LETS_ENCRYPT.without("new_accounts_per_ip")
    with pytest.raises(InvalidInput, match="no limit"):
        LETS_ENCRYPT.with_overrides({"certificates_per_domain": 1})


def test_no_limits_is_empty() -> None:
    assert len(NO_LIMITS) == 0
    assert list(NO_LIMITS) == []


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("bad name", 1, 60, Scope.ACCOUNT), {}, "identifier"),
        (("x", 0, 60, Scope.ACCOUNT), {}, "capacity"),
        (("x", 1.5, 60, Scope.ACCOUNT), {}, "capacity"),
        (("x", 1, 0, Scope.ACCOUNT), {}, "seconds > 0"),
        (("x", 1, float("inf"), Scope.ACCOUNT), {}, "finite"),
        (("x", 1, 60, "galaxy"), {}, "galaxy"),
        (("x", 1, 60, Scope.ACCOUNT), {"pauses": True}, "pause"),
    ],
)
def test_invalid_limits_are_refused(
    args: tuple[object, ...], kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(InvalidInput, match=match):
        Limit(*args, **kwargs)  # type: ignore[arg-type]


def test_duplicate_names_are_refused() -> None:
    limit = Limit("x", 1, 60, Scope.ACCOUNT)
    with pytest.raises(InvalidInput, match="two limits"):
        RateLimitModel([limit, limit])


def test_interval_rounds_up_to_the_microsecond() -> None:
    # 1 s / 3 is 333333.33 µs: the bucket refills at 333334 µs, never faster than allowed.
    assert Limit("x", 3, 1, Scope.ACCOUNT).interval_us == 333_334


@pytest.mark.parametrize(
    ("url", "model"),
    [
        ("https://acme-v02.api.letsencrypt.org/directory", LETS_ENCRYPT),
        ("https://ACME-V02.api.letsencrypt.org./directory", LETS_ENCRYPT),
        ("https://acme-staging-v02.api.letsencrypt.org/directory", LETS_ENCRYPT_STAGING),
        ("https://127.0.0.1:14000/dir", NO_LIMITS),
        ("https://acme.zerossl.com/v2/DV90", NO_LIMITS),
    ],
)
def test_the_model_of_a_directory(url: str, model: RateLimitModel) -> None:
    assert model_for_directory(url) is model


@pytest.mark.parametrize("url", ["acme-v02.api.letsencrypt.org/directory", "ftp://ca/x", "", 3])
def test_the_model_of_something_that_is_not_a_directory_url(url: object) -> None:
    with pytest.raises(InvalidInput):
        model_for_directory(url)  # type: ignore[arg-type]
