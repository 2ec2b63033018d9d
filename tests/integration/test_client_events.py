"""The client's events against a real Pebble: one seam to observe and extend the client.

Every event type of an issuance is seen, in order and counted; the transport's request
events pair up with the requests sent; subscribers are awaited before the client goes
on; a subscriber that raises fails the issuance loudly (or, for events reporting an
outcome, is logged); the deprecated hooks still work as adapters onto the events.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from typing import Any

import anyio
import pytest

from acmecerts import AcmeClient, AcmeProblem, AttemptTimeout, FakeClock, Http01Server, PollPolicy
from acmecerts.client import (
    AttemptEnded,
    CertificateDownloaded,
    ChallengeAnswered,
    ChallengePresented,
    ClientEvent,
    IssuanceEvent,
    OrderAuthorized,
    OrderCreated,
    OrderFinalized,
    OrderRefused,
    OrderRequested,
    OrderResumed,
    RequestSent,
    ResponseReceived,
)
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.keys import PrivateKey, generate_private_key
from acmecerts.protocol.resources import Order
from acmecerts.testing import PebbleServer
from tests.faults.proxy import MALFORMED, FaultProxy, Match, Respond

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

_TRANSPORT = (RequestSent, ResponseReceived)


def _issuance(events: list[Any]) -> list[type]:
    return [type(e) for e in events if not isinstance(e, _TRANSPORT)]


async def test_one_issuance_emits_each_event_type_in_order(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    names = ["a.events.example.test", "b.events.example.test"]
    await client.register()
    seen: list[ClientEvent] = []
    client.subscribe(seen.append)
    sent_before = client.transport.request_count

    issued = await client.issue(names, solver=http01)

    kinds = _issuance(seen)
    assert kinds[:2] == [OrderRequested, OrderCreated]
    assert kinds[-4:] == [OrderAuthorized, OrderFinalized, CertificateDownloaded, AttemptEnded]
    middle = kinds[2:-4]
    assert Counter(middle) == {ChallengePresented: 2, ChallengeAnswered: 2}
    for url in {e.authorization_url for e in seen if isinstance(e, ChallengePresented)}:
        steps = [
            type(e)
            for e in seen
            if isinstance(e, ChallengePresented | ChallengeAnswered) and e.authorization_url == url
        ]
        assert steps == [ChallengePresented, ChallengeAnswered]
    wanted = tuple(Identifier("dns", n) for n in names)
    assert all(e.identifiers == wanted for e in seen if not isinstance(e, _TRANSPORT))

    created = next(e for e in seen if isinstance(e, OrderCreated))
    assert created.order.url == issued.order_url
    assert not created.found
    assert created.private_key is not None
    assert "PRIVATE" not in repr(created)
    assert "private_key" not in repr(created)
    downloaded = next(e for e in seen if isinstance(e, CertificateDownloaded))
    assert downloaded.chain == issued.chain
    assert downloaded.order.certificate == issued.certificate_url
    ended = next(e for e in seen if isinstance(e, AttemptEnded))
    assert ended.error is None
    assert ended.order.status == "valid"
    answered = [e for e in seen if isinstance(e, ChallengeAnswered)]
    assert {e.challenge.status for e in answered} <= {"pending", "processing", "valid"}

    # one RequestSent and one ResponseReceived per request, each answer after its request
    sent = [e for e in seen if isinstance(e, RequestSent)]
    received = [e for e in seen if isinstance(e, ResponseReceived)]
    assert len(sent) == len(received) == client.transport.request_count - sent_before
    assert all(200 <= e.status < 300 for e in received)
    posts = [e.url for e in sent if e.method == "POST"]
    assert sum(u.endswith("/order-plz") for u in posts) == 1
    new_order_sent = seen.index(next(e for e in sent if e.url.endswith("/order-plz")))
    assert seen.index(created) > new_order_sent  # after the answer, not before
    assert seen.index(next(e for e in seen if isinstance(e, OrderRequested))) < new_order_sent


async def test_issue_events_come_first_and_carry_no_request_events(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    order: list[tuple[str, type]] = []
    client.subscribe(lambda event: order.append(("client", type(event))))

    async def mine(event: IssuanceEvent) -> None:
        order.append(("issue", type(event)))

    await client.issue(["first.events.example.test"], solver=http01, events=mine)

    issue_only = [kind for who, kind in order if who == "issue"]
    client_issuance = [k for who, k in order if who == "client" and k not in _TRANSPORT]
    assert issue_only == client_issuance
    assert len(issue_only) == 8
    for index, (who, kind) in enumerate(order):
        if who == "issue":  # the same event reaches the client's subscriber right after
            assert order[index + 1] == ("client", kind)


async def test_a_subscriber_without_requests_hears_the_issuance_only(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    everything: list[ClientEvent] = []
    issuance: list[ClientEvent] = []
    client.subscribe(everything.append)
    stop = client.subscribe(issuance.append, requests=False)

    await client.issue(["quiet.events.example.test"], solver=http01)

    assert issuance == [e for e in everything if not isinstance(e, _TRANSPORT)]
    assert len(issuance) == 8
    assert len(everything) > len(issuance)  # the requests were there to hear
    stop()
    await client.issue(["quiet2.events.example.test"], solver=http01)
    assert len(issuance) == 8  # unsubscribed


async def test_an_awaited_subscriber_holds_the_client_until_it_returns(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    requests: list[str] = []
    client.subscribe(lambda e: requests.append(e.url) if isinstance(e, RequestSent) else None)
    held: list[tuple[type, int, int]] = []

    async def slow_journal(event: IssuanceEvent) -> None:
        if isinstance(event, OrderRequested | OrderCreated):
            before = len(requests)
            await anyio.sleep(0.05)  # a durable write: nothing is sent meanwhile
            held.append((type(event), before, len(requests)))

    await client.issue(["held.events.example.test"], solver=http01, events=slow_journal)

    assert [kind for kind, _, _ in held] == [OrderRequested, OrderCreated]
    assert all(before == after for _, before, after in held)
    requested_at, created_at = held[0][1], held[1][1]
    # the intent before newOrder was sent, the order before anything else was sent for it
    assert not any(u.endswith("/order-plz") for u in requests[:requested_at])
    assert requests[created_at - 1].endswith("/order-plz")


async def test_a_raising_subscriber_fails_the_issuance_and_cleanup_still_runs(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    class Broken(Exception):
        pass

    seen: list[ClientEvent] = []
    client.subscribe(seen.append)

    def broken(event: IssuanceEvent) -> None:
        if isinstance(event, ChallengePresented):
            raise Broken("the subscriber's own bug")

    with pytest.raises(Broken, match="own bug"):
        await client.issue(["broken.events.example.test"], solver=http01, events=broken)

    ended = [e for e in seen if isinstance(e, AttemptEnded)]
    assert len(ended) == 1
    assert isinstance(ended[0].error, Broken)
    assert ChallengeAnswered not in _issuance(seen)  # the challenge was never answered
    # the pending authorization was deactivated in the cleanup
    sent = [e for e in seen if isinstance(e, RequestSent) and e.method == "POST"]
    authz = ended[0].order.authorizations[0]
    assert sum(e.url == authz for e in sent) >= 2  # fetched, then looked at and deactivated
    assert (await client.get_authorization(authz)).status == "deactivated"


async def test_a_raising_subscriber_of_order_requested_stops_the_order(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    sent: list[str] = []
    client.subscribe(lambda e: sent.append(e.url) if isinstance(e, RequestSent) else None)

    async def refuse(event: IssuanceEvent) -> None:
        if isinstance(event, OrderRequested):
            raise RuntimeError("the journal's store is down")

    with pytest.raises(RuntimeError, match="store is down"):
        await client.issue(["refused.events.example.test"], solver=http01, events=refuse)
    assert not any(u.endswith("/order-plz") for u in sent)


async def test_a_raising_subscriber_of_an_outcome_is_logged_and_the_certificate_kept(
    pebble: PebbleServer,
    client: AcmeClient,
    http01: Http01Server,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: IssuanceEvent) -> None:
        if isinstance(event, AttemptEnded):
            raise ValueError("a bug after the fact")

    with caplog.at_level(logging.ERROR, logger="acmecerts.events"):
        issued = await client.issue(["kept.events.example.test"], solver=http01, events=broken)
    assert issued.names == ("kept.events.example.test",)
    failures = [r for r in caplog.records if r.name == "acmecerts.events"]
    assert len(failures) == 1
    assert "AttemptEnded" in failures[0].getMessage()


async def test_a_resumed_order_and_a_found_order(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    names = ["resumed.events.example.test"]
    standalone: list[ClientEvent] = []
    stop = client.subscribe(standalone.append)
    order = await client.new_order(names)
    stop()  # unsubscribed: it hears nothing more
    assert _issuance(standalone) == [OrderRequested, OrderCreated]
    requested = next(e for e in standalone if isinstance(e, OrderRequested))
    assert requested.private_key is None
    assert requested.renewal_of is None
    count = len(standalone)

    seen: list[IssuanceEvent] = []
    await client.issue(names, solver=http01, resume_order_url=order.url, events=seen.append)
    assert len(standalone) == count
    kinds = [type(e) for e in seen]
    assert kinds[0] is OrderResumed
    assert OrderRequested not in kinds
    assert OrderCreated not in kinds
    assert kinds[-1] is AttemptEnded
    assert CertificateDownloaded in kinds

    # an order nobody recorded (a process died after newOrder) is found again
    lost = await client.new_order(["found.events.example.test"])
    found: list[IssuanceEvent] = []
    await client.issue(lost.identifiers, solver=http01, recover_order=True, events=found.append)
    created = [e for e in found if isinstance(e, OrderCreated)]
    assert len(created) == 1
    assert created[0].found
    assert created[0].order.url == lost.url
    assert OrderRequested not in [type(e) for e in found]


async def test_a_refused_order_is_reported(pebble: PebbleServer, proxy: FaultProxy) -> None:
    proxy.add_rule(Match("/order-plz", "POST"), Respond(400, MALFORMED, "not today"))
    seen: list[ClientEvent] = []
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle) as client:
        client.subscribe(seen.append)
        with pytest.raises(AcmeProblem, match="not today") as refused:
            await client.new_order(["refused.events.example.test"])
    assert _issuance(seen) == [OrderRequested, OrderRefused]
    event = next(e for e in seen if isinstance(e, OrderRefused))
    assert event.error is refused.value
    assert event.request is next(e for e in seen if isinstance(e, OrderRequested))


async def test_the_deprecated_order_hooks_adapt_onto_the_events(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    calls: list[tuple[str, object]] = []
    sent: list[str] = []
    client.subscribe(lambda e: sent.append(e.url) if isinstance(e, RequestSent) else None)
    key = generate_private_key("ec256")

    async def before_order(k: PrivateKey) -> None:
        calls.append(("before", (k is key, any(u.endswith("/order-plz") for u in sent))))

    async def on_order(order: Order, k: PrivateKey) -> None:
        calls.append(("on", (k is key, sent[-1].endswith("/order-plz"))))

    with pytest.warns(DeprecationWarning, match=r"issue\(on_order= and before_order=\)") as caught:
        issued = await client.issue(
            ["hooks.events.example.test"],
            solver=http01,
            private_key=key,
            before_order=before_order,
            on_order=on_order,
        )
    assert calls == [("before", (True, False)), ("on", (True, True))]
    [warning] = caught
    assert "events=" in str(warning.message)
    assert warning.filename == __file__  # it points at the caller's line
    with pytest.warns(DeprecationWarning, match=r"issue\(before_order=\)"):
        await client.issue(["hooks2.events.example.test"], solver=http01, before_order=before_order)
    assert [c[0] for c in calls] == ["before", "on", "before"]
    assert issued.order_url


async def test_the_deprecated_request_hooks_adapt_onto_the_events(
    pebble: PebbleServer,
) -> None:
    requests: list[tuple[str, str]] = []
    responses: list[int] = []
    with pytest.warns(DeprecationWarning, match="on_request is deprecated") as caught:
        client = AcmeClient(
            pebble.directory_url,
            ca_bundle=pebble.ca_bundle,
            on_request=lambda method, url: requests.append((method, url)),
        )
    [warning] = caught
    assert "subscribe()" in str(warning.message)
    assert "RequestSent" in str(warning.message)
    assert warning.filename == __file__  # the caller's line, not the transport's
    async with client:
        with pytest.warns(DeprecationWarning, match="add_response_hook") as caught:
            client.transport.add_response_hook(lambda method, url, status: responses.append(status))
        [warning] = caught
        assert "ResponseReceived" in str(warning.message)
        assert warning.filename == __file__

        def broken(method: str, url: str, status: int) -> None:
            raise ZeroDivisionError("an observer's bug: logged only, as before")

        with pytest.warns(DeprecationWarning, match="add_response_hook"):
            client.transport.add_response_hook(broken)
        await client.register()
        assert len(requests) == len(responses) == client.transport.request_count > 0
        client.transport.on_request = None  # the adapter is unsubscribed (no warning)
        await client.transport.directory(refresh=True)
        assert len(requests) == len(responses) - 1
        again: list[str] = []
        with pytest.warns(DeprecationWarning, match="on_request is deprecated") as caught:
            client.transport.on_request = lambda method, url: again.append(url)
        [warning] = caught
        assert warning.filename == __file__
        await client.transport.directory(refresh=True)
        assert again == [pebble.directory_url]


async def test_polling_waits_as_the_poll_policy_says(pebble: PebbleServer) -> None:
    clock = FakeClock()
    policy = PollPolicy(initial=0.25, multiplier=2.0, max_interval=1.0, floor=0.05)
    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, clock=clock, poll=policy
    ) as client:
        order = await client.new_order(["poll.events.example.test"])
        clock.sleeps.clear()
        deadline = clock.now() + dt.timedelta(seconds=2.5)
        with pytest.raises(AttemptTimeout, match="deadline passed while waiting for the CA"):
            # nobody answers the challenge: pending until the deadline
            await client.wait_authorization(order.authorizations[0], deadline=deadline)
        assert clock.sleeps == pytest.approx([0.25, 0.5, 1.0, 0.75])
        clock.sleeps.clear()
        deadline = clock.now() + dt.timedelta(seconds=0.5)
        with pytest.raises(AttemptTimeout):
            await client.wait_order(order, until=frozenset({"valid"}), deadline=deadline)
        assert clock.sleeps == pytest.approx([0.25, 0.25])
