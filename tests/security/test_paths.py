"""Names from the network never become paths: nothing is written outside its root.

Challenge tokens come from the CA and name webroot files; certificate names and CA
directory URLs name storage keys. Hostile values (``../``, absolute paths, NUL, slashes,
very long names) are refused with typed errors, and the file system is checked: the tree
around the root is unchanged and nothing appeared at the absolute paths named.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acmecerts import BadServerResponse, Http01Webroot, InvalidInput
from acmecerts.protocol.challenges import key_authorization
from acmecerts.protocol.identifiers import parse_identifier
from acmecerts.solvers import ChallengeTask
from acmecerts.storage import FileStorage, KeyLayout
from acmecerts.storage.keys import ca_slug, certificate_slug, validate_key, validate_segment
from tests.security._fake_ca import CA, FakeCa

THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
_ESCAPE = f"acmecerts-escape-{secrets.token_hex(6)}"
#: An absolute path that must never come into existence.
ABSOLUTE = os.path.join(tempfile.gettempdir(), _ESCAPE)

HOSTILE_TOKENS = [
    "../../" + _ESCAPE,
    "../../../../../../../../" + ABSOLUTE.lstrip("/"),
    ABSOLUTE,
    "/" + "a" * 40,
    "..",
    ".",
    "",
    "a" * 20 + "/" + "b" * 20,
    "a" * 20 + "\\" + "b" * 20,
    "a" * 20 + "\x00" + "b" * 20,
    "a" * 20 + "\n" + "b" * 20,
    "a" * 20 + "%2e%2e%2f" + "b" * 20,
    "a" * 20 + "\u2215" + "b" * 20,  # DIVISION SLASH
    "a" * 20 + ".." + "b" * 20,
    "a" * 300,
    "~" + "a" * 20,
]


def escaped() -> bool:
    """Whether anything appeared at :data:`ABSOLUTE`."""
    return os.path.lexists(ABSOLUTE)


def tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def task_for(token: str, name: str = "example.com") -> ChallengeTask:
    return ChallengeTask(
        type="http-01",
        identifier=parse_identifier(name),
        token=token,
        key_authorization=f"{token}.{THUMBPRINT}",
        url=f"{CA}/chall/1",
    )


# --------------------------------------------------------------------------- http-01 webroot


@pytest.mark.anyio
@pytest.mark.parametrize("token", HOSTILE_TOKENS)
async def test_webroot_refuses_hostile_tokens(tmp_path: Path, token: str) -> None:
    root = tmp_path / "srv" / "www"
    root.mkdir(parents=True)
    webroot = Http01Webroot(root)
    with pytest.raises(BadServerResponse):
        await webroot.present(task_for(token))
    await webroot.cleanup(task_for(token))  # must not delete anything either
    with pytest.raises(BadServerResponse):
        webroot.path_for(token)
    assert tree(tmp_path) == ["srv", "srv/www"]
    assert not escaped()


def test_the_token_alphabet_is_base64url_only() -> None:
    with pytest.raises(BadServerResponse):
        key_authorization("../" * 10, THUMBPRINT)


@pytest.mark.anyio
async def test_a_hostile_token_from_the_ca_writes_nothing(tmp_path: Path) -> None:
    """End to end: the CA's authorization carries a traversal token; the client refuses it."""
    ca = FakeCa()
    ca.new_order["status"] = "pending"
    ca.new_order["authorizations"] = [f"{CA}/authz/1"]
    authz = {
        "status": "pending",
        "identifier": {"type": "dns", "value": "example.com"},
        "challenges": [
            {
                "type": "http-01",
                "url": f"{CA}/chall/1",
                "status": "pending",
                "token": "../../../../" + _ESCAPE,
            }
        ],
    }
    ca.routes["/authz/1"] = lambda request: ca.json_response(authz)
    root = tmp_path / "www"
    root.mkdir()
    client = ca.client()
    with pytest.raises(BadServerResponse, match="token"):
        await client.issue(["example.com"], solver=Http01Webroot(root))
    assert tree(tmp_path) == ["www"]
    assert not escaped()
    assert "/chall/1" not in ca.paths()  # the challenge was never answered


# --------------------------------------------------------------------------- storage keys

HOSTILE_NAMES = [
    "../../" + _ESCAPE,
    ABSOLUTE,
    "a/../../b",
    "..",
    ".",
    ".hidden",
    "",
    "a\x00b",
    "a\\b",
    "a b",
    "exa\u2215mple.com",
    "\u00e9xample.com",
    "_wildcard_.example.com",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_certificate_names_are_refused(name: str) -> None:
    layout = KeyLayout("https://ca.test/directory")
    for build in (layout.certificate, layout.order, layout.attempt_state, layout.certificate_lock):
        with pytest.raises(InvalidInput):
            build(name)


@pytest.mark.parametrize("account", [*HOSTILE_NAMES[:-1], "a/b", "A"])
def test_hostile_account_names_are_refused(account: str) -> None:
    with pytest.raises(InvalidInput):
        KeyLayout("https://ca.test/directory", account=account)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "key",
    [
        "../" + _ESCAPE,
        "a/../../" + _ESCAPE,
        ABSOLUTE,
        "/abs",
        "a//b",
        "a/",
        ".locks/x",
        "a/.tmp",
        "a\x00b",
        "a/" + "b" * 300,
        "x/" * 600,
    ],
)
async def test_file_storage_refuses_keys_that_leave_its_root(tmp_path: Path, key: str) -> None:
    root = tmp_path / "state"
    storage = FileStorage(root)
    with pytest.raises(InvalidInput):
        await storage.store(key, b"secret", secret=True)
    with pytest.raises(InvalidInput):
        await storage.load(key)
    with pytest.raises(InvalidInput):
        await storage.delete(key)
    with pytest.raises(InvalidInput):
        storage.lock(key)
    assert tree(tmp_path) == []
    assert not escaped()


KEYISH = st.one_of(
    st.text(max_size=60),
    st.text(alphabet="abc./-_\\\x00~", max_size=40),
    st.lists(st.sampled_from(["..", ".", "", "a", "b.c", "_", "-x", "x-", "/"]), max_size=6).map(
        "/".join
    ),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(key=KEYISH)
def test_every_accepted_key_stays_under_the_root(tmp_path: Path, key: str) -> None:
    storage = FileStorage(tmp_path / "state")
    try:
        validate_key(key)
    except InvalidInput:
        with pytest.raises(InvalidInput):
            storage.path_for(key)
        return
    path = os.path.realpath(storage.path_for(key))
    root = os.path.realpath(storage.root)
    assert os.path.commonpath([root, path]) == root
    assert path != root
    assert not any(part.startswith(".") for part in key.split("/"))


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=60), st.text(alphabet="*.abc-_/\\\x00", max_size=40)))
def test_certificate_slugs_are_single_safe_segments(name: str) -> None:
    try:
        slug = certificate_slug(name)
    except InvalidInput:
        return
    assert validate_segment(slug) == slug
    assert "/" not in slug
    assert slug not in (".", "..")


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.text(max_size=60),
        st.builds(
            "https://{}{}".format,
            st.text(alphabet="./:@[]%a1", max_size=20),
            st.text(alphabet="./%a\\", max_size=20),
        ),
    )
)
def test_ca_slugs_are_single_safe_segments(url: str) -> None:
    try:
        slug = ca_slug(url)
    except InvalidInput:
        return
    assert validate_segment(slug) == slug


def test_store_writes_only_under_its_root(tmp_path: Path) -> None:
    """A legitimate write lands under the root, files 0600 in 0700 directories."""
    root = tmp_path / "state"
    layout = KeyLayout("https://ca.test/directory")
    key = layout.certificate("*.example.com").privkey

    async def main() -> None:
        await FileStorage(root).store(key, b"-----BEGIN PRIVATE KEY-----", secret=True)

    anyio.run(main)
    assert tree(tmp_path)[0] == "state"
    assert all(p.startswith("state") for p in tree(tmp_path))
    assert "_wildcard_.example.com" in key
