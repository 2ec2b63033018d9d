"""``AcmeClient.renewal_info`` reads the usual answer from its bytes (no ``json``) only
when it is ``application/json``: any other content type, or any other shape, takes the
general path, with the same results and errors as before."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from acmecerts.errors import BadServerResponse
from acmecerts.protocol.ari import RenewalInfoResult
from acmecerts.testing.simulated_ca import SimulatedCA
from acmecerts.transport import Answer

from ._sim import run


class _Rewriting:
    """The CA, with renewalInfo answers given another content type and/or body."""

    def __init__(self, ca: SimulatedCA, content_type: str, body: bytes | None) -> None:
        self.ca, self.content_type, self.body = ca, content_type, body

    async def exchange(
        self, method: str, url: httpx.URL, headers: Any, body: bytes, timeouts: Any
    ) -> Answer:
        answer = await self.ca.exchange(method, url, headers, body, timeouts)
        if "/renewal-info/" not in str(url):
            return answer
        rewritten = httpx.Headers(answer.headers)
        rewritten["Content-Type"] = self.content_type
        content = answer.content if self.body is None else self.body
        return Answer(answer.status_code, answer.reason, rewritten, content)

    async def aclose(self) -> None:
        """Nothing to release."""


def _ask(content_type: str, body: bytes | None = None) -> RenewalInfoResult:
    async def main(ca: Any, client: Any, solver: Any) -> RenewalInfoResult:
        cert = await client.issue(["w.example"], solvers=[solver], profile="classic")
        client.transport._http = _Rewriting(ca, content_type, body)
        result: RenewalInfoResult = await client.renewal_info(cert.chain.leaf)
        return result

    return run(main)[0]


def test_the_usual_answer_with_parameters_to_its_content_type() -> None:
    plain = _ask("application/json")
    assert _ask("Application/JSON; charset=utf-8").info == plain.info
    assert plain.window_end > plain.window_start
    assert plain.explanation_url is None


def test_another_json_content_type_gives_the_same_window() -> None:
    assert _ask("application/problem+json").info == _ask("application/json").info


def test_a_usual_body_with_a_wrong_content_type_is_refused_as_before() -> None:
    with pytest.raises(BadServerResponse, match="expected application/json"):
        _ask("text/plain")


def test_other_shapes_take_the_general_path() -> None:
    window = b'"suggestedWindow": {"start": "2027-01-01T00:00:00Z", "end": "2027-01-02T00:00:00Z"}'
    info = _ask("application/json", b"{" + window + b', "explanationURL": "https://ca/why"}').info
    assert info.explanation_url == "https://ca/why"
    empty = b'{"suggestedWindow": {"start": "2027-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"}}'
    with pytest.raises(BadServerResponse, match="window is empty"):
        _ask("application/json", empty)
    with pytest.raises(BadServerResponse, match="not valid JSON"):
        _ask("application/json", b"{" + window)
