"""The simulated CA's nonces (RFC 8555 §6.5): each accepted once, the oldest forgotten;
which answers carry one; the checkpoint a request without latency still is."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import anyio
import httpx
import pytest

from acmecerts import VirtualClock
from acmecerts.testing.simulated_ca._config import wait_latency
from acmecerts.testing.simulated_ca._jws import JwsRejected, Nonces

from ._sim import START, run


def test_each_nonce_is_accepted_once_and_the_oldest_are_forgotten_first() -> None:
    nonces = Nonces(limit=1000)
    issued = [nonces.issue() for _ in range(5000)]  # the first 4,000 forgotten in order
    assert len(set(issued)) == len(issued)
    for old in (issued[0], issued[2000], issued[3999]):
        with pytest.raises(JwsRejected, match="nonce"):
            nonces.redeem(old)
    nonces.redeem(issued[4000])  # the oldest kept
    nonces.redeem(issued[-1])
    with pytest.raises(JwsRejected, match="nonce"):
        nonces.redeem(issued[-1])  # a replay
    with pytest.raises(JwsRejected, match="nonce"):
        nonces.redeem(None)
    # redeemed nonces leave room: the next ones issued push out no one still usable
    fresh = [nonces.issue() for _ in range(2)]
    nonces.redeem(issued[4001])
    for nonce in fresh:
        nonces.redeem(nonce)


def test_answers_carry_a_nonce_except_to_a_get_as_boulder_answers() -> None:
    """Boulder's WFE adds ``Replay-Nonce`` to every answer but a GET's (newNonce's GET
    included): a fleet's renewalInfo checks neither fill the client's pool nor the CA's
    table of outstanding nonces."""

    async def body(ca: Any, client: Any, solver: Any) -> dict[str, bool]:
        cert = await client.issue(["n.example"], solvers=[solver], profile="classic")
        info = await client.renewal_info(cert.chain.leaf)
        base = ca.directory_url.rsplit("/", 1)[0]
        seen: dict[str, bool] = {}
        for name, method, url in (
            ("renewalInfo GET", "GET", info.url),
            ("directory GET", "GET", ca.directory_url),
            ("newNonce HEAD", "HEAD", f"{base}/new-nonce"),
            ("newNonce GET", "GET", f"{base}/new-nonce"),
            ("unsigned POST", "POST", f"{base}/new-order"),  # a 400, with a nonce
            ("unknown GET", "GET", f"{base}/nowhere"),  # a 404, without
        ):
            answer = await ca.answer(method, httpx.URL(url), b"", ca.source)
            seen[name] = "replay-nonce" in answer.headers
            assert answer.headers["link"] == f'<{ca.directory_url}>;rel="index"'
        return seen

    seen, _ = run(body)
    assert seen == {
        "renewalInfo GET": False,
        "directory GET": False,
        "newNonce HEAD": True,
        "newNonce GET": True,
        "unsigned POST": True,
        "unknown GET": False,
    }


def test_no_latency_is_still_a_checkpoint_and_a_latency_is_slept() -> None:
    clock = VirtualClock(START)

    async def main() -> list[str]:
        order: list[str] = []
        # no latency: a checkpoint (see test_time's test of the checkpoint itself)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await wait_latency(0.0, "GET", "https://ca.test/x")
            order.append("not cancelled")
        assert scope.cancelled_caught
        seen: list[tuple[str, str]] = []
        await wait_latency(lambda m, u: seen.append((m, u)) or 2.5, "POST", "https://ca.test/y")
        assert seen == [("POST", "https://ca.test/y")]
        assert clock.now() == START + _dt.timedelta(seconds=2.5)
        return order

    assert clock.run(main) == []
