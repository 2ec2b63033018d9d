"""Shared fixtures: the anyio backend and real Pebble servers.

* ``anyio_backend``: ``"asyncio"``, so ``@pytest.mark.anyio`` tests run on asyncio.
* ``pebble``: one :class:`~acmecerts.testing.PebbleServer` for the whole session: Pebble
  **2.10** with Let's Encrypt's three profiles (an order that names none gets one at random,
  as upstream Pebble does), ``PEBBLE_VA_NOSLEEP=1``, no nonce rejection. Do not reconfigure
  or stop it. Before
  each test that uses it, :func:`_session_pebble_answers` checks that it still answers a
  ``newOrder`` and replaces it when it does not: Pebble 2.4 can deadlock (an
  authorization deactivated while its validation is in flight, heavy concurrency), and
  one stuck server must not fail every test after the one that broke it. Pebble 2.10
  deadlocks too (see :func:`pytest_runtest_teardown`), so the session Pebbles are also
  recycled, empty, between test modules.
* ``pebble_2_4``: the compatibility CA for the session, Debian bookworm's Pebble 2.4 (no
  profiles, no ARI, no ``Retry-After``): a small set of tests keeps running against it.
* ``pebble_factory``: ``pebble_factory(**kwargs)`` starts a dedicated server with the given
  :class:`~acmecerts.testing.PebbleServer` options (2.10 unless ``release="2.4"``); all
  are stopped when the test ends.
* ``proxy_factory``: ``proxy_factory(**kwargs)`` starts a real HTTP proxy (Debian's
  ``tinyproxy``, :class:`tests.servers.tinyproxy.TinyProxy`) on loopback; stopped when the
  test ends.
* Every test starts without the machine's proxy variables (``HTTPS_PROXY``, ``NO_PROXY``,
  ...): acmecerts honours them by default, and a test sets the ones it means.

Pebble is a hard requirement: without the binaries these fixtures fail, they never skip.

A suite started with SIGINT ignored (a background job of a shell without job control:
``bash .ci/run &`` in a script, ``nohup``) gets Python's default SIGINT handler back in
:func:`pytest_configure`: a child process inherits an ignored SIGINT and keeps ignoring
it, so the tests that press Ctrl-C on the CLI would wait for nothing (see
docs/contributing.md, "The test bed").
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import coverage
import pytest
from pebble_health import PebbleProbe

from acmecerts.testing import PebbleNotFound, PebbleServer, find_pebble
from tests.faults.proxy import FaultProxy, make_proxy
from tests.servers.tinyproxy import TinyProxy

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def proxy(pebble: PebbleServer) -> Iterator[FaultProxy]:
    """The fault proxy (tests/faults/proxy.py) in front of the session Pebble, no rules yet:
    to count what a client sent or to inject what Pebble cannot produce. Point clients at
    ``proxy.directory_url``; stopped after the test."""
    with make_proxy(pebble) as running:
        yield running


def pytest_configure(config: pytest.Config) -> None:
    """Children start with SIGINT at its default, as from a terminal, however pytest was run."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class ProxyFactory(Protocol):
    """Starts a :class:`TinyProxy` with the given options (see its constructor)."""

    def __call__(self, **kwargs: Any) -> TinyProxy: ...


class PebbleFactory(Protocol):
    """Starts a :class:`PebbleServer` with the given options (see its constructor)."""

    def __call__(self, **kwargs: Any) -> PebbleServer: ...


def _require_pebble(release: str = "2.10") -> None:
    try:
        find_pebble("2.4" if release == "2.4" else "2.10")
    except PebbleNotFound as exc:
        pytest.fail(f"The tests need a real Pebble: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio only."""
    return "asyncio"


@pytest.fixture(scope="session")
def pebble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PebbleServer]:
    """Pebble 2.10 shared by the session: three profiles, no VA sleeps, no nonce rejection.

    No ``retryAfter``: many tests share a FakeClock between the client and the manager's
    background tasks, and a Retry-After slept on it let those tasks move fake time past
    the attempt deadline while Pebble worked in real time (a retention test failed 1 run
    in 5). The polling tests start their own Pebble with ``retry_after_*`` set."""
    _require_pebble("2.10")
    server = PebbleServer(
        tmp_path_factory.mktemp("pebble"),
        va_nosleep=True,
        nonce_reject_percent=0,
        release="2.10",
    )
    server.start()
    _SESSION_PEBBLES["pebble"] = server
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pebble_2_4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PebbleServer]:
    """Debian bookworm's Pebble 2.4 for the session: a CA without profiles, ARI or waits."""
    _require_pebble("2.4")
    server = PebbleServer(
        tmp_path_factory.mktemp("pebble-2.4"),
        va_nosleep=True,
        nonce_reject_percent=0,
        release="2.4",
    )
    server.start()
    _SESSION_PEBBLES["pebble_2_4"] = server
    try:
        yield server
    finally:
        server.stop()


#: The session Pebbles started so far, by fixture name.
_SESSION_PEBBLES: dict[str, PebbleServer] = {}

#: The session Pebbles that served a test since they were last (re)started.
_USED_SINCE_START: set[str] = set()


@pytest.fixture(autouse=True)
def _note_session_pebbles_used(request: pytest.FixtureRequest) -> None:
    """Remember which session Pebbles this test (or its module's fixtures) reached."""
    _USED_SINCE_START.update(name for name in _SESSION_PEBBLES if name in request.fixturenames)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Restart the session Pebbles a module used, empty, once that module is done.

    Pebble's in-memory store keeps every account, order and authorization, and a
    ``newOrder`` walks all authorizations under the store's read lock
    (``FindValidAuthorization``), taking each one's lock in turn. The authorization handler
    holds an authorization's lock while it looks the account up under the store's read
    lock; with a writer (another ``newOrder``) queued between the two, Go's RWMutex lets
    none of them on: Pebble deadlocks (2.4 and 2.10 alike, letsencrypt/pebble's
    db/memorystore.go and wfe.go). The longer the walk, the wider that window: over a
    whole session the store grew to thousands of orders and a parallel test hung one CI
    run in 3. A restart between modules (about 0.2 s) keeps the store small. Module
    fixtures built on a session Pebble are torn down before this runs, and tests read
    its URLs from the same :class:`PebbleServer` object, so nothing holds the old ports.
    """
    result = yield
    if nextitem is None or nextitem.module is item.module:
        return result
    for name in sorted(_USED_SINCE_START):
        server = _SESSION_PEBBLES[name]
        if server.pids:
            server.stop()
            server.start()
    _USED_SINCE_START.clear()
    return result


_PROBE = PebbleProbe()


@pytest.fixture(autouse=True)
def _session_pebble_answers(request: pytest.FixtureRequest) -> None:
    """Replace the session Pebble if it stopped answering (before a test that uses it)."""
    if "pebble" not in request.fixturenames:
        return
    server: PebbleServer = request.getfixturevalue("pebble")
    problem = _PROBE.answers(server)
    if problem is None:
        return
    kept = server.log_path.with_name(f"pebble-stuck-{len(_REPLACED)}.log")
    shutil.copyfile(server.log_path, kept)
    server.stop()
    server.start()
    _REPLACED.append(f"{request.node.nodeid}: {problem} (its log: {kept})")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"\nthe session Pebble did not answer ({problem}); replaced it before "
            f"{request.node.nodeid} (the stuck one's log: {kept})",
            yellow=True,
        )
    assert _PROBE.answers(server) is None, "the replaced session Pebble does not answer"


#: Loggers whose level or handlers a test may change, directly or through the CLI's
#: set-up when it runs in-process (``acmecerts.cli._report`` configures logging).
_LOGGERS = ("", "acmecerts", "acmecerts.manager", "httpx")


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """Give every test the logging configuration the previous one found.

    The CLI sets levels (``acmecerts.manager`` to ERROR) and adds a root handler; run
    in-process by one test, that silenced the warnings another test, run later in random
    order, asserted with ``caplog``.
    """
    saved = [
        (logger, logger.level, list(logger.handlers))
        for logger in (logging.getLogger(name) for name in _LOGGERS)
    ]
    yield
    for logger, level, handlers in saved:
        logger.setLevel(level)
        for handler in [h for h in logger.handlers if h not in handlers]:
            if not type(handler).__module__.startswith("_pytest"):  # pytest's own stay
                logger.removeHandler(handler)


#: What the health check found, one line per replaced session Pebble.
_REPLACED: list[str] = []


def ran_the_whole_suite(config: pytest.Config) -> bool:
    """Whether this session selected every test CI runs: no paths, ``-k`` or ``-m`` of its own.

    scripts/test.sh holds the coverage total to its floor only after such a run: a part of
    the suite covers less, and that is no regression.
    """
    return (
        config.args_source is pytest.Config.ArgsSource.TESTPATHS
        and not config.option.keyword
        and config.option.markexpr == "not soak"
        and not getattr(config.option, "lf", False)  # absent with -p no:cacheprovider
        and not config.option.deselect
    )


@pytest.fixture(autouse=True)
def _coverage_paused(request: pytest.FixtureRequest) -> Iterator[None]:
    """Measure no coverage in a test marked ``no_coverage`` (a load test, not a coverage one).

    Such a test's code is covered by others; traced, it ran three times slower and its
    throttle bounds met the machine's speed instead (tests/faults/test_throttle_burst.py).
    """
    current = coverage.Coverage.current()
    if current is None or request.node.get_closest_marker("no_coverage") is None:
        yield
        return
    current.stop()
    try:
        yield
    finally:
        current.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tell scripts/test.sh what this run selected (``$ACMECERTS_COVERAGE_SCOPE``, if set)."""
    scope_file = os.environ.get("ACMECERTS_COVERAGE_SCOPE")
    if scope_file:
        scope = "whole" if ran_the_whole_suite(session.config) else "part"
        Path(scope_file).write_text(scope + "\n", encoding="utf-8")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """List the session Pebbles that had to be replaced (a test broke them)."""
    if _REPLACED:
        terminalreporter.section("session Pebble replaced", yellow=True)
        for line in _REPLACED:
            terminalreporter.write_line(line)


@pytest.fixture
def pebble_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PebbleFactory]:
    """Start custom Pebbles, e.g. ``pebble_factory(nonce_reject_percent=30)``; stopped after."""
    servers: list[PebbleServer] = []

    def start(**kwargs: Any) -> PebbleServer:
        _require_pebble(kwargs.get("release") or "2.10")
        server = PebbleServer(tmp_path_factory.mktemp("pebble-custom"), **kwargs)
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


#: The environment variables that send acmecerts (and curl, httpx...) through a proxy.
PROXY_VARIABLES = tuple(
    name
    for base in ("https_proxy", "http_proxy", "all_proxy", "no_proxy")
    for name in (base, base.upper())
)


@pytest.fixture(autouse=True)
def _no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test inherits the machine's proxy settings (a test sets the ones it means)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def proxy_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyFactory]:
    """Start real HTTP proxies (tinyproxy on loopback), e.g. ``proxy_factory(basic_auth=...)``."""
    if shutil.which("tinyproxy") is None:
        pytest.fail(
            "tinyproxy not found on PATH: run `bash scripts/test.sh` (installs it) or "
            "`apt-get install -y tinyproxy`.",
            pytrace=False,
        )
    proxies: list[TinyProxy] = []

    def start(**kwargs: Any) -> TinyProxy:
        proxy = TinyProxy(tmp_path_factory.mktemp("tinyproxy"), **kwargs)
        proxies.append(proxy)
        proxy.start()
        return proxy

    try:
        yield start
    finally:
        for proxy in proxies:
            proxy.stop()
