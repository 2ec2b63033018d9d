"""Developer sessions: ``nox -s tests lint types docs bench``."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "types"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite against real Pebble (needs Debian's pebble package)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and format check."""
    session.install("ruff")
    session.run("ruff", "check", "acmecerts", "tests", "bench")
    session.run("ruff", "format", "--check", "acmecerts", "tests", "bench")


@nox.session
def types(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install("-e", ".[test,cli]", "mypy")
    session.run("mypy", "--strict", "acmecerts")


@nox.session
def docs(session: nox.Session) -> None:
    """Every Python block in docs/ and README.md compiles and imports real names."""
    session.install("-e", ".")
    session.install("pytest")
    session.run("pytest", "tests/test_docs.py")


@nox.session
def bench(session: nox.Session) -> None:
    """Issuance benchmark against a local Pebble."""
    session.install("-e", ".")
    session.run("python", "bench/issue_bench.py", *session.posargs)
