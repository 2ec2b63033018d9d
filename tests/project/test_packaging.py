"""The package as people install it, built once per session with ``python -m build``.

``python -m build --no-isolation`` (the test venv's hatchling: fast, and no download of the
build backend) makes the sdist, then the wheel from the sdist, so the sdist is known to be
complete enough to build from. ``twine check --strict`` accepts both. The sdist is the
source tree git holds (less the CI entry point, ``.ci/``), with the tests; the wheel is
``acmecerts/`` (``py.typed`` included) and its metadata, nothing else.

The last test installs the wheel into a fresh virtual environment (no system
site-packages, run from outside the repository so nothing of the checkout is on
``sys.path``); its dependencies come from the package index pip is configured with (PyPI:
the network is needed, and pip's cache keeps repeated runs quick). Its ``acmecerts``
command then issues a certificate from the session Pebble.
"""

from __future__ import annotations

import email.parser
import email.policy
import fnmatch
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import REPO, ca_args, check_certificate, cli_env, http01_args

import acmecerts

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

#: The environment the suite started with, before conftest.py takes the proxy variables
#: away from each test: pip may need them to reach the package index.
MACHINE_ENV = dict(os.environ)

#: Variables that would put something other than the fresh venv's own packages on its path.
PYTHON_PATH_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PIP_USER")

#: What the sdist leaves out of the source tree.
NOT_IN_SDIST = (".ci/*",)

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """``python -m build --no-isolation`` of the checkout: the sdist, then the wheel from it."""
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)]
    result = subprocess.run(
        command, cwd=out, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dist(sdist, wheel)


def source_files() -> set[str]:
    """The files of the checkout a build sees: git's (tracked, or new and not ignored).

    Outside a git checkout (an unpacked sdist), the files on disk less what .gitignore names.
    """
    if (REPO / ".git").exists():
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        return {name for name in listed.split("\0") if name and (REPO / name).is_file()}
    ignored = [
        line.strip("/")
        for line in (REPO / ".gitignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    return {
        path.relative_to(REPO).as_posix()
        for path in REPO.rglob("*")
        if path.is_file()
        and not any(
            fnmatch.fnmatch(part, pattern)
            for part in path.relative_to(REPO).parts
            for pattern in ignored
        )
    }


def wheel_metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"acmecerts-{acmecerts.__version__}.dist-info/METADATA").decode()
    return email.parser.Parser(policy=email.policy.compat32).parsestr(text)


def test_twine_check_accepts_the_sdist_and_the_wheel(dist: Dist) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dist.sdist), str(dist.wheel)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_the_archives_are_named_for_the_version(dist: Dist) -> None:
    version = acmecerts.__version__
    assert dist.sdist.name == f"acmecerts-{version}.tar.gz"
    assert dist.wheel.name == f"acmecerts-{version}-py3-none-any.whl"


def test_the_wheel_holds_the_package_its_license_and_its_command(dist: Dist) -> None:
    info = f"acmecerts-{acmecerts.__version__}.dist-info"
    with zipfile.ZipFile(dist.wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    package = {name for name in source_files() if name.startswith("acmecerts/")}
    assert "acmecerts/py.typed" in package
    assert {name for name in names if not name.startswith(f"{info}/")} == package
    assert names - package == {
        f"{info}/{name}"
        for name in ("METADATA", "WHEEL", "RECORD", "entry_points.txt", "licenses/LICENSE")
    }
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    assert "[console_scripts]\nacmecerts = acmecerts.cli:main" in entry_points


def test_the_wheel_metadata_says_what_pyproject_says(dist: Dist) -> None:
    project = PYPROJECT["project"]
    metadata = wheel_metadata(dist.wheel)
    assert metadata["Metadata-Version"] == "2.4"
    assert metadata["Name"] == "acmecerts"
    assert metadata["Version"] == acmecerts.__version__
    assert metadata["Summary"] == project["description"]
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Requires-Python"] == project["requires-python"]
    assert sorted(metadata.get_all("Classifier") or []) == sorted(project["classifiers"])
    required = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert sorted(required) == sorted(project["dependencies"])
    assert set(metadata.get_all("Provides-Extra") or []) == set(project["optional-dependencies"])
    # the README is the long description, as PyPI shows it
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().strip() == (REPO / "README.md").read_text().strip()


def test_the_sdist_is_the_source_tree_with_the_tests(dist: Dist) -> None:
    prefix = f"acmecerts-{acmecerts.__version__}/"
    with tarfile.open(dist.sdist) as archive:
        members = archive.getmembers()
    assert all(m.name.startswith(prefix) for m in members)
    names = {m.name.removeprefix(prefix) for m in members if m.isfile()}
    expected = {
        name
        for name in source_files()
        if not any(fnmatch.fnmatch(name, pattern) for pattern in NOT_IN_SDIST)
    }
    assert names - {"PKG-INFO"} == expected
    for needed in ("README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml", "acmecerts/py.typed"):
        assert needed in names
    assert any(name.startswith("tests/") for name in names)
    assert not [name for name in names if name.startswith((".venv/", ".git/", "dist/", ".ci/"))]
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def fresh_env(**extra: str) -> dict[str, str]:
    """The machine's environment (its proxy settings for pip) less the Python path settings."""
    env = {k: v for k, v in MACHINE_ENV.items() if k not in PYTHON_PATH_VARIABLES}
    env.update(extra)
    return env


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_in_a_fresh_venv_issues_a_certificate(
    dist: Dist, pebble: PebbleServer, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    command = venv / "bin" / "acmecerts"

    def run(
        *args: str | Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(arg) for arg in args],
            cwd=tmp_path,  # not the checkout: its acmecerts/ must not be importable
            env=env if env is not None else fresh_env(),
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    created = run(sys.executable, "-m", "venv", venv)
    assert created.returncode == 0, created.stderr
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()

    # Without the cli extra, the command is there and says what it misses.
    bare = run(python, "-m", "pip", "install", "--quiet", dist.wheel)
    assert bare.returncode == 0, bare.stdout + bare.stderr
    without_cli = run(command, "--version")
    assert without_cli.returncode == 2, without_cli.stdout + without_cli.stderr
    assert "pip install 'acmecerts[cli]'" in without_cli.stderr

    with_cli = run(python, "-m", "pip", "install", "--quiet", f"{dist.wheel}[cli]")
    assert with_cli.returncode == 0, with_cli.stdout + with_cli.stderr
    consistent = run(python, "-m", "pip", "check")
    assert consistent.returncode == 0, consistent.stdout

    where = run(python, "-c", "import acmecerts, sysconfig; print(acmecerts.__file__); "
                "print(sysconfig.get_paths()['purelib'])")  # fmt: skip
    assert where.returncode == 0, where.stderr
    module, purelib = (Path(line) for line in where.stdout.splitlines())
    assert module == Path(purelib) / "acmecerts" / "__init__.py"
    assert module.is_relative_to(venv)
    assert not module.resolve().is_relative_to(REPO)

    version = run(command, "--version")
    assert (version.returncode, version.stdout) == (0, f"acmecerts {acmecerts.__version__}\n")

    names = {"wheel.example.test"}
    issue_env = {k: v for k, v in cli_env(tmp_path).items() if k not in PYTHON_PATH_VARIABLES}
    issued = run(
        command,
        "issue",
        *ca_args(pebble, tmp_path / "state"),
        "--out",
        tmp_path / "out",
        *http01_args(pebble),
        *names,
        env=issue_env,
    )
    assert issued.returncode == 0, issued.stdout + issued.stderr
    assert "Certificate issued for" in issued.stdout
    check_certificate(tmp_path / "out", names, pebble.root_pem())
