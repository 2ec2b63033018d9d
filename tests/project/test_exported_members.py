"""The public API is exactly what ``acmecerts.__all__`` says, sorted and documented."""

from __future__ import annotations

import ast
import importlib
import inspect
from types import ModuleType

import acmecerts


def type_checking_imports(package: ModuleType) -> dict[str, str | None]:
    """Each name a package imports under ``if TYPE_CHECKING:``, and the module it names."""
    tree = ast.parse(inspect.getsource(package))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )
    return {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_all_is_sorted_and_complete() -> None:
    names = acmecerts.__all__
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert hasattr(acmecerts, name), name
    public = {n for n in dir(acmecerts) if not n.startswith("_")} - {
        "cli",
        "client",
        "errors",
        "logging",
        "manager",
        "metrics",
        "protocol",
        "ratelimit",
        "retry",
        "attempts",
        "solvers",
        "storage",
        "testing",
        "transport",
    }
    assert public <= set(names), public - set(names)


def test_public_names_have_docstrings() -> None:
    for name in acmecerts.__all__:
        obj = getattr(acmecerts, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") or not callable(member):
                        continue
                    assert inspect.getdoc(member), f"{name}.{attr} has no docstring"


def test_lazy_names_match_the_type_checking_imports() -> None:
    """``acmecerts/__init__.py`` names each public name twice: keep the two lists equal.

    The imports under ``TYPE_CHECKING`` are what type checkers and IDEs see; ``_LAZY`` is what
    ``acmecerts.NAME`` imports at run time. A name in one list only would type-check but fail
    at run time, or the reverse.
    """
    imported = type_checking_imports(acmecerts)
    lazy: dict[str, str] = acmecerts._LAZY
    assert imported == lazy
    assert set(lazy) == set(acmecerts.__all__) - {"__version__"}
    for name, module in lazy.items():
        assert getattr(importlib.import_module(module), name) is getattr(acmecerts, name), name


def test_solvers_lazy_names_match_the_type_checking_imports() -> None:
    """``acmecerts/solvers/__init__.py`` imports each solver's module on first use (PEP 562):
    its ``_LAZY`` table and its ``TYPE_CHECKING`` imports name the same things, and every
    name of its ``__all__`` resolves to the object its module defines."""
    import acmecerts.solvers as solvers

    imported = type_checking_imports(solvers)
    lazy: dict[str, str] = solvers._LAZY
    assert imported == lazy
    assert set(lazy) | {"ChallengeTask", "Solver"} == set(solvers.__all__)
    assert solvers.__all__ == sorted(solvers.__all__)
    for name, module in lazy.items():
        assert getattr(importlib.import_module(module), name) is getattr(solvers, name), name
