"""A malicious CA cannot make the client loop forever, nor accept a certificate it did not ask for.

* Every poll has a deadline: an order kept ``processing`` (or ``pending``) forever, even
  with a ``Retry-After`` of a day, ends in :class:`AttemptTimeout` at the attempt's
  deadline, after a bounded number of polls.
* The certificate must match the request: a chain for another key, or for other names,
  is :class:`CertificateMismatch`, checked by the client before it returns anything.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from acmecerts import (
    AcmeClient,
    AttemptTimeout,
    CertificateMismatch,
    Http01Server,
    Identifier,
    PollPolicy,
    RequestRetry,
)
from acmecerts.protocol.certificate import check_certificate_matches, parse_pem_chain
from acmecerts.protocol.keys import generate_private_key
from acmecerts.solvers import Http01Webroot
from acmecerts.testing import PebbleServer
from tests.faults.proxy import FaultProxy, Match, Respond
from tests.security._fake_ca import CA, FakeCa, make_chain

pytestmark = pytest.mark.anyio

DEADLINE = 0.5
#: Slack for a busy machine.
SLACK = 3.0


# --------------------------------------------------------------------------- deadlines


@pytest.mark.parametrize("status", ["processing", "pending"])
@pytest.mark.parametrize("retry_after", [None, "86400"])
async def test_an_order_that_never_finishes_times_out(
    tmp_path: Path, status: str, retry_after: str | None
) -> None:
    ca = FakeCa()
    ca.new_order["status"] = status
    ca.polled = {**ca.new_order, "status": status}
    if retry_after is not None:
        ca.order_headers["Retry-After"] = retry_after
    client = ca.client(attempt_timeout=DEADLINE)
    started = time.monotonic()
    with pytest.raises(AttemptTimeout):
        await client.issue(["example.com"], solver=Http01Webroot(tmp_path))
    elapsed = time.monotonic() - started
    assert DEADLINE * 0.9 <= elapsed <= DEADLINE + SLACK
    polls = [r for r in ca.requests if r.url.path == "/order/1"]
    assert polls  # it did poll...
    # ...but never in a tight loop: the poll floor (10 ms) bounds the count.
    assert len(polls) <= DEADLINE / 0.01 + 1


async def test_an_authorization_that_stays_pending_times_out() -> None:
    ca = FakeCa()
    authz = {
        "status": "pending",
        "identifier": {"type": "dns", "value": "example.com"},
        "challenges": [],
    }
    ca.routes["/authz/1"] = lambda request: ca.json_response(authz)
    client = ca.client()
    import datetime as dt

    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=DEADLINE)
    started = time.monotonic()
    with pytest.raises(AttemptTimeout):
        await client.wait_authorization(f"{CA}/authz/1", deadline=deadline)
    assert time.monotonic() - started <= DEADLINE + SLACK


@pytest.mark.timeout(60)
async def test_pebble_order_kept_processing_by_the_proxy_times_out(
    pebble: PebbleServer, proxy: FaultProxy, http01: Http01Server
) -> None:
    """Against the real Pebble: the proxy answers every order poll with ``processing``."""
    processing = {
        "status": "processing",
        "identifiers": [{"type": "dns", "value": "forever.deadline.example.test"}],
        "authorizations": [],
        "finalize": f"{proxy.url}/finalize-order/never",
    }
    proxy.add_rule(
        Match("/my-order/", "POST"),
        Respond(200, body=json.dumps(processing).encode(), headers={"Retry-After": "3600"}),
        times=None,
    )
    client = AcmeClient(
        proxy.directory_url,
        ca_bundle=pebble.ca_bundle,
        attempt_timeout=3.0,
        poll=PollPolicy(initial=0.05, max_interval=0.2, floor=0.05),
        request_retry=RequestRetry(floor=0.1, cap=0.5, max_attempts=3),
    )
    async with client:
        started = time.monotonic()
        with pytest.raises(AttemptTimeout):
            await client.issue(["forever.deadline.example.test"], solver=http01)
        assert time.monotonic() - started <= 3.0 + SLACK
    assert proxy.requests_to("/my-order/", "POST")
    assert not proxy.requests_to("/certZ/")  # never downloaded anything


# --------------------------------------------------------------------------- mismatches

NAMES = (Identifier("dns", "example.com"), Identifier("dns", "www.example.com"))


def test_the_check_refuses_another_key() -> None:
    key, other = generate_private_key(), generate_private_key()
    chain = parse_pem_chain(make_chain(other.public_key(), ["example.com", "www.example.com"]))
    with pytest.raises(CertificateMismatch, match="key"):
        check_certificate_matches(chain, key=key, identifiers=NAMES)
    check_certificate_matches(chain, key=other, identifiers=NAMES)


@pytest.mark.parametrize(
    "names",
    [
        ["example.com"],
        ["example.com", "www.example.com", "evil.example"],
        ["example.com", "www.example.org"],
        [],
    ],
)
def test_the_check_refuses_other_names(names: list[str]) -> None:
    key = generate_private_key()
    chain = parse_pem_chain(make_chain(key.public_key(), names))
    with pytest.raises(CertificateMismatch, match="names"):
        check_certificate_matches(chain, key=key, identifiers=NAMES)


async def test_the_client_refuses_a_certificate_for_another_key(tmp_path: Path) -> None:
    ca = FakeCa()
    ca.chain_pem = make_chain(generate_private_key().public_key(), ca.names)
    with pytest.raises(CertificateMismatch, match="key"):
        await ca.client().issue(["example.com"], solver=Http01Webroot(tmp_path))
    assert "/cert/1" in ca.paths()  # it was downloaded, then refused


async def test_the_client_refuses_a_certificate_for_other_names(tmp_path: Path) -> None:
    ca = FakeCa()
    key = generate_private_key()
    ca.chain_pem = make_chain(key.public_key(), ["example.com", "attacker.example"])
    with pytest.raises(CertificateMismatch, match="names"):
        await ca.client().issue(["example.com"], solver=Http01Webroot(tmp_path), private_key=key)


async def test_the_client_accepts_the_matching_certificate(tmp_path: Path) -> None:
    """The control: the same flow with the right certificate succeeds."""
    ca = FakeCa()
    key = generate_private_key()
    issued = await ca.client(certificate_key=key).issue(
        ["example.com"], solver=Http01Webroot(tmp_path), private_key=key
    )
    assert issued.names == ("example.com",)
