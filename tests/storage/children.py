"""Run Python snippets in child processes, to test what holds across processes.

``child(script, *args)`` starts ``python -c script args...`` with this checkout on
``PYTHONPATH`` and kills it (SIGKILL) when the block ends if it still runs. The snippet
gets :data:`PRELUDE` first: imports, ``ARGS`` (its arguments) and ``wait_for_go(path)``,
a start barrier so that several children act at the same moment.

The prelude imports ``acmecerts.storage`` without running ``acmecerts/__init__.py`` (an
empty package module stands in for it): the top-level package pulls in the HTTP client
and the ACME message classes, about a second of CPU per child, which the storage code
never uses. Three children then start in well under a second even on a busy machine.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread

import acmecerts

REPO = Path(acmecerts.__file__).resolve().parents[1]

PRELUDE = (
    f"""\
import json, os, sys, time, types
_package = types.ModuleType("acmecerts")
_package.__path__ = [{str(REPO / "acmecerts")!r}]
sys.modules["acmecerts"] = _package
"""
    + """\
import anyio
from acmecerts.storage import FileStorage, VersionConflict

ARGS = sys.argv[1:]

def wait_for_go(path):
    print("ready", flush=True)
    while not os.path.exists(path):
        time.sleep(0.002)

async def increment(store, key):
    while True:
        current = await store.load(key)
        count = 0 if current is None else json.loads(current.data)["count"]
        try:
            await store.store(
                key,
                json.dumps({"count": count + 1}).encode(),
                expect_version=None if current is None else current.version,
            )
        except VersionConflict:
            continue
        return count + 1
"""
)


@contextlib.contextmanager
def child(script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``script`` (after :data:`PRELUDE`) in a child process; kill it at the end."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = PRELUDE + textwrap.dedent(script)
    with subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    ) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


async def expect_line(proc: subprocess.Popen[str], prefix: str, *, within: float = 8.0) -> str:
    """Read the child's output until a line starting with ``prefix``; return that line."""
    assert proc.stdout is not None
    seen: list[str] = []
    with anyio.fail_after(within):
        while True:
            line = await anyio.to_thread.run_sync(proc.stdout.readline, abandon_on_cancel=True)
            if not line:
                raise AssertionError(
                    f"child exited ({proc.wait()}) before printing {prefix!r}:\n" + "".join(seen)
                )
            if line.startswith(prefix):
                return line.strip()
            seen.append(line)


async def finish(proc: subprocess.Popen[str], *, within: float = 8.0) -> str:
    """Wait for the child to exit 0 and return the rest of its output."""
    assert proc.stdout is not None
    with anyio.fail_after(within):
        output = await anyio.to_thread.run_sync(proc.stdout.read, abandon_on_cancel=True)
        code = await anyio.to_thread.run_sync(proc.wait, abandon_on_cancel=True)
    assert code == 0, f"child exited {code}:\n{output}"
    return output
