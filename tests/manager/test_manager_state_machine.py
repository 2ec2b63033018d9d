"""The manager's scheduler as a state machine: random histories over simulated days.

Hypothesis drives a real :class:`CertificateManager`, running in the background, through
random sequences of what happens to a fleet: certificates issued, invalid input, CA
errors, 429 and 503 with ``Retry-After``, owner guards that say yes, no or raise, a store
that fails, specs that change, unmanage, restarts, and time passing (seconds to days).
After every step it checks that each certificate has an explicit next instant (never
"now", never unknown unless parked or cancelled) and that no certificate was attempted,
or its owner asked, more often than the schedule allows.

Time is a :class:`SteppedClock`: it moves only when the test moves it, and sleepers wake
in deadline order, so the manager sees days pass in milliseconds without the sleeps of
one task moving time under another. The manager's two outer seams are test doubles: a
client that answers each ``issue()`` as scripted (with a real certificate) and a store in
memory that can be told to fail; the real ones are exercised against Pebble, FileStorage
and a real kube-apiserver in ``tests/integration/test_manager_schedule.py`` and
``tests/storage/``.

Two plain tests at the end check that the driver carries out the fleet core's actions in
the order returned: the certificate saved before it is held, then its state; a
certificate whose owner is gone retired after the store's lock is released.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import heapq
import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from acmecerts._issued import IssuedCertificate
from acmecerts.errors import (
    AcmeCertsError,
    ConnectError,
    InvalidInput,
    OrderFailed,
    RateLimited,
    ServerBusy,
    StorageError,
)
from acmecerts.manager import (
    CertificateManager,
    CertificateSpec,
    CertificateState,
)
from acmecerts.protocol.certificate import CertificateChain, certificate_info
from acmecerts.storage import KeyLayout, StoredValue
from acmecerts.storage._base import ANY_VERSION, VersionConflict

pytestmark = pytest.mark.timeout(600)

START = dt.datetime(2027, 1, 4, tzinfo=dt.UTC)
DIRECTORY = "https://ca.test/directory"
#: The shortest spacing the error backoff allows (5 s less 20 % jitter).
MIN_HOLD = dt.timedelta(seconds=4)
#: The shortest spacing of the attempt schedule (1 min less 10 % jitter).
MIN_RETRY = dt.timedelta(seconds=54)


class SteppedClock:
    """A clock that moves only when told to; each sleeper wakes at its own deadline.

    ``step`` numbers the test's steps, so that what happened in a step can be told from
    what happened before it at the same instant.
    """

    def __init__(self, start: dt.datetime) -> None:
        self.step = 0
        self._now = start
        self._sleepers: list[tuple[dt.datetime, int, anyio.Event]] = []
        self._seq = itertools.count()

    def now(self) -> dt.datetime:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        woken = anyio.Event()
        heapq.heappush(
            self._sleepers, (self._now + dt.timedelta(seconds=seconds), next(self._seq), woken)
        )
        await woken.wait()

    async def advance(self, seconds: float) -> None:
        """Move to ``now + seconds``, waking every sleeper on the way at its deadline."""
        target = self._now + dt.timedelta(seconds=seconds)
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, woken = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            woken.set()
            await settle()
        self._now = target
        await settle()


async def settle() -> None:
    """Let every task run until all of them wait for something (time, an event).

    ``anyio.wait_all_tasks_blocked()`` would do, but on asyncio it sleeps 0.1 s of real
    time whenever a task is still runnable: with a few such sleeps per step, the 625
    steps took 6-9 minutes on a loaded 2-core machine. The manager runs no threads here
    (the client and store are in-memory doubles), so yielding to the loop until every
    other task waits on an unfinished future, three times in a row, is as strong and
    takes no real time.
    """
    this = asyncio.current_task()
    quiet = 0
    for _ in range(10_000):
        await asyncio.sleep(0)
        runnable = any(
            task is not this and (task._fut_waiter is None or task._fut_waiter.done())  # type: ignore[attr-defined]
            for task in asyncio.all_tasks()
        )
        quiet = 0 if runnable else quiet + 1
        if quiet == 3:
            return
    raise AssertionError("the manager's tasks never all waited: a busy loop?")


class MemoryStorage:
    """The Storage contract in memory (CAS versions, non-re-entrant locks); can fail."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[bytes, str]] = {}
        self.versions = itertools.count(1)
        self.locks: dict[str, anyio.Lock] = {}
        self.broken = False

    def _check(self, key: str) -> None:
        if self.broken:
            raise StorageError(f"the store is down ({key})", path=key)

    async def load(self, key: str) -> StoredValue | None:
        self._check(key)
        await anyio.lowlevel.checkpoint()
        found = self.data.get(key)
        return None if found is None else StoredValue(found[0], found[1])

    async def store(
        self, key: str, data: bytes, *, secret: bool = False, expect_version: Any = ANY_VERSION
    ) -> str:
        self._check(key)
        await anyio.lowlevel.checkpoint()
        self._cas(key, expect_version)
        version = str(next(self.versions))
        self.data[key] = (bytes(data), version)
        return version

    def _cas(self, key: str, expect_version: Any) -> None:
        if expect_version is ANY_VERSION:
            return
        current = self.data.get(key)
        if (current[1] if current is not None else None) != expect_version:
            raise VersionConflict(f"{key} changed", path=key)

    async def delete(self, key: str, *, expect_version: Any = ANY_VERSION) -> bool:
        self._check(key)
        await anyio.lowlevel.checkpoint()
        self._cas(key, expect_version)
        return self.data.pop(key, None) is not None

    async def list(self, prefix: str) -> list[str]:
        self._check(prefix)
        await anyio.lowlevel.checkpoint()
        return sorted(k for k in self.data if k.startswith(prefix))

    @asynccontextmanager
    async def lock(
        self,
        name: str,
        *,
        lease: Any = 60.0,
        timeout: Any = None,  # noqa: ASYNC109
    ) -> AsyncIterator[Any]:
        self._check(name)
        lock = self.locks.setdefault(name, anyio.Lock())
        async with lock:
            yield dataclasses.make_dataclass("Held", ["name", ("lost", bool, False)])(name)

    async def aclose(self) -> None:
        return None


@dataclasses.dataclass(frozen=True)
class _Directory:
    renewal_info: str | None = None


class _Transport:
    directory_url = DIRECTORY


_CA_KEY = ec.generate_private_key(ec.SECP256R1())
_CA_NAME = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "state machine CA")])
_CA = (
    x509.CertificateBuilder()
    .subject_name(_CA_NAME)
    .issuer_name(_CA_NAME)
    .public_key(_CA_KEY.public_key())
    .serial_number(1)
    .not_valid_before(START - dt.timedelta(days=1))
    .not_valid_after(START + dt.timedelta(days=3650))
    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    .sign(_CA_KEY, hashes.SHA256())
)
_CA_PEM = _CA.public_bytes(serialization.Encoding.PEM).decode()


def make_certificate(names: Sequence[str], now: dt.datetime) -> IssuedCertificate:
    """A real certificate for ``names``, valid for 90 days from ``now``."""
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(_CA_NAME)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=90))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=True)
        .sign(_CA_KEY, hashes.SHA256())
    )
    pem = leaf.public_bytes(serialization.Encoding.PEM).decode() + _CA_PEM
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    from acmecerts.protocol.identifiers import parse_identifiers

    return IssuedCertificate(
        identifiers=parse_identifiers(names),
        chain=CertificateChain(pem=pem, certificates=(leaf, _CA)),
        private_key_pem=key_pem,
        info=certificate_info(leaf),
        order_url=f"{DIRECTORY}/order/{leaf.serial_number}",
        certificate_url=f"{DIRECTORY}/cert/{leaf.serial_number}",
    )


OUTCOMES = ("issued", "bad_input", "ca_error", "rate_limited", "busy_503", "unreachable")


class ScriptedClient:
    """The manager's view of an AcmeClient; ``issue()`` answers as the test scripted."""

    def __init__(self, clock: SteppedClock) -> None:
        self.clock = clock
        self.transport = _Transport()
        self.ledger = None
        self.account_url = f"{DIRECTORY}/acct/1"
        self.outcome: dict[str, tuple[str, float]] = {}
        self.calls: dict[str, list[tuple[int, dt.datetime]]] = {}
        #: Per identifier, (step, when, until): the CA said not to come back before until.
        self.not_before: dict[str, list[tuple[int, dt.datetime, dt.datetime]]] = {}

    async def directory(self) -> _Directory:
        return _Directory()

    async def renewal_info(self, leaf: Any) -> Any:
        raise AssertionError("no ARI in this CA")

    async def issue(self, names: list[str], **_: Any) -> IssuedCertificate:
        key = names[0]
        now = self.clock.now()
        self.calls.setdefault(key, []).append((self.clock.step, now))
        outcome, wait = self.outcome.get(key, ("issued", 0.0))
        retry_after = now + dt.timedelta(seconds=wait)
        error: AcmeCertsError | None = None
        if outcome == "bad_input" or any(n.startswith("*.") for n in names):
            error = InvalidInput(f"{key}: a wildcard needs dns-01")
        elif outcome == "ca_error":
            error = OrderFailed("the order became invalid")
        elif outcome == "rate_limited":
            error = RateLimited(
                "urn:ietf:params:acme:error:rateLimited", "too many", retry_after=retry_after
            )
        elif outcome == "busy_503":
            error = ServerBusy(
                "urn:ietf:params:acme:error:serverInternal",
                "busy",
                status_code=503,
                retry_after=retry_after,
            )
        elif outcome == "unreachable":
            error = ConnectError("connection refused", reached_ca=False)
        if error is not None:
            if outcome in ("rate_limited", "busy_503"):
                self.not_before.setdefault(key, []).append((self.clock.step, now, retry_after))
            raise error
        await anyio.lowlevel.checkpoint()
        return make_certificate(names, now)


class Owner:
    """An owner guard whose answer the test sets: present, gone, or raising."""

    def __init__(self, name: str, clock: SteppedClock) -> None:
        self.name = name
        self.clock = clock
        self.mode = "present"
        self.checks: list[tuple[int, dt.datetime]] = []

    async def __call__(self) -> bool:
        self.checks.append((self.clock.step, self.clock.now()))
        if self.mode == "raises":
            raise ConnectionError("the API server is unreachable")
        return self.mode == "present"


NAMES = ("a", "b", "c")


class ManagerMachine(RuleBasedStateMachine):
    """Random histories of a fleet of three certificates under one manager."""

    def __init__(self) -> None:
        super().__init__()
        self.portal_cm = anyio.from_thread.start_blocking_portal("asyncio")
        self.portal = self.portal_cm.__enter__()
        self.clock = SteppedClock(START)
        self.storage = MemoryStorage()
        self.client = ScriptedClient(self.clock)
        self.owners = {name: Owner(name, self.clock) for name in NAMES}
        #: What the operator has declared: name -> identifiers (None: not managed).
        self.declared: dict[str, list[str] | None] = dict.fromkeys(NAMES)
        #: The step since which each name's spacing rules hold (a spec change, a restart
        #: or managing it anew starts over).
        self.epoch: dict[str, int] = dict.fromkeys(NAMES, 0)
        self.manager: CertificateManager | None = None
        self._start()

    def _start(self) -> None:
        manager = CertificateManager(
            self.client,  # type: ignore[arg-type]
            solvers=[object()],  # type: ignore[list-item]
            clock=self.clock,
            storage=self.storage,  # type: ignore[arg-type]
            layout=KeyLayout(DIRECTORY),
            retention=None,
        )
        self.manager_cm = self.portal.wrap_async_context_manager(manager)
        self.manager = self.manager_cm.__enter__()
        for name, identifiers in self.declared.items():
            if identifiers is not None:
                self._manage(name, identifiers)
        self.portal.call(settle)

    def _manage(self, name: str, identifiers: list[str]) -> None:
        assert self.manager is not None
        spec = CertificateSpec.of(name, identifiers, owner=self.owners[name])
        self.portal.call(self.manager.manage, spec)

    def teardown(self) -> None:
        try:
            self.manager_cm.__exit__(None, None, None)
        finally:
            self.portal_cm.__exit__(None, None, None)

    # -- what happens (each rule is one step) ------------------------------------------

    def _next_step(self) -> None:
        self.clock.step += 1

    @rule(name=st.sampled_from(NAMES), wildcard=st.booleans(), www=st.booleans())
    def manage(self, name: str, wildcard: bool, www: bool) -> None:
        self._next_step()
        identifiers = [f"{'*' if wildcard else 'www' if www else 'web'}.{name}.sm.test"]
        assert self.manager is not None
        status = self.manager.status(name)
        cancelled = status is not None and status.state is CertificateState.CANCELLED
        if self.declared[name] != identifiers or cancelled:
            self.epoch[name] = self.clock.step  # another spec, or managed anew
        self.declared[name] = identifiers
        self._manage(name, identifiers)
        self.portal.call(settle)

    @rule(name=st.sampled_from(NAMES))
    def unmanage(self, name: str) -> None:
        self._next_step()
        assert self.manager is not None
        self.portal.call(self.manager.unmanage, name)
        self.declared[name] = None
        self.epoch[name] = self.clock.step
        self.portal.call(settle)

    @rule(
        name=st.sampled_from(NAMES),
        outcome=st.sampled_from(OUTCOMES),
        wait=st.sampled_from([1.0, 30.0, 3600.0, 86400.0]),
    )
    def script_ca(self, name: str, outcome: str, wait: float) -> None:
        for prefix in ("web", "www", "*"):
            self.client.outcome[f"{prefix}.{name}.sm.test"] = (outcome, wait)

    @rule(name=st.sampled_from(NAMES), mode=st.sampled_from(["present", "gone", "raises"]))
    def owner(self, name: str, mode: str) -> None:
        self.owners[name].mode = mode

    @rule(broken=st.booleans())
    def store(self, broken: bool) -> None:
        self.storage.broken = broken

    @rule()
    def restart(self) -> None:
        self._next_step()
        self.manager_cm.__exit__(None, None, None)
        for name in NAMES:
            self.epoch[name] = self.clock.step  # a new process: no memory of its holds
        self._start()

    @rule(seconds=st.sampled_from([1.0, 7.0, 61.0, 600.0, 3600.0, 6 * 3600.0, 86400.0]))
    def time_passes(self, seconds: float) -> None:
        self._next_step()
        self.portal.call(self.clock.advance, seconds)

    # -- what must always hold ----------------------------------------------------------

    @invariant()
    def every_certificate_has_an_explicit_next_instant(self) -> None:
        manager = self.manager
        assert manager is not None
        now = self.clock.now()
        for name, identifiers in self.declared.items():
            if identifiers is None:
                continue
            status = manager.status(name)
            assert status is not None, name
            if status.next_at is None:
                assert status.state in (
                    CertificateState.PARKED,
                    CertificateState.CANCELLED,
                    CertificateState.EXHAUSTED,
                ), status
            else:
                # everything due was started and has ended: the next instant is ahead
                assert status.next_at > now, status
            if status.state is CertificateState.PARKED:
                assert status.reason is not None, status

    @invariant()
    def attempts_keep_to_the_schedule(self) -> None:
        for identifiers, calls in self.client.calls.items():
            name = identifiers.split(".")[1]
            since = [t for step, t in calls if step >= self.epoch[name]]
            for earlier, later in itertools.pairwise(since):
                assert later - earlier >= MIN_HOLD, (identifiers, earlier, later)

    @invariant()
    def the_cas_retry_after_is_obeyed(self) -> None:
        for identifiers, waits in self.client.not_before.items():
            name = identifiers.split(".")[1]
            calls = self.client.calls[identifiers]
            for step, asked, until in waits:
                if step < self.epoch[name]:
                    continue  # a restart since: a store that was down may have lost it
                early = [t for s, t in calls if s >= step and asked < t < until]
                assert not early, (identifiers, asked, until, early)

    @invariant()
    def owner_checks_keep_to_the_backoff(self) -> None:
        for name, owner in self.owners.items():
            since = [t for step, t in owner.checks if step >= self.epoch[name]]
            for earlier, later in itertools.pairwise(since):
                assert later - earlier >= MIN_HOLD, (name, earlier, later)

    @invariant()
    def invalid_input_is_tried_once_per_spec(self) -> None:
        for identifiers, calls in self.client.calls.items():
            name = identifiers.split(".")[1]
            if identifiers.startswith("*.") and self.declared[name] == [identifiers]:
                since = [t for step, t in calls if step >= self.epoch[name]]
                assert len(since) <= 1, identifiers


TestManagerMachine = ManagerMachine.TestCase
TestManagerMachine.settings = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_the_stepped_clock_wakes_sleepers_in_deadline_order() -> None:
    clock = SteppedClock(START)
    woke: list[float] = []

    async def main() -> None:
        async def sleeper(seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append((clock.now() - START).total_seconds())

        async with anyio.create_task_group() as tg:
            for seconds in (30.0, 10.0, 20.0):
                tg.start_soon(sleeper, seconds)
            await settle()
            assert woke == []
            await clock.advance(15)
            assert woke == [10.0]
            await clock.advance(100)
        assert woke == [10.0, 20.0, 30.0]
        assert clock.now() == START + dt.timedelta(seconds=115)

    anyio.run(main)


class RecordingStorage(MemoryStorage):
    """A :class:`MemoryStorage` that records each write and lock, and what the manager
    held for ``name`` at each write; its first write of a key containing ``fail_once``
    fails."""

    def __init__(self, held: Any) -> None:
        super().__init__()
        self.held = held
        self.fail_once: str | None = None
        self.ops: list[tuple[str, str, bool]] = []

    async def store(
        self, key: str, data: bytes, *, secret: bool = False, expect_version: Any = ANY_VERSION
    ) -> str:
        if self.fail_once is not None and self.fail_once in key:
            self.fail_once = None
            self.ops.append(("failed", key, self.held() is not None))
            raise StorageError(f"the store is down ({key})", path=key)
        self.ops.append(("store", key, self.held() is not None))
        return await super().store(key, data, secret=secret, expect_version=expect_version)

    async def delete(self, key: str, *, expect_version: Any = ANY_VERSION) -> bool:
        self.ops.append(("delete", key, self.held() is not None))
        return await super().delete(key, expect_version=expect_version)

    @asynccontextmanager
    async def lock(
        self,
        name: str,
        *,
        lease: Any = 60.0,
        timeout: Any = None,  # noqa: ASYNC109
    ) -> AsyncIterator[Any]:
        async with super().lock(name, lease=lease, timeout=timeout) as held:
            self.ops.append(("lock", name, False))
            yield held
        self.ops.append(("unlock", name, False))


class _Solver:
    """Stands for an HTTP-01 solver (the scripted client never asks it to solve)."""

    challenge_type = "http-01"


def _driven(
    scenario: Any, *, retention: float | None = None
) -> tuple[RecordingStorage, list[Any], KeyLayout]:
    """Run ``scenario(manager, clock, client, storage, owner)`` against a manager over a
    :class:`RecordingStorage`; returns the store, the events published and the layout."""
    clock = SteppedClock(START)
    client = ScriptedClient(clock)
    owner = Owner("one", clock)
    layout = KeyLayout(DIRECTORY)
    events: list[Any] = []
    box: list[CertificateManager] = []
    storage = RecordingStorage(lambda: box[0].get("one") if box else None)

    async def main() -> None:
        manager = CertificateManager(
            client,  # type: ignore[arg-type]
            solvers=[_Solver()],  # type: ignore[list-item]
            clock=clock,
            storage=storage,  # type: ignore[arg-type]
            layout=layout,
            retention=retention,
        )
        box.append(manager)
        manager.subscribe(events.append)
        async with manager:
            await scenario(manager, clock, client, storage, owner)

    anyio.run(main)
    return storage, events, layout


def test_the_driver_saves_the_certificate_before_it_is_held_then_its_state() -> None:
    """The core's actions, carried out in order: a certificate whose save failed is not
    held (the attempt is retried on the error backoff); saved, it is held, and only then
    is its attempt state saved (here: the failure's state deleted) and the event sent."""

    async def scenario(manager: Any, clock: Any, client: Any, storage: Any, owner: Any) -> None:
        client.outcome["one.sm.test"] = ("ca_error", 0.0)
        manager.manage(CertificateSpec.of("one", ["one.sm.test"], owner=owner))
        await settle()
        client.outcome["one.sm.test"] = ("issued", 0.0)
        storage.fail_once = "certificate"
        await clock.advance(3600)
        assert manager.get("one") is not None

    storage, events, layout = _driven(scenario)
    state = layout.attempt_state("one")
    record = layout.certificate("one").record
    writes = [(op, key, held) for op, key, held in storage.ops if key in (state, record)]
    assert writes == [
        ("store", state, False),  # the CA's failure: its next instant
        ("failed", record, False),  # the certificate's save failed: not held
        ("store", record, False),  # saved before it counts as held
        ("delete", state, True),  # then the state after the success
    ]
    kinds = [type(e).__name__ for e in events if type(e).__name__ != "CertificateObtaining"]
    assert kinds == ["CertificateFailed", "CertificateFailed", "CertificateObtained"]
    assert isinstance(events[-1].certificate, IssuedCertificate)
    assert isinstance(next(e for e in events if "Failed" in type(e).__name__).error, OrderFailed)


def test_the_driver_retires_a_certificate_whose_owner_is_gone_after_the_lock() -> None:
    """The owner gone: cancelled, no order, and retired once the store's lock is released
    (a purge takes that lock)."""

    async def scenario(manager: Any, clock: Any, client: Any, storage: Any, owner: Any) -> None:
        manager.manage(CertificateSpec.of("one", ["one.sm.test"], owner=owner))
        await settle()
        assert manager.get("one") is not None
        owner.mode = "gone"
        storage.ops.clear()
        await clock.advance(61 * 86400)  # past its renewal

    storage, events, _ = _driven(scenario, retention=86400.0)
    ops = [op for op, _, _ in storage.ops]
    retired = [i for i, (op, key, _) in enumerate(storage.ops) if "/retired/" in key]
    # the renewal's turn: the lock, the owner asked (gone), the lock released; then the
    # retirement recorded, and a day later the purge (under the lock again)
    assert ops[:3] == ["lock", "unlock", "store"], storage.ops
    assert retired[0] == 2
    assert ops[3] == "lock"
    assert ops[-1] == "unlock"
    assert storage.ops[-2][0:2] == ("delete", storage.ops[retired[0]][1])
    assert [type(e).__name__ for e in events].count("CertificateObtained") == 1
    assert [type(e).__name__ for e in events][-1] == "CertificateCancelled"
