"""The manager is put together from parts it holds, as the client is (no mixin towers).

``CertificateManager`` holds its parts (the fleet core, the scheduler, the stored
entries, the :class:`RenewalPlanner`, the :class:`AttemptRunner`...), each built with
what it uses. No class of ``acmecerts/manager/`` inherits from another of the package,
but the public events, which all are a :class:`CertificateEvent` (frozen dataclasses a
subscriber tells apart with ``isinstance``). And no class declares an attribute it never
sets itself: what a part needs of the manager comes in through its constructor.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import urllib.parse
from pathlib import Path

import anyio
import pytest

import acmecerts.manager
from acmecerts import AcmeClient, Http01Server
from acmecerts.manager import CertificateManager, IssuedResult
from acmecerts.manager._attempts import AttemptRunner
from acmecerts.manager._events import CertificateEvent
from acmecerts.manager._renewals import RenewalPlanner
from acmecerts.storage import FileStorage
from acmecerts.testing import PebbleServer
from tests.package_classes import classes_defined_in

pytestmark = pytest.mark.anyio

PACKAGE = Path(acmecerts.manager.__file__).parent

#: Bases under which a class-level annotation is a field, not an attribute to set.
_FIELD_BASES = {"TypedDict", "NamedTuple", "Enum", "StrEnum", "IntEnum", "Protocol"}


def manager_classes() -> list[type]:
    return classes_defined_in(acmecerts.manager)


def test_no_class_of_the_manager_inherits_from_another_but_the_events() -> None:
    classes = manager_classes()
    assert {c.__name__ for c in classes} >= {
        "CertificateManager",
        "AttemptRunner",
        "RenewalPlanner",
        "FleetCore",
    }
    inherited = {
        (cls, base)
        for cls in classes
        for base in cls.__mro__[1:]
        if base.__module__.startswith("acmecerts.manager")
    }
    # the one legitimate family: the events, frozen dataclasses under CertificateEvent
    assert {base for _, base in inherited} == {CertificateEvent}
    for cls, _ in inherited:
        assert dataclasses.is_dataclass(cls), cls
        assert cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
    assert len(inherited) >= 8  # Obtained, Failed, Cancelled, Deferred, Loaded...


def _declared_but_unset(tree: ast.Module) -> list[str]:
    """``Class.attr`` for each bare class-level annotation its own methods never assign."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        decorators = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
        bases = {ast.unparse(b).split(".")[-1] for b in node.bases}
        if decorators & {"dataclass", "dataclasses.dataclass"} or bases & _FIELD_BASES:
            continue
        declared = [
            item.target.id
            for item in node.body
            if isinstance(item, ast.AnnAssign)
            and isinstance(item.target, ast.Name)
            and item.value is None
        ]
        assigned = {
            target.attr
            for sub in ast.walk(node)
            if isinstance(sub, ast.Assign | ast.AnnAssign | ast.AugAssign)
            for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
            if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        }
        found += [f"{node.name}.{name}" for name in declared if name not in assigned]
    return found


def test_no_class_of_the_manager_declares_an_attribute_it_never_sets() -> None:
    unset = {
        path.name: _declared_but_unset(ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(PACKAGE.glob("*.py"))
    }
    assert {name: found for name, found in unset.items() if found} == {}
    # the check finds the shape it forbids (the mixins of before)
    mixin = ast.parse(
        "class Attempts:\n"
        "    client: AcmeClient\n"
        "    _sweeping: bool = False\n"
        "    def go(self) -> None:\n"
        "        self.client.issue()\n"
    )
    assert _declared_but_unset(mixin) == ["Attempts.client"]


async def test_the_parts_hold_what_they_were_given_and_not_the_manager(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    client = AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle)
    solver = Http01Server(host="127.0.0.1", port=pebble.http_port)
    manager = CertificateManager(
        client, solvers=[solver], storage=FileStorage(tmp_path), renewal_fraction=0.5
    )
    runner, planner = manager._attempts, manager._renewals
    assert isinstance(runner, AttemptRunner)
    assert isinstance(planner, RenewalPlanner)
    # every attribute is a constructor argument (the planner adds its sweep's bookkeeping)
    assert set(vars(runner)) == set(inspect.signature(AttemptRunner).parameters)
    assert set(vars(planner)) == set(inspect.signature(RenewalPlanner).parameters) | {
        "sweeping",
        "sweep_end",
        "rechecking",
        "recheck_done",
    }
    for part in (runner, planner):
        for name, value in vars(part).items():
            assert value is not manager, name
    # the parts share the manager's objects, not copies of them
    assert runner.core is planner.core is manager._core
    assert runner.scheduler is planner.scheduler is manager._scheduler
    assert runner.renewals is planner
    assert runner.stored.plan_renewal == planner.plan
    # the narrow callables back into the manager
    assert runner.client_issue == manager._client_issue
    assert runner.cancelled == manager._cancelled
    assert runner.publish == planner.publish == manager._events.publish
    # a setting of the manager is the part's
    assert planner.fraction == manager.renewal_fraction == 0.5
    manager.renewal_fraction = 0.25
    assert planner.fraction == 0.25
    # what the core and the runner were built with cannot be swapped behind their backs
    assert runner.schedule is manager.schedule
    assert runner.clock is manager.clock
    for setting in ("schedule", "error_backoff", "clock"):
        with pytest.raises(AttributeError):
            setattr(manager, setting, getattr(manager, setting))
    await client.aclose()


# -- the parts driven by themselves ---------------------------------------------------------


@pytest.mark.timeout(180)
async def test_the_runner_and_the_planner_driven_alone(pebble: PebbleServer) -> None:
    """One flight for two callers, its outcome through the callables, then the ARI window."""
    name = "runner.parts.example.test"
    async with (
        AcmeClient(pebble.directory_url, ca_bundle=pebble.ca_bundle) as client,
        Http01Server(host="127.0.0.1", port=pebble.http_port) as solver,
    ):
        manager = CertificateManager(client, solvers=[solver])
        events: list[CertificateEvent] = []
        manager.subscribe(events.append)
        manager.manage(name, [name])
        entry = manager._core.entries[name]
        runner, planner = manager._attempts, manager._renewals
        seen = len(pebble.requests_seen())
        results = []

        async def obtain() -> None:
            results.append(await runner.obtain(entry))

        async with anyio.create_task_group() as tg:
            tg.start_soon(obtain)
            tg.start_soon(obtain)
        assert pebble.requests_seen()[seen:].count(("POST", "/order-plz")) == 1
        first, second = results
        assert isinstance(first, IssuedResult)
        assert isinstance(second, IssuedResult)
        assert first.certificate.certificate_pem == second.certificate.certificate_pem
        assert entry.flight is None
        assert entry.certificate is not None
        assert [type(e).__name__ for e in events] == ["CertificateObtaining", "CertificateObtained"]
        # the runner planned the renewal through the planner: at the lifetime fraction,
        # the CA's ARI window asked for later (no renewalInfo request yet)
        assert entry.renew_at is not None
        assert entry.ari_answer is None
        assert entry.ari_recheck_at is not None
        assert entry.ari_recheck_at < entry.renew_at
        renewal_info = (await client.directory()).renewal_info
        assert renewal_info is not None
        ari_path = urllib.parse.urlsplit(renewal_info).path

        def ari_requests() -> int:
            return sum(path.startswith(ari_path) for _, path in pebble.requests_seen()[seen:])

        assert ari_requests() == 0
        await planner.plan(entry)
        assert entry.ari_answer is not None  # asked now
        assert ari_requests() == 1
        assert planner.rechecking == set()
        assert planner.sweeping is False
        assert runner.recheck_only(entry) is (entry.ari_recheck_at is not None)
