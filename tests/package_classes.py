"""The classes a package of acmecerts defines, for the tests that hold its shape."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType


def classes_defined_in(package: ModuleType) -> list[type]:
    """Every class defined in a module of ``package`` (not those it imports)."""
    classes = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                classes.append(cls)
    return classes
