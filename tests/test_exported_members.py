"""The public API is exactly what ``acmecerts.__all__`` says, sorted and documented."""

from __future__ import annotations

import inspect

import acmecerts


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
