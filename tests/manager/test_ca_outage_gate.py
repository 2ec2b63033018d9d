"""The manager's CA health gate (:class:`acmecerts.manager._outage.CaOutage`), on its own.

While the CA keeps failing, background work is held in memory and one probe at a time
asks the CA; a probe failing again closes the gate for longer (1 min doubling, up to an
hour, a later ``Retry-After`` winning); any answer opens it and wakes what was held. A
renewal with too little life left to wait is never held. The probes here are counted
calls; the gate against the simulated CA is in tests/fleet/test_outage.py, against
Pebble in tests/faults/test_ca_outage.py.
"""

from __future__ import annotations

import datetime as dt
import random

import anyio
import pytest

from acmecerts.errors import AcmeCertsError, RateLimitDeferred, RequestTimeout
from acmecerts.manager import CertificateSpec
from acmecerts.manager._entry import Entry
from acmecerts.manager._outage import CaOutage, ca_failing
from acmecerts.protocol.problems import synthetic_problem
from acmecerts.retry import AttemptSchedule
from tests.manager.test_manager_state_machine import make_certificate

START = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
URL = "https://ca.test/acme/new-order"


def busy(retry_after: dt.datetime | None = None) -> AcmeCertsError:
    return synthetic_problem(503, url=URL, retry_after=retry_after, reason="Service Unavailable")


class Gate:
    """A :class:`CaOutage` on a hand-moved clock, its probe failing with ``self.answer``."""

    def __init__(self) -> None:
        self.now = START
        self.answer: AcmeCertsError | None = busy()
        self.probes = 0
        self.woken: list[Entry] = []
        self.gate = CaOutage(
            clock_now=lambda: self.now,
            schedule=AttemptSchedule(),
            wake=self.woken.append,
            check=self.check,
            rng=random.Random(1),
        )

    async def check(self) -> None:
        self.probes += 1
        if self.answer is not None:
            raise self.answer


def entry(name: str, *, life: dt.timedelta | None = None) -> Entry:
    made = Entry(CertificateSpec.of(name))
    if life is not None:
        made.certificate = make_certificate([name], START + life - dt.timedelta(days=90))
    return made


def test_what_says_the_ca_is_failing() -> None:
    assert ca_failing(busy()) is True
    assert ca_failing(RequestTimeout("no answer", reached_ca=True)) is True
    assert ca_failing(synthetic_problem(429, url=URL, retry_after=None, reason="")) is False
    deferred = RateLimitDeferred("the ledger says wait", retry_after=None, limit=None)
    assert ca_failing(deferred) is None


@pytest.mark.anyio
async def test_one_probe_at_a_time_backing_off_until_the_ca_answers() -> None:
    g = Gate()
    a, b = entry("a.example"), entry("b.example", life=dt.timedelta(days=30))
    assert await g.gate.admit(a) is None  # open: work goes
    g.gate.observe(busy())
    first = g.gate.closed_until
    assert first is not None
    assert 54 <= (first - START).total_seconds() <= 66  # 1 min, +-10 %
    # closed: held in memory until then, no probe
    assert await g.gate.admit(b) == first
    assert g.probes == 0
    # a failure of work that started before it closed does not escalate it
    g.gate.observe(busy())
    assert g.gate.closed_until == first
    closes = []
    for _ in range(8):
        g.now = g.gate.closed_until  # type: ignore[assignment]
        held_until = await g.gate.admit(a)  # a probes; the CA still fails: a is held
        assert held_until is not None
        assert held_until == g.gate.closed_until
        closes.append(round((held_until - g.now).total_seconds() / 60))
    assert g.probes == 8
    # 2, 4 ... 32 min, then the cap of an hour, each +-10 %
    wants = [2, 4, 8, 16, 32, 60, 60, 60]
    assert all(0.9 * w - 1 <= got <= 1.1 * w + 1 for got, w in zip(closes, wants, strict=True))
    # the CA answers the next probe: open, and b (held) is woken
    g.answer = None
    g.now = g.gate.closed_until  # type: ignore[assignment]
    assert await g.gate.admit(a) is None
    assert g.probes == 9
    assert g.gate.closed_until is None
    assert g.woken == [b]


@pytest.mark.anyio
async def test_a_probe_out_holds_the_others_and_retry_after_wins() -> None:
    g = Gate()
    a, b = entry("a.example"), entry("b.example")
    later = START + dt.timedelta(hours=3)
    g.gate.observe(busy(retry_after=later))
    assert g.gate.closed_until == later  # the CA said when: longer than the 1 min step
    g.now = later
    started = anyio.Event()
    release = anyio.Event()

    async def slow() -> None:
        g.probes += 1
        started.set()
        await release.wait()

    g.gate._check = slow
    async with anyio.create_task_group() as tg:
        tg.start_soon(g.gate.admit, a)
        await started.wait()
        held = await g.gate.admit(b)  # a's probe is out: b waits, sends nothing
        assert held is not None
        assert held > g.now
        release.set()
    assert g.probes == 1
    assert g.gate.closed_until is None  # the probe was answered
    assert g.woken == [b]


@pytest.mark.anyio
async def test_an_urgent_renewal_is_not_held() -> None:
    g = Gate()
    g.gate.observe(busy(retry_after=START + dt.timedelta(hours=6)))
    # 30 days left: waiting 6 h is fine; 8 h left: a quarter is 2 h, it goes now
    assert await g.gate.admit(entry("calm.example", life=dt.timedelta(days=30))) is not None
    assert await g.gate.admit(entry("urgent.example", life=dt.timedelta(hours=8))) is None
    assert g.probes == 0
