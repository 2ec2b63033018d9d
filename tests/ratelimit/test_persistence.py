"""The ledger in a store: restarts keep the counts, replicas share one budget."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import anyio
import pytest

from acmecerts import FakeClock
from acmecerts.errors import InvalidInput, ProblemType, RateLimitDeferred, RateLimited, StorageError
from acmecerts.ratelimit import LETS_ENCRYPT, RateLimitLedger
from acmecerts.ratelimit._state import LedgerState
from acmecerts.storage import FileStorage, KeyLayout, StoredValue
from tests.ratelimit.conftest import ACCOUNT, T0

pytestmark = pytest.mark.anyio

KEY = KeyLayout("https://acme-v02.api.letsencrypt.org/directory").ledger()
CONSECUTIVE = "consecutive_authorization_failures_per_identifier_per_account"


def stored_ledger(root: Path, clock: FakeClock) -> RateLimitLedger:
    """A new ledger object (as after a restart) on a new store object on ``root``."""
    return RateLimitLedger(LETS_ENCRYPT, clock=clock, storage=FileStorage(root), key=KEY)


async def test_a_restart_keeps_the_counts(tmp_path: Path, clock: FakeClock) -> None:
    first = stored_ledger(tmp_path, clock)
    for i in range(30):
        assert (await first.reserve([f"h{i}.example.com"], account=ACCOUNT)).allowed
    await first.authorization_failed("bad.example.com", account=ACCOUNT)

    second = stored_ledger(tmp_path, clock)
    assert await second.budget() == await first.budget()
    granted = [
        (await second.reserve([f"g{i}.example.com"], account=ACCOUNT)).allowed for i in range(25)
    ]
    assert granted.count(True) == 20
    lines = {(line.limit, line.scope_key): line for line in await second.budget()}
    assert lines["certificates_per_registered_domain", "example.com"].remaining == 0
    assert (
        lines[
            "authorization_failures_per_identifier_per_account", f"bad.example.com {ACCOUNT}"
        ].remaining
        == 4
    )


async def test_learned_blocks_and_pauses_survive_a_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    first = stored_ledger(tmp_path, clock)
    until = T0 + dt.timedelta(hours=3)
    error = RateLimited(ProblemType.RATE_LIMITED, "slow down", retry_after=until)
    await first.learn_from(error, ["a.example.com"], account=ACCOUNT)
    paused = RateLimited(ProblemType.RATE_LIMITED, 'paused for "p.example.com"')
    await first.learn_from(paused, ["p.example.com"], account=ACCOUNT)

    second = stored_ledger(tmp_path, clock)
    blocked = await second.check(["b.example.org"], account=ACCOUNT)
    assert (blocked.limit, blocked.not_before) == ("rate_limited", until)
    clock.advance(dt.timedelta(hours=3))
    assert (await second.check(["p.example.com"], account=ACCOUNT)).paused
    assert await second.unpause("p.example.com", account=ACCOUNT)
    assert (await stored_ledger(tmp_path, clock).check(["p.example.com"], account=ACCOUNT)).allowed


async def test_the_stored_json_is_compact_and_pruned(tmp_path: Path, clock: FakeClock) -> None:
    ledger = stored_ledger(tmp_path, clock)
    for i in range(10):
        await ledger.reserve([f"h{i}.example.com"], account=ACCOUNT)
    storage = FileStorage(tmp_path)
    stored = await storage.load(KEY)
    assert stored is not None
    document = json.loads(stored.data)
    assert document["format"] == 1
    assert len(document["buckets"]["certificates_per_exact_identifier_set"]) == 10
    assert b" " not in stored.data.replace(ACCOUNT.encode(), b"")
    # A week later every bucket is full again: the next write drops them all.
    clock.advance(dt.timedelta(days=7))
    await ledger.reserve(["new.example.net"], account=ACCOUNT)
    stored = await storage.load(KEY)
    assert stored is not None
    buckets = json.loads(stored.data)["buckets"]
    assert {name: sorted(b) for name, b in buckets.items()} == {
        "certificates_per_exact_identifier_set": ["new.example.net"],
        "certificates_per_registered_domain": ["example.net"],
        "new_orders_per_account": [ACCOUNT],
    }


async def test_replicas_sharing_a_store_never_overspend(tmp_path: Path, clock: FakeClock) -> None:
    replicas = [stored_ledger(tmp_path, clock) for _ in range(4)]
    granted: list[bool] = []

    async def one(i: int) -> None:
        ledger = replicas[i % len(replicas)]
        decision = await ledger.reserve([f"r{i}.example.com"], account=ACCOUNT)
        granted.append(decision.allowed)

    async with anyio.create_task_group() as tg:
        for i in range(80):
            tg.start_soon(one, i)
    assert granted.count(True) == 50
    assert granted.count(False) == 30
    [line] = await replicas[0].budget(limit="certificates_per_registered_domain")
    assert line.remaining == 0


async def test_a_corrupt_ledger_is_reported_and_left_alone(
    tmp_path: Path, clock: FakeClock
) -> None:
    storage = FileStorage(tmp_path)
    await storage.store(KEY, b'{"format": 1, "buckets": {"x": {"k": "soon"}}}')
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock, storage=storage, key=KEY)
    with pytest.raises(StorageError, match="integer"):
        await ledger.check(["a.example.com"], account=ACCOUNT)
    with pytest.raises(StorageError):
        await ledger.reserve(["a.example.com"], account=ACCOUNT)
    for junk in (b"not json", b"[]", b'{"format": 99}', b'{"format": 1, "paused": []}'):
        await storage.store(KEY, junk)
        with pytest.raises(StorageError):
            await ledger.check(["a.example.com"], account=ACCOUNT)
        stored = await storage.load(KEY)
        assert stored is not None
        assert stored.data == junk  # never overwritten


class ConflictingStorage:
    """A store where another writer changes the ledger under us ``conflicts`` times."""

    def __init__(self, inner: FileStorage, conflicts: int) -> None:
        self.inner = inner
        self.conflicts = conflicts

    async def load(self, key: str) -> StoredValue | None:
        return await self.inner.load(key)

    async def store(
        self, key: str, data: bytes, *, secret: bool = False, expect_version: object = None
    ) -> str:
        if self.conflicts:
            self.conflicts -= 1
            # Another replica spends a token first.
            other = RateLimitLedger(LETS_ENCRYPT, clock=FakeClock(T0), storage=self.inner, key=key)
            await other.reserve(["other.example.com"], account=ACCOUNT)
        return await self.inner.store(key, data, expect_version=expect_version)  # type: ignore[arg-type]


async def test_compare_and_swap_retries_with_the_other_writers_change(
    tmp_path: Path, clock: FakeClock
) -> None:
    storage = ConflictingStorage(FileStorage(tmp_path), conflicts=3)
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock, storage=storage, key=KEY)  # type: ignore[arg-type]
    assert (await ledger.reserve(["mine.example.com"], account=ACCOUNT)).allowed
    [line] = await ledger.budget(limit="certificates_per_registered_domain")
    assert line.remaining == 50 - 4  # three of theirs and ours, nothing lost or doubled


async def test_a_stored_ledger_needs_a_key(tmp_path: Path, clock: FakeClock) -> None:
    with pytest.raises(InvalidInput, match="key"):
        RateLimitLedger(LETS_ENCRYPT, clock=clock, storage=FileStorage(tmp_path))


class CountingStorage(FileStorage):
    """A FileStorage that counts its reads and writes (each write an fsynced compare-and-swap)."""

    loads = 0

    async def load(self, key: str) -> StoredValue | None:
        self.loads += 1
        return await super().load(key)

    stores = 0

    async def store(self, key: str, data: bytes, **kwargs: object) -> str:  # type: ignore[override]
        self.stores += 1
        return await super().store(key, data, **kwargs)  # type: ignore[arg-type]


async def test_concurrent_changes_are_stored_in_groups_and_none_is_lost(
    tmp_path: Path, clock: FakeClock
) -> None:
    storage = CountingStorage(tmp_path)
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock, storage=storage, key=KEY)
    decisions: list[bool] = []

    async def reserve(i: int) -> None:
        decisions.append((await ledger.reserve([f"h{i}.example{i}.com"], account=ACCOUNT)).allowed)

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(reserve, i)

    assert decisions == [True] * 40
    # every reservation is in the store when its call returns, most of them in a shared write
    assert 1 <= storage.stores < 40
    stored = await FileStorage(tmp_path).load(KEY)
    assert stored is not None
    document = json.loads(stored.data)
    assert len(document["buckets"]["certificates_per_exact_identifier_set"]) == 40
    restarted = stored_ledger(tmp_path, clock)
    lines = {(line.limit, line.scope_key): line for line in await restarted.budget()}
    assert lines["new_orders_per_account", ACCOUNT].remaining == (
        lines["new_orders_per_account", ACCOUNT].capacity - 40
    )


async def test_a_change_that_raises_fails_alone_in_its_group(
    tmp_path: Path, clock: FakeClock
) -> None:
    ledger = stored_ledger(tmp_path, clock)
    outcomes: dict[int, object] = {}

    def half_done(state: LedgerState, now: int) -> tuple[None, bool]:
        state.paused["half-done.example.com"] = now  # a change left half made...
        raise RuntimeError("a bug in the middle of a change")  # ...by a failure

    async def change(i: int) -> None:
        try:
            if i == 3:
                outcomes[i] = await ledger._write(half_done)
            else:
                names = [f"h{i}.example{i}.com"]
                outcomes[i] = (await ledger.reserve(names, account=ACCOUNT)).allowed
        except RuntimeError as exc:
            outcomes[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(change, i)

    assert isinstance(outcomes.pop(3), RuntimeError)
    assert outcomes == dict.fromkeys([0, 1, 2, 4, 5, 6, 7], True)
    stored = await FileStorage(tmp_path).load(KEY)
    assert stored is not None
    document = json.loads(stored.data)
    assert len(document["buckets"]["certificates_per_exact_identifier_set"]) == 7
    assert "half-done.example.com" not in json.dumps(document)


class FailingOnceStorage(FileStorage):
    """A FileStorage whose first write fails (a full disk, say)."""

    failed = False

    async def store(self, key: str, data: bytes, **kwargs: object) -> str:  # type: ignore[override]
        if not self.failed:
            self.failed = True
            raise StorageError("disk full", path=key)
        return await super().store(key, data, **kwargs)  # type: ignore[arg-type]


async def test_a_failed_group_write_fails_every_change_in_it_and_applies_none(
    tmp_path: Path, clock: FakeClock
) -> None:
    storage = FailingOnceStorage(tmp_path)
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock, storage=storage, key=KEY)
    outcomes: list[object] = []

    async def reserve(i: int) -> None:
        try:
            outcomes.append(
                (await ledger.reserve([f"h{i}.example{i}.com"], account=ACCOUNT)).allowed
            )
        except StorageError as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(reserve, i)

    failed = [o for o in outcomes if isinstance(o, StorageError)]
    assert failed  # the group written first failed as a whole...
    assert outcomes.count(True) == 6 - len(failed)  # ...later groups were stored
    stored = await FileStorage(tmp_path).load(KEY)
    spent = (
        0
        if stored is None
        else len(json.loads(stored.data)["buckets"]["certificates_per_exact_identifier_set"])
    )
    assert spent == 6 - len(failed)  # nothing of the failed group, nothing twice


async def test_a_ledger_that_wrote_last_writes_again_without_reading(
    tmp_path: Path, clock: FakeClock
) -> None:
    storage = CountingStorage(tmp_path)
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock, storage=storage, key=KEY)
    for i in range(5):
        assert (await ledger.reserve([f"h{i}.example.com"], account=ACCOUNT)).allowed
    # the first write reads the store; the next ones compare-and-swap on the version
    # this ledger stored last (one store request each instead of two)
    assert (storage.loads, storage.stores) == (1, 5)
    [line] = await stored_ledger(tmp_path, clock).budget(limit="certificates_per_registered_domain")
    assert line.remaining == 50 - 5


async def test_another_replicas_write_is_seen_by_the_next_change(
    tmp_path: Path, clock: FakeClock
) -> None:
    mine, theirs = stored_ledger(tmp_path, clock), stored_ledger(tmp_path, clock)
    for i in range(30):
        assert (await mine.reserve([f"m{i}.example.com"], account=ACCOUNT)).allowed
    for i in range(20):
        assert (await theirs.reserve([f"t{i}.example.com"], account=ACCOUNT)).allowed
    # mine's cached state has 20 tokens left: the compare-and-swap fails, it reads again
    refused = await mine.reserve(["late.example.com"], account=ACCOUNT)
    assert not refused.allowed
    assert refused.limit == "certificates_per_registered_domain"
    # a change that stores nothing (no pause known to mine's cache) is checked too
    paused = RateLimited(ProblemType.RATE_LIMITED, 'paused for "p.example.org"')
    await theirs.learn_from(paused, ["p.example.org"], account=ACCOUNT)
    assert await mine.unpause("p.example.org", account=ACCOUNT)
    assert (await theirs.check(["p.example.org"], account=ACCOUNT)).allowed


class _CountingLoads(FileStorage):
    """A FileStorage that counts its reads."""

    loads = 0

    async def load(self, key: str) -> StoredValue | None:
        self.loads += 1
        return await super().load(key)


async def test_deferral_asks_the_store_only_to_confirm_a_refusal(
    tmp_path: Path, clock: FakeClock
) -> None:
    """What the manager asks before a certificate's lock: no store read when it fits."""
    store = _CountingLoads(tmp_path)
    ledger = RateLimitLedger(LETS_ENCRYPT, clock=clock, storage=store, key=KEY)
    # 50 certificates a registered domain a week: the 50th reservation empties the bucket
    for i in range(50):
        assert (await ledger.reserve([f"h{i}.example.com"], account=ACCOUNT)).allowed
    reads = store.loads
    assert await ledger.deferral(["other.example.org"], account=ACCOUNT) is None
    assert store.loads == reads  # answered from the state it last wrote
    deferred = await ledger.deferral(["h50.example.com"], account=ACCOUNT)
    assert deferred is not None
    assert deferred.limit == "certificates_per_registered_domain"
    assert deferred.retry_after is not None
    assert deferred.retry_after > clock.now()
    assert store.loads == reads + 1  # the refusal read again from the store
    # spends nothing: what preflight would raise, and the same instant
    with pytest.raises(RateLimitDeferred) as raised:
        await ledger.preflight(["h50.example.com"], account=ACCOUNT)
    assert raised.value.retry_after == deferred.retry_after
    # a week later the bucket has refilled: it fits again, answered without a read
    clock.advance(dt.timedelta(days=7))
    reads = store.loads
    assert await ledger.deferral(["h50.example.com"], account=ACCOUNT) is None
    assert store.loads == reads
