"""The layers of docs/contributing.md, held by import-linter's contracts (pyproject.toml).

``lint-imports`` runs as CI would, from the project root; a broken contract fails the test
with import-linter's report (which import, at which line). The second test breaks each kind
of contract in a copy of the package, so a contract that stopped checking anything would
fail here too.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: How many contracts pyproject.toml declares.
CONTRACTS = len(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
)

#: ``lint-imports`` without the console script (the venv's bin/ may not be on PATH).
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("importlinter") is None:
        pytest.fail("import-linter is not installed: pip install -e '.[test]'")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(cwd), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    )
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "200"  # one contract, one line
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--no-logo"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.timeout(180)
def test_the_layer_contracts_are_kept() -> None:
    result = lint_imports(ROOT)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    # every contract of pyproject.toml ran (an empty configuration would pass too)
    assert f"{CONTRACTS} kept, 0 broken" in report, report


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("module", "line", "contract", "named"),
    [
        pytest.param(
            "acmecerts/protocol/jws.py",
            "import acmecerts.transport",
            "Each layer imports only the layers below it",
            "acmecerts.protocol.jws -> acmecerts.transport",
            id="layers",
        ),
        pytest.param(
            "acmecerts/client/_order.py",
            "import acmecerts.solvers",
            "Each layer imports only the layers below it",
            "acmecerts.client._order -> acmecerts.solvers",
            id="client-solvers-independent",
        ),
        pytest.param(
            "acmecerts/solvers/_checks.py",
            "import acmecerts.retry",
            "Solvers use the protocol's contract",
            "acmecerts.solvers._checks -> acmecerts.retry",
            id="solvers",
        ),
        pytest.param(
            "acmecerts/protocol/problems.py",
            "import anyio",
            "The protocol does no I/O and no sleeping",
            "acmecerts.protocol.problems -> anyio",
            id="protocol-no-io",
        ),
        pytest.param(
            "acmecerts/manager/_core.py",
            "import acmecerts.storage",
            "The manager's fleet core decides; it does no I/O",
            "acmecerts.manager._core -> acmecerts.storage",
            id="fleet-core-no-io",
        ),
        pytest.param(
            "acmecerts/retry.py",
            "import httpx",
            "Policy (retry, ratelimit) decides; it does no I/O",
            "acmecerts.retry -> httpx",
            id="policy-is-pure",
        ),
        pytest.param(
            "acmecerts/metrics.py",
            "import acmecerts.ratelimit._state",
            "use the public API only",
            "acmecerts.metrics -> acmecerts.ratelimit._state",
            id="public-names",
        ),
    ],
)
def test_a_broken_contract_fails_with_its_report(
    tmp_path: Path, module: str, line: str, contract: str, named: str
) -> None:
    shutil.copytree(
        ROOT / "acmecerts", tmp_path / "acmecerts", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "layer_contracts.py", tmp_path / "tests")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    source = tmp_path / module
    source.write_text(source.read_text() + f"\n{line}  # a violation\n")
    result = lint_imports(tmp_path)
    report = result.stdout + result.stderr
    assert result.returncode != 0, report
    assert f"{CONTRACTS - 1} kept, 1 broken" in report, report
    broken = report[report.index("Broken contracts") :]
    assert contract in broken, report
    assert named in broken, report
