"""The fleet core as a state machine: random histories, no event loop, no I/O.

Hypothesis drives a real :class:`~acmecerts.manager._core.FleetCore` through what
happens to a fleet: certificates managed (and their specs changed), ticks at random
instants, the store's state read, attempts started, joined and ended with every outcome
(issued, invalid input, a CA error, a 429 with ``Retry-After``, the ledger deferring
with and without an instant, our store failing, the owner gone), ARI answers (windows
in the future and in the past), a certificate written by another replica, the CA failing
and answering again, cancel and unmanage. The test does what the async driver does
with each answer of the core (``tests/manager/test_manager_state_machine.py`` drives the whole
manager), and checks after every step that:

* every certificate has an explicit next instant (``None`` only when cancelled, parked
  or exhausted), and after a failure it is later than the failure: never "now";
* a tick starts exactly the idle certificates due, highest priority first, and wakes at
  the earliest instant of the others (none is forgotten, none started early);
* at most one attempt is in the air per name and per identifier set;
* what the core tells the store's retired certificates (managed, waiting) is so;
* the actions the core returns are the ones the driver must carry out: an issued
  certificate is saved (``SaveCertificate``) before anything else and before it counts
  as held, then its state is saved and its renewal planned; every failure saves the
  state; the owner gone and unmanage retire it, and no attempt starts for it afterwards;
  an ended attempt is planned again.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Sequence

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from acmecerts._issued import IssuedCertificate
from acmecerts.errors import (
    AcmeCertsError,
    InvalidInput,
    OrderFailed,
    RateLimitDeferred,
    RateLimited,
)
from acmecerts.manager import CertificateSpec
from acmecerts.manager._actions import (
    Action,
    PlanFirstCheck,
    Replan,
    Retire,
    SaveCertificate,
    SaveState,
)
from acmecerts.manager._attempts import Flight
from acmecerts.manager._core import FleetCore, Read
from acmecerts.manager._entry import AT_ONCE, Entry, due_at, parked, queue_time
from acmecerts.manager._held import ari_cert_id
from acmecerts.protocol.ari import RenewalInfoResult
from acmecerts.protocol.certificate import CertificateChain, certificate_info
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.protocol.resources import RenewalInfo
from acmecerts.retry import AttemptSchedule, AttemptState

pytestmark = pytest.mark.timeout(300)

START = dt.datetime(2027, 1, 4, tzinfo=dt.UTC)
DIRECTORY = "https://ca.test/directory"
HELD = "the CA is failing"
#: The shortest hold of the error backoff (5 s less 20 % jitter).
MIN_HOLD = dt.timedelta(seconds=4)
#: The shortest spacing of the attempt schedule (1 min less 10 % jitter).
MIN_RETRY = dt.timedelta(seconds=54)
NAMES = ("a", "b", "c", "d")
#: Two names share an identifier set ("c" and "d" ask for the same): single flight across.
IDENTIFIERS = {
    "a": (["a.test"], ["a.test", "www.a.test"]),
    "b": (["b.test"], ["b2.test"]),
    "c": (["shared.test"], ["c.test"]),
    "d": (["shared.test"], ["d.test"]),
}
OUTCOMES = (
    "issued",
    "invalid",
    "ca_error",
    "rate_limited",
    "deferred",
    "deferred_no_instant",
    "store_failed",
    "owner_gone",
)

_CA_KEY = ec.generate_private_key(ec.SECP256R1())
_CA_NAME = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleet core CA")])
_CA = (
    x509.CertificateBuilder()
    .subject_name(_CA_NAME)
    .issuer_name(_CA_NAME)
    .public_key(_CA_KEY.public_key())
    .serial_number(1)
    .not_valid_before(START - dt.timedelta(days=1))
    .not_valid_after(START + dt.timedelta(days=3650))
    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    .add_extension(x509.SubjectKeyIdentifier.from_public_key(_CA_KEY.public_key()), False)
    .sign(_CA_KEY, hashes.SHA256())
)
_CA_PEM = _CA.public_bytes(serialization.Encoding.PEM).decode()
_LEAF_KEY = ec.generate_private_key(ec.SECP256R1())
_LEAF_KEY_PEM = _LEAF_KEY.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()


def certificate(names: Sequence[str], now: dt.datetime, days: int = 10) -> IssuedCertificate:
    """A real certificate for ``names``, valid for ``days`` from ``now``."""
    aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(_CA_KEY.public_key())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(_CA_NAME)
        .public_key(_LEAF_KEY.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), True)
        .add_extension(aki, critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(_CA_KEY, hashes.SHA256())
    )
    pem = leaf.public_bytes(serialization.Encoding.PEM).decode() + _CA_PEM
    return IssuedCertificate(
        identifiers=parse_identifiers(names),
        chain=CertificateChain(pem=pem, certificates=(leaf, _CA)),
        private_key_pem=_LEAF_KEY_PEM,
        info=certificate_info(leaf),
        order_url=f"{DIRECTORY}/order/{leaf.serial_number}",
        certificate_url=f"{DIRECTORY}/cert/{leaf.serial_number}",
    )


def error_for(outcome: str, now: dt.datetime, wait: float) -> AcmeCertsError:
    if outcome == "invalid":
        return InvalidInput("a wildcard needs dns-01")
    if outcome == "ca_error":
        return OrderFailed("the order became invalid")
    if outcome == "rate_limited":
        return RateLimited(
            "urn:ietf:params:acme:error:rateLimited",
            "too many",
            retry_after=now + dt.timedelta(seconds=wait),
        )
    at = now + dt.timedelta(seconds=wait) if outcome == "deferred" else None
    return RateLimitDeferred("the ledger says wait", retry_after=at, limit=None)


class FleetCoreMachine(RuleBasedStateMachine):
    """A fleet of four certificates (two share an identifier set) under one core."""

    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self.schedule = AttemptSchedule()
        self.core = FleetCore(
            schedule=self.schedule,
            error_backoff=AttemptSchedule.exponential(
                base=5.0, multiplier=2.0, cap=300.0, jitter=0.2
            ),
            rng=random.Random(7),
            stored=True,
        )
        #: The store, as the driver would read it: certificates and attempt states.
        self.stored: dict[str, IssuedCertificate] = {}
        self.states: dict[str, AttemptState] = {}
        #: The attempts in the air, by entry.
        self.flights: dict[Entry, Flight] = {}
        #: The instant of each certificate's last failure (cleared by a spec change).
        self.failed_at: dict[Entry, dt.datetime] = {}
        self.generations: dict[Entry, int] = {}
        self.joined = 0
        #: The identifier set each attempt started with (its spec may change meanwhile).
        self.flight_ids: dict[Flight, frozenset[Identifier]] = {}
        #: The CA's health gate: closed until this instant (``None``: open).
        self.gate: dt.datetime | None = None
        #: The names retired (``Retire`` carried out), with the identifiers it named.
        self.retired: dict[str, tuple[Identifier, ...] | None] = {}
        #: The entries whose owner is gone: no attempt may start for them again.
        self.gone: set[Entry] = set()

    # -- what the driver does with the core's answers -------------------------------------

    def plan_renewal(self, entry: Entry) -> None:
        """No renewalInfo at this CA: the lifetime fraction (as ``plan_renewal``)."""
        self.core.renewal_planned(entry, None)

    def load(self, entry: Entry) -> None:
        """The tick started ``entry`` to read its stored state (``AttemptRunner.background``)."""
        read = self.core.loaded(entry, self.stored.get(entry.spec.name))
        if read in (Read.TAKEN, Read.WRITTEN_ELSEWHERE):
            self.plan_renewal(entry)
        if entry.state_changed:
            self.core.state_loaded(entry, None, None, read=False)
        else:
            self.core.state_loaded(entry, self.states.get(entry.spec.name), "solvers")
        self.core.steady(entry)
        self.core.load_ended(entry)
        assert entry.loaded

    def save_state(self, entry: Entry) -> None:
        self.states[entry.spec.name] = entry.state
        self.core.state_saved(entry)

    def carry_out(self, actions: Sequence[Action]) -> None:
        """What ``AttemptRunner.carry_out`` does, against this machine's store."""
        for action in actions:
            match action:
                case SaveCertificate(name, issued):
                    self.stored[name] = issued
                case SaveState(entry):
                    self.save_state(entry)
                case PlanFirstCheck(entry):
                    self.plan_obtained(entry)
                case Retire(name, identifiers):
                    # retired only while no certificate of that name is managed
                    assert not self.core.is_managed(name)
                    self.retired[name] = identifiers
                case Replan(entry):
                    self.core.due.changed(entry)

    def plan_obtained(self, entry: Entry) -> None:
        """As ``RenewalPlanner.plan_obtained``: the first ARI check later, if there is a
        later (a 10-day certificate: in 6 hours); else the window asked for now."""
        if self.core.first_check_planned(entry, None, self.now):
            assert entry.ari_recheck_at is not None
            assert entry.renew_at is not None
            assert self.now < entry.ari_recheck_at < entry.renew_at
            assert entry.ari_replacement is None
        else:
            self.plan_renewal(entry)

    # -- rules ----------------------------------------------------------------------------

    @rule(
        name=st.sampled_from(NAMES),
        variant=st.integers(0, 1),
        profile=st.sampled_from([None, "shortlived"]),
        priority=st.integers(0, 1),
    )
    def manage(self, name: str, variant: int, profile: str | None, priority: int) -> None:
        spec = CertificateSpec.of(
            name, IDENTIFIERS[name][variant], profile=profile, priority=priority
        )
        before = self.core.entries.get(name)
        fingerprint = before.spec.fingerprint if before is not None else None
        entry = self.core.managed(spec)
        assert self.core.entries[name] is entry
        assert entry.spec == spec
        assert entry.cancelled is None
        assert self.core.is_managed(name)
        if entry is not before or fingerprint != spec.fingerprint:
            self.failed_at.pop(entry, None)  # new input: a fresh schedule may start now
        if before is not None and entry is not before:
            assert entry.seq == before.seq  # keeps its place in the declaration order

    @rule(name=st.sampled_from(NAMES), unmanage=st.booleans())
    def cancel(self, name: str, unmanage: bool) -> None:
        entry = self.core.entries.get(name)
        if entry is None:
            return
        generation = entry.generation
        self.core.cancelled(entry, "unmanaged" if unmanage else "cancelled")
        assert entry.generation == generation + 1
        assert due_at(entry, self.schedule, self.now) is None
        assert not self.core.is_managed(name)
        flight = self.flights.pop(entry, None)
        if flight is not None:  # its scope is cancelled; cancel() returns once it ended
            assert entry.flight is flight
            self.carry_out(self.core.attempt_ended(entry, flight))
        if unmanage:
            actions = self.core.unmanaged(name, entry)
            assert actions == (Retire(name, entry.spec.identifiers),)
            assert name not in self.core.entries
            self.carry_out(actions)

    @rule(seconds=st.sampled_from([0.0, 1.0, 30.0, 61.0, 600.0, 3600.0, 6 * 3600.0, 86400.0]))
    def tick(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)
        now = self.now
        tick = self.core.time_passed(now)
        started = set(tick.start)
        assert len(started) == len(tick.start)
        keys = []
        for entry in tick.start:
            assert entry.flight is None
            assert entry.cancelled is None
            assert entry not in self.gone
            assert self.core.entries.get(entry.spec.name) is entry
            when = queue_time(entry, self.schedule, now)
            assert when is not None
            assert when <= now, (entry.spec.name, when, now)
            keys.append((not entry.loaded, -entry.spec.priority, when is AT_ONCE))
        # those whose state is read come first (the reads wait their turn), and among
        # each, the highest priority first, then timed work before new certificates
        assert keys == sorted(keys), keys
        # the others: none due, and the tick wakes at the earliest of them
        waiting = [
            when
            for entry in self.core.entries.values()
            if entry not in started
            and entry.flight is None
            and (when := queue_time(entry, self.schedule, now)) is not None
        ]
        assert all(when > now for when in waiting), "a certificate due was not started"
        assert tick.wake == (min(waiting) if waiting else None)
        assert tick.wake is None or tick.wake > now
        for entry in tick.start:
            self.work(entry)

    def work(self, entry: Entry) -> None:
        """What ``AttemptRunner.background`` does with a certificate the tick started."""
        if self.core.loading(entry):
            self.load(entry)
            due = due_at(entry, self.schedule, self.now)
            if due is None or due > self.now:
                self.core.due.changed(entry)
                return
        if self.gate is not None and self.now < self.gate:
            self.core.ca_held(entry, self.gate, HELD)  # no request while the CA fails
            self.core.due.changed(entry)
            return
        flight = Flight()
        existing = self.core.attempt_started(entry, flight)
        assert entry not in self.gone
        if existing is not None:
            self.joined += 1
            # the identifier set is in the air under another name: joined, planned again
            assert any(f is existing for f in self.flights.values())
            self.core.due.changed(entry)
            return
        assert entry.flight is flight
        self.flights[entry] = flight
        self.flight_ids[flight] = entry.spec.identifier_set
        self.core.solvers_now(entry, "solvers")

    @precondition(lambda self: self.flights)
    @rule(
        pick=st.integers(0, 3),
        outcome=st.sampled_from(OUTCOMES),
        wait=st.sampled_from([1.0, 120.0, 3600.0]),
    )
    def end_attempt(self, pick: int, outcome: str, wait: float) -> None:
        entry = list(self.flights)[pick % len(self.flights)]
        flight = self.flights.pop(entry)
        name = entry.spec.name
        now = self.now
        if outcome == "issued":
            issued = certificate([i.value for i in entry.spec.identifiers], now)
            actions = self.core.obtained(entry, issued)
            # saved before anything else, and before it counts as held
            assert actions == (SaveCertificate(name, issued),)
            assert entry.hiccups == 0
            held = entry.certificate
            assert held is None or held.serial != issued.serial
            self.carry_out(actions)
            actions = self.core.issued(entry, issued)
            assert entry.certificate is not None
            assert not entry.stale
            assert entry.certificate.serial == issued.serial
            assert actions == (SaveState(entry), PlanFirstCheck(entry))
            self.carry_out(actions)
            assert self.states[name] == entry.state
            assert not entry.state_changed
            self.failed_at.pop(entry, None)
        elif outcome == "store_failed":
            until = self.core.hiccup(entry, "StorageError: the store is down", now)
            assert until >= now + MIN_HOLD
            self.failed_at[entry] = now
        elif outcome == "owner_gone":
            actions = self.core.owner_gone(entry, "owner gone")
            assert entry.cancelled == "owner gone"
            assert not self.core.is_managed(name)
            assert actions == (Retire(name, entry.spec.identifiers),)
            self.gone.add(entry)
            self.carry_out(actions)  # (the driver: once the store's lock is released)
        else:
            self.core.steady(entry)
            error = error_for(outcome, now, wait)
            deferred = error.retry_after if outcome == "deferred" else None
            failure = self.core.attempt_failed(
                entry, error, now=now, solvers="solvers", deferred_until=deferred
            )
            if outcome == "invalid":
                assert failure.kind == "parked"
                assert failure.until is None
                assert parked(entry)
            else:
                assert failure.until is not None
                least = MIN_HOLD if failure.kind == "held" else MIN_RETRY
                if outcome in ("rate_limited", "deferred"):
                    least = min(least, dt.timedelta(seconds=wait))
                assert failure.until >= now + least, (outcome, failure, now)
                self.failed_at[entry] = now
            # every failure saves the state (its next instant, or parked), nothing else
            assert failure.actions == (SaveState(entry),)
            self.carry_out(failure.actions)
            assert self.states[name] == entry.state
            assert entry.state.next_attempt_at == failure.until or failure.kind == "held"
        flight.result = None
        actions = self.core.attempt_ended(entry, flight)
        assert actions == (Replan(entry),)
        self.carry_out(actions)
        assert entry.flight is None

    @precondition(lambda self: any(self.rechecked()))
    @rule(
        pick=st.integers(0, 3),
        start=st.sampled_from([-86400.0, 3600.0, 5 * 86400.0]),
        again=st.sampled_from([60.0, 6 * 3600.0]),
    )
    def ari_answer(self, pick: int, start: float, again: float) -> None:
        """The CA names a window (in the past: replace it now) for a held certificate."""
        entries = self.rechecked()
        entry = entries[pick % len(entries)]
        held = entry.certificate
        assert held is not None
        self.core.renewal_planned(entry, None)
        window = RenewalInfo(
            window_start=self.now + dt.timedelta(seconds=start),
            window_end=self.now + dt.timedelta(seconds=start + 86400.0),
        )
        result = RenewalInfoResult(
            info=window,
            retry_after=self.now + dt.timedelta(seconds=again),
            cert_id=ari_cert_id(held),
            url=f"{DIRECTORY}/renewalInfo/x",
        )
        self.core.window_answered(entry, held, result, self.now)
        assert entry.renew_at is not None
        if start < 0:
            assert entry.renew_at == self.now
            assert entry.ari_replacement is not None
        else:
            assert window.window_start <= entry.renew_at <= window.window_end
        assert entry.ari_recheck_at is not None
        assert entry.ari_recheck_at >= result.retry_after
        self.core.due.changed(entry)

    def rechecked(self) -> list[Entry]:
        return [
            e
            for e in self.core.entries.values()
            if e.certificate is not None and e.flight is None and not e.stale
        ]

    @rule(name=st.sampled_from(NAMES))
    def written_by_another_replica(self, name: str) -> None:
        """Another replica issued ``name`` and this one reads the store again."""
        entry = self.core.entries.get(name)
        if entry is None or not entry.loaded or entry.flight is not None:
            return
        issued = certificate([i.value for i in entry.spec.identifiers], self.now)
        self.stored[name] = issued
        read = self.core.loaded(entry, issued)
        assert read is Read.WRITTEN_ELSEWHERE
        assert entry.written_elsewhere == issued.serial
        assert entry.certificate is not None
        assert entry.certificate.serial == issued.serial
        self.plan_renewal(entry)
        self.core.stretched(entry, self.now, 4.0)
        self.core.due.changed(entry)

    @rule(seconds=st.sampled_from([60.0, 3600.0]))
    def ca_fails(self, seconds: float) -> None:
        """The CA fails: the work started until ``seconds`` from now is held (CaOutage)."""
        self.gate = self.now + dt.timedelta(seconds=seconds)

    @rule()
    def ca_answers(self) -> None:
        """The CA answers again: every certificate held for it is planned at once."""
        self.gate = None
        for entry in list(self.core.entries.values()):
            held = entry.hold_reason == HELD
            assert self.core.ca_answers(entry, HELD) is held
            assert entry.hold_reason != HELD

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def every_certificate_has_an_explicit_next_instant(self) -> None:
        for entry in self.core.entries.values():
            due = due_at(entry, self.schedule, self.now)
            if due is None:
                assert (
                    entry.cancelled is not None
                    or parked(entry)
                    or self.schedule.exhausted(entry.state)
                )
                continue
            failed = self.failed_at.get(entry)
            if failed is not None and entry.flight is None:
                assert due > failed, (entry.spec.name, due, failed)  # never "now"

    @invariant()
    def one_attempt_per_name_and_identifier_set(self) -> None:
        started_with = [self.flight_ids[f] for f in self.flights.values()]
        assert len(set(started_with)) == len(started_with)
        for entry, flight in self.flights.items():
            assert entry.flight is flight
        for entry in self.core.entries.values():
            if entry.flight is not None:
                assert self.flights[entry] is entry.flight

    @invariant()
    def the_retired_certificates_are_told_the_truth(self) -> None:
        for name in NAMES:
            entry = self.core.entries.get(name)
            assert self.core.is_managed(name) == (entry is not None and entry.cancelled is None)
        for variants in IDENTIFIERS.values():
            for identifiers in variants:
                ids = frozenset(parse_identifiers(identifiers))
                waiting = any(
                    e.cancelled is None
                    and (e.certificate is None or e.stale)
                    and e.spec.identifier_set == ids
                    for e in self.core.entries.values()
                )
                assert self.core.waits_for(ids) is waiting

    @invariant()
    def generations_only_grow(self) -> None:
        for entry in self.core.entries.values():
            assert entry.generation >= self.generations.get(entry, 0)
            self.generations[entry] = entry.generation


FleetCoreMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    report_multiple_bugs=False,
)
test_fleet_core = FleetCoreMachine.TestCase


def new_core(*, stored: bool) -> FleetCore:
    """A core with Let's Encrypt's schedule and the manager's default error backoff."""
    return FleetCore(
        schedule=AttemptSchedule(),
        error_backoff=AttemptSchedule.exponential(base=5.0, multiplier=2.0, cap=300.0),
        rng=random.Random(1),
        stored=stored,
    )


def test_a_new_certificate_is_read_from_the_store_then_started() -> None:
    """The plain path, step by step: managed, due at once, read, started, issued, due
    at its renewal; a failure after that is due later, never at once."""
    core = new_core(stored=True)
    entry = core.managed(CertificateSpec.of("one", ["one.test"]))
    tick = core.time_passed(START)
    assert tick.start == [entry]
    assert tick.wake is None
    assert core.loading(entry)
    assert core.loaded(entry, None) is Read.NOTHING
    core.state_loaded(entry, None, None)
    core.load_ended(entry)
    flight = Flight()
    assert core.attempt_started(entry, flight) is None
    assert core.attempt_started(entry, Flight()) is flight  # single flight: joined
    issued = certificate(["one.test"], START, days=90)
    core.issued(entry, issued)
    core.renewal_planned(entry, None)
    core.attempt_ended(entry, flight)
    tick = core.time_passed(START)
    assert tick.start == []
    assert tick.wake == entry.renew_at
    assert entry.renew_at == START + dt.timedelta(days=60)  # a third of 90 days left
    # at the renewal it starts again; a CA error then waits on the attempt schedule
    tick = core.time_passed(entry.renew_at)
    assert tick.start == [entry]
    assert not core.loading(entry)
    flight = Flight()
    assert core.attempt_started(entry, flight) is None
    failure = core.attempt_failed(
        entry, OrderFailed("invalid order"), now=entry.renew_at, solvers="s"
    )
    core.attempt_ended(entry, flight)
    assert failure.kind == "retry"
    assert failure.until is not None
    assert failure.until >= entry.renew_at + MIN_RETRY
    assert core.time_passed(entry.renew_at).wake == failure.until


@pytest.mark.parametrize(
    ("days", "longest", "first_check", "renew_after"),
    [
        # 90 days: renewal on day 60; the first check after the 6 hours asked for
        (90, dt.timedelta(hours=6), dt.timedelta(hours=6), dt.timedelta(days=60)),
        # 6 days: renewal at half (72 h); half of that (36 h) comes before 4 days
        (6, dt.timedelta(days=4), dt.timedelta(hours=36), dt.timedelta(hours=72)),
    ],
)
def test_a_certificate_just_obtained_is_first_checked_later(
    days: int, longest: dt.timedelta, first_check: dt.timedelta, renew_after: dt.timedelta
) -> None:
    core = new_core(stored=False)
    entry = core.managed(CertificateSpec.of("one", ["one.test"]))
    entry.ari_replacement = "window-passed"  # asked of the certificate it replaces
    core.issued(entry, certificate(["one.test"], START, days=days))
    assert core.first_check_planned(entry, None, START, longest)
    assert entry.renew_at == START + renew_after
    assert entry.ari_recheck_at == START + first_check  # on the 1-minute grid already
    assert entry.ari_replacement is None
    assert core.time_passed(START).wake == entry.ari_recheck_at


def test_a_certificate_due_within_minutes_or_asked_at_once_has_no_later_check() -> None:
    core = new_core(stored=False)
    entry = core.managed(CertificateSpec.of("one", ["one.test"]))
    core.issued(entry, certificate(["one.test"], START, days=90))
    assert not core.first_check_planned(entry, None, START, dt.timedelta(0))
    # its lifetime-fraction renewal a minute away: the window is asked for now
    almost = START + dt.timedelta(days=60) - dt.timedelta(minutes=1)
    assert not core.first_check_planned(entry, None, almost)
    assert entry.ari_recheck_at is None


def test_a_state_read_while_the_spec_changed_keeps_the_fresh_state() -> None:
    """A spec changed while the stored state was read: the stored (older) state is not
    taken over the reset one (the read began before the change)."""
    core = new_core(stored=True)
    entry = core.managed(CertificateSpec.of("one", ["one.test"]))
    old = AttemptState(attempts=3, next_attempt_at=START + dt.timedelta(hours=5))
    core.managed(CertificateSpec.of("one", ["one.test", "two.test"]))  # during the read
    core.state_loaded(entry, old, None)
    assert entry.loaded
    assert entry.state == AttemptState()
    assert entry.state != old


def started(core: FleetCore, name: str = "one") -> tuple[Entry, Flight]:
    """A certificate managed, read from the store (nothing there) and started."""
    entry = core.managed(CertificateSpec.of(name, [f"{name}.test"]))
    core.time_passed(START)
    core.loaded(entry, None)
    core.state_loaded(entry, None, None)
    core.load_ended(entry)
    flight = Flight()
    assert core.attempt_started(entry, flight) is None
    return entry, flight


def test_an_issued_certificate_is_saved_before_it_counts_as_held() -> None:
    core = new_core(stored=True)
    entry, _ = started(core)
    core.hiccup(entry, "the store failed", START)
    issued = certificate(["one.test"], START, days=90)
    assert core.obtained(entry, issued) == (SaveCertificate("one", issued),)
    assert entry.certificate is None  # not held until the driver saved it
    assert entry.hiccups == 0  # progress
    assert core.issued(entry, issued) == (SaveState(entry), PlanFirstCheck(entry))
    assert entry.certificate is not None
    assert entry.certificate.serial == issued.serial


def test_without_a_store_an_issued_certificate_is_only_planned() -> None:
    core = new_core(stored=False)
    entry = core.managed(CertificateSpec.of("one", ["one.test"]))
    issued = certificate(["one.test"], START, days=90)
    assert core.obtained(entry, issued) == ()
    assert core.issued(entry, issued) == (PlanFirstCheck(entry),)


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [
        ("invalid", "parked"),
        ("ca_error", "retry"),
        ("rate_limited", "retry"),
        ("deferred", "retry"),
        ("deferred_no_instant", "held"),
    ],
)
@pytest.mark.parametrize("stored", [True, False])
def test_every_failure_saves_the_state_with_a_store(outcome: str, kind: str, stored: bool) -> None:
    core = new_core(stored=stored)
    entry, _ = started(core)
    error = error_for(outcome, START, 120.0)
    deferred = error.retry_after if outcome == "deferred" else None
    failure = core.attempt_failed(entry, error, now=START, solvers="s", deferred_until=deferred)
    assert failure.kind == kind
    assert (failure.until is None) == (kind == "parked")
    assert failure.actions == ((SaveState(entry),) if stored else ())
    if kind == "retry":
        assert failure.until == entry.state.next_attempt_at
        assert failure.until is not None
        assert failure.until > START


def test_the_owner_gone_retires_the_certificate_and_starts_nothing_more() -> None:
    core = new_core(stored=True)
    entry, flight = started(core)
    identifiers = entry.spec.identifiers
    assert core.owner_gone(entry, "owner gone") == (Retire("one", identifiers),)
    assert entry.cancelled == "owner gone"
    assert core.attempt_ended(entry, flight) == (Replan(entry),)
    for hours in (0, 1, 24 * 90):
        assert core.time_passed(START + dt.timedelta(hours=hours)).start == []
    assert new_core(stored=False).owner_gone(entry, "owner gone") == ()


def test_unmanaged_retires_the_certificate_with_its_last_identifiers() -> None:
    core = new_core(stored=True)
    entry = core.managed(CertificateSpec.of("one", ["one.test", "www.one.test"]))
    assert core.unmanaged("one", entry) == (Retire("one", entry.spec.identifiers),)
    assert "one" not in core.entries
    # a name never managed here: retired with what its stored files say
    assert core.unmanaged("other", None) == (Retire("other", None),)
    # managed again while being cancelled: the new entry stays (the driver's retirement
    # then skips a name managed again)
    old = core.managed(CertificateSpec.of("two", ["two.test"]))
    core.cancelled(old, "unmanaged")
    new = core.managed(CertificateSpec.of("two", ["two.test"]))
    assert core.unmanaged("two", old) == (Retire("two", old.spec.identifiers),)
    assert core.entries["two"] is new
    assert new_core(stored=False).unmanaged("one", entry) == ()


def test_an_ended_attempt_is_planned_again() -> None:
    core = new_core(stored=False)
    entry, flight = started(core)
    assert core.attempt_ended(entry, flight) == (Replan(entry),)
    assert entry.flight is None
    assert core.attempt_started(entry, Flight()) is None  # the next one may go
