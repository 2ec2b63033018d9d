"""The simulated CA's nonces (RFC 8555 §6.5): each accepted once, the oldest forgotten."""

from __future__ import annotations

import pytest

from acmecerts.testing.simulated_ca._jws import JwsRejected, Nonces


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
