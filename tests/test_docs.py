"""Every Python code block in README.md and docs/ compiles and imports only real names."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def _blocks() -> list[tuple[str, str]]:
    found = []
    for path in FILES:
        for i, match in enumerate(BLOCK.finditer(path.read_text())):
            found.append((f"{path.relative_to(ROOT)}#{i}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[w for w, _ in _blocks()])
def test_block_compiles_and_its_imports_exist(where: str, code: str) -> None:
    tree = compile(code, where, "exec", flags=FLAGS)
    assert isinstance(tree, ast.Module)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("acmecerts"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{where}: {node.module}.{alias.name} missing"
