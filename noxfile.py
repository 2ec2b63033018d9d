"""Developer sessions: ``nox -s tests lint types docs bench soak stress audit build``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nox

nox.options.sessions = ["tests", "lint", "types"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite against real Pebble (needs Debian's pebble package)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def stress(session: nox.Session) -> None:
    """The suite in random order while a CPU and loopback load runs beside it.

    ``bench/stress.py``: one busy process per core and a loop of the issuance benchmark
    (its own Pebble, 50 certificates a round) start first; pytest runs beside them (random
    order: pytest-randomly; the seed is in the header) and the load stops when it ends.
    Arguments go to pytest: ``nox -s stress -- tests/cli/test_cli.py -x``. Load knobs:
    ``python bench/stress.py --help``. Needs what ``tests`` needs (Debian's pebble...);
    the Kubernetes store's tests need ``ACMECERTS_KUBE_APISERVER`` (scripts/test.sh sets it).
    """
    session.install("-e", ".[test,kubernetes]")
    session.run("python", "bench/stress.py", "--", "-p", "no:cacheprovider", *session.posargs)


@nox.session
def soak(session: nox.Session) -> None:
    """Fault soak through the fault proxy (default 60 s; not part of ``tests``).

    Knobs: ``ACMECERTS_SOAK_SECONDS``, ``ACMECERTS_SOAK_FAULT_RATE``,
    ``ACMECERTS_SOAK_CONCURRENCY``, ``ACMECERTS_SOAK_SEED`` (see tests/soak/test_soak.py).
    """
    session.install("-e", ".[test]")
    session.run("pytest", "tests/soak", "-m", "soak", "-s", *session.posargs)


#: What pip-audit asks by default (the PyPI JSON API's ``vulnerabilities``, from OSV).
AUDIT_PROBE = "https://pypi.org/pypi/pip/24.0/json"


def _advisories_reachable() -> str | None:
    """``None`` if the advisory service answers, else why not (offline, blocked, a mirror)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(AUDIT_PROBE, timeout=10) as answer:
            if b'"vulnerabilities"' not in answer.read():
                return f"{AUDIT_PROBE} answered without vulnerability data"
    except (urllib.error.URLError, OSError) as exc:
        return f"{AUDIT_PROBE}: {getattr(exc, 'reason', exc)}"
    return None


@nox.session
def audit(session: nox.Session) -> None:
    """pip-audit of the installed dependencies (every extra); fails on a known vulnerability.

    Offline-tolerant: when the advisory database cannot be reached (no network, a proxy
    that blocks it, a package mirror without vulnerability data) the session says so and
    is skipped (exit 0): that is "not audited", never "no vulnerabilities". ``nox -s audit
    -- --strict`` makes unauditable packages fail instead.
    """
    unreachable = _advisories_reachable()
    if unreachable is not None:
        session.skip(f"NOT AUDITED: the advisory database is unreachable ({unreachable})")
    session.install("-e", ".[cli,kubernetes,metrics]", "pip-audit>=2.7")
    report = session.run(
        "pip-audit",
        "--skip-editable",  # acmecerts itself (a PyPI project of that name is not us)
        "--progress-spinner=off",
        "--format=json",
        *session.posargs,
        silent=True,
        success_codes=[0, 1],
    )
    import json

    dependencies: list[dict[str, Any]] | None = None
    for line in reversed(str(report).splitlines()):  # stderr may be mixed in
        if line.startswith('{"dependencies"'):
            dependencies = json.loads(line)["dependencies"]
            break
    if dependencies is None:
        session.error(f"pip-audit failed:\n{report}")
    audited = [d for d in dependencies if "skip_reason" not in d]
    vulnerable = [d for d in audited if d.get("vulns")]
    for dep in vulnerable:
        for vuln in dep["vulns"]:
            fixed = ", ".join(vuln.get("fix_versions", [])) or "no fix yet"
            session.warn(f"{dep['name']} {dep['version']}: {vuln['id']} (fixed in: {fixed})")
    if vulnerable:
        session.error(f"{len(vulnerable)} installed package(s) have known vulnerabilities")
    if not audited:
        session.skip(
            f"NOT AUDITED: none of the {len(dependencies)} packages could be looked up "
            "(the advisory database is unreachable from here)"
        )
    skipped = len(dependencies) - len(audited)
    session.log(
        f"no known vulnerabilities in {len(audited)} packages"
        + (f" ({skipped} could not be looked up)" if skipped else "")
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and format check, and the layer contracts (``lint-imports``)."""
    session.install("-e", ".", "ruff", "import-linter>=2.17,<3")
    session.run("ruff", "check", "acmecerts", "tests", "bench")
    session.run("ruff", "format", "--check", "acmecerts", "tests", "bench")
    # pyproject.toml's [tool.importlinter]; docs/contributing.md, "Layers"
    session.run("lint-imports", "--no-cache")


@nox.session
def types(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install("-e", ".[test,cli]", "mypy")
    session.run("mypy", "--strict", "acmecerts")


@nox.session
def build(session: nox.Session) -> None:
    """The sdist and the wheel in ``dist/``, checked by ``twine check --strict``.

    ``python -m build`` in its own isolated environment (the build backend, hatchling, comes
    from the package index), as a release would be built; the wheel is built from the sdist.
    ``dist/`` is emptied first, so it holds exactly what was checked.
    tests/project/test_packaging.py installs such a wheel in a fresh venv and runs ``acmecerts``.
    """
    import shutil

    session.install("build>=1.2", "twine>=6.1")
    shutil.rmtree("dist", ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", "dist", ".")
    archives = sorted(str(path) for path in Path("dist").iterdir())
    session.run("twine", "check", "--strict", *archives)
    session.log("built: " + ", ".join(archives))


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site (mkdocs --strict) and run every code block of the docs and examples.

    The blocks talk to a real Pebble (Debian's pebble package). The kopf operator example
    needs a kube-apiserver (scripts/kube-apiserver.sh); run its test too with
    ``nox -s docs -- tests/examples/test_example_operator.py``.
    """
    session.install("-e", ".[docs,cli,test,kubernetes]", "kopf>=1.37")
    session.run("mkdocs", "build", "--strict", "--site-dir", f"{session.create_tmp()}/site")
    session.run(
        "pytest", "tests/project/test_docs.py", "tests/examples/test_examples.py", *session.posargs
    )


@nox.session
def bench(session: nox.Session) -> None:
    """acmecerts against its peers on a local Pebble: ``nox -s bench -- --quick``.

    Peers (certbot's acme, aioacme, lego) live in their own venvs, installed on first use
    by ``bench/setup_peers.sh``; see docs/performance.md. The run's chart is drawn by
    ``bench/chart.py`` (matplotlib, installed here only) into the session's tmp directory
    as ``bench.svg``, with its JSON beside it (``bench.json``). Then the manager at scale
    (``bench/manager_scale.py``): 1,000, 10,000 and 100,000 certificates (not 100,000
    with ``--quick``). And how long the ``acmecerts`` command takes to start
    (``bench/cli_start.py``).
    """
    session.install("-e", ".[cli]", "matplotlib")  # matplotlib: bench/chart.py only
    results = f"{session.create_tmp()}/bench.json"
    session.run("python", "bench/run.py", "--json", results, *session.posargs)
    session.run("python", "bench/chart.py", results, "-o", f"{session.create_tmp()}/bench.svg")
    sizes = ["1000", "10000"] if "--quick" in session.posargs else ["1000", "10000", "100000"]
    session.run("python", "bench/manager_scale.py", *[a for n in sizes for a in ("--count", n)])
    runs = "10" if "--quick" in session.posargs else "30"
    session.run("python", "bench/cli_start.py", "--runs", runs)
