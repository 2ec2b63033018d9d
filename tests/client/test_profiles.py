"""Certificate profiles (draft-aaron-acme-profiles), with recorded answers.

Debian's Pebble 2.4 predates profiles, so the CA here is an ``httpx.MockTransport`` that
answers like Let's Encrypt does: its directory advertises ``meta.profiles``, ``newOrder``
echoes the ``profile`` it accepted, and a profile the account may not use is refused with
``urn:ietf:params:acme:error:invalidProfile``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest

import acmecerts
from acmecerts import AcmeClient, AcmeProblem, ErrorKind, InvalidInput, InvalidProfile
from acmecerts.errors import ProblemType, problem_class
from acmecerts.transport import AcmeTransport

pytestmark = pytest.mark.anyio

BASE = "https://acme-staging.test/acme"
#: Let's Encrypt staging's directory (2025), with the host replaced.
LE_DIRECTORY = {
    "keyChange": f"{BASE}/key-change",
    "meta": {
        "caaIdentities": ["letsencrypt.org"],
        "profiles": {
            "classic": "https://letsencrypt.org/docs/profiles#classic",
            "shortlived": "https://letsencrypt.org/docs/profiles#shortlived",
            "tlsserver": "https://letsencrypt.org/docs/profiles#tlsserver",
        },
        "termsOfService": "https://letsencrypt.org/documents/LE-SA-v1.5-February-24-2025.pdf",
        "website": "https://letsencrypt.org/docs/staging-environment/",
    },
    "newAccount": f"{BASE}/new-acct",
    "newNonce": f"{BASE}/new-nonce",
    "newOrder": f"{BASE}/new-order",
    "renewalInfo": f"{BASE}/renewal-info",
    "revokeCert": f"{BASE}/revoke-cert",
}
NO_PROFILES_DIRECTORY = {k: v for k, v in LE_DIRECTORY.items() if k not in ("meta", "renewalInfo")}


def order_answer(payload: Mapping[str, Any]) -> httpx.Response:
    """A new order as Boulder answers it (the accepted profile echoed)."""
    body: dict[str, Any] = {
        "status": "pending",
        "expires": "2026-03-08T12:00:00Z",
        "identifiers": payload["identifiers"],
        "authorizations": [f"{BASE}/authz/1"],
        "finalize": f"{BASE}/finalize/1/1",
    }
    if "profile" in payload:
        body["profile"] = payload["profile"]
    return httpx.Response(201, json=body, headers={"Location": f"{BASE}/order/1/1"})


class RecordedCA:
    """Answers the directory, nonces, ``newAccount`` and ``newOrder``; records payloads."""

    def __init__(
        self,
        directory: Mapping[str, Any] = LE_DIRECTORY,
        new_order: Callable[[Mapping[str, Any]], httpx.Response] = order_answer,
    ) -> None:
        self.directory = directory
        self.new_order = new_order
        self.requests: list[str] = []
        self.payloads: dict[str, list[Any]] = {}
        self._nonce = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/acme")
        self.requests.append(f"{request.method} {path}")
        if path == "/dir":
            return httpx.Response(200, json=self.directory)
        response = self.answer(path, request)
        self._nonce += 1
        response.headers["Replay-Nonce"] = f"recorded-nonce-{self._nonce:04d}"
        return response

    def answer(self, path: str, request: httpx.Request) -> httpx.Response:
        if path == "/new-nonce":
            return httpx.Response(200)
        body = json.loads(request.content)
        raw = body["payload"]
        payload = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))) if raw else None
        self.payloads.setdefault(path, []).append(payload)
        if path == "/new-acct":
            return httpx.Response(
                201, json={"status": "valid"}, headers={"Location": f"{BASE}/acct/1"}
            )
        if path == "/new-order":
            return self.new_order(payload)
        return httpx.Response(404)


def client_for(ca: RecordedCA) -> AcmeClient:
    http = httpx.AsyncClient(transport=httpx.MockTransport(ca))
    return AcmeClient(f"{BASE}/dir", transport=AcmeTransport(f"{BASE}/dir", client=http))


async def test_the_directory_lists_the_profiles() -> None:
    async with client_for(RecordedCA()) as acme:
        directory = await acme.directory()
    assert directory.profiles == {
        "classic": "https://letsencrypt.org/docs/profiles#classic",
        "shortlived": "https://letsencrypt.org/docs/profiles#shortlived",
        "tlsserver": "https://letsencrypt.org/docs/profiles#tlsserver",
    }


async def test_a_directory_without_profiles_lists_none() -> None:
    async with client_for(RecordedCA(NO_PROFILES_DIRECTORY)) as acme:
        assert (await acme.directory()).profiles == {}


async def test_new_order_sends_the_profile() -> None:
    ca = RecordedCA()
    async with client_for(ca) as acme:
        order = await acme.new_order(["example.com"], profile="shortlived")
        plain = await acme.new_order(["example.com"])
    sent, sent_plain = ca.payloads["/new-order"]
    assert sent == {
        "identifiers": [{"type": "dns", "value": "example.com"}],
        "profile": "shortlived",
    }
    assert "profile" not in sent_plain
    assert order.profile == "shortlived"
    assert plain.profile is None


@pytest.mark.parametrize(
    ("directory", "offered"),
    [(LE_DIRECTORY, "classic, shortlived, tlsserver"), (NO_PROFILES_DIRECTORY, "none")],
)
async def test_a_profile_the_ca_does_not_offer_is_refused_before_sending(
    directory: Mapping[str, Any], offered: str
) -> None:
    ca = RecordedCA(directory)
    async with client_for(ca) as acme:
        with pytest.raises(InvalidInput, match="offers no profile 'longlived'") as info:
            await acme.new_order(["example.com"], profile="longlived")
        with pytest.raises(InvalidInput):
            await acme.issue(["example.com"], solver=acmecerts.Http01Server(), profile="longlived")
    assert offered in str(info.value)
    assert info.value.reached_ca is False
    assert ca.requests == ["GET /dir"]  # the directory, nothing else


def invalid_profile(payload: Mapping[str, Any]) -> httpx.Response:
    """Boulder refusing a profile the account is not allowed to use."""
    return httpx.Response(
        400,
        json={
            "type": "urn:ietf:params:acme:error:invalidProfile",
            "detail": f'profile "{payload["profile"]}" is not allowed for this account',
            "status": 400,
        },
        headers={"Content-Type": "application/problem+json"},
    )


async def test_the_cas_invalid_profile_problem_is_typed() -> None:
    ca = RecordedCA(new_order=invalid_profile)
    async with client_for(ca) as acme:
        with pytest.raises(InvalidProfile) as info:
            await acme.new_order(["example.com"], profile="shortlived")
    error = info.value
    assert isinstance(error, AcmeProblem)
    assert error.type == ProblemType.INVALID_PROFILE
    assert error.detail == 'profile "shortlived" is not allowed for this account'
    assert error.status_code == 400
    assert error.kind is ErrorKind.PERMANENT  # asking again will not help
    assert ca.requests.count("POST /new-order") == 1  # not retried


def test_invalid_profile_is_in_the_problem_table_and_exported() -> None:
    assert problem_class("urn:ietf:params:acme:error:invalidProfile") is InvalidProfile
    assert acmecerts.InvalidProfile is InvalidProfile
    assert "InvalidProfile" in acmecerts.errors.__all__
