"""Protocol features against a real Pebble: tls-alpn-01, EAB, key rollover, deactivation,
alternate chains, profiles, and the CA's identifier errors."""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import secrets
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from requests_seen import on_requests

from acmecerts import (
    AccountDoesNotExist,
    AccountKey,
    AcmeClient,
    AcmeProblem,
    AuthorizationFailed,
    BadServerResponse,
    ChallengeTask,
    ExternalAccountBinding,
    ExternalAccountRequired,
    Http01Server,
    InvalidIdentifier,
    InvalidInput,
    IssuedCertificate,
    TlsAlpn01Server,
)
from acmecerts.errors import Malformed, RejectedIdentifier, Unauthorized
from acmecerts.protocol.identifiers import Identifier
from acmecerts.testing import PebbleServer

from .conftest import assert_valid_chain

pytestmark = pytest.mark.anyio


def b64url_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def management_pem(server: PebbleServer, path: str) -> str:
    """``GET`` from Pebble's management API (``/roots/N``, ``/intermediates/N``)."""
    context = ssl.create_default_context(cafile=str(server.ca_bundle))
    response = httpx.get(server.management_url + path, verify=context, trust_env=False)
    response.raise_for_status()
    return response.text


def common_name(pem: str) -> str:
    cert = x509.load_pem_x509_certificate(pem.encode())
    value = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
    assert isinstance(value, str)
    return value


PebbleFactory = Callable[..., PebbleServer]


def posts(server: PebbleServer, path: str) -> int:
    return server.requests_seen().count(("POST", path))


# -- tls-alpn-01 (RFC 8737) ---------------------------------------------------------------


@pytest.fixture
def no_reuse_pebble(pebble_factory: PebbleFactory) -> PebbleServer:
    """A Pebble that never reuses authorizations: every name is validated for real."""
    return pebble_factory(authz_reuse_percent=0)


async def test_tls_alpn_01_issues_for_names_and_an_ip_address(
    no_reuse_pebble: PebbleServer,
) -> None:
    server = no_reuse_pebble
    async with (
        TlsAlpn01Server(host="127.0.0.1", port=server.tls_port) as solver,
        AcmeClient(server.directory_url, ca_bundle=server.ca_bundle) as acme,
    ):
        names = ["alpn1.example.test", "alpn2.example.test"]
        assert_valid_chain(await acme.issue(names, solver=solver), server, names)
        # RFC 8738 §6: Pebble asks for 1.0.0.127.in-addr.arpa in SNI
        assert_valid_chain(await acme.issue(["127.0.0.1"], solver=solver), server, ["127.0.0.1"])


class _WrongKeyAuthorization(TlsAlpn01Server):
    """Serves a well-formed validation certificate for the wrong key authorization."""

    async def present(self, task: ChallengeTask) -> None:
        wrong = dataclasses.replace(task, key_authorization=task.token + ".not-my-thumbprint")
        await super().present(wrong)


async def test_tls_alpn_01_with_a_wrong_certificate_fails_with_the_ca_detail(
    no_reuse_pebble: PebbleServer,
) -> None:
    server = no_reuse_pebble
    async with (
        _WrongKeyAuthorization(host="127.0.0.1", port=server.tls_port) as solver,
        AcmeClient(server.directory_url, ca_bundle=server.ca_bundle) as acme,
    ):
        with pytest.raises(AuthorizationFailed) as info:
            await acme.issue(["wrong-alpn.example.test"], solver=solver)
    problem = info.value.problem
    assert problem is not None
    assert problem.type == "urn:ietf:params:acme:error:unauthorized"
    assert "acmeValidation extension value" in problem.detail


# -- external account binding (RFC 8555 §7.3.4) -------------------------------------------

EAB_KEY = b64url_key()


@pytest.fixture
def eab_pebble(pebble_factory: PebbleFactory) -> PebbleServer:
    return pebble_factory(eab_required=True, eab_mac_keys={"kid-1": EAB_KEY})


async def test_eab_missing_is_a_clear_error_before_any_account_request(
    eab_pebble: PebbleServer,
) -> None:
    async with AcmeClient(eab_pebble.directory_url, ca_bundle=eab_pebble.ca_bundle) as acme:
        assert (await acme.directory()).external_account_required
        with pytest.raises(ExternalAccountRequired) as info:
            await acme.register()
        # issue() registers on first use: same error, still nothing sent
        with pytest.raises(ExternalAccountRequired):
            await acme.issue(["eab.example.test"], solver=Http01Server(port=0))
    error = info.value
    assert "ExternalAccountBinding(kid, hmac_key)" in str(error)
    assert error.type == "urn:ietf:params:acme:error:externalAccountRequired"
    assert error.reached_ca is False
    assert posts(eab_pebble, "/sign-me-up") == 0
    assert posts(eab_pebble, "/order-plz") == 0


async def test_eab_binding_creates_the_account_and_issues(eab_pebble: PebbleServer) -> None:
    binding = ExternalAccountBinding("kid-1", EAB_KEY)
    assert EAB_KEY not in repr(binding)
    async with (
        Http01Server(host="127.0.0.1", port=eab_pebble.http_port) as solver,
        AcmeClient(eab_pebble.directory_url, ca_bundle=eab_pebble.ca_bundle, eab=binding) as acme,
    ):
        account = await acme.register()
        assert account.status == "valid"
        issued = await acme.issue(["eab.example.test"], solver=solver)
    assert_valid_chain(issued, eab_pebble, ["eab.example.test"])


@pytest.mark.parametrize(
    ("kid", "detail"),
    [
        ("kid-1", "external account binding JWS verification error"),  # wrong MAC key
        ("kid-unknown", "not known to the ACME server"),
    ],
)
async def test_a_wrong_eab_binding_is_the_cas_typed_problem(
    eab_pebble: PebbleServer, kid: str, detail: str
) -> None:
    binding = ExternalAccountBinding(kid, b64url_key() if kid == "kid-1" else EAB_KEY)
    async with AcmeClient(
        eab_pebble.directory_url, ca_bundle=eab_pebble.ca_bundle, eab=binding
    ) as acme:
        with pytest.raises(Unauthorized) as info:
            await acme.register()
    assert detail in info.value.detail
    assert info.value.status_code == 403
    assert acme.account_url is None


# -- key rollover (§7.3.5) and deactivation (§7.3.6) --------------------------------------


async def test_key_rollover_refuses_the_old_key_and_keeps_the_account(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    account = await client.register()
    old_key, new_key = client.account_key, AccountKey.generate()
    await client.change_key(new_key)
    assert client.account_key is new_key

    async with AcmeClient(
        pebble.directory_url,
        ca_bundle=pebble.ca_bundle,
        account_key=old_key,
        account_url=account.url,
    ) as old:
        with pytest.raises(Malformed, match="JWS verification error"):
            await old.account()
        with pytest.raises(AccountDoesNotExist):
            await old.find_account()

    async with AcmeClient(
        pebble.directory_url, ca_bundle=pebble.ca_bundle, account_key=new_key
    ) as new:
        assert (await new.find_account()).url == account.url
        issued = await new.issue(["rolled.example.test"], solver=http01)
    assert_valid_chain(issued, pebble, ["rolled.example.test"])
    # the client that rolled over goes on with the new key
    assert (await client.account()).url == account.url


@pytest.mark.parametrize("release", ["2.10", "2.4"])
async def test_key_rollover_to_a_key_of_another_account_is_refused(
    pebble: PebbleServer, pebble_2_4: PebbleServer, release: str
) -> None:
    ca = pebble if release == "2.10" else pebble_2_4
    async with (
        AcmeClient(ca.directory_url, ca_bundle=ca.ca_bundle) as client,
        AcmeClient(ca.directory_url, ca_bundle=ca.ca_bundle) as other,
    ):
        await client.register()
        old_key = client.account_key
        await other.register()
        seen: list[str] = []
        client.transport.subscribe(on_requests(lambda method, url: seen.append(url)))
        if release == "2.4":
            # RFC 8555 §7.3.5 says 409 Conflict; Pebble 2.4 answers 500 serverInternal.
            # A 5xx leaves the outcome open, so the client asked the CA whom the new key
            # belongs to (newAccount with onlyReturnExisting) instead of replaying it.
            with pytest.raises(AcmeProblem, match="already in use") as info:
                await client.change_key(other.account_key)
            assert info.value.status_code in (409, 500)
        else:
            # Pebble 2.10 answers an empty 200 (its handler returns without a status),
            # not the account object of a success: the client asks the same question
            # rather than take the new key.
            with pytest.raises(BadServerResponse, match="belongs to another account"):
                await client.change_key(other.account_key)
        assert [u.rsplit("/", 1)[-1] for u in seen if "/rollover" in u or "/sign-me-up" in u] == [
            "rollover-account-key",
            "sign-me-up",
        ]
        assert client.account_key is old_key
        await client.account()  # the old key still works


async def test_a_deactivated_account_is_refused_with_a_typed_problem(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    await client.register()
    account = await client.deactivate_account()
    assert account.status == "deactivated"
    with pytest.raises(Unauthorized, match="deactivated"):
        await client.account()
    with pytest.raises(Unauthorized, match="deactivated"):
        await client.issue(["deactivated.example.test"], solver=http01)
    with pytest.raises(Unauthorized, match="deactivated"):
        await client.find_account()


# -- alternate chains (§7.4.2) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def chains_pebble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PebbleServer]:
    """Three chains per certificate (default + 2 alternates), 2 intermediates each."""
    server = PebbleServer(
        tmp_path_factory.mktemp("pebble-chains"),
        extra_env={"PEBBLE_ALTERNATE_ROOTS": "2", "PEBBLE_CHAIN_LENGTH": "3"},
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def chains(chains_pebble: PebbleServer) -> AsyncIterator[tuple[AcmeClient, Http01Server]]:
    async with (
        Http01Server(host="127.0.0.1", port=chains_pebble.http_port) as solver,
        AcmeClient(chains_pebble.directory_url, ca_bundle=chains_pebble.ca_bundle) as acme,
    ):
        yield acme, solver


def assert_chains_to(issued: IssuedCertificate, root_pem: str) -> None:
    certs = issued.chain.certificates
    for child, parent in itertools.pairwise(certs):
        child.verify_directly_issued_by(parent)
    certs[-1].verify_directly_issued_by(x509.load_pem_x509_certificate(root_pem.encode()))
    assert issued.chain.root_issuer_name == common_name(root_pem)


async def test_the_default_chain_leads_to_root_0_without_fetching_alternates(
    chains_pebble: PebbleServer, chains: tuple[AcmeClient, Http01Server]
) -> None:
    acme, solver = chains
    seen: list[str] = []
    acme.transport.subscribe(on_requests(lambda method, url: seen.append(url)))
    issued = await acme.issue(["default-chain.example.test"], solver=solver)
    assert_valid_chain(issued, chains_pebble, ["default-chain.example.test"])
    assert_chains_to(issued, management_pem(chains_pebble, "/roots/0"))
    assert len(issued.chain.certificates) == 4  # leaf + 3 intermediates
    assert issued.alternate_chains == ()
    assert not [u for u in seen if "/alternate/" in u]
    # preferring the default root costs nothing either
    seen.clear()
    root0 = common_name(management_pem(chains_pebble, "/roots/0"))
    issued = await acme.issue(["default-chain.example.test"], solver=solver, preferred_chain=root0)
    assert_chains_to(issued, management_pem(chains_pebble, "/roots/0"))
    assert not [u for u in seen if "/alternate/" in u]


@pytest.mark.parametrize("index", [1, 2])
async def test_preferring_an_alternate_root_by_its_common_name(
    chains_pebble: PebbleServer, chains: tuple[AcmeClient, Http01Server], index: int
) -> None:
    acme, solver = chains
    root = management_pem(chains_pebble, f"/roots/{index}")
    name = f"alt{index}.example.test"
    issued = await acme.issue([name], solver=solver, preferred_chain=common_name(root))
    assert_chains_to(issued, root)
    assert issued.names == (name,)
    # the other two chains are kept, for the same leaf
    assert len(issued.alternate_chains) == 2
    for other in issued.alternate_chains:
        assert other.leaf == issued.chain.leaf
        assert other.root_issuer_name != common_name(root)
    assert_chains_to(
        dataclasses.replace(issued, chain=issued.alternate_chains[0]),
        management_pem(chains_pebble, "/roots/0"),
    )


async def test_preferring_a_chain_by_an_intermediates_common_name(
    chains_pebble: PebbleServer, chains: tuple[AcmeClient, Http01Server]
) -> None:
    acme, solver = chains
    root2 = management_pem(chains_pebble, "/roots/2")
    first = await acme.issue(
        ["intermediate.example.test"],
        solver=solver,
        preferred_chain=common_name(management_pem(chains_pebble, "/roots/1")),
    )
    (to_root2,) = [c for c in first.alternate_chains if c.root_issuer_name == common_name(root2)]
    # an intermediate found only in the chain to root 2 (issuer of its third certificate)
    intermediate = to_root2.issuer_names[1]
    assert intermediate.startswith("Pebble Intermediate CA")
    assert intermediate not in first.chain.issuer_names
    issued = await acme.issue(
        ["intermediate.example.test"], solver=solver, preferred_chain=intermediate
    )
    assert_chains_to(issued, root2)
    assert intermediate in issued.chain.issuer_names


async def test_a_name_shared_by_every_chain_or_unknown_keeps_the_default(
    chains_pebble: PebbleServer, chains: tuple[AcmeClient, Http01Server]
) -> None:
    acme, solver = chains
    root0 = management_pem(chains_pebble, "/roots/0")
    # the leaf's issuing intermediate is cross-signed: it is in every chain
    shared = common_name(management_pem(chains_pebble, "/intermediates/0"))
    for preference in (shared, "No Such Root CA"):
        issued = await acme.issue(["keep.example.test"], solver=solver, preferred_chain=preference)
        assert_chains_to(issued, root0)
        assert issued.chain.issuer_names[0] == shared
        assert len(issued.alternate_chains) == 2


# -- profiles (draft-aaron-acme-profiles): Pebble 2.4 has none ----------------------------


async def test_a_profile_the_ca_does_not_offer_is_refused_before_ordering(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    assert "enterprise" not in (await client.directory()).profiles  # Pebble 2.10 has three
    orders = posts(pebble, "/order-plz")
    with pytest.raises(InvalidInput, match="'enterprise'"):
        await client.issue(["profile.example.test"], solver=http01, profile="enterprise")
    assert posts(pebble, "/order-plz") == orders


# -- identifier errors from the CA (§6.7, §7.4) ---------------------------------------------


class _BlocklistPebble(PebbleServer):
    """Pebble with a ``domainBlocklist`` (a config key the harness does not expose)."""

    def _write_config(self) -> None:
        super()._write_config()
        config = json.loads(self.config_path.read_text(encoding="utf-8"))
        config["pebble"]["domainBlocklist"] = ["blocked.test"]
        self.config_path.write_text(json.dumps(config), encoding="utf-8")


@pytest.fixture
def blocklist_pebble(tmp_path: Path) -> Iterator[PebbleServer]:
    with _BlocklistPebble(tmp_path / "pebble") as server:
        yield server


async def test_a_rejected_identifier_carries_the_cas_detail(
    blocklist_pebble: PebbleServer,
) -> None:
    server = blocklist_pebble
    async with (
        Http01Server(host="127.0.0.1", port=server.http_port) as solver,
        AcmeClient(server.directory_url, ca_bundle=server.ca_bundle) as acme,
    ):
        with pytest.raises(RejectedIdentifier) as info:
            await acme.issue(["fine.example.test", "www.blocked.test"], solver=solver)
        # the rest of the names are fine
        issued = await acme.issue(["fine.example.test"], solver=solver)
    error = info.value
    assert error.type == "urn:ietf:params:acme:error:rejectedIdentifier"
    assert error.status_code == 400
    assert '"www.blocked.test"' in error.detail
    assert "forbidden by policy" in str(error)
    assert_valid_chain(issued, server, ["fine.example.test"])


async def test_a_malformed_identifier_sent_anyway_is_the_cas_typed_problem(
    pebble: PebbleServer, client: AcmeClient, http01: Http01Server
) -> None:
    with pytest.raises(InvalidIdentifier):  # refused locally by issue()
        await client.issue(["bad_name.example"], solver=http01)
    # new_order() sends a ready Identifier as it is: the CA says what is wrong with it
    with pytest.raises(Malformed) as info:
        await client.new_order([Identifier("dns", "bad_name.example")])
    assert "illegal character" in info.value.detail
    with pytest.raises(Malformed, match="too many wildcards"):
        await client.new_order([Identifier("dns", "*.*.example.com")])
