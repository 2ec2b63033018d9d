"""Coverage-guided fuzzing of the parsers with atheris (run by hand; not part of the suite).

The hypothesis tests in ``test_fuzz_parsers.py`` run a few hundred structured examples
on every test run; this harness lets libFuzzer explore for as long as you like, guided by
coverage of acmecerts' own code. The property is the same: any input gives a result or an
:class:`~acmecerts.errors.AcmeCertsError`; anything else (or a hang past ``-timeout``) is a
crash that libFuzzer reports with the input that caused it (saved as ``crash-*``).

Usage (``pip install atheris``, which has wheels for CPython 3.11 on x86-64 Linux)::

    python tests/security/atheris_parsers.py --list
    PYTHONPATH=. python tests/security/atheris_parsers.py --make-corpus corpus
    python tests/security/atheris_parsers.py --target json -max_total_time=300 corpus/json
    python tests/security/atheris_parsers.py --target pem -runs=200000 corpus/pem
    python tests/security/atheris_parsers.py -max_total_time=60   # every target on each input

Each target reads the whole input as one document (an answer body, a header value, a
stored file...), so a corpus of real answers (``--make-corpus`` writes one from the
documents of ``test_fuzz_parsers.py``) gets libFuzzer to the deep branches quickly.

Targets: ``json`` (a CA's answer through ``AcmeResponse.json()`` into the directory,
order, authorization, challenge, account and renewalInfo parsers), ``problem``,
``retry-after``, ``link``, ``pem`` (chains, then everything the client reads from them),
``cert`` (DER/PEM into ``load_certificate`` and ``cert_id``), ``identifier``, ``state``
(attempt state, ledger, and the FileStorage envelope) and ``token``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable

import atheris

with atheris.instrument_imports(include=["acmecerts"]):
    import httpx

    from acmecerts._time import parse_retry_after, retry_after_from_detail
    from acmecerts.errors import AcmeCertsError
    from acmecerts.protocol.ari import cert_id, load_certificate
    from acmecerts.protocol.certificate import (
        certificate_info,
        check_certificate_matches,
        parse_pem_chain,
    )
    from acmecerts.protocol.challenges import validate_token
    from acmecerts.protocol.identifiers import Identifier, parse_identifier
    from acmecerts.protocol.keys import generate_private_key
    from acmecerts.protocol.problems import problem_from_response
    from acmecerts.protocol.resources import (
        parse_account,
        parse_authorization,
        parse_challenge,
        parse_directory,
        parse_order,
        parse_renewal_info,
    )
    from acmecerts.ratelimit._state import LedgerState
    from acmecerts.retry import AttemptState
    from acmecerts.storage.filesystem import FileStorage
    from acmecerts.transport._response import AcmeResponse, _parse_links

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
URL = "https://ca.test/acme/x"
KEY = generate_private_key()
IDENTIFIERS = (Identifier("dns", "example.com"),)
PARSERS: tuple[Callable[..., object], ...] = (
    parse_order,
    parse_authorization,
    parse_challenge,
    parse_account,
    parse_renewal_info,
    parse_directory,
)
CONTENT_TYPES = ("application/json", "application/problem+json", "text/plain", "")
_STORE = FileStorage(tempfile.mkdtemp(prefix="acmecerts-atheris-"))
_STORE_KEY = "fuzz/value.json"


def _json(data: bytes) -> None:
    """The input is the body of a CA's answer; every resource parser reads it."""
    headers = httpx.Headers({"content-type": "application/json"})
    response = AcmeResponse(200, headers, data, URL, None)
    document = response.json()
    for parser in PARSERS:
        with contextlib.suppress(AcmeCertsError):
            parser(document, url=URL)


def _problem(data: bytes) -> None:
    """The input is the body of an error answer."""
    for status in (400, 429, 503):
        for content_type in CONTENT_TYPES:
            problem = problem_from_response(
                status_code=status, content_type=content_type, body=data, url=URL
            )
            if problem is not None:
                str(problem)


def _retry_after(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    for func in (parse_retry_after, retry_after_from_detail):
        result = func(text, now=NOW)
        if result is not None and not NOW <= result <= NOW + dt.timedelta(days=30):
            raise AssertionError(f"{func.__name__}({text!r}) = {result} is out of bounds")


def _link(data: bytes) -> None:
    """The input is a ``Link`` header value."""
    _parse_links(data.decode("latin-1"), "alternate", base=URL)
    AcmeResponse(200, httpx.Headers([(b"link", data)]), b"", URL, None).links("alternate")


def _pem(data: bytes) -> None:
    chain = parse_pem_chain(data, url=URL)
    chain.leaf_pem  # noqa: B018 - properties are the code under test
    chain.intermediates_pem  # noqa: B018
    chain.root_issuer_name  # noqa: B018
    certificate_info(chain.leaf)
    check_certificate_matches(chain, key=KEY, identifiers=IDENTIFIERS)


def _cert(data: bytes) -> None:
    cert_id(load_certificate(data))


def _identifier(data: bytes) -> None:
    ident = parse_identifier(data.decode("utf-8", "replace"))
    if parse_identifier(ident.value) != ident:
        raise AssertionError(f"not idempotent: {ident!r}")


def _state(data: bytes) -> None:
    """The input is a stored file: attempt state, the ledger, a FileStorage envelope."""
    for parse in (_attempt_state, LedgerState.from_bytes, _envelope):
        with contextlib.suppress(AcmeCertsError):
            parse(data)


def _attempt_state(data: bytes) -> None:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return
    AttemptState.from_json(document)


def _envelope(data: bytes) -> None:
    path = _STORE.path_for(_STORE_KEY)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "wb") as file:
        file.write(data)
    _STORE._load_sync(_STORE_KEY)  # the same code as load(), without an event loop


def _token(data: bytes) -> None:
    token = validate_token(data.decode("utf-8", "replace"))
    if not re.fullmatch(r"[A-Za-z0-9_-]+", token):
        raise AssertionError(f"accepted {token!r}")


TARGETS: dict[str, Callable[[bytes], None]] = {
    "json": _json,
    "problem": _problem,
    "retry-after": _retry_after,
    "link": _link,
    "pem": _pem,
    "cert": _cert,
    "identifier": _identifier,
    "state": _state,
    "token": _token,
}


def _all(data: bytes) -> None:
    for target in TARGETS.values():
        with contextlib.suppress(AcmeCertsError):
            target(data)


def _seeds() -> dict[str, list[bytes]]:
    """Valid inputs per target: libFuzzer mutates these far better than it invents JSON."""
    from tests.security.test_fuzz_parsers import (
        ACCOUNT,
        AUTHORIZATION,
        CHAIN_PEM,
        CHALLENGE,
        DIRECTORY,
        LEAF_DER,
        ORDER,
        PROBLEM,
        RENEWAL_INFO,
    )

    documents = [DIRECTORY, ORDER, AUTHORIZATION, CHALLENGE, ACCOUNT, RENEWAL_INFO]
    return {
        "json": [json.dumps(d).encode() for d in documents],
        "problem": [json.dumps(PROBLEM).encode()],
        "retry-after": [
            b"120",
            b"Fri, 31 Dec 1999 23:59:59 GMT",
            b"retry after 2026-01-01 00:00:00 UTC",
        ],
        "link": [b'<https://ca.test/cert/1/1>;rel="alternate", </cert/1/2>; rel=alternate'],
        "pem": [CHAIN_PEM],
        "cert": [LEAF_DER, CHAIN_PEM],
        "identifier": [b"example.com", b"*.xn--bcher-kva.example", b"192.0.2.1", b"[2001:db8::1]"],
        "state": [json.dumps({"attempts": 1, "next_attempt_at": NOW.isoformat()}).encode()],
        "token": [b"LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"],
    }


def make_corpus(root: str) -> None:
    """Write the seeds to ``root/<target>/seed-N`` (run from the repository root)."""
    for target, seeds in _seeds().items():
        os.makedirs(os.path.join(root, target), exist_ok=True)
        for number, seed in enumerate(seeds):
            with open(os.path.join(root, target, f"seed-{number}"), "wb") as file:
                file.write(seed)


def main() -> None:
    argv = list(sys.argv)
    if "--list" in argv:
        print("\n".join(TARGETS))
        return
    if "--make-corpus" in argv:
        make_corpus(argv[argv.index("--make-corpus") + 1])
        return
    target = _all
    if "--target" in argv:
        index = argv.index("--target")
        name = argv[index + 1]
        del argv[index : index + 2]
        target = TARGETS[name]

    def test_one_input(data: bytes) -> None:
        with contextlib.suppress(AcmeCertsError):  # a typed error answers bad input correctly
            target(data)

    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
