"""Other clients' strategies, on the same client and the same simulated CA (issue #26, 4).

Each baseline is a :class:`~acmecerts.testing.fleet.Strategy` that drives the real
:class:`~acmecerts.AcmeClient` (its flow and request-level retries, through the same
:class:`~acmecerts.transport.AcmeTransport` and exchange seam) its own way, with no
rate-limit ledger and no renewal information (ARI). What each one models:

* :class:`CertbotCron`: ``certbot renew`` from a timer twice a day (at a random minute,
  as certbot's packaged timer), every certificate in turn, one at a time. It renews a
  certificate with a third of its lifetime left, half when the lifetime is under 10
  days: the default since certbot 4.0 (before it, a fixed 30 days, the same for
  90-day certificates). A new service is ordered at once (``certbot certonly``); one
  that failed is tried again at the next timer run.
* :class:`CertManagerPolicy`: a controller with cert-manager's policy: renew at 2/3 of
  the lifetime (``renewBefore`` defaults to a third of the duration), a failed issuance
  tried again after 1 h, doubling to 32 h; a few workers (``workers``) issue at once.
* :class:`NaiveOperator`: the Kubernetes operator of the release notes before their
  fixes: renewal at 2/3 of the lifetime, a failure tried again at a fixed interval
  (``retry_every``) whatever ``Retry-After`` said, one certificate at a time, and
  orders still sent for services that were deleted meanwhile (work already queued for
  them is not dropped).

Every baseline writes each certificate it gets to the shared store (one ``store``),
and the certbot one reads its certificates back on each run (one ``load`` each), as
certbot reads its renewal configurations and certificates from disk. Each is one
process with one account: with several replicas in the plan, every replica serves
what that one process holds (a leader-elected controller, a single cron host).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import math
import random
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import cast

import anyio
import anyio.abc

from acmecerts import AcmeClient, IssuedCertificate
from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.testing.fleet._scenarios import Service
from acmecerts.testing.fleet._strategy import (
    AcmecertsStrategy,
    FleetContext,
    Running,
    Served,
    Strategy,
)
from acmecerts.testing.simulated_ca import SimulatedSolver
from acmecerts.transport import AcmeTransport

__all__ = [
    "STRATEGIES",
    "Attempt",
    "CertManagerPolicy",
    "CertbotCron",
    "NaiveOperator",
    "certbot_renew_before",
    "strategy",
]

_HOUR = 3600.0


def certbot_renew_before(lifetime: _dt.timedelta) -> _dt.timedelta:
    """How long before expiry certbot (4.0 and later, by default) renews: a third of
    the lifetime, or half of it when the lifetime is shorter than 10 days."""
    if lifetime < _dt.timedelta(days=10):
        return lifetime / 2
    return lifetime / 3


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """One issuance attempt of a baseline: for ``name`` at ``at``; ``error`` is the
    error's class name when it failed (``None``: issued)."""

    name: str
    at: _dt.datetime
    error: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Held:
    serial: int
    not_before: _dt.datetime
    not_after: _dt.datetime

    @property
    def lifetime(self) -> _dt.timedelta:
        return self.not_after - self.not_before


class _Baseline:
    """What every baseline shares: one client on its own address, the solver, the
    certificates held, the attempt log; :meth:`serving` for the run."""

    def __init__(self, context: FleetContext, name: str, address: str) -> None:
        ca, self.clock = context.ca, context.clock
        self.context = context
        self.name = name
        transport = AcmeTransport(
            ca.directory_url, client=ca.exchange_for(address), clock=self.clock
        )
        self.client = AcmeClient(ca.directory_url, transport=transport, clock=self.clock)
        self.solver = SimulatedSolver(ca.published)
        self.profile = context.plan.profile
        self.replicas = context.plan.replicas
        self.held: dict[str, _Held] = {}
        self.wanted: dict[str, Service] = {}
        #: Every issuance attempt, in order.
        self.attempts: list[Attempt] = []

    def serving(self, name: str) -> list[Served | None]:
        held = self.held.get(name)
        served = None if held is None else Served(held.serial)
        return [served] * self.replicas

    def _key(self, name: str) -> str:
        return f"baselines/{self.name}/{name}.pem"

    async def issue(self, service: Service) -> bool:
        """One attempt for ``service``, logged; on success stored and held."""
        now = self.clock.now()
        try:
            issued: IssuedCertificate = await self.client.issue(
                service.identifiers, solvers=[self.solver], profile=self.profile
            )
        except AcmeCertsError as exc:
            self.attempts.append(Attempt(service.name, now, type(exc).__name__))
            return False
        self.attempts.append(Attempt(service.name, now, None))
        await self.context.storage.store(self._key(service.name), issued.chain.pem.encode())
        self.held[service.name] = _Held(int(issued.serial, 16), issued.not_before, issued.not_after)
        return True

    async def forget(self, name: str) -> None:
        """The service is gone: its certificate is no longer served (nor stored)."""
        self.wanted.pop(name, None)
        if self.held.pop(name, None) is not None:
            await self.context.storage.delete(self._key(name))

    async def sleep_until(self, instant: _dt.datetime) -> None:
        await self.clock.sleep((instant - self.clock.now()).total_seconds())


# ---------------------------------------------------------------------------
# certbot from a timer
# ---------------------------------------------------------------------------


class _Certbot(_Baseline):
    def __init__(self, context: FleetContext, name: str, rng: random.Random) -> None:
        super().__init__(context, name, "192.0.2.50")
        #: The timer's minute past 00:00 and 12:00 (UTC).
        self.minute = rng.randrange(60)
        self.new: list[Service] = []
        self.kick = anyio.Event()

    def add(self, service: Service) -> None:
        self.wanted[service.name] = service
        self.new.append(service)
        self.kick.set()

    async def remove(self, service: Service) -> None:
        await self.forget(service.name)

    def next_run(self) -> _dt.datetime:
        now = self.clock.now()
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        for k in range(3):
            at = day + _dt.timedelta(hours=12 * k, minutes=self.minute)
            if at > now:
                return at
        raise AssertionError("unreachable: a run is at most 12 hours away")

    def due(self, name: str, now: _dt.datetime) -> bool:
        held = self.held.get(name)
        if held is None:
            return True
        return now >= held.not_after - certbot_renew_before(held.lifetime)

    async def loop(self) -> None:
        while True:
            run_at = self.next_run()
            with anyio.move_on_after((run_at - self.clock.now()).total_seconds()):
                await self.kick.wait()
            if self.kick.is_set():  # certonly for the services just added, in turn
                self.kick = anyio.Event()
                new, self.new = self.new, []
                for service in new:
                    if service.name in self.wanted and service.name not in self.held:
                        await self.issue(service)
                continue
            # the timer's run: every certificate in turn (read from disk), one at a time
            for name in list(self.wanted):
                if name in self.held:
                    await self.context.storage.load(self._key(name))
                wanted = self.wanted.get(name)
                if wanted is not None and self.due(name, self.clock.now()):
                    await self.issue(wanted)


@dataclasses.dataclass(slots=True)
class CertbotCron:
    """``certbot renew`` twice a day, one certificate at a time (see the module)."""

    name: str = "certbot-cron"
    #: The last run's baseline (its ``attempts`` log, its ``minute``), for tests.
    last: _Certbot | None = dataclasses.field(default=None, repr=False)

    def start(self, context: FleetContext) -> AbstractAsyncContextManager[Running]:
        """Start the timer's loop."""
        return self._start(context)

    @contextlib.asynccontextmanager
    async def _start(self, context: FleetContext) -> AsyncIterator[Running]:
        rng = random.Random(context.plan.seed * 1000 + 7)  # noqa: S311 - a simulation
        bot = _Certbot(context, self.name, rng)
        self.last = bot
        async with bot.client, anyio.create_task_group() as tg:
            tg.start_soon(bot.loop)
            yield bot
            tg.cancel_scope.cancel()


# ---------------------------------------------------------------------------
# cert-manager's policy
# ---------------------------------------------------------------------------


class _Controller(_Baseline):
    #: Where the certificates' tasks run (set when the controller starts).
    tg: anyio.abc.TaskGroup

    def __init__(self, context: FleetContext, name: str, workers: int) -> None:
        super().__init__(context, name, "192.0.2.60")
        self.limiter = anyio.CapacityLimiter(workers)
        self.scopes: dict[str, anyio.CancelScope] = {}

    def add(self, service: Service) -> None:
        self.wanted[service.name] = service
        scope = anyio.CancelScope()
        self.scopes[service.name] = scope
        self.tg.start_soon(self.keep, service, scope)

    async def remove(self, service: Service) -> None:
        scope = self.scopes.pop(service.name, None)
        if scope is not None:
            scope.cancel()
        await self.forget(service.name)

    async def keep(self, service: Service, scope: anyio.CancelScope) -> None:
        with scope:
            failures = 0
            while True:
                held = self.held.get(service.name)
                if held is not None and failures == 0:
                    await self.sleep_until(held.not_before + held.lifetime * 2 / 3)
                async with self.limiter:
                    ok = await self.issue(service)
                if ok:
                    failures = 0
                    continue
                failures += 1
                await self.clock.sleep(min(_HOUR * 2 ** (failures - 1), 32 * _HOUR))


@dataclasses.dataclass(slots=True)
class CertManagerPolicy:
    """cert-manager's renewal and backoff policy, ``workers`` at once (see the module)."""

    name: str = "cert-manager"
    workers: int = 5
    last: _Controller | None = dataclasses.field(default=None, repr=False)

    def start(self, context: FleetContext) -> AbstractAsyncContextManager[Running]:
        """Start the controller."""
        return self._start(context)

    @contextlib.asynccontextmanager
    async def _start(self, context: FleetContext) -> AsyncIterator[Running]:
        controller = _Controller(context, self.name, self.workers)
        self.last = controller
        async with controller.client, anyio.create_task_group() as tg:
            controller.tg = tg
            yield controller
            tg.cancel_scope.cancel()


# ---------------------------------------------------------------------------
# the operator of the release notes, before its fixes
# ---------------------------------------------------------------------------


class _Operator(_Baseline):
    def __init__(self, context: FleetContext, name: str, retry_every: float) -> None:
        super().__init__(context, name, "192.0.2.70")
        self.retry_every = retry_every
        #: Work to do: service name -> when, the line in insertion order.
        self.queue: dict[str, _dt.datetime] = {}
        self.services: dict[str, Service] = {}
        self.wake = anyio.Event()

    def add(self, service: Service) -> None:
        self.wanted[service.name] = service
        self.services[service.name] = service
        self.queue.setdefault(service.name, self.clock.now())
        self.wake.set()

    async def remove(self, service: Service) -> None:
        # the bug: work already queued for the service (a first order, a retry) stays
        if service.name in self.held:
            self.queue.pop(service.name, None)
        await self.forget(service.name)

    async def loop(self) -> None:
        while True:
            now = self.clock.now()
            due = [n for n, at in self.queue.items() if at <= now]
            if not due:
                wait = min(self.queue.values(), default=None)
                self.wake = anyio.Event()
                seconds = math.inf if wait is None else (wait - now).total_seconds()
                with anyio.move_on_after(seconds):
                    await self.wake.wait()
                continue
            for name in due:  # one at a time, in line
                ok = await self.issue(self.services[name])
                if not ok:  # a fixed interval, whatever Retry-After said
                    self.queue[name] = self.clock.now() + _dt.timedelta(seconds=self.retry_every)
                    continue
                self.queue.pop(name, None)
                if name not in self.wanted:  # deleted meanwhile: ordered for nothing
                    await self.forget(name)
                    continue
                held = self.held[name]
                self.queue[name] = held.not_before + held.lifetime * 2 / 3


@dataclasses.dataclass(slots=True)
class NaiveOperator:
    """The operator of the release notes before their fixes (see the module)."""

    name: str = "naive-operator"
    #: Seconds between attempts of a failed certificate, ``Retry-After`` ignored.
    retry_every: float = 300.0
    last: _Operator | None = dataclasses.field(default=None, repr=False)

    def start(self, context: FleetContext) -> AbstractAsyncContextManager[Running]:
        """Start the operator's one worker."""
        return self._start(context)

    @contextlib.asynccontextmanager
    async def _start(self, context: FleetContext) -> AsyncIterator[Running]:
        operator = _Operator(context, self.name, self.retry_every)
        self.last = operator
        async with operator.client, anyio.create_task_group() as tg:
            tg.start_soon(operator.loop)
            yield operator
            tg.cancel_scope.cancel()


def _acmecerts() -> Strategy:
    # AcmecertsStrategy is frozen: its ``name`` is read-only, which a Protocol's plain
    # attribute does not accept; it is never assigned, so the cast is safe
    return cast("Strategy", AcmecertsStrategy())


def _no_ledger() -> Strategy:
    return cast("Strategy", AcmecertsStrategy(name="acmecerts-no-ledger", ledger=False))


#: Every strategy a fleet run can be asked for by name (``--strategy``): acmecerts,
#: acmecerts with its rate-limit ledger off, and the three baselines above.
STRATEGIES: dict[str, Callable[[], Strategy]] = {
    "acmecerts": _acmecerts,
    "acmecerts-no-ledger": _no_ledger,
    "certbot-cron": CertbotCron,
    "cert-manager": CertManagerPolicy,
    "naive-operator": NaiveOperator,
}


def strategy(name: str) -> Strategy:
    """A new strategy called ``name`` (:class:`~acmecerts.errors.InvalidInput` if none)."""
    try:
        make = STRATEGIES[name]
    except KeyError:
        raise InvalidInput(
            f"no fleet strategy {name!r} (strategies: {', '.join(STRATEGIES)})"
        ) from None
    return make()
