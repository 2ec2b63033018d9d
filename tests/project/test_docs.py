"""Every code block in README.md and docs/ is executed (or checked), so the docs never rot.

The convention, also described for writers in ``docs/contributing.md``:

* **python** blocks run as a reader would run them: each is written to a file of its own
  and run with ``python FILE`` (a subprocess), so top-level ``await`` or ``async with``
  fails: wrap the code in ``async def main()`` and ``anyio.run(main)``. A block preceded
  by ``<!-- continues -->`` builds on the python block before it: it is appended to that
  block's file, and the file runs once, whole (the reader pastes both into one file).
  Blocks that talk to a CA talk to the session's Pebble, because the source is rewritten
  before it runs (:func:`rewrite`): Let's Encrypt's directory URLs become Pebble's,
  ``port=80`` (and ``Http01Server()``) the port where Pebble validates http-01 (on
  ``127.0.0.1``, not every address), and absolute state paths (``/var/lib/...``,
  ``/etc/ssl/...``) paths under a temporary directory, which is the working directory of
  every block of the page. ``SSL_CERT_FILE`` names a bundle with Pebble's HTTPS CA, so the
  client trusts Pebble without a ``ca_bundle=`` the reader would not write; nothing else
  is injected: a block defines or imports every name it uses.
* ``<!-- invisible-code-block: python ... -->`` holds python that is not shown. After a
  python block it is appended to that block's file (hidden checks: it runs after the
  shown code, so the shown code cannot depend on it); elsewhere (first, or after another
  kind of block) it runs in a file of its own (set-up for the shell blocks that follow,
  such as a file they read).
* **sh**/**console** blocks: every command runs. ``acmecerts ...`` runs the CLI as a
  subprocess against Pebble (``ACMECERTS_DIRECTORY``, ``ACMECERTS_CA_BUNDLE``,
  ``ACMECERTS_STATE_DIR`` set, ``--staging`` dropped: Pebble stands in for Let's
  Encrypt's staging; ``issue`` answers http-01 where Pebble validates, or with
  ``--webroot DIR`` a real web server serves DIR there), and
  ``python examples/...`` an example (``ACMECERTS_HTTP_PORT`` set too); both must exit
  0. ``pip install 'acmecerts[extra]'`` checks that the extras exist. Any other command
  needs a not-run marker.
* **json**, **yaml** and **toml** blocks must parse; **text** blocks are output or
  formats, not code. A block without a language fails.
* A block made of ``--8<-- "examples/..."`` lines shows a file from ``examples/``, which
  ``tests/examples/test_examples.py`` and ``tests/examples/test_example_operator.py`` run;
  the file (and section) must exist.
* ``<!-- not-run: reason -->`` right before a block skips it. There may be at most
  :data:`MAX_NOT_RUN` of them, each with a reason of a few words.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import ssl
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from acmecerts.testing import PebbleServer

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FILES = [
    ROOT / "README.md",
    *sorted(p for p in DOCS.glob("**/*.md") if not any(part.startswith("_") for part in p.parts)),
]

#: At most this many blocks may be marked ``<!-- not-run: ... -->`` (all files together).
MAX_NOT_RUN = 8

#: Languages and what happens to their blocks.
PYTHON = {"python", "py", "pycon"}
SHELL = {"sh", "bash", "console", "shell"}
PARSED = {"json", "yaml", "toml"}
NOT_CODE = {"text"}

LETS_ENCRYPT_URLS = (
    "https://acme-v02.api.letsencrypt.org/directory",
    "https://acme-staging-v02.api.letsencrypt.org/directory",
)
#: Absolute paths in the docs that are moved under the page's temporary directory.
STATE_PATHS = ("/var/lib/", "/etc/ssl/", "/etc/acmecerts/", "/var/www/")

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n"
    r"(?P<body>.*?)"
    r"^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_INVISIBLE = re.compile(
    r"^<!--[ \t]*invisible-code-block:[ \t]*python[ \t]*\n(?P<body>.*?)^-->[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_NOT_RUN = re.compile(r"<!--[ \t]*not-run:(?P<reason>[^\n]*?)-->[ \t]*\n(?:[ \t]*\n)*\Z")
_CONTINUES = re.compile(r"<!--[ \t]*continues[ \t]*-->[ \t]*\n(?:[ \t]*\n)*\Z")
_SNIPPET = re.compile(r'^--8<--[ \t]+"(?P<path>[^"]+)"[ \t]*$')
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_REQUIREMENT = re.compile(r"(?:acmecerts|\.)(?:\[(?P<extras>[^\]]*)\])?(?:[<>=!~].*)?")


@dataclass(frozen=True)
class Block:
    """One code block of a page."""

    path: Path
    line: int
    language: str
    body: str
    invisible: bool = False
    not_run: str | None = None
    continues: bool = False

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def _masked(text: str) -> str:
    """``text`` with the inside of every fence blanked (newlines kept), so that markers
    and comments quoted in a block are not taken for real ones."""
    out, last = [], 0
    for match in _FENCE.finditer(text):
        out.append(text[last : match.start("body")])
        out.append(re.sub(r"[^\n]", " ", match["body"]))
        last = match.end("body")
    out.append(text[last:])
    return "".join(out)


def blocks_of(path: Path) -> list[Block]:
    """The blocks of ``path`` in document order (invisible ones included)."""
    text = path.read_text(encoding="utf-8")
    masked = _masked(text)
    comments = [m.span() for m in _COMMENT.finditer(masked)]
    found: list[tuple[int, Block]] = []
    for match in _INVISIBLE.finditer(masked):
        line = text.count("\n", 0, match.start()) + 1  # the comment's first line
        body = text[match.start("body") : match.end("body")]
        found.append((match.start(), Block(path, line, "python", body, invisible=True)))
    for match in _FENCE.finditer(text):
        if any(start < match.start() < end for start, end in comments):
            continue  # commented out, or the body of an invisible block
        indent = len(match["indent"])
        body = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
        language = match["info"].strip().split(" ")[0].lower().lstrip(".")
        marker = _NOT_RUN.search(masked, 0, match.start())
        reason = marker["reason"].strip() if marker else None
        continues = _CONTINUES.search(masked, 0, match.start()) is not None
        line = text.count("\n", 0, match.start()) + 1
        block = Block(path, line, language, body, not_run=reason, continues=continues)
        found.append((match.start(), block))
    return [block for _, block in sorted(found, key=lambda item: item[0])]


def not_run_markers(path: Path) -> int:
    """How many not-run markers ``path`` has outside code blocks."""
    return len(re.findall(r"<!--[ \t]*not-run:", _masked(path.read_text(encoding="utf-8"))))


ALL_BLOCKS = [block for path in FILES for block in blocks_of(path)]


# -- running python -------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where the rewritten blocks point."""

    directory: str
    ca_bundle: Path
    http_port: int
    tls_port: int
    tmp: Path


def rewrite(source: str, target: Target) -> str:
    """Point a block at Pebble and at temporary paths (see the module docstring)."""
    for url in LETS_ENCRYPT_URLS:
        source = source.replace(url, target.directory)
    source = re.sub(r"\bport=80\b", f"port={target.http_port}", source)
    source = re.sub(r"\bport=443\b", f"port={target.tls_port}", source)
    source = source.replace("Http01Server()", f"Http01Server(port={target.http_port})")
    source = source.replace("TlsAlpn01Server()", f"TlsAlpn01Server(port={target.tls_port})")
    # The servers' default address is every IPv4 and IPv6 address: tests stay on loopback.
    source = re.sub(
        r"\b(Http01Server|TlsAlpn01Server)\((?!\s*host=)", r'\1(host="127.0.0.1", ', source
    )
    for prefix in STATE_PATHS:
        source = source.replace(prefix, f"{target.tmp}{prefix}")
    return source


def python_files(blocks: list[Block]) -> Iterator[list[Block]]:
    """The python files of a page, in order, each as the blocks it is made of, interleaved
    with the page's other blocks (each alone in its list), so that a python file runs
    before the shell blocks that follow it.

    A python block starts a file; a block marked ``<!-- continues -->``, and an invisible
    block after a python block, are appended to the file before them. A continuation with
    no python block right before it (another kind of block in between, or none) fails.
    """
    current: list[Block] | None = None
    for block in blocks:
        if block.not_run is not None:
            continue
        if block.language in PYTHON:
            if block.continues or (block.invisible and current is not None):
                assert current is not None, (
                    f"{block.where}: marked <!-- continues --> but no python block is right "
                    "before it"
                )
                current.append(block)
                continue
            if current is not None:
                yield current
            current = [block]
            continue
        assert not block.continues, f"{block.where}: only a python block can continue one"
        if current is not None:
            yield current
            current = None
        yield [block]
    if current is not None:
        yield current


def python_source(parts: list[Block], target: Target) -> str:
    """The file the blocks make, rewritten for Pebble; each block's lines are at their line
    in the Markdown file, so a traceback's line numbers point into the page."""
    lines: list[str] = []
    for part in parts:
        lines.extend([""] * (part.line - len(lines)))
        lines.extend(rewrite(part.body, target).splitlines())
    return "\n".join(lines) + "\n"


def check_runs_as_a_file(source: str, where: str) -> None:
    """Fail with a clear message if ``source`` is not a valid program on its own, as top-level
    ``await`` or ``async with`` is not (a REPL accepts them; ``python FILE`` does not)."""
    try:
        compile(source, where, "exec", dont_inherit=True)
    except SyntaxError as error:
        hint = ""
        if "outside" in str(error.msg) and ("await" in error.msg or "async" in error.msg):
            hint = (
                " (top-level await: put the code in `async def main()` and end the block "
                "with `anyio.run(main)`)"
            )
        pytest.fail(
            f"{where}: line {error.lineno} is not valid in a file run with python: "
            f"{error.msg}{hint}",
            pytrace=False,
        )


def run_python(parts: list[Block], target: Target, env: dict[str, str]) -> float:
    """Write the blocks to a file and run it with ``python FILE``; the seconds it took."""
    first = parts[0]
    where = first.where + "".join(f"+{part.line}" for part in parts[1:])
    source = python_source(parts, target)
    check_runs_as_a_file(source, where)
    name = f"{first.path.stem}_{first.line}.py"
    file = target.tmp.parent / "blocks" / name
    file.parent.mkdir(exist_ok=True)
    file.write_text(source, encoding="utf-8")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(file)],
        env=env,
        cwd=target.tmp,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert result.returncode == 0, (
        f"{where}: `python {name}` exited {result.returncode} (line numbers are the page's)\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    )
    return time.monotonic() - started


# -- running shell ----------------------------------------------------------------------------


def shell_commands(body: str) -> Iterator[list[str]]:
    """The commands of a shell block (``$`` prompts and output lines of console blocks)."""
    lines = body.splitlines()
    console = any(line.startswith("$ ") for line in lines)
    pending = ""
    for raw in lines:
        line = raw.rstrip()
        if console:
            if not line.startswith("$ ") and not pending:
                continue  # output
            line = line.removeprefix("$ ")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        command = shlex.split(pending + line, comments=True)
        pending = ""
        if command:
            yield command


def _extras() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(pyproject["project"]["optional-dependencies"])


def _option_value(args: list[str], option: str) -> str | None:
    for index, arg in enumerate(args):
        if arg == option and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(f"{option}="):
            return arg.partition("=")[2]
    return None


@contextlib.contextmanager
def _web_server(root: str | None, target: Target) -> Iterator[None]:
    """For ``--webroot DIR``: a real web server serving DIR where Pebble validates http-01."""
    if root is None:
        yield
        return
    port = str(target.http_port)
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--directory", root, "--bind", "127.0.0.1", port],
        cwd=target.tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", target.http_port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "the web server for --webroot exited"
                assert time.monotonic() < deadline, "the web server for --webroot did not start"
                time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def run_shell(block: Block, target: Target, env: dict[str, str]) -> None:
    for command in shell_commands(rewrite(block.body, target)):
        if command[0] == "acmecerts":
            # --staging is Let's Encrypt's staging directory; here Pebble's stands in for it
            # (ACMECERTS_DIRECTORY), as it does for the directory URLs of python blocks.
            args = [a for a in command[1:] if a != "--staging"]
            webroot = _option_value(args, "--webroot")
            if (
                args
                and args[0] == "issue"
                and webroot is None
                and not any(a.startswith("--http-01-listen") for a in args)
            ):
                args = [*args, "--http-01-listen", f"127.0.0.1:{target.http_port}"]
            args = [
                re.sub(r"^(.*):80$", rf"127.0.0.1:{target.http_port}", a)
                if a.endswith(":80")
                else a
                for a in args
            ]
            with _web_server(webroot, target):
                result = subprocess.run(
                    [sys.executable, "-m", "acmecerts.cli", *args],
                    env=env,
                    cwd=target.tmp,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
            assert result.returncode == 0, (
                f"{block.where}: `{shlex.join(command)}` exited {result.returncode}\n"
                f"{result.stdout}\n{result.stderr}"
            )
        elif command[0] == "python" and command[1:2] and command[1].startswith("examples/"):
            result = subprocess.run(
                [sys.executable, str(ROOT / command[1]), *command[2:]],
                env={**env, "ACMECERTS_HTTP_PORT": str(target.http_port)},
                cwd=target.tmp,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            assert result.returncode == 0, (
                f"{block.where}: `{shlex.join(command)}` exited {result.returncode}\n"
                f"{result.stdout}\n{result.stderr}"
            )
        elif command[:2] == ["pip", "install"]:
            for requirement in command[2:]:
                if requirement.startswith("-"):
                    continue
                match = _REQUIREMENT.fullmatch(requirement)
                assert match, f"{block.where}: pip installs {requirement!r}, not acmecerts"
                wanted = {e.strip() for e in (match["extras"] or "").split(",") if e.strip()}
                missing = wanted - _extras()
                assert not missing, f"{block.where}: no extra {sorted(missing)} in pyproject.toml"
        else:
            pytest.fail(
                f"{block.where}: `{shlex.join(command)}` is not run by the docs test; run "
                "acmecerts commands only, or mark the block <!-- not-run: reason -->",
                pytrace=False,
            )


def check_snippet(block: Block) -> bool:
    """Whether ``block`` only includes files; if so, check that they exist."""
    lines = [line for line in block.body.splitlines() if line.strip()]
    if not lines or not all(_SNIPPET.match(line) for line in lines):
        return False
    for line in lines:
        match = _SNIPPET.match(line)
        assert match is not None
        name, _, section = match["path"].partition(":")
        path = ROOT / name
        assert path.is_file(), f"{block.where}: includes {name}, which does not exist"
        assert name.startswith("examples/"), (
            f"{block.where}: includes {name}; only files under examples/ are run by a test"
        )
        if section:
            text = path.read_text()
            assert f"--8<-- [start:{section}]" in text, f"{block.where}: no section {section}"
            assert f"--8<-- [end:{section}]" in text, f"{block.where}: section {section} open"
    return True


def check_parsed(block: Block) -> None:
    if block.language == "json":
        json.loads(block.body)
    elif block.language == "toml":
        tomllib.loads(block.body)
    else:
        import yaml

        list(yaml.safe_load_all(block.body))


# -- the tests --------------------------------------------------------------------------------


@pytest.fixture
def target(pebble: PebbleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Target:
    """A temporary working directory, and a CA bundle trusted through ``SSL_CERT_FILE``."""
    bundle = tmp_path / "trusted.pem"
    system = ssl.get_default_verify_paths().cafile
    parts = [Path(system).read_text()] if system and Path(system).is_file() else []
    bundle.write_text("".join([*parts, Path(pebble.ca_bundle).read_text()]))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    return Target(pebble.directory_url, pebble.ca_bundle, pebble.http_port, pebble.tls_port, work)


def block_env(target: Target) -> dict[str, str]:
    """The environment of the python files and commands a page runs: pointed at Pebble."""
    return {
        **os.environ,
        "ACMECERTS_DIRECTORY": target.directory,
        "ACMECERTS_CA_BUNDLE": str(target.ca_bundle),
        "ACMECERTS_STATE_DIR": str(target.tmp / "state"),
    }


def run_page(path: Path, target: Target) -> list[tuple[str, float]]:
    """Run (or check) every block of one page, in order; the python files' run times."""
    env = block_env(target)
    timings: list[tuple[str, float]] = []
    for parts in python_files(blocks_of(path)):
        block = parts[0]
        if check_snippet(block):
            continue
        try:
            if block.language in PYTHON:
                timings.append((block.where, run_python(parts, target, env)))
            elif block.language in SHELL:
                run_shell(block, target, env)
            elif block.language in PARSED:
                check_parsed(block)
            elif block.language in NOT_CODE:
                pass
            else:
                pytest.fail(
                    f"{block.where}: a block needs a language the docs test knows "
                    f"(python, sh, console, json, yaml, toml, text), not {block.language!r}",
                    pytrace=False,
                )
        except Exception as exc:
            exc.add_note(f"in the {block.language} block at {block.where}")
            raise
    return timings


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
@pytest.mark.timeout(300)
def test_code_blocks_run(path: Path, target: Target) -> None:
    """Run (or check) every block of one page, in order, against Pebble: each python block
    (with its continuations) as a file of its own, with ``python FILE``."""
    for where, seconds in run_page(path, target):
        print(f"{where}: {seconds:.2f} s")


# -- the checker itself -------------------------------------------------------------------------


@pytest.fixture
def offline(tmp_path: Path) -> Target:
    """A target for pages that talk to no CA."""
    work = tmp_path / "work"
    work.mkdir()
    return Target("https://ca.invalid/directory", tmp_path / "none.pem", 1, 1, work)


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


def test_a_block_with_top_level_await_fails(tmp_path: Path, offline: Target) -> None:
    """What a REPL accepts but ``python FILE`` refuses is refused, with the way out."""
    page = _page(
        tmp_path,
        "# A page\n\n```python\nimport anyio\n\nawait anyio.sleep(0)\n```\n",
    )
    with pytest.raises(pytest.fail.Exception, match=r"page.md:3: line 6 .*anyio.run\(main\)"):
        run_page(page, offline)
    page.write_text(
        "```python\nimport anyio\n\nasync with anyio.create_task_group():\n    pass\n```\n"
    )
    with pytest.raises(pytest.fail.Exception, match="top-level await"):
        run_page(page, offline)
    # wrapped, the same code runs
    page.write_text(
        "```python\nimport anyio\n\n\nasync def main() -> None:\n"
        "    await anyio.sleep(0)\n\n\nanyio.run(main)\n```\n"
    )
    [(where, _)] = run_page(page, offline)
    assert where.endswith("page.md:1")


def test_each_block_is_a_file_of_its_own(tmp_path: Path, offline: Target) -> None:
    """A block sees nothing of the blocks before it, unless marked as a continuation; an
    invisible block after a python block is appended to its file, so it can check it."""
    first = "```python\nanswer = 42\n```\n\n"
    page = _page(tmp_path, first + "```python\nassert answer == 42\n```\n")
    with pytest.raises(AssertionError, match=r"(?s)page.md:5: .*NameError: name 'answer'"):
        run_page(page, offline)
    page.write_text(
        first + "<!-- continues -->\n\n```python\nassert answer == 42\nprint('seen')\n```\n"
        "\n<!-- invisible-code-block: python\nassert answer == 41\n-->\n"
    )
    with pytest.raises(AssertionError, match=r"(?s)page.md:1\+7\+12: .*line 13"):
        run_page(page, offline)
    page.write_text(first + "<!-- continues -->\n```python\nassert answer == 42\n```\n")
    [(where, _)] = run_page(page, offline)
    assert where.endswith("page.md:1")
    # a continuation after another kind of block continues nothing
    page.write_text(
        first + "```json\n{}\n```\n\n<!-- continues -->\n```python\nprint(answer)\n```\n"
    )
    with pytest.raises(AssertionError, match="no python block is right before it"):
        run_page(page, offline)


def test_a_block_runs_with_the_environment_pointing_at_pebble(
    tmp_path: Path, target: Target
) -> None:
    """The page's python files get Pebble's directory and bundle, and the rewrites."""
    page = _page(
        tmp_path,
        "```python\nimport os\n\n"
        'url = "https://acme-staging-v02.api.letsencrypt.org/directory"\n'
        'assert url == os.environ["ACMECERTS_DIRECTORY"], url\n'
        'assert os.environ["SSL_CERT_FILE"]\n```\n',
    )
    [(_, seconds)] = run_page(page, target)
    assert seconds < 60


def test_not_run_markers_are_few_and_justified() -> None:
    skipped = [b for b in ALL_BLOCKS if b.not_run is not None]
    report = "\n".join(f"  {b.where}: {b.not_run}" for b in skipped)
    assert len(skipped) <= MAX_NOT_RUN, f"too many blocks are not run:\n{report}"
    for block in skipped:
        assert len(block.not_run.split()) >= 3, f"{block.where}: say why it is not run"
    # a marker must sit right before a block: count them in the raw text too
    markers = sum(not_run_markers(path) for path in FILES)
    assert markers == len(skipped), f"a not-run marker is not right before a block:\n{report}"
    continued = [b for b in ALL_BLOCKS if b.continues]
    found = sum(
        # outside blocks and inline code (docs/contributing.md quotes the marker)
        len(re.findall(r"(?<!`)<!--[ \t]*continues[ \t]*-->", _masked(path.read_text())))
        for path in FILES
    )
    assert found == len(continued), "a <!-- continues --> marker is not right before a block"


def test_every_block_has_a_known_language() -> None:
    known = PYTHON | SHELL | PARSED | NOT_CODE
    unknown = [f"{b.where}: {b.language!r}" for b in ALL_BLOCKS if b.language not in known]
    assert not unknown, "blocks without a known language:\n" + "\n".join(unknown)


def test_python_blocks_are_most_of_the_docs() -> None:
    """The harness finds the python blocks (a broken fence regex would silently find none)."""
    python = [b for b in ALL_BLOCKS if b.language in PYTHON and not b.invisible]
    assert len(python) >= 20, [b.where for b in python]


def test_readme_demo_runs() -> None:
    """The last step of ``scripts/demo.sh`` (its block in README.md is not run)."""
    result = subprocess.run(
        [sys.executable, "-m", "acmecerts.testing.demo"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


# -- the CLI reference --------------------------------------------------------------------------


def _cli_reference() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", DOCS / "_hooks/cli_reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_has_every_command_and_option() -> None:
    hook = _cli_reference()
    markdown = hook.render()
    root = hook._root_command()
    ctx = root.make_context("acmecerts", [], resilient_parsing=True)
    for path, command, _ in hook._walk(root, (), ctx):
        assert f"## `{' '.join(('acmecerts', *path))}`" in markdown
        for param in command.params:
            for option in getattr(param, "opts", []):
                if option.startswith("-") and not param.hidden:
                    assert f"`{option}`" in markdown, f"{option} of {path} is not documented"
    page = (DOCS / "cli.md").read_text()
    assert hook.MARKER in page
    assert hook.on_page_markdown(page, page=None).count(hook.MARKER) == 0


def test_cli_exit_codes_are_the_documented_ones() -> None:
    from acmecerts.cli._constants import ExitCode

    page = (DOCS / "cli.md").read_text()
    table = page.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = [int(m) for m in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)]
    assert set(rows) == set(ExitCode)
    assert len(rows) == len(set(rows)), f"one row per exit code, not {rows}"


def test_cli_reference_is_readable() -> None:
    """No type tags or escaped pipes, ``--help`` fits 80 columns, ``--config`` not in Output."""
    hook = _cli_reference()
    markdown = hook.render()
    # a table cell needs `\|` for a pipe, which a code span shows as it is
    escaped = re.findall(r"`[^`\n]*\\\|[^`\n]*`", markdown)
    assert not escaped, f"choices shown with a literal backslash: {escaped}"
    helps = [
        line.removeprefix("    ")
        for line in markdown.splitlines()
        if line.startswith("    ") and not line.strip().startswith("```")
    ]
    assert len(helps) > 100, "the --help texts are on the page"
    for tag in ("<bool>", "<list[", "<str>", "<int>", "<float>", "<path>"):
        assert tag not in markdown, f"--help shows the type tag {tag}"
    too_wide = [line for line in helps if len(line) > hook.COLUMNS]
    assert not too_wide, too_wide[:3]
    for row in re.findall(r"^\| `--.*$", markdown, re.MULTILINE):
        assert row.count(" | ") == 1, f"an options row has two columns: {row}"
    root_help = markdown.split("## `acmecerts issue`")[0]
    config_panel = root_help.split("╭─ Configuration")[1].split("╰")[0]
    assert "--config" in config_panel
    output_panels = [p.split("╰")[0] for p in markdown.split("╭─ Output")[1:]]
    assert not any("--config" in panel for panel in output_panels)


@pytest.mark.timeout(300)
def test_mkdocs_build_is_strict_and_clean(tmp_path: Path) -> None:
    """``mkdocs build --strict`` passes and prints no warning (the docs extra installs it)."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    warnings = [line for line in output.splitlines() if "WARNING" in line or "Black" in line]
    assert not warnings, "\n".join(warnings)
    assert (tmp_path / "site" / "cli" / "index.html").is_file()
    assert "--key-type" in (tmp_path / "site" / "cli" / "index.html").read_text()


PRODUCTION = "https://acme-v02.api.letsencrypt.org/directory"
#: ``acmecerts`` commands that take their CA from the command line (the others use the CA
#: each certificate or account was stored with).
_PICKS_A_CA = (["issue"], ["account", "create"])


def production_defaults(blocks: list[Block], example_files: list[Path]) -> list[str]:
    """Where code a reader copies would talk to Let's Encrypt production as written: the
    production directory URL in a python, shell or config block or in a file of
    ``examples/``, or an ``acmecerts issue``/``account create`` command with neither ``--staging``
    nor ``--directory`` (the CLI's default CA is production)."""
    found = [
        b.where
        for b in blocks
        if b.language in PYTHON | SHELL | {"yaml", "toml"}
        and not b.invisible
        and PRODUCTION in b.body
    ]
    for block in blocks:
        if block.language not in SHELL:
            continue
        exported = "ACMECERTS_DIRECTORY=" in block.body
        for command in shell_commands(block.body):
            picks = any(command[1 : 1 + len(c)] == c for c in _PICKS_A_CA)
            if command[0] != "acmecerts" or not picks or exported:
                continue
            if not any(a == "--staging" or a.startswith("--directory") for a in command):
                found.append(f"{block.where}: {shlex.join(command)} (add --staging)")
    found += [
        str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)
        for p in example_files
        if PRODUCTION in p.read_text(encoding="utf-8", errors="replace")
    ]
    return found


def test_examples_point_at_staging_not_production() -> None:
    """Code a reader copies (blocks of the docs, examples/) never defaults to production."""
    examples = sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file())
    found = production_defaults(ALL_BLOCKS, examples)
    assert not found, "production by default in examples (use staging or Pebble):\n" + (
        "\n".join(found)
    )


def test_the_production_scan_finds_production(tmp_path: Path) -> None:
    """The scan is not vacuous: each way of defaulting to production is found."""
    page = _page(
        tmp_path,
        f'```python\nAcmeClient("{PRODUCTION}")\n```\n\n'
        f'```toml\ndirectory = "{PRODUCTION}"\n```\n\n'
        "```sh\nacmecerts issue --out ./certs example.com\n"
        "acmecerts issue --staging example.com\nacmecerts renew\n```\n\n"
        "```sh\nexport ACMECERTS_DIRECTORY=https://ca.example/dir\nacmecerts issue x.example\n```\n"
        f'```json\n{{"directory": "{PRODUCTION}"}}\n```\n',
    )
    example = tmp_path / "acmecerts.cron"
    example.write_text(f"0 0 * * * root acmecerts renew --directory {PRODUCTION}\n")
    found = production_defaults(blocks_of(page), [example])
    where = str(page)
    assert found == [
        f"{where}:1",
        f"{where}:5",
        f"{where}:9: acmecerts issue --out ./certs example.com (add --staging)",
        str(example),
    ], found
