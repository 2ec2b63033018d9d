"""Coverage over time: :class:`Recorded` samples it during a run, :func:`draw` plots it.

:class:`Recorded` wraps any :class:`~acmecerts.testing.fleet.Strategy`; while the run
goes on it samples, every ``every`` seconds of simulated time, the fraction of the
services that exist whose every replica serves a certificate valid at that instant (in
its validity, and not revoked by a mass revocation's deadline: the measures' rule;
always-failing names left out). :func:`draw` makes a matplotlib figure of such series,
one panel per scenario, one line per strategy (matplotlib is imported only there: the
``bench`` extra installs it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio

from acmecerts.testing.fleet._scenarios import Plan, Service
from acmecerts.testing.fleet._strategy import FleetContext, Running, Served, Strategy
from acmecerts.testing.simulated_ca import CertificateRecord, SimulatedCA

__all__ = ["Recorded", "Series", "coverage", "draw"]

_BACKDATE = _dt.timedelta(hours=1)


@dataclasses.dataclass(slots=True)
class Series:
    """One run's coverage: ``hours`` since the start and the ``covered`` fraction then."""

    scenario: str
    strategy: str
    hours: list[float] = dataclasses.field(default_factory=list)
    covered: list[float] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return dataclasses.asdict(self)


class _Watching:
    """A :class:`Running` that forwards to the wrapped one and knows who exists."""

    def __init__(self, inner: Running) -> None:
        self.inner = inner
        self.wanted: dict[str, Service] = {}

    def add(self, service: Service) -> None:
        self.wanted[service.name] = service
        self.inner.add(service)

    async def remove(self, service: Service) -> None:
        self.wanted.pop(service.name, None)
        await self.inner.remove(service)

    def serving(self, name: str) -> list[Served | None]:
        return self.inner.serving(name)


def _valid(plan: Plan, record: CertificateRecord | None, now: _dt.datetime) -> bool:
    if record is None or not record.not_before <= now < record.not_after:
        return False
    rev = plan.revocation
    return not (
        rev is not None
        and now >= rev.deadline
        and record.not_before + _BACKDATE < rev.at
        and record.draw < rev.fraction
    )


def coverage(plan: Plan, ca: SimulatedCA, running: Running, names: Sequence[str]) -> float:
    """The fraction of ``names`` (always-failing ones left out) covered now."""
    now = ca.clock.now()
    counted = covered = 0
    for name in names:
        if name in plan.zombies:
            continue
        counted += 1
        records = [
            None if s is None else ca.certificates.get(s.serial) for s in running.serving(name)
        ]
        covered += all(_valid(plan, r, now) for r in records)
    return covered / counted if counted else 1.0


@dataclasses.dataclass(slots=True)
class Recorded:
    """``strategy``, with its coverage sampled every ``every`` seconds into :attr:`series`."""

    strategy: Strategy
    every: float = 3600.0
    #: The last run's samples.
    series: Series | None = None

    @property
    def name(self) -> str:
        """The wrapped strategy's name."""
        return self.strategy.name

    def start(self, context: FleetContext) -> AbstractAsyncContextManager[Running]:
        """Start the wrapped strategy and the sampling."""
        return self._start(context)

    @contextlib.asynccontextmanager
    async def _start(self, context: FleetContext) -> AsyncIterator[Running]:
        series = self.series = Series(context.plan.scenario, self.strategy.name)
        async with self.strategy.start(context) as inner, anyio.create_task_group() as tg:
            watching = _Watching(inner)

            async def sample() -> None:
                start, k = context.plan.start, 0
                while True:
                    await context.clock.sleep(
                        (start - context.clock.now()).total_seconds() + k * self.every
                    )
                    series.hours.append(round(k * self.every / 3600, 3))
                    series.covered.append(
                        coverage(context.plan, context.ca, watching, list(watching.wanted))
                    )
                    k += 1

            tg.start_soon(sample)
            yield watching
            tg.cancel_scope.cancel()


def draw(
    panels: Mapping[str, Sequence[Series]],
    path: str | Path,
    *,
    titles: Mapping[str, str] | None = None,
    width_px: int = 700,
) -> None:
    """Plot ``panels`` (scenario -> its series) one above another into ``path`` (PNG or
    SVG by its suffix), ``width_px`` wide at 100 dpi, text at 11 pt and more."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = ["-", "--", "-.", ":", (0, (5, 1))]
    n = len(panels)
    with plt.rc_context({"font.size": 11, "axes.titlesize": 12, "legend.fontsize": 11}):
        fig, axes = plt.subplots(
            n, 1, figsize=(width_px / 100, 2.6 * n + 0.9), dpi=100, squeeze=False
        )
        for ax, (scenario, series) in zip(axes[:, 0], panels.items(), strict=True):
            for i, s in enumerate(series):
                days = [h / 24 for h in s.hours]
                ax.plot(
                    days,
                    [100 * c for c in s.covered],
                    linestyle=styles[i % len(styles)],
                    linewidth=2,
                    label=s.strategy,
                )
            ax.set_title((titles or {}).get(scenario, scenario), loc="left")
            ax.set_ylabel("covered, %")
            ax.set_ylim(-3, 103)
            ax.grid(alpha=0.3)
        axes[-1, 0].set_xlabel("simulated days")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
        fig.tight_layout(rect=(0, 0.9 / (2.6 * n + 0.9) + 0.02, 1, 1))
        fig.savefig(path)
        plt.close(fig)
