"""``--pre-hook``, ``--post-hook`` and ``--deploy-hook``: shell commands around orders.

* The **pre-hook** of a certificate runs right before its first order in a run (each
  distinct command once per run); its **post-hook** after all the run's work, also when
  some of it failed or was interrupted. A run that orders nothing runs neither.
* The **deploy-hook** runs once for each certificate issued or renewed, after its files
  were written, with its paths and names in the environment (:func:`deploy_environment`).

Every hook runs through ``/bin/sh -c``, one at a time, with stdin closed and its output
copied to stderr (stdout stays for the command's own output, e.g. ``--json``). It gets
``--hook-timeout`` seconds; then its process group is killed. A failed hook (non-zero
exit, not found, not executable, timed out) is reported and makes the exit code 1; it
never undoes anything: the certificate is stored and exported, and the next ``renew``
does not order it again.

The variables a hook gets are named ``ACMECERTS_HOOK_*`` (plus certbot's
``RENEWED_LINEAGE`` and ``RENEWED_DOMAINS``). ``ACMECERTS_<OPTION>`` is how options are
set, and a hook that runs ``acmecerts`` inherits its environment: no hook variable is
the variable of an option (``tests/cli/test_cli_renew.py`` checks every command's options),
so a nested ``acmecerts`` never takes a hook variable for an option.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc

from ._args import DEFAULT_HOOK_TIMEOUT, Hooks

__all__ = [
    "HOOK_VARIABLES",
    "HookResult",
    "HookRunner",
    "deploy_environment",
    "run_hook",
]

#: Every variable a hook may get from acmecerts.
HOOK_VARIABLES: Final = (
    "RENEWED_LINEAGE",
    "RENEWED_DOMAINS",
    "ACMECERTS_HOOK_EVENT",
    "ACMECERTS_HOOK_CERT_NAME",
    "ACMECERTS_HOOK_DOMAINS",
    "ACMECERTS_HOOK_CERT_DIR",
    "ACMECERTS_HOOK_CERT_PATH",
    "ACMECERTS_HOOK_CHAIN_PATH",
    "ACMECERTS_HOOK_FULLCHAIN_PATH",
    "ACMECERTS_HOOK_KEY_PATH",
    "ACMECERTS_HOOK_SERIAL",
    "ACMECERTS_HOOK_NOT_AFTER",
    "ACMECERTS_HOOK_CA_DIRECTORY",
)
_SHELL: Final = "/bin/sh"
#: How much of a failed hook's stderr is reported.
_TAIL_CHARS: Final = 1000
#: After the shell exits, how long its output may still arrive (a daemon it started may
#: keep the pipe open: it is not waited for, and not killed).
_DRAIN: Final = 1.0
#: After a kill, how long to wait for the process to be reaped.
_REAP: Final = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class HookResult:
    """How one hook run ended."""

    #: ``pre``, ``post`` or ``deploy``.
    kind: str
    command: str
    #: The certificate a deploy-hook ran for.
    certificate: str | None = None
    #: The exit status; ``None`` when it did not exit on its own (timed out, not started).
    exit_status: int | None = None
    #: Why it did not exit on its own.
    error: str | None = None
    #: The end of what it wrote to stderr.
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_status == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "hook": self.kind,
            "command": self.command,
            "certificate": self.certificate,
            "ok": self.ok,
            "exit_status": self.exit_status,
            "error": self.error,
            "stderr_tail": self.stderr_tail,
        }

    def describe(self) -> str:
        """One line for a failed hook: which, for what, how it ended, its stderr's end."""
        what = f"{self.kind}-hook"
        if self.certificate is not None:
            what += f" for {self.certificate}"
        if self.error is not None:
            how = self.error
        elif self.exit_status is not None and self.exit_status < 0:
            how = f"killed by signal {-self.exit_status}"
        else:
            how = f"exited with status {self.exit_status}"
            if self.exit_status == 126:
                how += " (not executable)"
            elif self.exit_status == 127:
                how += " (not found)"
        tail = " ".join(self.stderr_tail.split())
        return f"{what} `{self.command}` {how}" + (f": {tail}" if tail else "")


def deploy_environment(
    *,
    name: str,
    identifiers: Sequence[str],
    out: Path,
    files: Mapping[str, Path],
    event: str,
    serial: str,
    not_after: str,
    directory: str,
) -> dict[str, str]:
    """The variables a deploy-hook gets for one certificate (see :data:`HOOK_VARIABLES`)."""
    domains = " ".join(identifiers)
    return {
        "RENEWED_LINEAGE": str(out),
        "RENEWED_DOMAINS": domains,
        "ACMECERTS_HOOK_EVENT": event,
        "ACMECERTS_HOOK_CERT_NAME": name,
        "ACMECERTS_HOOK_DOMAINS": domains,
        "ACMECERTS_HOOK_CERT_DIR": str(out),
        "ACMECERTS_HOOK_CERT_PATH": str(files["cert"]),
        "ACMECERTS_HOOK_CHAIN_PATH": str(files["chain"]),
        "ACMECERTS_HOOK_FULLCHAIN_PATH": str(files["fullchain"]),
        "ACMECERTS_HOOK_KEY_PATH": str(files["privkey"]),
        "ACMECERTS_HOOK_SERIAL": serial,
        "ACMECERTS_HOOK_NOT_AFTER": not_after,
        "ACMECERTS_HOOK_CA_DIRECTORY": directory,
    }


def _kill_group(process: anyio.abc.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def run_hook(
    kind: str,
    command: str,
    *,
    env: Mapping[str, str],
    time_limit: float,
    certificate: str | None = None,
) -> HookResult:
    """Run ``command`` through ``/bin/sh -c`` with ``env`` added to the environment.

    Its stdout and stderr are copied to this process's stderr as they come. After
    ``time_limit`` seconds (or when the caller is cancelled) its process group is killed.
    """
    environ = {k: v for k, v in os.environ.items() if k not in HOOK_VARIABLES}
    environ.update(env)
    try:
        process = await anyio.open_process(
            [_SHELL, "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environ,
            start_new_session=True,  # its own process group: a timeout kills all of it
        )
    except OSError as exc:
        return HookResult(
            kind, command, certificate, error=f"could not be started: {exc.strerror or exc}"
        )
    stderr_text: list[str] = []

    async def copy(
        stream: anyio.abc.ByteReceiveStream | None, keep: bool, done: anyio.Event
    ) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            if stream is None:
                return
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
                async for chunk in stream:
                    text = decoder.decode(chunk)
                    if keep:
                        stderr_text.append(text)
                        if sum(map(len, stderr_text)) > 4 * _TAIL_CHARS:
                            joined = "".join(stderr_text)[-_TAIL_CHARS:]
                            stderr_text[:] = [joined]
                    sys.stderr.write(text)
                    sys.stderr.flush()
        finally:
            done.set()

    error: str | None = None
    out_done, err_done = anyio.Event(), anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(copy, process.stdout, False, out_done)
            tg.start_soon(copy, process.stderr, True, err_done)
            with anyio.move_on_after(time_limit) as scope:
                await process.wait()
            if scope.cancelled_caught:
                error = f"timed out after {time_limit:g} s (killed)"
                _kill_group(process)
            with anyio.move_on_after(_DRAIN):
                await out_done.wait()
                await err_done.wait()
            tg.cancel_scope.cancel()
    finally:
        if process.returncode is None:  # cancelled (Ctrl-C) or timed out
            _kill_group(process)
        with anyio.CancelScope(shield=True), anyio.move_on_after(_REAP):
            await process.wait()
        with anyio.CancelScope(shield=True):
            await process.aclose()
    tail = "".join(stderr_text)[-_TAIL_CHARS:].strip()
    return HookResult(
        kind,
        command,
        certificate,
        exit_status=None if error is not None else process.returncode,
        error=error,
        stderr_tail=tail,
    )


class HookRunner:
    """The hooks of one command run: pre-hooks once before the first order, post-hooks
    after all the work, deploy-hooks after each new certificate; one at a time."""

    def __init__(self, *, timeout: float = DEFAULT_HOOK_TIMEOUT) -> None:
        self.timeout = timeout
        #: Every hook that ran, in order.
        self.results: list[HookResult] = []
        self._pre_done: set[str] = set()
        self._post: dict[str, None] = {}
        self._lock = anyio.Lock()

    @property
    def failed(self) -> list[HookResult]:
        return [r for r in self.results if not r.ok]

    async def _run(
        self, kind: str, command: str, env: Mapping[str, str], certificate: str | None = None
    ) -> HookResult:
        result = await run_hook(
            kind, command, env=env, time_limit=self.timeout, certificate=certificate
        )
        self.results.append(result)
        return result

    async def before_order(self, hooks: Hooks) -> None:
        """A certificate with ``hooks`` is about to be ordered."""
        async with self._lock:
            if hooks.post is not None:
                self._post.setdefault(hooks.post)
            if hooks.pre is not None and hooks.pre not in self._pre_done:
                self._pre_done.add(hooks.pre)
                await self._run("pre", hooks.pre, {"ACMECERTS_HOOK_EVENT": "pre"})

    async def deploy(self, command: str, env: Mapping[str, str], certificate: str) -> HookResult:
        """Run a deploy-hook for ``certificate``."""
        async with self._lock:
            return await self._run("deploy", command, env, certificate)

    async def after_all(self) -> None:
        """Run the post-hooks of the certificates that were ordered (shielded: this runs
        in ``finally``, also after Ctrl-C, each hook within its timeout)."""
        with anyio.CancelScope(shield=True):
            async with self._lock:
                posts, self._post = list(self._post), {}
                for command in posts:
                    await self._run("post", command, {"ACMECERTS_HOOK_EVENT": "post"})
