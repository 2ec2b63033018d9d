"""dns-account-01 names and dns-persist-01 records (``acmecerts.protocol.challenges``), and
how the flow turns those challenges into tasks: no event loop, no network.

That Pebble 2.10 accepts what is computed here is shown end to end in
``tests/integration/test_dns_account_persist.py``.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from test_flow import (
    AUTHZ,
    DEADLINE,
    DNS,
    NAMES,
    POLICY,
    THUMB,
    FakeSolver,
    authz,
    challenge,
    order,
)

from acmecerts.errors import BadServerResponse, InvalidInput, UnsupportedChallenge
from acmecerts.protocol._flow import Fail, IssuanceFlow, Present
from acmecerts.protocol._solver import ChallengeTask
from acmecerts.protocol.challenges import (
    check_issuer_domain_names,
    dns_account01_label,
    dns_account01_record_name,
    dns_persist01_record_name,
    dns_persist01_txt_value,
    parse_dns_persist01_value,
)
from acmecerts.protocol.identifiers import Identifier
from acmecerts.protocol.resources import parse_challenge

ACCOUNT = "https://ca.test/acme/acct/42"
NOW = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
PERSIST = FakeSolver("dns-persist-01", wildcards=True)
ACCOUNT01 = FakeSolver("dns-account-01", wildcards=True)


# -- dns-account-01 ------------------------------------------------------------------------


def test_the_account_label_is_16_base32_characters_of_the_account() -> None:
    label = dns_account01_label(ACCOUNT)
    # 10 octets of the digest are 80 bits: 16 base32 characters, no padding
    assert re.fullmatch(r"_[a-z2-7]{16}", label)
    assert dns_account01_label(ACCOUNT) == label
    assert dns_account01_label(ACCOUNT + "3") != label


def test_the_account_record_name_drops_a_wildcard() -> None:
    label = dns_account01_label(ACCOUNT)
    assert dns_account01_record_name("*.Example.COM.", ACCOUNT) == (
        f"{label}._acme-challenge.example.com"
    )
    with pytest.raises(InvalidInput):
        dns_account01_label("")


def test_each_task_type_names_the_record_the_ca_reads() -> None:
    def task(ctype: str, account: str | None = ACCOUNT) -> ChallengeTask:
        ident = Identifier("dns", "*.example.com")
        return ChallengeTask(ctype, ident, "t", "k", "https://ca.test/c", account_url=account)

    assert task("dns-01").dns_record_name == "_acme-challenge.example.com"
    assert task("dns-account-01").dns_record_name == (
        f"{dns_account01_label(ACCOUNT)}._acme-challenge.example.com"
    )
    assert task("dns-persist-01").dns_record_name == "_validation-persist.example.com"
    with pytest.raises(UnsupportedChallenge):
        _ = task("dns-account-01", None).dns_record_name


def test_dns_account_01_needs_a_token() -> None:
    chall = {"type": "dns-account-01", "url": "https://ca.test/c", "status": "pending"}
    with pytest.raises(BadServerResponse, match="token"):
        parse_challenge(chall, url="https://ca.test/authz")


# -- dns-persist-01 records -----------------------------------------------------------------


def test_the_persist_record_value() -> None:
    assert dns_persist01_record_name("*.example.com") == "_validation-persist.example.com"
    assert dns_persist01_txt_value("LetsEncrypt.org.", ACCOUNT) == (
        f"letsencrypt.org; accounturi={ACCOUNT}"
    )
    until = dt.datetime(2028, 1, 1, tzinfo=dt.UTC)
    assert dns_persist01_txt_value(
        "letsencrypt.org", ACCOUNT, wildcard=True, persist_until=until
    ) == (f"letsencrypt.org; accounturi={ACCOUNT}; policy=wildcard; persistUntil=1830297600")


@pytest.mark.parametrize(
    ("issuer", "account", "until"),
    [
        ("not a domain", ACCOUNT, None),
        ("", ACCOUNT, None),
        ("letsencrypt.org", "https://ca.test/a b", None),
        ("letsencrypt.org", "https://ca.test/a;b", None),
        ("letsencrypt.org", ACCOUNT, dt.datetime(2028, 1, 1)),  # naive
    ],
)
def test_a_persist_record_of_bad_parts_is_refused(
    issuer: str, account: str, until: dt.datetime | None
) -> None:
    with pytest.raises(InvalidInput):
        dns_persist01_txt_value(issuer, account, persist_until=until)


def test_a_record_reads_back_as_written() -> None:
    until = dt.datetime(2028, 1, 1, tzinfo=dt.UTC)
    value = dns_persist01_txt_value("ca.example", ACCOUNT, wildcard=True, persist_until=until)
    record = parse_dns_persist01_value(value)
    assert record is not None
    assert (record.issuer, record.account_uri, record.wildcard, record.persist_until) == (
        "ca.example",
        ACCOUNT,
        True,
        until,
    )


def test_tags_are_case_insensitive_and_unknown_ones_ignored() -> None:
    record = parse_dns_persist01_value(
        f" ca.example ;AccountURI={ACCOUNT};\tPOLICY=Wildcard; future=1; PersistUntil=10"
    )
    assert record is not None
    assert record.account_uri == ACCOUNT
    assert record.wildcard
    assert record.persist_until == dt.datetime(1970, 1, 1, 0, 0, 10, tzinfo=dt.UTC)
    other = parse_dns_persist01_value(f"ca.example; accounturi={ACCOUNT}; policy=everything")
    assert other is not None
    assert not other.wildcard


@pytest.mark.parametrize(
    "text",
    [
        "",
        "; accounturi=x",
        "ca.example; accounturi",  # no "="
        f"ca.example; accounturi={ACCOUNT}; accounturi={ACCOUNT}",  # duplicate
        f"ca.example; accounturi={ACCOUNT};",  # trailing ";": an empty parameter
        "ca.example; accounturi=a b",
        "ca.example; persistUntil=soon",
    ],
)
def test_malformed_records_are_none(text: str) -> None:
    assert parse_dns_persist01_value(text) is None


def test_what_a_record_authorizes() -> None:
    plain = parse_dns_persist01_value(f"ca.example; accounturi={ACCOUNT}; persistUntil=100")
    assert plain is not None
    early = dt.datetime.fromtimestamp(50, dt.UTC)
    late = dt.datetime.fromtimestamp(101, dt.UTC)
    assert plain.authorizes(("ca.example",), ACCOUNT, wildcard=False, now=early)
    assert not plain.authorizes(("ca.example",), ACCOUNT, wildcard=False, now=late)
    assert not plain.authorizes(("ca.example",), ACCOUNT, wildcard=True, now=early)
    assert not plain.authorizes(("other.example",), ACCOUNT, wildcard=False, now=early)
    assert not plain.authorizes(("ca.example",), ACCOUNT + "0", wildcard=False, now=early)


@pytest.mark.parametrize(
    "names",
    [None, [], ["a.example"] * 11, [1], "ca.example", ["bad name"], ["x" * 254]],
)
def test_malformed_issuer_domain_names_are_refused(names: object) -> None:
    with pytest.raises(BadServerResponse):
        check_issuer_domain_names(names)


def test_issuer_domain_names_are_normalised() -> None:
    assert check_issuer_domain_names(["CA.Example.", "b.example"]) == ("ca.example", "b.example")


# -- the challenge as parsed, and the task the flow makes ---------------------------------


def persist_challenge(**extra: object) -> dict[str, object]:
    return {
        "type": "dns-persist-01",
        "url": "https://ca.test/chall/p",
        "status": "pending",
        "issuer-domain-names": ["ca.example", "ca2.example"],
        **extra,
    }


def test_a_persist_challenge_has_issuers_and_maybe_an_account_uri() -> None:
    parsed = parse_challenge(persist_challenge(), url=AUTHZ[0])
    assert parsed.token is None
    assert parsed.issuer_domain_names == ("ca.example", "ca2.example")
    assert parsed.account_uri is None
    newer = parse_challenge(persist_challenge(accounturi=ACCOUNT), url=AUTHZ[0])
    assert newer.account_uri == ACCOUNT
    odd = parse_challenge(persist_challenge(**{"issuer-domain-names": "x"}), url=AUTHZ[0])
    assert odd.issuer_domain_names == ()  # kept, refused only if a solver takes it


def pending(solvers: tuple[FakeSolver, ...], **kw: object) -> IssuanceFlow:
    f = IssuanceFlow(
        NAMES,
        solvers,  # type: ignore[arg-type]
        thumbprint=THUMB,
        deadline=DEADLINE,
        poll=POLICY,
        **kw,  # type: ignore[arg-type]
    )
    f.order_received(order("pending"))
    f.next_action(dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC))
    return f


def test_the_flow_makes_a_tokenless_persist_task() -> None:
    f = pending((PERSIST, DNS), account_url=ACCOUNT)
    offered = (challenge("dns-01"), parse_challenge(persist_challenge(), url=AUTHZ[0]))
    action = f.authorization_received(authz(challenges=offered))
    assert isinstance(action, Present)
    task = action.task
    assert (task.type, task.token, task.key_authorization) == ("dns-persist-01", "", "")
    assert task.issuer_domain_names == ("ca.example", "ca2.example")
    assert task.account_url == ACCOUNT


def test_the_cas_accounturi_wins_over_the_flows() -> None:
    f = pending((PERSIST,), account_url=ACCOUNT)
    ca_says = parse_challenge(persist_challenge(accounturi=ACCOUNT + "/x"), url=AUTHZ[0])
    action = f.authorization_received(authz(challenges=(ca_says,)))
    assert isinstance(action, Present)
    assert action.task.account_url == ACCOUNT + "/x"


def test_account_challenges_need_the_account_url() -> None:
    for solver, offered in (
        (PERSIST, parse_challenge(persist_challenge(), url=AUTHZ[0])),
        (ACCOUNT01, challenge("dns-account-01")),
    ):
        f = pending((solver,))
        action = f.authorization_received(authz(challenges=(offered,)))
        assert isinstance(action, Fail)
        assert isinstance(action.error, UnsupportedChallenge)


def test_a_dns_account_task_carries_the_account_url() -> None:
    f = pending((ACCOUNT01,), account_url=ACCOUNT)
    action = f.authorization_received(authz(challenges=(challenge("dns-account-01"),)))
    assert isinstance(action, Present)
    assert action.task.account_url == ACCOUNT
    assert action.task.dns_record_name == dns_account01_record_name("a.example", ACCOUNT)


def test_a_persist_challenge_with_bad_issuers_fails_the_attempt() -> None:
    f = pending((PERSIST,), account_url=ACCOUNT)
    bad = parse_challenge(persist_challenge(**{"issuer-domain-names": []}), url=AUTHZ[0])
    action = f.authorization_received(authz(challenges=(bad,)))
    assert isinstance(action, Fail)
    assert isinstance(action.error, BadServerResponse)
