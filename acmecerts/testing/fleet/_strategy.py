"""How a strategy plugs into a fleet run, and the one built in: acmecerts' own manager.

A :class:`Strategy` is started once per run with a :class:`FleetContext` (the plan, the
virtual clock, the simulated CA, the shared counted store) and yields a
:class:`Running`: the run tells it which services appear (:meth:`Running.add`) and go
(:meth:`Running.remove`), and asks what each replica serves (:meth:`Running.serving`).
Everything else (when to order, how to retry, what to store) is the strategy's. A
baseline (a certbot-like cron, cert-manager's policy...) is a class with a ``name`` and
a ``start`` that drives the real :class:`~acmecerts.AcmeClient` its own way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import random
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import anyio
import anyio.abc

from acmecerts import VirtualClock
from acmecerts.manager import CertificateManager, open_manager
from acmecerts.ratelimit import LETS_ENCRYPT
from acmecerts.storage import Storage
from acmecerts.testing.fleet._scenarios import Plan, Service
from acmecerts.testing.simulated_ca import SimulatedCA, SimulatedSolver
from acmecerts.transport import AcmeTransport

__all__ = ["AcmecertsStrategy", "FleetContext", "Running", "Served", "Strategy"]


@dataclasses.dataclass(frozen=True, slots=True)
class Served:
    """The certificate a replica serves for a service: its serial (the CA's, an int)."""

    serial: int


@dataclasses.dataclass(frozen=True, slots=True)
class FleetContext:
    """What a strategy is given: the plan, the clock, the CA and the shared store."""

    plan: Plan
    clock: VirtualClock
    ca: SimulatedCA
    storage: Storage


class Running(Protocol):
    """A started strategy, as the fleet run sees it."""

    def add(self, service: Service) -> None:
        """``service`` exists from now on: keep a valid certificate for it."""
        ...

    async def remove(self, service: Service) -> None:
        """``service`` was deleted: stop working for it."""
        ...

    def serving(self, name: str) -> list[Served | None]:
        """What each replica serves for ``name`` now (``None``: nothing)."""
        ...


class Strategy(Protocol):
    """A way to keep a fleet's certificates (see the module docstring)."""

    @property
    def name(self) -> str:
        """Its name in the measures' table."""
        ...

    def start(self, context: FleetContext) -> AbstractAsyncContextManager[Running]:
        """Start (one or ``context.plan.replicas`` replicas); stop on leaving the block."""
        ...


class _Managers:
    """:class:`Running` over one :class:`CertificateManager` per replica."""

    def __init__(self, managers: list[CertificateManager], profile: str) -> None:
        self.managers = managers
        self.profile = profile
        #: The replicas stopped (a plan's ``replica_stops``): they serve nothing more.
        self.stopped: set[int] = set()
        #: The last :class:`Served` per manager and name, with the certificate it is of.
        self._served: dict[tuple[int, str], tuple[object, Served]] = {}

    def _live(self) -> list[CertificateManager]:
        if not self.stopped:
            return self.managers
        return [m for i, m in enumerate(self.managers) if i not in self.stopped]

    def add(self, service: Service) -> None:
        for manager in self._live():
            manager.manage(service.name, service.identifiers, profile=self.profile)

    async def remove(self, service: Service) -> None:
        for manager in self._live():
            await manager.unmanage(service.name)

    def serving(self, name: str) -> list[Served | None]:
        # The serial of what manager.get(name) hands out, read from the manager's entry:
        # get() builds an IssuedCertificate (a DER parse) and status() a whole status,
        # per certificate per sample; this is asked ~24 times a certificate-day.
        # The Served of a certificate is made once (the same held object: the same one).
        out: list[Served | None] = []
        served = self._served
        for manager in self._live():
            entry = manager._entries.get(name)
            held = None if entry is None else entry.certificate
            if held is None:
                out.append(None)
                continue
            key = (id(manager), name)
            known = served.get(key)
            if known is None or known[0] is not held:
                known = served[key] = (held, Served(int(held.serial, 16)))
            out.append(known[1])
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class AcmecertsStrategy:
    """acmecerts as an operator runs it: :func:`~acmecerts.manager.open_manager` on the
    shared store, Let's Encrypt's limits in the ledger (``ledger=False``: none), the
    client throttled to Let's Encrypt's request rates; one manager per replica, each
    from its own address (:meth:`SimulatedCA.exchange_for`)."""

    name: str = "acmecerts"
    ledger: bool = True
    concurrency: int = 16

    def start(self, context: FleetContext) -> AbstractAsyncContextManager[Running]:
        """Open ``context.plan.replicas`` managers on the shared store."""
        return self._start(context)

    @contextlib.asynccontextmanager
    async def _start(self, context: FleetContext) -> AsyncIterator[Running]:
        # each replica in its own task: one of the plan's ``replica_stops`` ends early
        stops = dict(context.plan.replica_stops)
        running = _Managers([], context.plan.profile)
        end = anyio.Event()
        async with anyio.create_task_group() as tg:
            for replica in range(context.plan.replicas):
                manager = await tg.start(
                    self._replica, context, replica, stops.get(replica), running, end
                )
                running.managers.append(manager)
            try:
                yield running
            finally:
                end.set()

    async def _replica(
        self,
        context: FleetContext,
        replica: int,
        stop_at: _dt.datetime | None,
        running: _Managers,
        end: anyio.Event,
        *,
        task_status: anyio.abc.TaskStatus[CertificateManager] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Replica ``replica``'s manager, open until ``end`` (or it stops at ``stop_at``,
        as a pod that dies: it serves nothing from then)."""
        ca, clock = context.ca, context.clock
        transport = AcmeTransport(
            ca.directory_url,
            client=ca.exchange_for(f"192.0.2.{10 + replica}"),
            clock=clock,
            request_rates=LETS_ENCRYPT.request_rates,
        )
        async with open_manager(
            context.storage,
            ca.directory_url,
            solvers=[SimulatedSolver(ca.published)],
            rate_limits=LETS_ENCRYPT if self.ledger else None,
            transport=transport,
            clock=clock,
            rng=random.Random(context.plan.seed * 1000 + replica),  # noqa: S311
            concurrency=self.concurrency,
        ) as manager:
            task_status.started(manager)
            async with anyio.create_task_group() as tg:

                async def stop() -> None:
                    assert stop_at is not None
                    await clock.sleep(max(0.0, (stop_at - clock.now()).total_seconds()))
                    running.stopped.add(replica)
                    tg.cancel_scope.cancel()

                if stop_at is not None:
                    tg.start_soon(stop)
                await end.wait()
                tg.cancel_scope.cancel()
