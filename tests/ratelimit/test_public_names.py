"""``acmecerts.ratelimit``'s names: the module, its stub for type checkers, and users' code.

Every name is imported on first use (PEP 562) from the module ``_LAZY`` names
(``RateLimitLedger`` from beside the manager); type checkers read
``acmecerts/ratelimit/__init__.pyi``, which must declare exactly the names of ``__all__``,
from the same modules, each the object the module gives at run time.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import acmecerts.ratelimit as ratelimit
from acmecerts.manager._ledger import RateLimitLedger
from acmecerts.ratelimit import LETS_ENCRYPT, LedgerLike

STUB = Path(ratelimit.__file__).with_suffix(".pyi")


def test_the_stub_declares_the_names_of_all_from_the_same_modules() -> None:
    tree = ast.parse(STUB.read_text())
    declared = {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names
    }
    stub_all = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
    )
    assert stub_all == ratelimit.__all__
    assert declared == ratelimit._LAZY
    for name, module in declared.items():
        assert getattr(importlib.import_module(module), name) is getattr(ratelimit, name), name


def test_rate_limit_ledger_is_the_managers_and_a_ledger_like() -> None:
    assert ratelimit.RateLimitLedger is RateLimitLedger
    ledger: LedgerLike = RateLimitLedger(LETS_ENCRYPT)
    assert ledger.model is LETS_ENCRYPT


@pytest.mark.timeout(300)
def test_users_code_is_mypy_strict_clean(tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text(
        "from acmecerts import AcmeClient\n"
        "from acmecerts.ratelimit import LETS_ENCRYPT, BudgetLine, RateLimitLedger\n\n"
        "async def budget(client: AcmeClient) -> list[BudgetLine]:\n"
        "    ledger = RateLimitLedger(LETS_ENCRYPT)\n"
        "    AcmeClient('https://ca.test/dir', ledger=ledger)\n"
        "    return await ledger.budget()\n\n"
        "def wrong() -> int:\n"
        "    return RateLimitLedger(LETS_ENCRYPT)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(user)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    # the one error proves mypy saw the real class, not Any
    assert 'Incompatible return value type (got "RateLimitLedger", expected "int")' in (
        result.stdout
    ), result.stdout
    assert "Found 1 error in 1 file" in result.stdout, result.stdout
