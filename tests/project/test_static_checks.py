"""The static checks CI holds the code to: ``mypy --strict`` and ``ruff`` (with the S rules)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import acmecerts.errors

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_mypy_strict_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "acmecerts"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_check_and_format_are_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    paths = ["acmecerts", "tests", "bench", "examples"]
    check = subprocess.run([ruff, "check", *paths], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-4000:]
    fmt = subprocess.run(
        [ruff, "format", "--check", *paths], cwd=ROOT, capture_output=True, text=True
    )
    assert fmt.returncode == 0, fmt.stdout[-4000:]


# -- errors are built with what they need -----------------------------------------------------

#: What an error may have set on it after it was made: Python's own chaining and traceback.
_CHAINING = frozenset({"__cause__", "__context__", "__traceback__", "__suppress_context__"})


def _callee(call: ast.expr) -> str:
    if not isinstance(call, ast.Call):
        return ""
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _makes_an_error(call: ast.expr, classes: set[str]) -> bool:
    """Whether ``call`` makes an exception: an error class (``...Error``, ``...Problem``,
    ``Ours(...)`` of acmecerts' tree, one ``problem_class()`` chose: ``classes``) or one
    of the functions that build one."""
    name = _callee(call)
    return bool(name) and (
        name.endswith(("Error", "Problem", "Timeout", "Refused", "Failed", "Missing", "Found"))
        or name in _TREE
        or name in classes
        or name.startswith(("problem_from_", "synthetic_problem", "_translate", "_unsent"))
        or name.endswith("_error")
    )


def patched_errors(root: Path) -> list[str]:
    """``file:line: name.attribute`` for every attribute set on an error after it was
    made (in the same function): by ``except ... as name``, or from a call that makes one."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            errors = {
                node.name
                for node in ast.walk(function)
                if isinstance(node, ast.ExceptHandler) and node.name
            }
            assigned = [node for node in ast.walk(function) if isinstance(node, ast.Assign)]
            classes = {
                target.id
                for node in assigned
                if _callee(node.value) == "problem_class"
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            for node in assigned:
                if _makes_an_error(node.value, classes):
                    errors.update(t.id for t in node.targets if isinstance(t, ast.Name))
            for node in ast.walk(function):
                targets = node.targets if isinstance(node, ast.Assign) else []
                if isinstance(node, ast.AugAssign | ast.AnnAssign):
                    targets = [node.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id in errors
                        and target.attr not in _CHAINING
                    ):
                        where = path.relative_to(root.parent)
                        found.append(f"{where}:{node.lineno}: {target.value.id}.{target.attr}")
    return sorted(found, key=lambda line: (line.split(":")[0], int(line.split(":")[1])))


_TREE = frozenset(acmecerts.errors.__all__)


def test_no_error_is_patched_after_it_was_made() -> None:
    """``exc.kind = ...``, ``problem.message = ...``: the constructor takes it instead
    (``AcmeProblem(kind=..., request=...)``, ``ConnectError(unknown_host=...)``...)."""
    assert patched_errors(ROOT / "acmecerts") == []


def test_the_patch_check_finds_a_patched_error(tmp_path: Path) -> None:
    package = tmp_path / "acmecerts"
    package.mkdir()
    (package / "m.py").write_text(
        "def f(url):\n"
        "    error = ConnectError('no', url=url)\n"
        "    error.kind = 'permanent'\n"
        "    try:\n"
        "        g()\n"
        "    except DnsZoneNotFound as exc:\n"
        "        exc.message += ' (via CNAME)'\n"
        "        exc.__cause__ = None\n"
        "        raise\n"
        "    problem = problem_from_document({})\n"
        "    problem.retry_after = 1\n"
        "    other = make()\n"
        "    other.kind = 1\n"
        "    cls = problem_class(t)\n"
        "    made = cls(t, d)\n"
        "    made.kind = 2\n"
    )
    assert patched_errors(package) == [
        "acmecerts/m.py:3: error.kind",
        "acmecerts/m.py:7: exc.message",
        "acmecerts/m.py:11: problem.retry_after",
        "acmecerts/m.py:16: made.kind",
    ]
