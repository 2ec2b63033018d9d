"""``acmecerts --version`` and ``acmecerts COMMAND --help`` start without the library.

They used to import all of acmecerts, httpx, cryptography, dnspython and acme first (0.5 to
0.9 s); now only typer, the standard library and the light modules. What each run imported
is read from ``python -X importtime`` (every module the process imported, in order), so
these tests count modules, not seconds: they fail the day someone adds an eager import
back to ``acmecerts/__init__.py`` or ``acmecerts/cli/_app.py``, whatever the machine's
speed. ``bench/cli_start.py`` measures the time itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import CLI, REPO, ca_args, cli_env, http01_args

from acmecerts.testing import PebbleServer


def python_in_repo(
    argv: list[str], *, timeout: float = 60, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """This Python with ``argv``, in the checkout, with the CLI tests' environment, output kept."""
    return subprocess.run(
        [sys.executable, *argv],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


pytestmark = pytest.mark.timeout(60)

#: Top-level packages that nothing on the way to a version or a help text needs.
HEAVY: frozenset[str] = frozenset(
    {
        "acme",  # certbot's acme
        "anyio",
        "cryptography",
        "dns",  # dnspython
        "h11",
        "h2",
        "httpcore",
        "httpx",
        "josepy",
        "lightkube",
        "OpenSSL",
        "publicsuffixlist",
        # typer converts option values through pydantic, imported on first use; _app's
        # _unconverted() keeps `COMMAND --help` from using it (about 0.07 s).
        "pydantic",
        "tenacity",
    }
)
#: The only parts of acmecerts outside ``acmecerts.cli`` that may be imported.
LIGHT: frozenset[str] = frozenset({"acmecerts", "acmecerts._version", "acmecerts.errors"})
#: The command implementations, imported inside the command functions.
COMMANDS: frozenset[str] = frozenset(
    f"acmecerts.cli.{name}"
    for name in (
        "_account",
        "_batch",
        "_ca",
        "_display",
        "_engine",
        "_interrupt",
        "_issue",
        "_report",
        "_revoke",
        "_solvers",
        "_state",
        "_status",
    )
)
#: The console script's own code (pyproject's ``acmecerts = "acmecerts.cli:main"``).
SCRIPT = "import sys; from acmecerts.cli import main; sys.exit(main(sys.argv[1:]))"
LAUNCHERS = {
    "python -m acmecerts.cli": CLI[1:],
    "python -m acmecerts": ("-m", "acmecerts"),
    "console script": ("-c", SCRIPT),
}


def imported_modules(
    *args: str, launcher: str
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the CLI with ``args`` in a fresh interpreter; the modules it imported."""
    result = python_in_repo(["-X", "importtime", *LAUNCHERS[launcher], *args])
    # "import time: <self us> | <cumulative us> | <indented module name>", a header first.
    modules = {
        line.rpartition("|")[2].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "[us]" not in line
    }
    assert "acmecerts.cli" in modules, result.stderr[-2000:]  # the parsing found something
    return result, modules


def forbidden(modules: set[str]) -> list[str]:
    """The modules among ``modules`` that a start-up must not import."""
    return sorted(
        name
        for name in modules
        if name.partition(".")[0] in HEAVY
        or name in COMMANDS
        or (
            name.partition(".")[0] == "acmecerts"
            and name not in LIGHT
            and name != "acmecerts.cli"
            and not name.startswith("acmecerts.cli.")
        )
    )


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_version_imports_neither_the_library_nor_rich(launcher: str) -> None:
    result, modules = imported_modules("--version", launcher=launcher)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("acmecerts ")
    assert forbidden(modules) == []
    # Nothing is rendered: rich (typer's help renderer) is not needed either.
    assert not {name for name in modules if name.partition(".")[0] == "rich"}


@pytest.mark.parametrize(
    "args",
    [
        ("issue", "--help"),
        ("--help",),
        ("renew", "-h"),
        ("account", "create", "--help"),
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_help_imports_no_library(args: tuple[str, ...], launcher: str) -> None:
    result, modules = imported_modules(*args, launcher=launcher)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Usage: acmecerts" in result.stdout
    assert forbidden(modules) == []


def test_import_acmecerts_imports_no_library() -> None:
    """The package's public names are imported when first used, not with the package."""
    code = (
        "import sys, acmecerts; before = set(sys.modules); acmecerts.AcmeClient;"
        "print(' '.join(sorted(before))); print('acmecerts.client' in sys.modules)"
    )
    result = python_in_repo(["-c", code], check=True)
    before, loaded = result.stdout.splitlines()
    assert forbidden(set(before.split())) == []
    assert loaded == "True"  # and the first use imports it


def test_the_check_sees_a_command_that_imports_the_library(tmp_path: Path) -> None:
    """The check itself: a command that runs (status, nothing sent to the CA) is caught."""
    result, modules = imported_modules(
        "status", "--state-dir", str(tmp_path / "state"), launcher="python -m acmecerts.cli"
    )
    # exit 2: nothing was issued in that state directory (it was read all the same)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "does not exist" in result.stderr
    assert {"acmecerts.cli._status", "acmecerts.client", "httpx", "cryptography"} <= set(
        forbidden(modules)
    )


def test_the_command_imports_httpx_without_its_command_line(tmp_path: Path) -> None:
    """As the program, the CLI keeps httpx from importing ``httpx._main`` (click, pygments,
    rich's progress bars: ~0.05 s); httpx itself is imported and works."""
    result, modules = imported_modules(
        "status", "--state-dir", str(tmp_path / "state"), launcher="python -m acmecerts.cli"
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "httpx" in modules
    assert {"click", "pygments", "rich.progress", "rich.syntax"} & modules == set()


def test_python_m_acmecerts_is_the_command() -> None:
    """``python -m acmecerts`` runs the command line: its exit codes and its one-line errors."""
    version = python_in_repo(["-m", "acmecerts", "--version"])
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("acmecerts ")
    bad = python_in_repo(["-m", "acmecerts", "issue", "--key-type", "dsa", "a.example"])
    assert bad.returncode == 2, bad.stderr
    (line,) = bad.stderr.splitlines()
    assert line.startswith("acmecerts: error: ")
    assert "dsa" in line


#: What an http-01 ``issue`` has no use for: dnspython and the dns-01 solvers (~0.1 s of
#: imports), the tls-alpn-01 server. ``acmecerts.solvers`` imports them on first use.
NOT_FOR_HTTP_01: frozenset[str] = frozenset(
    {"dns", "acmecerts.solvers.dns01", "acmecerts.solvers.tlsalpn01"}
)


def unneeded_for_http_01(modules: set[str]) -> list[str]:
    return sorted(
        name
        for name in modules
        if name in NOT_FOR_HTTP_01 or name.partition(".")[0] in NOT_FOR_HTTP_01
    )


#: The console script's code, then every module loaded when the process ends, on stderr.
#: (``-X importtime`` does not see a module imported by ``importlib.import_module``, which
#: is how ``acmecerts.solvers`` imports a solver on first use; ``sys.modules`` does.)
AT_EXIT = (
    "import atexit, sys;"
    "atexit.register(lambda: sys.stderr.write('\\nmodules: ' + ' '.join(sorted(sys.modules))));"
    "from acmecerts.cli import main; sys.exit(main(sys.argv[1:]))"
)


def modules_at_exit(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the CLI with ``args`` in a fresh interpreter; every module loaded at its exit."""
    result = python_in_repo(["-c", AT_EXIT, *args], timeout=90)
    _, found, listed = result.stderr.rpartition("\nmodules: ")
    assert found, result.stderr[-2000:]
    modules = set(listed.split())
    assert "acmecerts.cli._issue" in modules, listed  # the command did its work
    return result, modules


@pytest.mark.timeout(120)
def test_http01_issue_imports_neither_dnspython_nor_tls_alpn(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    """A whole ``issue`` answered by http-01 (a certificate issued) never imports dns-01,
    nor certbot's ``acme``."""
    result, modules = modules_at_exit(
        "issue",
        *ca_args(pebble, tmp_path / "state"),
        *("--out", str(tmp_path / "out")),
        *http01_args(pebble),
        "lazy-solvers.example.test",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "out" / "fullchain.pem").is_file()
    assert "acmecerts.solvers.http01" in modules
    assert unneeded_for_http_01(modules) == []
    # nor certbot's acme, which imports requests and urllib3 (~45 ms of the start): the
    # directory, the account and the renewalInfo answer are read without it
    assert {"acme", "requests", "urllib3"} & modules == set()


@pytest.mark.timeout(120)
def test_an_issue_whose_output_is_not_a_terminal_imports_no_live_display(
    pebble: PebbleServer, tmp_path: Path
) -> None:
    """``acmecerts issue`` (the program) writing to a file or a pipe: certificate issued,
    and neither rich's live display nor httpx's command line was imported."""
    result, modules = imported_modules(
        "issue",
        *ca_args(pebble, tmp_path / "state"),
        *("--out", str(tmp_path / "out")),
        *http01_args(pebble),
        "no-live-display.example.test",
        launcher="python -m acmecerts.cli",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "out" / "fullchain.pem").is_file()
    assert "acmecerts.cli._display" in modules
    drawn = {"rich.live", "rich.spinner", "rich.table", "rich.progress", "click", "pygments"}
    assert drawn & modules == set()


def test_the_check_sees_a_dns01_issue_import_dnspython(tmp_path: Path) -> None:
    """The check itself: ``--challenge dns-01`` imports dnspython (and stops at bad input)."""
    result, modules = modules_at_exit(
        "issue",
        *("--state-dir", str(tmp_path / "state"), "--challenge", "dns-01"),
        *("--dns-rfc2136-server", "127.0.0.1:53"),  # no --dns-tsig-key: refused, nothing sent
        "lazy-solvers.example.test",
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--dns-tsig-key" in result.stderr
    assert {"dns", "acmecerts.solvers.dns01"} <= set(unneeded_for_http_01(modules))
    assert "acmecerts.solvers.tlsalpn01" not in modules


def test_solvers_package_imports_each_solver_on_first_use() -> None:
    """``import acmecerts.solvers`` is light; ``from acmecerts.solvers import X`` still works."""
    code = (
        "import sys, acmecerts.solvers as s; before = set(sys.modules);"
        "from acmecerts.solvers import Http01Server, Rfc2136Solver, TlsAlpn01Server;"
        "print(' '.join(sorted(before)));"
        "print(Rfc2136Solver.__module__, Http01Server.__module__, TlsAlpn01Server.__module__);"
        "print(sorted(set(s.__all__) - set(dir(s))))"
    )
    result = python_in_repo(["-c", code], check=True)
    before, where, missing = result.stdout.splitlines()
    assert unneeded_for_http_01(set(before.split())) == []
    assert "acmecerts.solvers.http01" not in before.split()
    # each class comes from its own solver's module (dns01 and http01 are packages whose
    # classes live in private modules of theirs)
    solver_modules = [
        "acmecerts.solvers.dns01",
        "acmecerts.solvers.http01",
        "acmecerts.solvers.tlsalpn01",
    ]
    assert len(where.split()) == len(solver_modules)
    for module, expected in zip(where.split(), solver_modules, strict=True):
        assert module == expected or module.startswith(expected + "."), (module, expected)
    assert missing == "[]"  # dir() lists every public name, imported or not


@pytest.mark.parametrize(
    ("code", "frozen"),
    [
        # the command itself (the console script calls main() without arguments)
        ("import sys; sys.argv = ['acmecerts', '--version']; main()", True),
        # called in-process with its arguments (tests, programs embedding the CLI)
        ("main(['--version'])", False),
    ],
    ids=["program", "in-process"],
)
def test_only_the_program_freezes_its_objects_for_the_collector(code: str, frozen: bool) -> None:
    """``acmecerts.cli._gc``: ``gc.freeze`` when the process is the command, never in-process."""
    program = f"import gc; from acmecerts.cli import main; {code}; print(gc.get_freeze_count())"
    result = python_in_repo(["-c", program], check=True)
    assert (int(result.stdout.splitlines()[-1]) > 0) is frozen, result.stdout


#: Counts the collector's runs from the moment ``main`` is called, and whether it is on at
#: exit; ``acmecerts.cli._gc.settle`` is wrapped to count those before and after it.
#: Then ``main`` as the program (``sys.argv``) or in-process (``main(argv)``).
COLLECTIONS = """
import atexit, gc, sys
from acmecerts.cli import _gc, main
runs = {"before settle": 0, "after settle": 0}
phase = ["before settle"]
def count(step, info):
    if step == "start":
        runs[phase[0]] += 1
settled = _gc.settle
def settle():
    settled()
    phase[0] = "after settle"
_gc.settle = settle
atexit.register(lambda: print(runs["before settle"], runs["after settle"], gc.isenabled()))
gc.collect()  # a fresh count: what follows is main's own
gc.callbacks.append(count)
"""


@pytest.mark.parametrize("program", [True, False], ids=["program", "in-process"])
def test_only_the_program_imports_with_the_collector_off(program: bool, tmp_path: Path) -> None:
    """``acmecerts.cli._gc``: no collections while the command's modules load (program only).

    ``status`` on a state directory that does not exist imports the library (httpx,
    cryptography, the client: ~120 collections when the collector is on) and stops with
    exit 2 before any async work, so before :func:`~acmecerts.cli._gc.settle`.
    """
    args = ["status", "--state-dir", str(tmp_path / "missing")]
    call = f"sys.argv = ['acmecerts', *{args!r}]; main()" if program else f"main({args!r})"
    result = python_in_repo(["-c", COLLECTIONS + call])
    assert "does not exist" in result.stderr, result.stderr[-2000:]
    before, after, enabled = result.stdout.split()
    assert after == "0"  # never settled
    if program:
        assert (before, enabled) == ("0", "False")
    else:
        assert int(before) > 0  # what the program avoids
        assert enabled == "True"


@pytest.mark.timeout(120)
def test_the_program_collects_again_once_settled(pebble: PebbleServer, tmp_path: Path) -> None:
    """A whole ``issue`` as the program: no collections before ``settle``, some after."""
    args = [
        "issue",
        *ca_args(pebble, tmp_path / "state"),
        *("--out", str(tmp_path / "out")),
        *http01_args(pebble),
        "collector.example.test",
    ]
    code = COLLECTIONS + f"sys.argv = ['acmecerts', *{args!r}]; main()"
    result = python_in_repo(["-c", code], timeout=90)
    assert (tmp_path / "out" / "fullchain.pem").is_file(), result.stderr[-2000:]
    before, after, enabled = result.stdout.split()[-3:]
    assert before == "0"
    assert int(after) > 0
    assert enabled == "True"
