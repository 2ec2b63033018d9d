"""One account key for every replica sharing a store, and the stored account URL."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from acmecerts.errors import InvalidInput, StorageError
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.storage import (
    FileStorage,
    KeyLayout,
    load_account_url,
    load_or_create_account_key,
    save_account_url,
)
from tests.storage.children import child, expect_line, finish

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]

DIRECTORY = "https://acme.example/directory"
ACCOUNT_URL = "https://acme.example/acct/1"


@pytest.fixture
def layout() -> KeyLayout:
    return KeyLayout(DIRECTORY)


def count_generated(monkeypatch: pytest.MonkeyPatch) -> list[KeyType]:
    generated: list[KeyType] = []
    original = AccountKey.generate

    def counting(key_type: KeyType | str = KeyType.EC256) -> AccountKey:
        generated.append(KeyType.parse(key_type))
        return original(key_type)

    monkeypatch.setattr(AccountKey, "generate", counting)
    return generated


async def test_creates_once_then_loads(
    tmp_path: Path, layout: KeyLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    generated = count_generated(monkeypatch)
    store = FileStorage(tmp_path)

    first = await load_or_create_account_key(store, layout)
    again = await load_or_create_account_key(FileStorage(tmp_path), layout)

    assert first.thumbprint == again.thumbprint
    assert generated == [KeyType.EC256]
    stored = await store.load(layout.account_key())
    assert stored is not None
    assert AccountKey.from_pem(stored.data) == first
    assert (tmp_path / layout.account_key()).stat().st_mode & 0o777 == 0o600


async def test_key_type_applies_to_a_new_key_only(tmp_path: Path, layout: KeyLayout) -> None:
    store = FileStorage(tmp_path)

    created = await load_or_create_account_key(store, layout, key_type="ec384")
    loaded = await load_or_create_account_key(store, layout, key_type=KeyType.EC256)

    assert created.algorithm.name == "ES384"
    assert loaded == created


async def test_concurrent_tasks_create_one_key(
    tmp_path: Path, layout: KeyLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    generated = count_generated(monkeypatch)
    thumbprints: list[str] = []

    async def replica() -> None:
        key = await load_or_create_account_key(FileStorage(tmp_path), layout)
        thumbprints.append(key.thumbprint)

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(replica)

    assert len(generated) == 1
    assert len(thumbprints) == 10
    assert len(set(thumbprints)) == 1


async def test_three_processes_create_one_key(tmp_path: Path, layout: KeyLayout) -> None:
    root, go = tmp_path / "store", tmp_path / "go"
    script = """
    import acmecerts.storage.account as account
    from acmecerts.storage import KeyLayout, load_or_create_account_key

    original = account.AccountKey.generate

    def generate(*args):
        print("generated", flush=True)
        return original(*args)

    account.AccountKey.generate = generate
    root, directory, go = ARGS

    async def main():
        store = FileStorage(root)
        wait_for_go(go)
        key = await load_or_create_account_key(store, KeyLayout(directory))
        print("thumbprint", key.thumbprint, flush=True)

    anyio.run(main)
    """
    args = (str(root), DIRECTORY, str(go))
    with child(script, *args) as a, child(script, *args) as b, child(script, *args) as c:
        for proc in (a, b, c):
            await expect_line(proc, "ready")
        go.touch()
        outputs = [(await finish(proc)).splitlines() for proc in (a, b, c)]

    stored = await load_or_create_account_key(FileStorage(root), layout)
    thumbprints = [line.split()[1] for out in outputs for line in out if "thumbprint" in line]
    assert thumbprints == [stored.thumbprint] * 3
    assert sum(out.count("generated") for out in outputs) == 1


async def test_corrupt_key_is_an_error_and_never_replaced(
    tmp_path: Path, layout: KeyLayout
) -> None:
    store = FileStorage(tmp_path)
    await store.store(layout.account_key(), b"-----BEGIN PRIVATE KEY-----\ngarbage\n", secret=True)
    before = (tmp_path / layout.account_key()).read_bytes()

    with pytest.raises(StorageError, match="account key") as caught:
        await load_or_create_account_key(store, layout)

    assert layout.account_key() in str(caught.value)
    assert (tmp_path / layout.account_key()).read_bytes() == before


async def test_damaged_key_file_is_an_error_naming_the_file(
    tmp_path: Path, layout: KeyLayout
) -> None:
    store = FileStorage(tmp_path)
    await load_or_create_account_key(store, layout)
    path = tmp_path / layout.account_key()
    damaged = path.read_bytes()[:-20]
    path.write_bytes(damaged)

    with pytest.raises(StorageError, match="corrupt") as caught:
        await load_or_create_account_key(store, layout)

    assert caught.value.path == str(path)
    assert path.read_bytes() == damaged


# -- account URL --------------------------------------------------------------------


async def test_account_url_round_trip(tmp_path: Path, layout: KeyLayout) -> None:
    store = FileStorage(tmp_path)
    key = AccountKey.generate()
    assert await load_account_url(store, layout) is None

    await save_account_url(store, layout, ACCOUNT_URL, account_key=key)

    assert await load_account_url(store, layout) == ACCOUNT_URL
    assert await load_account_url(store, layout, account_key=key) == ACCOUNT_URL
    stored = await store.load(layout.account_meta())
    assert stored is not None
    assert json.loads(stored.data) == {
        "directory": DIRECTORY,
        "thumbprint": key.thumbprint,
        "url": ACCOUNT_URL,
    }


async def test_saving_the_same_url_again_writes_nothing(tmp_path: Path, layout: KeyLayout) -> None:
    store = FileStorage(tmp_path)
    await save_account_url(store, layout, ACCOUNT_URL)
    before = await store.load(layout.account_meta())

    await save_account_url(store, layout, ACCOUNT_URL)

    assert await store.load(layout.account_meta()) == before


async def test_url_saved_for_another_key_is_ignored(tmp_path: Path, layout: KeyLayout) -> None:
    store = FileStorage(tmp_path)
    await save_account_url(store, layout, ACCOUNT_URL, account_key=AccountKey.generate())

    assert await load_account_url(store, layout, account_key=AccountKey.generate()) is None


async def test_concurrent_url_savers(tmp_path: Path, layout: KeyLayout) -> None:
    urls = [f"https://acme.example/acct/{i}" for i in range(8)]

    async with anyio.create_task_group() as tg:
        for url in urls:
            tg.start_soon(save_account_url, FileStorage(tmp_path), layout, url)

    assert await load_account_url(FileStorage(tmp_path), layout) in urls


async def test_corrupt_account_meta_is_an_error(tmp_path: Path, layout: KeyLayout) -> None:
    store = FileStorage(tmp_path)
    await store.store(layout.account_meta(), b"{not json")

    with pytest.raises(StorageError, match="account metadata"):
        await load_account_url(store, layout)
    with pytest.raises(StorageError, match="account metadata"):
        await save_account_url(store, layout, ACCOUNT_URL)
    stored = await store.load(layout.account_meta())
    assert stored is not None
    assert stored.data == b"{not json"


async def test_account_url_must_be_a_url(tmp_path: Path, layout: KeyLayout) -> None:
    with pytest.raises(InvalidInput):
        await save_account_url(FileStorage(tmp_path), layout, "acct/1")
