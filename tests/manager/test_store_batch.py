"""The manager's store reads a step's keys in one batch (``CertificateStore.reading``).

Against a real :class:`FileStorage`, wrapped to count the calls that reach it.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pytest

from acmecerts.errors import StorageError
from acmecerts.manager._persist import CertificateStore
from acmecerts.protocol.identifiers import parse_identifiers
from acmecerts.retry import AttemptState
from acmecerts.storage import FileStorage, KeyLayout, Storage, StoredValue

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

DIRECTORY = "https://ca.batch.test/dir"
NAME = "batch.example.test"


class Reads:
    """Forwards reads to a FileStorage and counts them (a ``load_each`` is one)."""

    def __init__(self, inner: FileStorage) -> None:
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    async def load(self, key: str) -> StoredValue | None:
        self.calls["load"] += 1
        return await self.inner.load(key)

    async def load_each(self, keys: Sequence[str]) -> list[StoredValue | StorageError | None]:
        self.calls["load_each"] += 1
        return await self.inner.load_each(keys)

    async def list(self, prefix: str) -> list[str]:
        self.calls["list"] += 1
        return await self.inner.list(prefix)


def store_over(tmp_path: Path) -> tuple[CertificateStore, Reads, FileStorage]:
    inner = FileStorage(tmp_path)
    reads = Reads(inner)
    return CertificateStore(cast(Storage, reads), KeyLayout(DIRECTORY)), reads, inner


async def test_reads_in_a_block_take_the_batch_once_then_read_again(tmp_path: Path) -> None:
    store, reads, inner = store_over(tmp_path)
    layout = store.layout
    attempts, record = layout.attempt_state(NAME), layout.certificate(NAME).record
    await CertificateStore(inner, layout).save_attempt_state(NAME, AttemptState(attempts=2))

    async with store.reading([record, attempts]):
        assert reads.calls == {"load_each": 1}
        assert await store.load_certificate(NAME) is None  # (lists the old layout once)
        state = await store.load_attempt_state(NAME)
        assert state is not None
        assert state.attempts == 2
        assert reads.calls == {"load_each": 1, "list": 1}  # both from the batch
        await inner.store(attempts, b'{"attempts": 3}')
        again = await store.load_attempt_state(NAME)  # handed out once: read again
        assert again is not None
        assert again.attempts == 3
        assert reads.calls == {"load_each": 1, "list": 1, "load": 1}
    assert await store.load_certificate(NAME) is None  # after the block: a read
    assert reads.calls == {"load_each": 1, "list": 1, "load": 2}


async def test_a_key_that_cannot_be_read_raises_at_its_read_not_the_others(
    tmp_path: Path,
) -> None:
    store, reads, inner = store_over(tmp_path)
    layout = store.layout
    attempts, order = layout.attempt_state(NAME), layout.order(NAME)
    await CertificateStore(inner, layout).save_attempt_state(NAME, AttemptState(attempts=1))
    await inner.store(order, b"{}")
    damaged = tmp_path / order
    damaged.write_bytes(damaged.read_bytes()[:-1])

    async with store.reading([order, attempts]):
        state = await store.load_attempt_state(NAME)  # the corrupt one beside it: no matter
        assert state is not None
        assert state.attempts == 1
        with pytest.raises(StorageError) as caught:
            await store.load_order(NAME)
        assert caught.value.path == str(damaged)
    assert reads.calls == {"load_each": 1}


async def test_a_retired_record_read_absent_in_the_batch_is_not_read_again(
    tmp_path: Path,
) -> None:
    store, reads, _ = store_over(tmp_path)
    key = store.retired_key(parse_identifiers([NAME]))
    asked = []

    def change(current: object) -> None:
        asked.append(current)

    async with store.reading([key]):
        assert await store.update_retired(key, change) is None
    assert reads.calls == {"load_each": 1}
    assert asked == []  # absent and not to be created: nothing to change
    assert await store.update_retired(key, change) is None  # outside: read
    assert reads.calls == {"load_each": 1, "load": 1}
