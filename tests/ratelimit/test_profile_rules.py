"""Let's Encrypt's profiles as data with dates (``acmecerts.ratelimit._profiles``), its
staging model, and the new-accounts-per-IPv6-/48 limit.

Each change takes effect at 00:00 UTC of its day: one microsecond before it the old
rules hold, at it the new ones.
"""

from __future__ import annotations

import datetime as dt

import pytest

from acmecerts import FakeClock, InvalidInput, ProfileRefused
from acmecerts.protocol.identifiers import parse_identifiers
from acmecerts.ratelimit import (
    LETS_ENCRYPT,
    LETS_ENCRYPT_PROFILES,
    LETS_ENCRYPT_STAGING,
    LETS_ENCRYPT_STAGING_PROFILES,
    NO_LIMITS,
    CaProfiles,
    Limit,
    ProfileRules,
    RateLimitLedger,
    RateLimitModel,
    Scope,
    model_for_directory,
    profile_rules,
)
from tests.ratelimit.conftest import T0

DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
US = dt.timedelta(microseconds=1)
PRODUCTION = "https://acme-v02.api.letsencrypt.org/directory"
STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"
NOW = dt.datetime(2026, 12, 2, 12, tzinfo=dt.UTC)


def at(year: int, month: int, day: int) -> dt.datetime:
    return dt.datetime(year, month, day, tzinfo=dt.UTC)


def lifetime_and_reuse(
    ca: CaProfiles | str, profile: str, when: dt.datetime
) -> tuple[dt.timedelta, dt.timedelta]:
    rules = profile_rules(ca, profile, at=when)
    return rules.certificate_lifetime, rules.authorization_reuse


def test_today_each_profile_issues_what_lets_encrypt_publishes() -> None:
    classic = profile_rules(PRODUCTION, "classic", at=NOW)
    assert (classic.certificate_lifetime, classic.authorization_reuse) == (90 * DAY, 30 * DAY)
    assert (classic.max_names, classic.ip_identifiers) == (100, False)
    assert (classic.order_lifetime, classic.pending_authorization_lifetime) == (7 * DAY, 7 * DAY)
    tlsserver = profile_rules(PRODUCTION, "tlsserver", at=NOW)
    assert (tlsserver.certificate_lifetime, tlsserver.authorization_reuse) == (45 * DAY, 7 * HOUR)
    assert (tlsserver.max_names, tlsserver.ip_identifiers) == (25, False)
    assert (tlsserver.order_lifetime, tlsserver.pending_authorization_lifetime) == (8 * HOUR, HOUR)
    shortlived = profile_rules(PRODUCTION, "shortlived", at=NOW)
    assert (shortlived.certificate_lifetime, shortlived.authorization_reuse) == (
        160 * HOUR,
        7 * HOUR,
    )
    assert (shortlived.max_names, shortlived.ip_identifiers) == (25, True)
    assert (shortlived.since, shortlived.until) == (None, None)


def test_no_profile_means_the_default_classic() -> None:
    assert profile_rules(LETS_ENCRYPT_PROFILES, None, at=NOW) == profile_rules(
        LETS_ENCRYPT_PROFILES, "classic", at=NOW
    )
    assert LETS_ENCRYPT_PROFILES.default == "classic"


@pytest.mark.parametrize(
    ("ca", "change", "before", "after"),
    [
        (PRODUCTION, at(2027, 2, 10), (90 * DAY, 30 * DAY), (64 * DAY, 10 * DAY)),
        (PRODUCTION, at(2028, 2, 16), (64 * DAY, 10 * DAY), (45 * DAY, 7 * HOUR)),
        (STAGING, at(2027, 1, 10), (90 * DAY, 30 * DAY), (64 * DAY, 10 * DAY)),
        (STAGING, at(2028, 1, 16), (64 * DAY, 10 * DAY), (45 * DAY, 7 * HOUR)),
    ],
)
def test_classic_switches_exactly_at_the_announced_instant(
    ca: str,
    change: dt.datetime,
    before: tuple[dt.timedelta, dt.timedelta],
    after: tuple[dt.timedelta, dt.timedelta],
) -> None:
    assert lifetime_and_reuse(ca, "classic", change - US) == before
    assert lifetime_and_reuse(ca, "classic", change) == after
    rules = profile_rules(ca, "classic", at=change)
    assert rules.since == change
    assert profile_rules(ca, "classic", at=change - US).until == change
    assert rules.max_names == 100  # only lifetime and reuse move


@pytest.mark.parametrize(
    ("ca", "change"), [(PRODUCTION, at(2026, 5, 13)), (STAGING, at(2026, 4, 13))]
)
def test_tlsserver_went_to_45_days(ca: str, change: dt.datetime) -> None:
    assert lifetime_and_reuse(ca, "tlsserver", change - US) == (90 * DAY, 7 * HOUR)
    assert lifetime_and_reuse(ca, "tlsserver", change) == (45 * DAY, 7 * HOUR)


def test_staging_runs_about_a_month_ahead_of_production() -> None:
    between = at(2027, 1, 20)  # staging switched, production not yet
    assert lifetime_and_reuse(STAGING, "classic", between)[0] == 64 * DAY
    assert lifetime_and_reuse(PRODUCTION, "classic", between)[0] == 90 * DAY
    assert LETS_ENCRYPT_STAGING_PROFILES.changes() == (
        at(2026, 4, 13),
        at(2027, 1, 10),
        at(2028, 1, 16),
    )


def test_an_instant_in_another_timezone_is_the_same_instant() -> None:
    paris = dt.timezone(dt.timedelta(hours=1))
    just_before = dt.datetime(2027, 2, 10, 0, 59, 59, tzinfo=paris)  # 23:59:59 UTC
    assert lifetime_and_reuse(PRODUCTION, "classic", just_before)[0] == 90 * DAY
    assert lifetime_and_reuse(PRODUCTION, "classic", just_before + dt.timedelta(seconds=1))[0] == (
        64 * DAY
    )


def test_bad_questions_are_typed_errors() -> None:
    with pytest.raises(InvalidInput, match="timezone-aware"):
        profile_rules(PRODUCTION, "classic", at=dt.datetime(2027, 1, 1))
    with pytest.raises(InvalidInput, match="no rules for profile 'longlived'"):
        profile_rules(PRODUCTION, "longlived", at=NOW)
    with pytest.raises(InvalidInput, match="no profile rules are known"):
        profile_rules("https://pebble.test/dir", "classic", at=NOW)
    assert LETS_ENCRYPT_PROFILES.get("longlived", NOW) is None


def test_the_rules_refuse_what_lets_encrypt_refuses() -> None:
    def check(profile: str, names: list[str]) -> None:
        profile_rules(PRODUCTION, profile, at=NOW).check(parse_identifiers(names), ca="LE")

    hundred = [f"n{i}.example.com" for i in range(100)]
    check("classic", hundred)
    with pytest.raises(ProfileRefused, match="at most 100 names per order, the order names 101"):
        check("classic", [*hundred, "one-more.example.com"])
    check("tlsserver", hundred[:25])
    with pytest.raises(ProfileRefused, match="'tlsserver' at LE allows at most 25") as info:
        check("tlsserver", hundred[:26])
    assert info.value.profile == "tlsserver"
    assert info.value.reached_ca is False
    for profile in ("classic", "tlsserver"):
        with pytest.raises(ProfileRefused, match="no IP address identifiers"):
            check(profile, ["example.com", "192.0.2.1"])
    check("shortlived", ["192.0.2.1", "2001:db8::1", "example.com"])


def test_a_timeline_must_be_in_order() -> None:
    rules = profile_rules(PRODUCTION, "classic", at=NOW)
    later = ProfileRules(**{**_fields(rules), "since": at(2030, 1, 1)})
    earlier = ProfileRules(**{**_fields(rules), "since": at(2029, 1, 1)})
    with pytest.raises(InvalidInput, match="out of order"):
        CaProfiles("x", default="classic", timeline={"classic": [rules, later, earlier]})
    with pytest.raises(InvalidInput, match="default profile 'other'"):
        CaProfiles("x", default="other", timeline={"classic": [rules]})


def _fields(rules: ProfileRules) -> dict[str, object]:
    return {f: getattr(rules, f) for f in ProfileRules.__dataclass_fields__ if f != "until"}


# -- the models ---------------------------------------------------------------------------


def test_model_for_directory_picks_staging_for_the_staging_url() -> None:
    assert model_for_directory(PRODUCTION) is LETS_ENCRYPT
    assert model_for_directory(STAGING) is LETS_ENCRYPT_STAGING
    assert model_for_directory("https://pebble.test/dir") is NO_LIMITS
    assert LETS_ENCRYPT.profiles is LETS_ENCRYPT_PROFILES
    assert LETS_ENCRYPT_STAGING.profiles is LETS_ENCRYPT_STAGING_PROFILES
    assert NO_LIMITS.profiles is None


def test_staging_limits_are_far_higher() -> None:
    staging = {limit.name: (limit.capacity, limit.period) for limit in LETS_ENCRYPT_STAGING}
    assert staging == {
        "certificates_per_registered_domain": (30_000, 7 * DAY),
        "certificates_per_exact_identifier_set": (30_000, 7 * DAY),
        "new_orders_per_account": (1_500, 3 * HOUR),
        "authorization_failures_per_identifier_per_account": (200, HOUR),
        "consecutive_authorization_failures_per_identifier_per_account": (3_600, 6 * HOUR),
        "new_accounts_per_ip": (50, 3 * HOUR),
        "new_accounts_per_ipv6_range": (500, 3 * HOUR),
    }
    for limit in LETS_ENCRYPT:
        assert LETS_ENCRYPT_STAGING[limit.name].scope is limit.scope
        assert LETS_ENCRYPT_STAGING[limit.name].renewal_exempt is limit.renewal_exempt


def test_derived_models_keep_the_profiles() -> None:
    assert LETS_ENCRYPT.with_overrides({"new_orders_per_account": 600}).profiles is (
        LETS_ENCRYPT_PROFILES
    )
    assert LETS_ENCRYPT.without("new_accounts_per_ip").profiles is LETS_ENCRYPT_PROFILES
    assert LETS_ENCRYPT.with_request_rates(None).profiles is LETS_ENCRYPT_PROFILES


def test_lets_encrypt_counts_new_accounts_per_ipv6_48() -> None:
    limit = LETS_ENCRYPT["new_accounts_per_ipv6_range"]
    assert (limit.capacity, limit.period, limit.scope) == (500, 3 * HOUR, Scope.SOURCE_IPV6_RANGE)
    assert limit.interval == dt.timedelta(seconds=21.6)


RANGE = "new_accounts_per_ipv6_range"
PER_IP = "new_accounts_per_ip"
#: Two accounts per IPv6 /48, three per address, per hour.
SMALL = RateLimitModel(
    [Limit(PER_IP, 3, HOUR, Scope.SOURCE_ADDRESS), Limit(RANGE, 2, HOUR, Scope.SOURCE_IPV6_RANGE)],
    name="small",
)


@pytest.mark.anyio
async def test_one_ipv6_48_shares_its_bucket() -> None:
    clock = FakeClock(T0)
    ledger = RateLimitLedger(SMALL, clock=clock)
    first = await ledger.reserve_new_account(source="2001:db8:1:1::1")
    assert first.allowed
    assert set(first.charges) == {(PER_IP, "2001:db8:1:1::1"), (RANGE, "2001:db8:1::/48")}
    assert (await ledger.reserve_new_account(source="2001:db8:1:2::7")).allowed
    third = await ledger.reserve_new_account(source="2001:db8:1:ffff::9")  # same /48
    assert not third.allowed
    assert (third.limit, third.scope_key) == (RANGE, "2001:db8:1::/48")
    assert third.not_before == T0 + HOUR / 2
    assert (await ledger.reserve_new_account(source="2001:db8:2::1")).allowed  # another /48


@pytest.mark.anyio
async def test_ipv4_and_unknown_sources_spend_nothing_per_range() -> None:
    ledger = RateLimitLedger(SMALL, clock=FakeClock(T0))
    for source in ("192.0.2.1", "local"):
        decisions = [await ledger.reserve_new_account(source=source) for _ in range(3)]
        assert all(d.allowed for d in decisions)
        assert all(d.charges == ((PER_IP, source),) for d in decisions)
        assert not (await ledger.reserve_new_account(source=source)).allowed
