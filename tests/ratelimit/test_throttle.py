"""The request throttle's policy: request rates, the pure token buckets, the model's table.

A bucket of ``burst`` tokens refilled at ``rate`` per second grants ``burst`` at once,
then one per ``1 / rate``; when it refuses, it names the exact instant the next token is
there (always later than now), and asked at that instant it grants. Over any window of
``W`` seconds it grants at most ``burst + floor(W / interval)``.
"""

from __future__ import annotations

import datetime as dt
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acmecerts.cli._ca import _rate_limit_model
from acmecerts.errors import InvalidInput
from acmecerts.ratelimit import (
    LETS_ENCRYPT,
    LETS_ENCRYPT_STAGING,
    NO_LIMITS,
    EndpointClass,
    Limit,
    RateLimitModel,
    RequestBucket,
    RequestBuckets,
    RequestRate,
    RequestRates,
    Scope,
    model_for_directory,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
US = dt.timedelta(microseconds=1)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# -- the buckets ---------------------------------------------------------------------------


def test_a_burst_then_the_steady_rate() -> None:
    buckets = RequestBuckets({"newNonce": (10, 3)})
    # a full bucket: three at once, the fourth is refused with the instant of the next
    assert [buckets.take("newNonce", T0) for _ in range(3)] == [None, None, None]
    assert buckets.take("newNonce", T0) == at(0.1)
    assert buckets.available("newNonce", T0) == 0
    # then one every 100 ms: over 10 s, 3 + 100 requests, each at its exact instant
    granted = 3
    now = T0
    while True:
        when = buckets.take("newNonce", now)
        if when is None:
            granted += 1
            continue
        assert when > now
        if when > at(10):
            break
        now = when
    assert granted == 3 + 100
    assert now == at(10)


def test_the_next_instant_is_exact() -> None:
    buckets = RequestBuckets({EndpointClass.NEW_ORDER: RequestRate(3, 1)})
    assert buckets.take(EndpointClass.NEW_ORDER, T0) is None
    # 1/3 s, rounded up to a whole microsecond (never sooner than the rate says)
    expected = T0 + 333_334 * US
    assert buckets.take(EndpointClass.NEW_ORDER, T0) == expected
    assert buckets.next_instant(EndpointClass.NEW_ORDER, T0) == expected
    # one microsecond early: refused, same instant named again, nothing taken
    assert buckets.take(EndpointClass.NEW_ORDER, expected - US) == expected
    assert buckets.take(EndpointClass.NEW_ORDER, expected) is None
    assert buckets.take(EndpointClass.NEW_ORDER, expected) == expected + 333_334 * US


def test_an_idle_bucket_fills_up_to_its_burst_only() -> None:
    buckets = RequestBuckets({"other": (2, 4)})
    for _ in range(4):
        assert buckets.take("other", T0) is None
    assert buckets.available("other", at(1)) == 2
    assert buckets.available("other", at(3600)) == 4  # never more than the burst
    assert [buckets.take("other", at(3600)) for _ in range(5)][-1] == at(3600.5)


def test_unthrottled_classes_always_go() -> None:
    buckets = RequestBuckets({"newOrder": (1, 1)})
    assert buckets.bucket("other") is None
    assert buckets.available("other", T0) is None
    assert all(buckets.take("other", T0) is None for _ in range(1000))
    assert buckets.next_instant("other", T0) == T0


def test_a_clock_that_steps_back_costs_one_interval_not_the_jump() -> None:
    bucket = RequestBucket(RequestRate(1, 2))
    now = 10**15
    assert bucket.take_us(now) == 0
    assert bucket.take_us(now) == 0
    # the wall clock is set back an hour: the bucket counts as empty, no hour-long wait
    back = now - 3600 * 10**6
    assert bucket.take_us(back) == 10**6
    assert bucket.take_us(back + 10**6) == 0


def test_naive_instants_are_refused() -> None:
    buckets = RequestBuckets({"newOrder": (1, 1)})
    with pytest.raises(InvalidInput, match="timezone-aware"):
        buckets.take("newOrder", dt.datetime(2026, 1, 1))


gaps = st.lists(st.integers(min_value=0, max_value=400_000), min_size=1, max_size=120)


@settings(max_examples=80, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=5_000, allow_nan=False),
    burst=st.integers(min_value=1, max_value=12),
    pattern=gaps,
)
def test_never_zero_never_early_never_over(rate: float, burst: int, pattern: list[int]) -> None:
    """For any arrivals: a refusal names a later instant that then grants, and no window
    of W µs holds more than burst + floor(W / interval) grants."""
    bucket = RequestBucket(RequestRate(rate, burst))
    interval = bucket.rate.interval_us
    now = 10**15
    granted: list[int] = []
    for gap in pattern:
        now += gap
        wait = bucket.take_us(now)
        if wait == 0:
            granted.append(now)
            continue
        assert wait >= 1
        assert bucket.take_us(now + wait - 1) == 1  # not a microsecond early...
        assert bucket.take_us(now + wait) == 0  # ...and granted exactly then
        granted.append(now + wait)
        now += wait
    for first in range(len(granted)):
        for last in range(first, len(granted)):
            window = granted[last] - granted[first]
            assert last - first + 1 <= burst + window // interval


# -- rates and their validation ----------------------------------------------------------


def test_rates_accept_names_members_and_pairs() -> None:
    table: dict[str, RequestRate | tuple[float, int]] = {
        "other": (250, 125),
        EndpointClass.NEW_ORDER: RequestRate(300, 200),
    }
    rates = RequestRates(table)
    assert list(rates) == [EndpointClass.NEW_ORDER, EndpointClass.OTHER]
    assert rates[EndpointClass.OTHER] == RequestRate(250, 125)
    assert rates[EndpointClass.OTHER].interval == dt.timedelta(milliseconds=4)
    assert RequestRates(rates) == rates
    assert hash(RequestRates(rates)) == hash(rates)
    assert not RequestRates()
    assert rates.with_overrides({"other": (10, 5)})[EndpointClass.OTHER] == RequestRate(10, 5)
    assert rates.without("other") == RequestRates({"newOrder": (300, 200)})
    assert "newOrder: 300/s burst 200" in repr(rates)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"newOrders": (1, 1)}, "no endpoint class 'newOrders'"),
        ({"newOrder": (0, 1)}, r"newOrder: a request rate must be"),
        ({"newOrder": (-5, 1)}, "a request rate must be"),
        ({"newOrder": (math.nan, 1)}, "a request rate must be"),
        ({"newOrder": (math.inf, 1)}, "a request rate must be"),
        ({"newOrder": (True, 1)}, "a request rate must be"),
        ({"newOrder": ("300", 1)}, "a request rate must be"),
        ({"newOrder": (2_000_000, 1)}, "a request rate must be"),
        ({"newOrder": (300, 0)}, "burst must be an int >= 1"),
        ({"newOrder": (300, 2.5)}, "burst must be an int >= 1"),
        ({"newOrder": 300}, "give a RequestRate or a"),
        ({"newOrder": (300,)}, "give a RequestRate or a"),
    ],
)
def test_bad_rates_are_invalid_input(table: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        RequestRates(table)  # type: ignore[arg-type]


def test_a_table_must_be_a_mapping() -> None:
    with pytest.raises(InvalidInput, match="mapping of endpoint class"):
        RequestRates([("newOrder", (1, 1))])  # type: ignore[arg-type]


# -- the model carries the table -----------------------------------------------------------


def test_lets_encrypt_carries_the_published_request_rates() -> None:
    assert {c.value: (r.rate, r.burst) for c, r in LETS_ENCRYPT.request_rates.items()} == {
        "directory": (40, 40),
        "newNonce": (20, 10),
        "newAccount": (5, 15),
        "newOrder": (300, 200),
        "revokeCert": (10, 100),
        "renewalInfo": (1000, 100),
        "other": (250, 125),
    }
    assert not NO_LIMITS.request_rates


def test_derived_models_keep_or_replace_the_rates() -> None:
    raised = LETS_ENCRYPT.with_overrides({"certificates_per_registered_domain": 300})
    assert raised.request_rates == LETS_ENCRYPT.request_rates
    assert LETS_ENCRYPT.without("new_accounts_per_ip").request_rates == LETS_ENCRYPT.request_rates
    assert not LETS_ENCRYPT.with_request_rates(None).request_rates
    assert len(LETS_ENCRYPT.with_request_rates(None)) == len(LETS_ENCRYPT)
    own = RateLimitModel(
        [Limit("orders", 10, 60, Scope.ACCOUNT)], request_rates={"newOrder": (5, 5)}
    )
    assert own.request_rates == RequestRates({"newOrder": (5, 5)})
    assert own != own.with_request_rates({"newOrder": (6, 5)})
    with pytest.raises(InvalidInput, match="no endpoint class"):
        RateLimitModel([], request_rates={"nonce": (1, 1)})


@pytest.mark.parametrize(
    ("directory", "model"),
    [
        ("https://acme-v02.api.letsencrypt.org/directory", LETS_ENCRYPT),
        ("https://ACME-V02.api.letsencrypt.org./directory", LETS_ENCRYPT),
        ("https://acme-staging-v02.api.letsencrypt.org/directory", LETS_ENCRYPT_STAGING),
        ("https://127.0.0.1:14000/dir", NO_LIMITS),
        ("https://ca.example/acme-v02.api.letsencrypt.org/directory", NO_LIMITS),
    ],
)
def test_the_model_is_chosen_by_the_directory(directory: str, model: RateLimitModel) -> None:
    assert model_for_directory(directory) is model
    # the CLI's --rate-limits auto makes the same choice
    assert _rate_limit_model("auto", directory) is model


def test_a_directory_that_is_no_url_is_refused() -> None:
    with pytest.raises(InvalidInput, match="invalid directory URL"):
        model_for_directory("https://[bad/dir")
