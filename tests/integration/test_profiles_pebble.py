"""Certificate profiles against a real Pebble 2.10 (classic 90 d, tlsserver 45 d,
shortlived 160 h): each is issued with its lifetime; a required profile the CA does not
offer is refused before ``newOrder``, a preferred one falls back to the CA's default; an
order Let's Encrypt's rules forbid is refused before ``newOrder``."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator

import pytest
from requests_seen import on_requests

from acmecerts import AcmeClient, Http01Server, ProfileRefused
from acmecerts.client import ClientEvent, OrderRequested, ProfileFallback
from acmecerts.ratelimit import LETS_ENCRYPT_PROFILES
from acmecerts.testing import PebbleServer

from .conftest import assert_valid_chain

pytestmark = pytest.mark.anyio

LIFETIMES = {
    "classic": dt.timedelta(days=90),
    "tlsserver": dt.timedelta(days=45),
    "shortlived": dt.timedelta(hours=160),
}


def assert_lifetime(not_before: dt.datetime, not_after: dt.datetime, want: dt.timedelta) -> None:
    assert abs((not_after - not_before) - want) <= dt.timedelta(minutes=1)


class Seen:
    """The requests and issuance events of a client."""

    def __init__(self, acme: AcmeClient) -> None:
        self.requests: list[tuple[str, str]] = []
        self.events: list[ClientEvent] = []
        acme.subscribe(on_requests(lambda m, u: self.requests.append((m, u))))
        acme.subscribe(self.events.append, requests=False)

    def new_orders(self, pebble: PebbleServer) -> int:
        return sum(1 for m, u in self.requests if m == "POST" and u.endswith("/order-plz"))


@pytest.fixture
async def le_rules(pebble: PebbleServer) -> AsyncIterator[AcmeClient]:
    """A client on Pebble that checks orders against Let's Encrypt's profile rules."""
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, ca_profiles=LETS_ENCRYPT_PROFILES
    ) as acme:
        yield acme


@pytest.mark.parametrize("profile", sorted(LIFETIMES))
async def test_each_profile_issues_with_its_lifetime(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server, profile: str
) -> None:
    names = [f"{profile}.profiles.example.test"]
    issued = await client.issue(names, solver=http01, profile=profile)
    assert_valid_chain(issued, pebble, names)
    assert_lifetime(issued.not_before, issued.not_after, LIFETIMES[profile])
    order = await client.get_order(issued.order_url)
    assert order.profile == profile


async def test_a_required_profile_the_ca_lacks_is_refused_before_new_order(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    seen = Seen(client)
    with pytest.raises(ProfileRefused, match="offers no profile 'longlived'") as info:
        await client.issue(["required.profiles.example.test"], solver=http01, profile="longlived")
    assert "classic, shortlived, tlsserver" in str(info.value)
    assert info.value.profile == "longlived"
    assert info.value.reached_ca is False
    assert seen.new_orders(pebble) == 0
    assert not any(isinstance(e, OrderRequested) for e in seen.events)


async def test_a_preferred_profile_the_ca_lacks_falls_back_to_its_default(
    pebble: PebbleServer,
    client: AcmeClient,
    http01: Http01Server,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen = Seen(client)
    names = ["preferred.profiles.example.test"]
    with caplog.at_level(logging.WARNING, logger="acmecerts.client"):
        issued = await client.issue(
            names, solver=http01, profile="longlived", profile_required=False
        )
    assert_valid_chain(issued, pebble, names)
    assert seen.new_orders(pebble) == 1
    kinds = [type(e) for e in seen.events]
    assert kinds.index(ProfileFallback) < kinds.index(OrderRequested)
    fallback = next(e for e in seen.events if isinstance(e, ProfileFallback))
    assert fallback.profile == "longlived"
    assert fallback.offered == ("classic", "shortlived", "tlsserver")
    requested = next(e for e in seen.events if isinstance(e, OrderRequested))
    assert requested.profile is None  # the CA's default: no profile sent
    assert requested.profile_required is False
    assert "offers no profile 'longlived'" in caplog.text
    # Pebble picks one of its profiles at random for an order naming none
    lifetime = issued.not_after - issued.not_before
    assert any(abs(lifetime - want) <= dt.timedelta(minutes=1) for want in LIFETIMES.values())


async def test_a_preferred_profile_the_ca_offers_is_ordered(
    client: AcmeClient, http01: Http01Server
) -> None:
    issued = await client.issue(
        ["offered.profiles.example.test"],
        solver=http01,
        profile="tlsserver",
        profile_required=False,
    )
    assert_lifetime(issued.not_before, issued.not_after, LIFETIMES["tlsserver"])


@pytest.mark.parametrize("profile", ["classic", "tlsserver", None])
async def test_lets_encrypt_rules_refuse_an_ip_outside_shortlived(
    pebble: PebbleServer, le_rules: AcmeClient, http01: Http01Server, profile: str | None
) -> None:
    seen = Seen(le_rules)
    with pytest.raises(ProfileRefused, match="allows no IP address identifiers"):
        await le_rules.issue(["127.0.0.1"], solver=http01, profile=profile)
    assert seen.new_orders(pebble) == 0


async def test_lets_encrypt_rules_allow_an_ip_under_shortlived(
    pebble: PebbleServer, le_rules: AcmeClient, http01: Http01Server
) -> None:
    issued = await le_rules.issue(["127.0.0.1"], solver=http01, profile="shortlived")
    assert_valid_chain(issued, pebble, ["127.0.0.1"])
    assert_lifetime(issued.not_before, issued.not_after, LIFETIMES["shortlived"])


async def test_lets_encrypt_rules_refuse_26_names_under_tlsserver(
    pebble: PebbleServer, le_rules: AcmeClient, http01: Http01Server
) -> None:
    names = [f"n{i}.many.profiles.example.test" for i in range(26)]
    seen = Seen(le_rules)
    with pytest.raises(ProfileRefused, match="at most 25 names per order, the order names 26"):
        await le_rules.issue(names, solver=http01, profile="tlsserver")
    with pytest.raises(ProfileRefused, match="at most 25 names"):
        await le_rules.new_order(names, profile="shortlived")
    assert seen.new_orders(pebble) == 0


async def test_without_the_rules_pebble_takes_what_lets_encrypt_would_refuse(
    pebble: PebbleServer, http01: Http01Server
) -> None:
    # the check is the client's: the same order goes through with ca_profiles=None
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, ca_profiles=None
    ) as acme:
        order = await acme.new_order(["127.0.0.1"], profile="tlsserver")
    assert order.profile == "tlsserver"


def test_auto_picks_the_rules_of_the_ca(pebble: PebbleServer) -> None:
    assert AcmeClient(pebble.directory_url).ca_profiles is None
    le = AcmeClient("https://acme-v02.api.letsencrypt.org/directory")
    assert le.ca_profiles is LETS_ENCRYPT_PROFILES
