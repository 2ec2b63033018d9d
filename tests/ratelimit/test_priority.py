"""Priorities under scarcity: renewals closest to expiry first, then new certificates."""

from __future__ import annotations

import datetime as dt

import pytest

from acmecerts.errors import InvalidInput
from acmecerts.ratelimit import IssuanceRequest, prioritize
from tests.ratelimit.conftest import T0


def names(requests: list[IssuanceRequest]) -> list[str]:
    return [r.identifiers[0].value for r in requests]


def test_renewals_by_expiry_then_new_certificates_in_request_order() -> None:
    day = dt.timedelta(days=1)
    requests = [
        IssuanceRequest(["new-a.example.com"]),
        IssuanceRequest(["renew-late.example.com"], expires_at=T0 + 20 * day),
        IssuanceRequest(["new-b.example.com"]),
        IssuanceRequest(["renew-soon.example.com"], expires_at=T0 + 2 * day),
        IssuanceRequest(["renew-unknown.example.com"], renewal_of=["old.example.com"]),
        IssuanceRequest(["new-c.example.com"], requested_at=T0 - day),
    ]
    assert names(prioritize(requests)) == [
        "renew-soon.example.com",
        "renew-late.example.com",
        "renew-unknown.example.com",
        "new-c.example.com",  # requested earliest
        "new-a.example.com",
        "new-b.example.com",
    ]


def test_priority_overrides_the_default_order() -> None:
    requests = [
        IssuanceRequest(["renew.example.com"], expires_at=T0),
        IssuanceRequest(["launch.example.com"], priority=5),
        IssuanceRequest(["low.example.com"], expires_at=T0, priority=-1),
    ]
    assert names(prioritize(requests)) == [
        "launch.example.com",
        "renew.example.com",
        "low.example.com",
    ]


def test_renewal_flags() -> None:
    same = IssuanceRequest(["b.example.com", "a.example.com"], expires_at=T0)
    assert same.is_renewal
    assert same.is_exact_renewal
    changed = IssuanceRequest(["a.example.com"], renewal_of=["a.example.com", "b.example.com"])
    assert changed.is_renewal
    assert not changed.is_exact_renewal
    ari = IssuanceRequest(["a.example.com"], replaces=True)
    assert ari.is_renewal
    assert not IssuanceRequest(["a.example.com"]).is_renewal


def test_bad_requests_are_refused() -> None:
    with pytest.raises(InvalidInput):
        IssuanceRequest([])
    with pytest.raises(InvalidInput, match="timezone"):
        IssuanceRequest(["a.example.com"], expires_at=dt.datetime(2026, 1, 1))
    with pytest.raises(InvalidInput, match="priority"):
        IssuanceRequest(["a.example.com"], priority=1.5)  # type: ignore[arg-type]
